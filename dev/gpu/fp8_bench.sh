#!/usr/bin/env bash
# Issue 31 deliver 4 on an H200 in one call: the FP8 rows of python -m moejit_bench (moejit's
# fp8-block recipe, the torch._scaled_grouped_mm row-wise peer, the FP8 dense ceiling) beside
# the bf16 ones, after the peer's real-op check (tests/python/test_bench_fp8.py, which runs
# torch._scaled_grouped_mm against its float64 emulation there). Builds only the library
# (reusing /tmp/moejit-build when an earlier pass made it). Logs, table and JSON under $OUT.
# usage: [SHAPES=qwen3-30b-a3b,deepseek-v3,mixtral-8x7b] [LIMIT=480] [ARGS=--quick] dev/gpu/fp8_bench.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
build_dir=${FP8_BENCH_BUILD:-/tmp/moejit-build} build_targets="capi/libmoejit.so"
# shellcheck source=dev/gpu/common.sh
. dev/gpu/common.sh  # builds (or reuses) $b; MOEJIT_LIBRARY, PYTHONPATH
timeout 120 python3 -m pytest -q tests/python/test_bench_fp8.py -rs >"$out/test_bench_fp8.log" 2>&1
echo "test_bench_fp8 rc=$?"; tail -3 "$out/test_bench_fp8.log"
# shellcheck disable=SC2086  # ARGS is a list of options
timeout "${LIMIT:-480}" python3 -m moejit_bench --shapes "${SHAPES:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b}" \
    --impls moejit,moejit-fp8,moejit-fp8-cached,grouped_mm,scaled_grouped_mm ${ARGS:---quick} \
    --json "$out/fp8_bench.json" >"$out/fp8_bench.txt" 2>"$out/fp8_bench.log"
rc=$?
echo "moejit_bench rc=$rc"; grep -E "dense|peer|error|Error" "$out/fp8_bench.log" | head -20; cat "$out/fp8_bench.txt"
exit "$rc"
