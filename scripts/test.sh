#!/usr/bin/env bash
# Builds moejit (release) and runs every test: the C++ suites (the CPU suite always; the GPU suite
# where a CUDA device is usable, SKIP = exit 77 elsewhere), then the Python tests.
# On a fresh Debian/Ubuntu machine with only the CUDA toolkit it first installs what is missing
# (scripts/setup.sh: system packages with apt-get, Python tools into the project's .venv, never
# into the machine's Python; it says what and why). Switches (environment):
#   MOEJIT_SANITIZE=1     also the whole CPU suite under AddressSanitizer + UndefinedBehavior-
#                         Sanitizer with leak checks, in a second build folder (build-san; a
#                         second full build: scripts/sanitize_cpu.sh). Default off, the same
#                         everywhere (CI included: .ci/run runs this command exactly as README
#                         gives it, so CI and a user run the same thing).
#   MOEJIT_TORCH_TESTS=1  install torch (CPU) and transformers into .venv so the Python torch
#                         tests run instead of being skipped
#   MOEJIT_SETUP=auto|check|0   see scripts/setup.sh
#   BUILD_DIR, SAN_BUILD_DIR, MOEJIT_TEST_JOBS (parallel tests, default 2); extra arguments go to
#   `meson test` (e.g. a test name).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
source scripts/setup.sh
setup_or_exit test
build=${BUILD_DIR:-build}
ran=(); skipped=()
t0=$(date +%s)
# -Dtests=enabled: a missing Boost.Test is an error here, not a build without tests (also for a
# folder scripts/main.sh configured before Boost.Test was installed: --clearcache drops that
# configuration's cached "no Boost.Test header", which setup may just have installed).
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --buildtype=release -Dtests=enabled
elif [ "$(meson introspect --buildoptions "$build" | python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "tests"))')" != enabled ]; then
    meson configure "$build" --clearcache -Dtests=enabled
fi
ninja -C "$build"
t1=$(date +%s); ran+=("release build in $build: $((t1 - t0)) s")
meson test -C "$build" --print-errorlogs --num-processes "${MOEJIT_TEST_JOBS:-2}" --no-suite experimental "$@"
t2=$(date +%s); ran+=("C++ suites (cpu; gpu where a device is usable): $((t2 - t1)) s")

# The Python tests, with the Python scripts/setup.sh chose (the venv's, which has pytest).
py=${MOEJIT_PYTHON:-python3}
if ! "$py" -c 'import pytest' 2>/dev/null; then
    skipped+=("the Python tests: pytest is not importable by $py (MOEJIT_SETUP=0?); run without MOEJIT_SETUP=0")
else
    MOEJIT_LIBRARY="$PWD/$build/capi/libmoejit.so" PYTHONPATH="$PWD/python:$PWD/bench" \
        "$py" -m pytest -q tests/python
    t3=$(date +%s); ran+=("Python tests ($py): $((t3 - t2)) s")
    if ! "$py" -c 'import torch' 2>/dev/null; then
        skipped+=("the Python torch tests (custom ops emulated, transformers, expert parallelism): torch is not installed in $py; MOEJIT_TORCH_TESTS=1 installs the CPU wheel into .venv")
    elif ! "$py" -c 'import transformers' 2>/dev/null; then
        skipped+=("the transformers tests: transformers is not installed in $py; MOEJIT_TORCH_TESTS=1 installs it")
    fi
fi

sanitize=${MOEJIT_SANITIZE:-0}
if [ "$sanitize" = 1 ]; then
    # The whole cpu suite (MOEJIT_SANITIZE_SKIP="name ..." leaves tests out), zero reports.
    t4=$(date +%s)
    scripts/sanitize_cpu.sh "${SAN_BUILD_DIR:-build-san}"
    ran+=("cpu suite under ASan+UBSan+LSan in ${SAN_BUILD_DIR:-build-san}${MOEJIT_SANITIZE_SKIP:+ (except $MOEJIT_SANITIZE_SKIP)}: $(( $(date +%s) - t4 )) s")
else
    skipped+=("the cpu suite under ASan/UBSan/LSan (a second build): MOEJIT_SANITIZE=1 runs it")
fi
echo "test command: ran (all passed):"; printf '  - %s\n' "${ran[@]}"
if [ ${#skipped[@]} -gt 0 ]; then echo "test command: skipped:"; printf '  - %s\n' "${skipped[@]}"; fi
echo "test command: $(( $(date +%s) - t0 )) s after setup"
