#!/usr/bin/env bash
# The wgmma engine on an H200: its own test, the GEMM and layer regression suites, then a tile
# sweep of the forward GEMMs against torch._grouped_mm (same run). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
b=/tmp/moejit-build; export MOEJIT_CACHE_DIR=/tmp/moejit-cache
[ -f $b/build.ninja ] || meson setup $b --buildtype=release >"$out/setup.log" 2>&1
ninja -C $b >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
for t in ${GPU_TESTS:-gemm_sm90 group_gemm moe_layer}; do
  timeout 300 $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$t.log" 2>&1; echo "gpu $t rc=$?"
  grep -E "error|failure|passed|failed|cache:" "$out/gpu_$t.log" | head -${LINES_PER_TEST:-8}
done
if [ -n "${BENCH_TILES:-}" ]; then
  MOEJIT_LIBRARY=$b/capi/libmoejit.so timeout ${BENCH_TIMEOUT:-300} python3 tools/bench_group_gemm.py \
    --tiles "$BENCH_TILES" --gemms "${BENCH_GEMMS:-fc1 fprop,fc2 fprop}" ${BENCH_ARGS:-} \
    --json "$out/bench.json" >"$out/bench.log" 2>&1; echo "bench rc=$?"
  grep -v "^\s*$" "$out/bench.log" | tail -${BENCH_LINES:-120}
fi
if [ -n "${LAYER_BENCH:-}" ]; then
  MOEJIT_LIBRARY=$b/capi/libmoejit.so PYTHONPATH=python:bench timeout ${LAYER_TIMEOUT:-240} python3 -m moejit_bench $LAYER_BENCH \
    --json "$out/layer.json" >"$out/layer.log" 2>&1; echo "layer bench rc=$?"
  grep -v "^\s*$" "$out/layer.log" | tail -${LAYER_LINES:-40}
fi
if [ -n "${PYTEST:-}" ]; then
  MOEJIT_LIBRARY=$b/capi/libmoejit.so PYTHONPATH=python:bench timeout 200 python3 -m pytest -q -x tests/python >"$out/pytest.log" 2>&1
  echo "pytest rc=$?"; tail -3 "$out/pytest.log"
fi
