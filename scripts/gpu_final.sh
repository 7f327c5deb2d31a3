#!/usr/bin/env bash
# A short, complete GPU pass for the end of a session: the layer regression suite first (the
# one this library exists for), then every other GPU suite, then the Python GPU tests.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
b=/tmp/moejit-build; export MOEJIT_CACHE_DIR=/tmp/moejit-cache
meson setup $b >/dev/null 2>&1; ninja -C $b >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head; exit 1; }
for t in moe_layer group_gemm gemm_sm90 routing swiglu jit; do
  $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$t.log" 2>&1; echo "gpu $t rc=$?"
  grep -E "\*\*\*|failure|cache:" "$out/gpu_$t.log" | head -5
done
MOEJIT_LIBRARY=$b/capi/libmoejit.so PYTHONPATH=capi/python timeout 120 python3 -m pytest -q -x capi/python/tests >"$out/pytest.log" 2>&1; echo "pytest rc=$?"; tail -3 "$out/pytest.log"
