#!/usr/bin/env bash
# One device call for GEMM engine work: build, the two GEMM suites (correctness of every tile
# kind, ping-pong included), a tile sweep of the grouped GEMMs against torch._grouped_mm
# (tools/bench_group_gemm.py), the layer on this tree and earlier releases, and the SASS spill check
# of the cached wgmma kernels. Logs under $OUT; the tables last.
#   TILES=heuristic,wgmma_... SHAPES=a,b [GEMMS='fc2 wgrad,...'] [LAYER=1 LAYER_SHAPES=a,b PREV=dir] bash dev/gpu/tile_sweep.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
final=${OUT:-$PWD/out}; out=/tmp/moejit-tiles; rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/tiles_logs.tgz" -C "$out" . ; cp "$out"/sweep.log "$out"/layer_*.log "$final"/ 2>/dev/null' EXIT
. dev/gpu/common.sh
pids=()
for t in ${SUITES:-gemm_sm90 group_gemm}; do
  ( timeout 300 $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$t.log" 2>&1; echo "$t rc=$?" >"$out/gpu_$t.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
for t in ${SUITES:-gemm_sm90 group_gemm}; do
  echo "== gpu $(cat "$out/gpu_$t.rc")"; grep -E "error|failure|test cases|assertions" "$out/gpu_$t.log" | grep -v "caught:" | head -8
done
tiles=${TILES:-heuristic,wgmma_128x128x64_s4_g8_e1,wgmma_128x128x64_s4_g8_e1_p1,wgmma_128x128x64_s5_g8_e1_p1}
timeout ${SWEEP_TIMEOUT:-300} python3 tools/bench_group_gemm.py ${SHAPES:+--shapes $SHAPES} ${GEMMS:+--gemms "$GEMMS"} --tiles "$tiles" \
  --json "$out/sweep.json" >"$out/sweep.log" 2>&1; echo "== sweep rc=$?"
if [ -n "${LAYER:-}" ]; then  # the layer on this tree and on each PREV release (see release_suites.sh)
  for tree in . ${PREV:-}; do
    tag=$([ "$tree" = . ] && echo this || basename "$tree")
    ( [ "$tree" != . ] && export MOEJIT_LIBRARY=$PWD/$tree/capi/libmoejit.so.0 PYTHONPATH=$PWD/$tree/python:$PWD/$tree/bench
      timeout 150 python3 -m moejit_bench --quick --no-eager --impls moejit ${LAYER_SHAPES:+--shapes $LAYER_SHAPES} \
        >"$out/layer_$tag.log" 2>&1; echo "== layer $tag rc=$?" )
  done
fi
if command -v cuobjdump >/dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
  PATH=$PATH:/usr/local/cuda/bin python3 dev/gpu/sass.py "$MOEJIT_CACHE_DIR" 40 _p1 >"$out/sass.log" 2>&1 &&
    { echo "== sass"; grep -iE "spill|LDL|STL|total" "$out/sass.log" | head -12; }
fi
grep -E "TFLOP/s  err" "$out/sweep.log" | head -120
grep -v '^  ' "$out/sweep.log" | tail -32
for f in "$out"/layer_*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -v '^\[' "$f" | tail -10; }; done
exit 0
