#!/usr/bin/env bash
# Builds moejit and runs every test: the CPU suite always; the GPU suite runs where a CUDA
# device is usable and reports SKIP (exit 77) elsewhere; the Python tests when pytest exists.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release
ninja -C "$build"
# The CPU suite again under AddressSanitizer + UndefinedBehaviorSanitizer (issue 16 item 7): a
# second build folder with only what that suite runs (no GPU tests); any report fails it.
# MOEJIT_SANITIZE=0 skips it. Runs before the main suite, so the output still ends with the
# main run's summary. To fit CI's time budget the default pass covers the C ABI, the host-side
# code the hardening is about and the pure arithmetic — bad_input, abi_*, checked_math, capi,
# header_*, plan, jit_concurrency, cache_trust, config, config_options, warmup_config,
# launch_bounds, tuning, reference_moe —
# and leaves out the NVRTC-bound tests (minutes each, nearly all in NVRTC, which is not
# instrumented), the tools and the install test (MOEJIT_SANITIZE_SKIP; set it empty for the
# whole suite).
if [ "${MOEJIT_SANITIZE:-1}" != 0 ]; then
    MOEJIT_SANITIZE_SKIP=${MOEJIT_SANITIZE_SKIP-gemm gemm_sm90 routing swiglu warmup_cache warmup_usage bench_usage install no_libcuda_link jit} \
        scripts/sanitize_cpu.sh "${SAN_BUILD_DIR:-build-san}"
fi
meson test -C "$build" --print-errorlogs --num-processes "${MOEJIT_TEST_JOBS:-2}" --no-suite experimental "$@"
# The Python tests run when pytest is importable; otherwise say so (and why) instead of passing
# silently.
if [ ! -d tests/python ]; then
    echo "Python tests: SKIPPED (tests/python not found)"
elif ! command -v python3 >/dev/null; then
    echo "Python tests: SKIPPED (python3 not found)"
elif ! python3 -c 'import pytest' 2>/dev/null; then
    echo "Python tests: SKIPPED (pytest is not installed for $(command -v python3); pip install pytest)"
else
    MOEJIT_LIBRARY="$PWD/$build/capi/libmoejit.so" PYTHONPATH="$PWD/python:$PWD/bench" \
        python3 -m pytest -q tests/python
fi
