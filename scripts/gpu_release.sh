#!/usr/bin/env bash
# The end-of-session GPU pass on one H200, within one 10-minute device call: build, every GPU
# suite and the Python tests (run side by side: they are small), then the layer benchmark with
# every peer, the duplicate-route case and the C++ benchmark. Logs under $OUT; a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:-$PWD/out}; out=/tmp/moejit-release; rm -rf "$out"; mkdir -p "$out" "$final"
# The device returns at most 8 files: logs are packed into one archive at the end.
trap 'tar czf "$final/release_logs.tgz" -C "$out" . ; cp "$out"/layer.log "$out"/dup.log "$out"/cbench.log "$final"/ 2>/dev/null' EXIT
b=/tmp/moejit-build; export MOEJIT_CACHE_DIR=/tmp/moejit-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
meson setup $b --buildtype=release >"$out/setup.log" 2>&1
ninja -C $b >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
export MOEJIT_LIBRARY=$b/capi/libmoejit.so PYTHONPATH=capi/python
pids=()
for group in "moe_layer" "group_gemm" "gemm_sm90 routing swiglu jit"; do
  ( for t in $group; do timeout 300 $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$t.log" 2>&1; echo "$t rc=$?" >"$out/gpu_$t.rc"; done ) &
  pids+=($!)
done
( timeout 200 python3 -m pytest -q -x capi/python/tests >"$out/pytest.log" 2>&1; echo "pytest rc=$?" >"$out/pytest.rc" ) &
pids+=($!)
wait "${pids[@]}"
for t in moe_layer group_gemm gemm_sm90 routing swiglu jit; do
  echo "== gpu $(cat "$out/gpu_$t.rc")"; grep -E "error|failure|test cases|assertions" "$out/gpu_$t.log" | grep -v "caught:" | head -6
done
echo "== $(cat "$out/pytest.rc")"; tail -1 "$out/pytest.log"
timeout ${LAYER_TIMEOUT:-240} python3 -m moejit.bench --quick --json "$out/layer.json" >"$out/layer.log" 2>&1; echo "== layer bench rc=$?"
timeout 90 python3 -m moejit.bench --quick --routing expert0 --shapes qwen3-30b-a3b,small-expert-7b,mid-expert-30b,mixtral-8x7b \
  --json "$out/dup.json" >"$out/dup.log" 2>&1; echo "== duplicate-route bench rc=$?"
timeout 60 $b/tools/moejit-bench --shapes small-expert-7b,mid-expert-30b,qwen3-30b-a3b-4k --json "$out/cbench.json" \
  >"$out/cbench.log" 2>"$out/cbench.err"; echo "== moejit-bench rc=$?"
cat "$out/cbench.log"
grep -v '^\[' "$out/dup.log" | tail -14
grep -v '^\[' "$out/layer.log" | tail -26
