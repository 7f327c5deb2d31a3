#!/usr/bin/env bash
# Issue 29 items 2 and 4 on a GPU, in one call: the nonsense expert offsets test plainly and
# under compute-sanitizer memcheck (no fault, no out-of-bounds access, the device error flag,
# float64 references, the context usable afterwards), the existing bad-input GPU suite, and the
# 0.1-header callers (guard bytes after their structs; a real backward with a 0.1 struct).
# Expect every line "PASS"; exits non-zero otherwise. Logs under $OUT (or ./out).
# usage: dev/gpu/bad_device_data.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
. dev/gpu/common.sh  # builds (or reuses) $b
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")}
fail=0
step() {  # step NAME COMMAND...: runs it, logs to $out/NAME.log, prints PASS/FAIL and its last line
    local name=$1; shift
    timeout 300 "$@" >"$out/$name.log" 2>&1
    local rc=$?
    if [ $rc = 0 ]; then echo "PASS $name: $(tail -1 "$out/$name.log")"; else echo "FAIL $name (rc $rc)"; tail -15 "$out/$name.log"; fail=1; fi
}
step offsets "$b/tests/test_gpu_bad_input_offsets"
step offsets_memcheck "$cs" --tool memcheck --error-exitcode 1 "$b/tests/test_gpu_bad_input_offsets"
step bad_input "$b/tests/test_gpu_bad_input"
step abi_old_caller "$b/tests/test_abi_old_caller_0_1"
step abi_old_binary env LD_LIBRARY_PATH="$b/capi" "$b/tests/test_abi_old_binary_0_1"
grep -E "^case|ys " "$out/offsets.log" | head -40
exit $fail
