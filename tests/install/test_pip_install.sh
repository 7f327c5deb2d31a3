#!/usr/bin/env bash
# The Python route as a new user takes it, outside CI (it compiles the whole library: minutes):
# a clean clone of this checkout's HEAD (or a copy of a tree without .git), a new venv,
# `pip wheel .` then `pip install` of that wheel, and `import moejit` with no MOEJIT_* variable
# set. Prints the wall times and the wheel size. Without a GPU, moejit.Context() must raise NoDriverError; with one, it must open.
# Usage: test_pip_install.sh [pip options, e.g. --no-index --find-links DIR]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moejit-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MOEJIT_LIBRARY MOEJIT_NVRTC

if git -C "$src" cat-file -e HEAD:pyproject.toml 2>/dev/null; then
    git clone --quiet "$src" "$tmp/clone"   # HEAD only: what a user's clone holds
else  # a copy without a usable .git (e.g. a device machine's working tree): its files minus builds
    mkdir "$tmp/clone"
    tar -C "$src" --exclude='./build*' --exclude=./.whl --exclude='./.mesonpy-*' --exclude=./out \
        -cf - . | tar -C "$tmp/clone" -xf -
fi
"$python" -m venv "$tmp/venv"
pip=("$tmp/venv/bin/python" -m pip --disable-pip-version-check)
start=$(date +%s)
(cd "$tmp/clone" && "${pip[@]}" wheel --no-deps -w "$tmp/wheels" "$@" . >"$tmp/wheel.log" 2>&1) ||
    { tail -40 "$tmp/wheel.log"; fail "pip wheel ."; }
built=$(date +%s)
wheel=$(ls "$tmp"/wheels/moejit-*.whl)
"${pip[@]}" install --no-deps "$@" "$wheel" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "pip install $wheel"; }
done_at=$(date +%s)
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KB; pip wheel . $((built - start)) s, pip install $((done_at - built)) s"
unzip -l "$wheel" | grep -E "libmoejit|_build_info" || fail "the wheel lacks libmoejit.so"

cd "$tmp"   # not the clone: the installed package must be the one imported
"$tmp/venv/bin/python" - <<'PY' || fail "import moejit"
import os, subprocess, moejit
from moejit import _capi
lib = _capi.load()
print(f"moejit {moejit.__version__}: library {lib.path}")
assert os.path.dirname(lib.path) == os.path.dirname(moejit.__file__), lib.path
needed = subprocess.run(["readelf", "-d", lib.path], capture_output=True, text=True).stdout
for bad in ("libfmt", "libnvrtc", "libcuda"):
    assert bad not in needed, f"{lib.path} links {bad}"
print(f"NVRTC {moejit.nvrtc_version()}")
gpu = os.path.exists("/dev/nvidia0")
try:
    moejit.Context().close()
    assert gpu, "a context opened without a GPU?"
    print("Context(): opened")
except moejit.NoDriverError as e:
    assert not gpu, e
    print(f"Context(): NoDriverError ({e})")
PY
echo "pip install test: ok"
