#!/usr/bin/env bash
# Issue 29 item 6 on a GPU, in one call: the load test (8 threads x 4 streams x 3 shapes of plans
# created, run forward+backward and destroyed concurrently on one context, every result bitwise
# equal to a single-threaded run, no device memory leaked; tests/gpu/test_stress_gpu.cpp) and the
# cache fault tests (two processes racing one cache folder; a read-only and a full cache during a
# run; tests/cpu/test_cache_robustness.cpp, CPU-only but run here too).
# Expect "PASS stress" and "PASS cache_robustness"; exits non-zero otherwise. Logs under $OUT.
# usage: [STRESS_SECONDS=60] dev/gpu/stress.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
. dev/gpu/common.sh  # builds (or reuses) $b
seconds=${STRESS_SECONDS:-60}
fail=0
step() {  # step NAME LIMIT COMMAND...: runs it, logs to $out/NAME.log, prints PASS/FAIL
    local name=$1 limit=$2; shift 2
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    if [ $rc = 0 ]; then echo "PASS $name"; else echo "FAIL $name (rc $rc)"; tail -25 "$out/$name.log"; fail=1; fi
}
step stress $((seconds + 300)) env MOEJIT_STRESS_SECONDS="$seconds" "$b/tests/test_gpu_stress"
grep -E "^stress_gpu" "$out/stress.log"
step cache_robustness 600 "$b/tests/test_cpu_cache_robustness"
grep -E "^child|SKIPPED" "$out/cache_robustness.log" | cut -c1-220
exit $fail
