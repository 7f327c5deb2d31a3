#!/usr/bin/env bash
# Every GPU suite under compute-sanitizer (issue 29 item 3): memcheck, racecheck, synccheck and
# initcheck over EVERY test_gpu_* binary of the build, in full, and over the GPU Python tests
# (tests/python/test_*gpu*.py and test_experts_op.py), each run with --error-exitcode 1.
# Prints a table tool x suite -> result, error count, seconds; exits non-zero on any error,
# failure or timeout (a run cut short proves nothing). Logs in $OUT/sanitize_logs.tgz.
#
# usage: dev/gpu/sanitize.sh [TOOL ...]     TOOL: memcheck racecheck synccheck initcheck all
#                                           (default all)
# The four tools over everything may not fit one 10-minute device call: split it, one tool per
# call (racecheck is the slowest), e.g.
#   dev/gpu/sanitize.sh memcheck; dev/gpu/sanitize.sh racecheck; ...
# Environment: SANITIZE_BUDGET_S (default 540): the whole call, build included, ends within it;
#   a run gets what is left, and runs that cannot start are NOTRUN (a failure);
#   SANITIZE_JOBS (default 6): runs of one tool side by side (the GPU and 16 cores have room);
#   SANITIZE_SUITES: space-separated subset of suite names (e.g. "routing py_experts_op") to
#   rerun one; the default is everything.
set -uo pipefail
cd "$(dirname "$0")/../.."
final=${OUT:-$PWD/out}; logs=/tmp/moejit-sanitize; rm -rf "$logs"; mkdir -p "$logs" "$final"
trap 'tar czf "$final/sanitize_logs.tgz" -C "$logs" . 2>/dev/null' EXIT
t0=$(date +%s)
budget=${SANITIZE_BUDGET_S:-540}
njobs=${SANITIZE_JOBS:-6}
tools=("$@"); [ ${#tools[@]} = 0 ] && tools=(all)
[ "${tools[*]}" = all ] && tools=(memcheck racecheck synccheck initcheck)
for t in "${tools[@]}"; do
    case $t in memcheck|racecheck|synccheck|initcheck) ;; *) echo "unknown tool: $t"; exit 2 ;; esac
done

out=$logs  # common.sh's log folder
# shellcheck source=common.sh
. dev/gpu/common.sh  # build (or reuse) $b, MOEJIT_LIBRARY, PYTHONPATH, gpu_suites
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")}
[ -x "$cs" ] || { echo "compute-sanitizer not found ($cs)"; exit 1; }
"$cs" --version | tail -1
echo "build: $(( $(date +%s) - t0 )) s"

# Suites: name -> command. Every GPU binary the build made, and each GPU Python test file.
declare -A cmd
for s in $(gpu_suites); do cmd[$s]="$b/tests/test_gpu_$s"; done
for f in tests/python/test_*gpu*.py tests/python/test_experts_op.py; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .py); cmd[py_${n#test_}]="python3 -m pytest -q -x -p no:cacheprovider $f"
done
suites=(${SANITIZE_SUITES:-$(printf '%s\n' "${!cmd[@]}" | sort)})

# run TOOL SUITE: one sanitized run (all its child processes too); result line in TOOL.SUITE.res.
run() {
    local tool=$1 name=$2 start rc errors left verdict
    start=$(date +%s)
    left=$(( t0 + budget - start ))
    if [ $left -lt 20 ]; then
        printf '%-10s %-26s %-8s %6s %5s\n' "$tool" "$name" NOTRUN - 0 >"$logs/$tool.$name.res"
        return
    fi
    # shellcheck disable=SC2086  # cmd holds a command line
    timeout "$left" "$cs" --tool "$tool" --target-processes all --error-exitcode 1 \
        --print-limit 50 ${cmd[$name]} >"$logs/$tool.$name.log" 2>&1
    rc=$?
    # One summary per sanitized process (Python tests may start several): their sum. racecheck
    # says "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the others
    # "ERROR SUMMARY: E errors".
    errors=$(grep -oE 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ error' \
        "$logs/$tool.$name.log" | sed -E 's/.*[(:] ?([0-9]+)( error)?$/\1/' | awk '{s+=$1} END {print s+0}')
    verdict=PASS
    [ $rc = 77 ] && verdict=SKIP
    [ $rc = 5 ] && [[ $name == py_* ]] && verdict=SKIP  # pytest: nothing collected/all skipped
    [ $rc = 124 ] && verdict=TIMEOUT
    [ $verdict = PASS ] && [ $rc != 0 ] && verdict=FAIL
    [ $verdict = SKIP ] && [ "$errors" != 0 ] && verdict=FAIL
    printf '%-10s %-26s %-8s %6s %5s\n' "$tool" "$name" "$verdict" "$errors" "$(( $(date +%s) - start ))" \
        >"$logs/$tool.$name.res"
}

for tool in "${tools[@]}"; do
    for name in "${suites[@]}"; do
        [ -n "${cmd[$name]:-}" ] || { echo "no suite named $name"; exit 2; }
        while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do wait -n; done
        run "$tool" "$name" &
    done
done
wait

# Failing runs: their first reports.
for f in "$logs"/*.res; do
    if ! grep -qE ' (PASS|SKIP) ' "$f"; then
        log=${f%.res}.log
        echo "== $(basename "$log")"
        grep -E '=========|error|FAILED|failure|Error' "$log" | head -25
        echo "-- its last lines:"; tail -5 "$log"
    fi
done
echo
printf '%-10s %-26s %-8s %6s %5s\n' tool suite result errors s
for tool in "${tools[@]}"; do cat "$logs/$tool".*.res; done
total=$(cat "$logs"/*.res | awk '$4 ~ /^[0-9]+$/ {s+=$4} END {print s+0}')
bad=$(grep -LE ' (PASS|SKIP) ' "$logs"/*.res | wc -l)
echo "errors: $total; runs not PASS/SKIP: $bad; total: $(( $(date +%s) - t0 )) s"
[ "$total" = 0 ] && [ "$bad" = 0 ]
