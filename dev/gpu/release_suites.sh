#!/usr/bin/env bash
# The end-of-session GPU pass on one H200, within one 10-minute device call: build, every GPU
# suite (all tests/test_gpu_* of the build, side by side in three groups) and the Python tests,
# then the layer benchmark with its peers and the duplicate-route case, and the C++ benchmark's
# host time per call. PREV="dir ..." adds earlier releases' layer measured in the same run
# (HOST_PREV: their moejit-bench host time), each a
# folder holding capi/libmoejit.so.0, tools/moejit-bench and python/ and meson.build (the package of that
# release), built elsewhere. SKIP_BENCH=1 stops after the suites; PYTEST_PATHS narrows the Python tests;
# SKIP_SUITES leaves suites out, ONLY_SUITES names the only ones, RING_SUITES runs some again with
# the store ring on; SKIP_PYTEST=1 skips the Python tests. Logs under $OUT; the tables last.
set -uo pipefail
cd "$(dirname "$0")/../.."
final=${OUT:-$PWD/out}; out=/tmp/moejit-release; rm -rf "$out"; mkdir -p "$out" "$final"
# The device returns at most 8 files: logs are packed into one archive at the end.
trap 'tar czf "$final/release_logs.tgz" -C "$out" . ; cp "$out"/layer*.log "$out"/cbench*.log "$final"/ 2>/dev/null' EXIT
. dev/gpu/common.sh
# SKIP_SUITES="name ...": suites left out of this pass (peers_session.sh runs stress in phase 2,
# when no warm-up process is allocating device memory beside its check).
suites=$(gpu_suites | grep -vxE "$(echo ${SKIP_SUITES:-_none_} | tr ' ' '|')")
[ -n "${ONLY_SUITES:-}" ] && suites=$ONLY_SUITES  # ONLY_SUITES="name ...": these alone
groups=("moe_layer" "group_gemm gpt_oss" "$(echo $suites | tr ' ' '\n' | grep -vxE 'moe_layer|group_gemm|gpt_oss' | tr '\n' ' ')")
# One suite: LOG (gpu_LOG.log and .rc, the rc line naming it as LABEL), run as NAME with the
# environment VAR=VALUE... ; report_suite prints its rc and summary.
run_suite() {  # NAME LOG LABEL [VAR=VALUE...]
  local t=$1 log=$2 label=$3; shift 3
  env "$@" timeout 330 $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$log.log" 2>&1; echo "$label rc=$?" >"$out/gpu_$log.rc"
}
report_suite() {  # LOG
  echo "== gpu $(cat "$out/gpu_$1.rc")"
  grep -E "error|failure|test cases|assertions|checks passed|\*\*\*" "$out/gpu_$1.log" | grep -v "caught:" | head -4
}
pids=()
for group in "${groups[@]}"; do
  ( for t in $group; do run_suite $t $t $t; done ) &
  pids+=($!)
done
# RING_SUITES="name ...": these suites once more with MOEJIT_STORE_RING=1 (the store ring under
# its rule, beside the default path's run), logged as gpu_<name>_ring.
for t in ${RING_SUITES:-}; do
  run_suite $t ${t}_ring "$t (MOEJIT_STORE_RING=1)" MOEJIT_STORE_RING=1 &
  pids+=($!)
done
# The Python tests that need the GPU by default (the whole suite outlasts the call there: 0.9.0
# device run 4; CI runs the CPU ones).
gpu_pytest="$(ls tests/python/test_*gpu*.py | tr '\n' ' ') tests/python/test_experts_op.py"
if [ -z "${SKIP_PYTEST:-}" ]; then  # SKIP_PYTEST=1: the C++ suites alone
  ( timeout ${PYTEST_TIMEOUT:-330} python3 -m pytest -q ${PYTEST_PATHS:-$gpu_pytest} >"$out/pytest.log" 2>&1; echo "pytest rc=$?" >"$out/pytest.rc" ) &
  pids+=($!)
else echo "pytest rc=skipped (SKIP_PYTEST)" >"$out/pytest.rc"; fi
wait "${pids[@]}"
for t in $suites; do report_suite $t; done
for t in ${RING_SUITES:-}; do report_suite ${t}_ring; done
echo "== $(cat "$out/pytest.rc")"; tail -1 "$out/pytest.log" 2>/dev/null
if [ -n "${SKIP_BENCH:-}" ]; then  # the suites alone (the benchmarks run in dev/gpu/peers.sh calls)
  grep -E "^(FAILED|ERROR) " "$out/pytest.log" | head -12; exit 0
fi
shapes=${SHAPES:+--shapes $SHAPES}
timeout ${LAYER_TIMEOUT:-200} python3 -m moejit_bench --quick --no-eager $shapes --json "$out/layer.json" >"$out/layer.log" 2>&1
echo "== layer bench rc=$?"
timeout 90 python3 -m moejit_bench --quick --no-eager --impls moejit,grouped_mm --routing expert0 \
  --shapes ${DUP_SHAPES:-qwen3-30b-a3b,small-expert-7b,mid-expert-30b} --json "$out/layer_dup.json" >"$out/layer_dup.log" 2>&1
echo "== duplicate-route bench rc=$?"
timeout 60 $b/tools/moejit-bench --tokens 512 --shapes qwen3-30b-a3b,deepseek-v3 >"$out/cbench.log" 2>&1
echo "== moejit-bench rc=$?"
for prev in ${PREV:-}; do  # earlier releases' layer in the same run
  ( export MOEJIT_LIBRARY=$PWD/$prev/capi/libmoejit.so.0 PYTHONPATH=$PWD/$prev/python:$PWD/$prev/bench
    timeout ${LAYER_TIMEOUT:-200} python3 -m moejit_bench --quick --no-eager --impls moejit $shapes \
      >"$out/layer_$(basename $prev).log" 2>&1; echo "== layer bench $(basename $prev) rc=$?" )
done
for prev in ${HOST_PREV:-}; do  # earlier releases' host time per call (their moejit-bench has --tokens)
  timeout 60 $prev/tools/moejit-bench --tokens 512 --shapes qwen3-30b-a3b,deepseek-v3 >"$out/cbench_$(basename $prev).log" 2>&1
  echo "== moejit-bench $(basename $prev) rc=$?"
done
for f in "$out"/cbench*.log; do echo "== $(basename $f)"; grep -iE "host|shape" "$f" | head -6; done
grep -v '^\[' "$out/layer_dup.log" | tail -8
for f in "$out"/layer_[0-9]*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -v '^\[' "$f" | tail -10; }; done
grep -v '^\[' "$out/layer.log" | tail -18
exit 0
