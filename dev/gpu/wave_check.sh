#!/usr/bin/env bash
# One H200 call for a wave's end (0.11: issues 28, 29, 31): build, then side by side every GPU
# suite of the build (the stress test shortened to STRESS_SECONDS) and the GPU Python tests;
# then, with the GPU quiet, the FP8 benchmarks (grouped GEMM, weight gradient, the layer against
# bf16) and the cold start of a new shape. Every step has a deadline inside DEADLINE_S (default
# 470) so the call ends in time and still prints its table; a step cut short says TIMEOUT.
# The stress suite runs alone after the others: it checks the device's free memory before and
# after, which other processes on the GPU move. Knobs: SUITES (the suites to run, default all),
# PYTEST=0 (no GPU Python tests), BENCHES (the phase-2 steps to run, default all of them),
# PHASE1_SHARE (tenths of the time left that phase 1 gets when benchmarks follow, default 4).
# Logs in $OUT/wave_logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s); deadline=$(( t0 + ${DEADLINE_S:-470} ))
final=${OUT:-$PWD/out}; out=/tmp/moejit-wave; rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/wave_logs.tgz" -C "$out" . 2>/dev/null' EXIT
. dev/gpu/common.sh
echo "build: $(( $(date +%s) - t0 )) s"
left() { echo $(( deadline - $(date +%s) - ${1:-0} )); }
export MOEJIT_STRESS_SECONDS=${STRESS_SECONDS:-30}
suites=$(echo ${SUITES:-$(gpu_suites)})  # one line: in_suites matches " name "
in_suites() { echo " $suites " | grep -q " $1 "; }
# Three groups of suites and the Python tests side by side (phase 1 ends by 40 % of what is left,
# less the stress run's time; all of it without benchmarks).
stress_s=$(( MOEJIT_STRESS_SECONDS + 60 )); in_suites stress || stress_s=0
benches=${BENCHES-fp8_layer_bench fp8_train_curve cold_start bench_fp8_gemm bench_fp8_wgrad}
share=${PHASE1_SHARE:-4}; [ -n "${benches// }" ] || share=10  # tenths; no benchmarks: phase 1 has all the time
phase1=$(( ( $(left) - stress_s ) * share / 10 )); p1end=$(( $(date +%s) + phase1 ))
others=$(echo $suites | tr ' ' '\n' | grep -vxE 'moe_layer|fp8_layer|group_gemm|gpt_oss|fp8|stress' | tr '\n' ' ')
groups=("moe_layer fp8_layer" "group_gemm gpt_oss fp8" "$others")
run_suite() {  # run_suite NAME SECONDS
  [ -x "$b/tests/test_gpu_$1" ] && in_suites "$1" || return 0
  timeout "$2" stdbuf -oL -eL "$b/tests/test_gpu_$1" --report_level=short >"$out/gpu_$1.log" 2>&1
  echo "$1 rc=$?" >"$out/gpu_$1.rc"
}
pids=()
for group in "${groups[@]}"; do
  ( for t in $group; do
      s=$(( p1end - $(date +%s) )); [ "$s" -gt 0 ] || { in_suites "$t" && echo "$t rc=NOTRUN" >"$out/gpu_$t.rc"; continue; }
      run_suite "$t" "$s"; done ) &
  pids+=($!)
done
gpu_pytest="$(ls tests/python/test_*gpu*.py | tr '\n' ' ') tests/python/test_experts_op.py"
if [ "${PYTEST:-1}" != 0 ]; then
  ( timeout $phase1 python3 -m pytest -q -p no:cacheprovider $gpu_pytest >"$out/pytest.log" 2>&1; echo "pytest rc=$?" >"$out/pytest.rc" ) &
  pids+=($!)
fi
wait "${pids[@]}"
[ "$stress_s" -gt 0 ] && run_suite stress "$stress_s"
echo "phase 1: $(( $(date +%s) - t0 )) s"
# Phase 2, the GPU quiet: benchmarks, then the cold start with what is left.
bench() {  # bench NAME LIMIT COMMAND...
  local name=$1 limit=$2; shift 2
  echo " $benches " | grep -q " $name " || return 0
  [ "$limit" -gt 10 ] || { echo "$name rc=NOTRUN" >"$out/$name.rc"; return; }
  timeout "$limit" "$@" >"$out/$name.log" 2>&1; echo "$name rc=$?" >"$out/$name.rc"
}
cap() { local l; l=$(left "$1"); [ "$l" -lt "$2" ] && echo "$l" || echo "$2"; }  # cap RESERVE MAX
# In order of what the issues need most; each keeps RESERVE seconds for the steps after it.
bench fp8_layer_bench $(cap 130 120) python3 -m moejit_bench --shapes "${FP8_SHAPES:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b}" \
  --impls moejit,moejit-fp8,moejit-fp8-cached,grouped_mm,scaled_grouped_mm --quick --json "$out/fp8_bench.json"
bench fp8_train_curve $(cap 50 90) python3 dev/fp8_train_curve.py --json "$out/fp8_train_curve.json"
bench cold_start $(cap 20 50) python3 dev/gpu/cold_start.py --shapes "${COLD_SHAPES:-qwen3-30b-a3b,deepseek-v3}" --tokens 8192 --json "$out/cold_start.json"
bench bench_fp8_gemm $(cap 10 25) "$b/tests/test_gpu_fp8" --run_test=benchmark --report_level=short
bench bench_fp8_wgrad $(cap 3 30) "$b/tests/test_gpu_fp8" --run_test=wgrad_benchmark --report_level=short
cp "$out"/*.json "$final/" 2>/dev/null
# The table.
for t in $suites; do
  [ -f "$out/gpu_$t.rc" ] || { echo "== gpu $t NOTRUN"; continue; }
  echo "== gpu $(cat "$out/gpu_$t.rc")"
  grep -E "failure|error:|test cases|assertions" "$out/gpu_$t.log" | grep -v "caught:" | head -3
done
if [ "${PYTEST:-1}" != 0 ]; then
  echo "== $(cat "$out/pytest.rc")"; grep -E "passed|failed" "$out/pytest.log" | tail -1; grep -E "^(FAILED|ERROR) " "$out/pytest.log" | head -8
fi
grep -hE "^(fp8|stress_gpu)" "$out"/gpu_fp8*.log "$out"/gpu_stress.log 2>/dev/null | cut -c1-200 | head -60
for n in $benches; do
  echo "== $(cat "$out/$n.rc" 2>/dev/null || echo "$n rc=?")"
  grep -vE "^\[|^Running|^$" "$out/$n.log" 2>/dev/null | tail -${TAIL_LINES:-24} | cut -c1-220
done
echo "total: $(( $(date +%s) - t0 )) s"
