#!/usr/bin/env bash
# Builds moejit and runs every test: the CPU suite always; the GPU suite runs where a CUDA
# device is usable and reports SKIP (exit 77) elsewhere; the Python tests when pytest exists.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release
ninja -C "$build"
meson test -C "$build" --print-errorlogs --num-processes "${MOEJIT_TEST_JOBS:-2}" --no-suite experimental "$@"
# The Python tests run when pytest is importable; otherwise say so (and why) instead of passing
# silently.
if [ ! -d capi/python/tests ]; then
    echo "Python tests: SKIPPED (capi/python/tests not found)"
elif ! command -v python3 >/dev/null; then
    echo "Python tests: SKIPPED (python3 not found)"
elif ! python3 -c 'import pytest' 2>/dev/null; then
    echo "Python tests: SKIPPED (pytest is not installed for $(command -v python3); pip install pytest)"
else
    MOEJIT_LIBRARY="$PWD/$build/capi/libmoejit.so" PYTHONPATH="$PWD/capi/python" \
        python3 -m pytest -q capi/python/tests
fi
