#!/usr/bin/env bash
# What README's two commands need, checked and (by default) installed: sourced by
# scripts/main.sh and scripts/test.sh, or run alone (`bash scripts/setup.sh [main|test]`).
#
# System packages (apt-get; sudo when not root): a C++20 compiler (g++), pkg-config, fmt
# (libfmt-dev), Boost.Test headers (libboost-test-dev, tests only), readelf (binutils) and cmake
# (tests only: the install test's CMake consumer), python3 with venv. Python tools go into a
# project-local virtual environment, never into the machine's Python: meson and ninja when the
# machine has none (or meson < 1.0), pytest for the Python tests, and, only when asked
# (MOEJIT_TORCH_TESTS=1), torch (CPU wheel) and transformers for the Python torch tests.
# The CUDA toolkit (NVRTC and its headers) is not installed here: it is checked and named.
#
# Switches (environment):
#   MOEJIT_SETUP=auto    check, install what is missing, say what and why (default)
#   MOEJIT_SETUP=check   check only; list what is missing with the command that installs it
#                        and fail (exit 1) if anything is
#   MOEJIT_SETUP=0       do nothing: use the tools on PATH as they are (the Python tests then
#                        use python3 from PATH and are skipped, with a reason, without pytest)
#   MOEJIT_SETUP_DRY_RUN=1   print the install commands instead of running them, then stop
#   MOEJIT_SETUP_PRETEND_MISSING="meson pytest libfmt-dev ..." | all
#                        treat these as missing (names as the check prints them), to exercise
#                        the install path without uninstalling anything
#   MOEJIT_TORCH_TESTS=1 also torch and transformers in the venv (for tests/python's torch tests)
#   MOEJIT_TORCH_INDEX   where torch comes from (default https://download.pytorch.org/whl/cpu:
#                        the CPU wheel, ~200 MB, instead of PyPI's CUDA build, ~4.6 GB)
#   MOEJIT_VENV          the virtual environment (default .venv in the repository root)
# After it: PATH starts with the venv's bin/ when the venv is used, and MOEJIT_PYTHON is the
# Python that runs the Python tests.

# Runs in the caller's shell when sourced: only setup_* names and the exports below leak.
setup_main() {
    local purpose=${1:-test}  # main: build + warm-up; test: also the tests' tools
    local mode=${MOEJIT_SETUP:-auto}
    local root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    case $mode in
        0|off|no) echo "setup: MOEJIT_SETUP=$mode: not checking tools"; MOEJIT_PYTHON=${MOEJIT_PYTHON:-python3}
                  export MOEJIT_PYTHON; return 0 ;;
        auto|check) ;;
        *) echo "setup: MOEJIT_SETUP=$mode: expected auto, check or 0" >&2; return 2 ;;
    esac
    local venv=${MOEJIT_VENV:-$root/.venv}
    local pretend=" ${MOEJIT_SETUP_PRETEND_MISSING:-} "
    local dry=${MOEJIT_SETUP_DRY_RUN:-0}
    local -a apt_pkgs=() apt_why=() pip_pkgs=() pip_why=() torch_pkgs=()
    local missing_cuda=""
    # Tools an earlier run put into the project venv (the other command's setup) count as
    # present: its bin/ goes first on PATH, so meson and ninja there are found and used.
    [ "$dry" = 1 ] || { [ -x "$venv/bin/meson" ] && export PATH="$venv/bin:$PATH"; } || true

    # present NAME TEST...: runs the test unless NAME is pretended missing.
    setup_present() {
        local name=$1; shift
        case $pretend in *" $name "*|*" all "*) return 1 ;; esac
        "$@" >/dev/null 2>&1
    }
    setup_need_apt() { apt_pkgs+=("$1"); apt_why+=("$1: $2"); }
    setup_need_pip() { pip_pkgs+=("$1"); pip_why+=("$1: $2"); }

    # ---- system packages
    setup_present g++ setup_cxx20 || setup_need_apt g++ "a C++20 compiler builds the library"
    setup_present pkg-config command -v pkg-config ||
        setup_need_apt pkg-config "Meson finds fmt through it"
    setup_present libfmt-dev setup_has_header fmt/format.h ||
        setup_need_apt libfmt-dev "fmt (headers; nothing of it is needed at run time)"
    setup_present python3 command -v python3 ||
        setup_need_apt python3 "the build runs python3 and the Python package is tested with it"
    if [ "$purpose" = test ]; then
        setup_present libboost-test-dev setup_has_header boost/test/included/unit_test.hpp ||
            setup_need_apt libboost-test-dev "the C++ test suites are Boost.Test programs"
        setup_present binutils command -v readelf ||
            setup_need_apt binutils "tests check the library's dependencies with readelf"
        setup_present cmake command -v cmake ||
            setup_need_apt cmake "the install test builds a consumer through find_package(moejit)"
    fi
    # A venv is needed for pytest (tests) and for meson/ninja where the machine lacks them.
    local want_venv=0 venv_py=$venv/bin/python
    [ "$purpose" = test ] && want_venv=1
    if ! setup_present meson setup_meson_ok; then
        setup_need_pip meson "the build system (none on PATH, or older than 1.0)"; want_venv=1
    fi
    if ! setup_present ninja command -v ninja; then
        setup_need_pip ninja "Meson's build backend"; want_venv=1
    fi
    if [ $want_venv = 1 ] && ! setup_present python3-venv setup_venv_ok "$venv"; then
        setup_need_apt python3-venv "the project-local virtual environment $venv (nothing goes into the machine's Python)"
    fi
    if [ "$purpose" = test ]; then
        setup_present pytest "$venv_py" -c 'import pytest' ||
            setup_need_pip pytest "runs the Python tests (tests/python)"
        if [ "${MOEJIT_TORCH_TESTS:-0}" = 1 ]; then
            setup_present torch "$venv_py" -c 'import torch' || torch_pkgs+=(torch)
            setup_present transformers "$venv_py" -c 'import transformers' || torch_pkgs+=(transformers)
        fi
    fi
    local cuda=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
    [ -f "$cuda/include/nvrtc.h" ] || missing_cuda=$cuda

    # ---- report
    local n_missing=$(( ${#apt_pkgs[@]} + ${#pip_pkgs[@]} + ${#torch_pkgs[@]} ))
    if [ -n "$missing_cuda" ]; then
        echo "setup: the CUDA toolkit is missing: no $missing_cuda/include/nvrtc.h. Install it" \
             "(https://developer.nvidia.com/cuda-downloads, or the distribution's nvidia-cuda-toolkit)" \
             "and/or set CUDA_HOME; moejit needs its NVRTC and headers, no GPU or driver." >&2
        return 1
    fi
    if [ "$n_missing" = 0 ]; then
        echo "setup: everything needed is here ($(setup_describe "$purpose" "$venv"))"
    else
        echo "setup: missing for scripts/$purpose.sh:"
        local line
        for line in "${apt_why[@]}"; do echo "  - system package $line"; done
        for line in "${pip_why[@]}"; do echo "  - $line (into the venv $venv)"; done
        [ ${#torch_pkgs[@]} = 0 ] ||
            echo "  - ${torch_pkgs[*]}: asked for by MOEJIT_TORCH_TESTS=1 (into the venv $venv; torch from ${MOEJIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu})"
    fi
    if [ "$n_missing" != 0 ] && [ "$mode" = check ]; then
        local by_hand=""
        [ ${#apt_pkgs[@]} = 0 ] || by_hand+="apt-get install ${apt_pkgs[*]}; "
        [ ${#pip_pkgs[@]} = 0 ] || by_hand+="python3 -m venv $venv; $venv/bin/pip install ${pip_pkgs[*]}; "
        echo "setup: MOEJIT_SETUP=check: nothing installed. MOEJIT_SETUP=auto (the default) installs it" \
             "${by_hand:+(by hand: ${by_hand%; })}"
        return 1
    fi

    # ---- install
    local sudo=""
    if [ ${#apt_pkgs[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || sudo=sudo
        if ! command -v apt-get >/dev/null; then
            echo "setup: no apt-get here: install ${apt_pkgs[*]} (or your distribution's names for them) and run again" >&2
            return 1
        fi
        if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
            echo "setup: not root and no sudo: as root run: apt-get install -y ${apt_pkgs[*]}" >&2
            return 1
        fi
        setup_run "installing system packages with apt-get: ${apt_pkgs[*]}" \
            $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
        setup_run "" $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${apt_pkgs[@]}" || return 1
    fi
    if [ $want_venv = 1 ]; then
        if [ ! -x "$venv_py" ] || case $pretend in *" python3-venv "*|*" all "*) true ;; *) false ;; esac; then
            setup_run "creating the project-local virtual environment $venv" python3 -m venv "$venv" ||
                return 1
        fi
        if [ ${#pip_pkgs[@]} -gt 0 ]; then
            setup_run "installing into $venv: ${pip_pkgs[*]}" "$venv_py" -m pip install \
                --disable-pip-version-check --progress-bar off "${pip_pkgs[@]}" || return 1
        fi
        if [ ${#torch_pkgs[@]} -gt 0 ]; then
            local spec=() p
            for p in "${torch_pkgs[@]}"; do
                case $p in torch) spec+=(torch==2.11.0) ;; transformers) spec+=(transformers==5.17.0) ;; esac
            done
            # torch and its dependencies from the CPU index, transformers from the usual index.
            if [[ " ${spec[*]} " == *" torch=="* ]]; then
                setup_run "installing torch 2.11.0 (CPU build) into $venv for the Python torch tests" \
                    "$venv_py" -m pip install --disable-pip-version-check --progress-bar off \
                    --index-url "${MOEJIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" torch==2.11.0 ||
                    echo "setup: torch could not be installed; the Python torch tests will be skipped" >&2
            fi
            if [[ " ${spec[*]} " == *" transformers=="* ]]; then
                setup_run "installing transformers 5.17.0 into $venv for the transformers tests" \
                    "$venv_py" -m pip install --disable-pip-version-check --progress-bar off transformers==5.17.0 ||
                    echo "setup: transformers could not be installed; its tests will be skipped" >&2
            fi
        fi
        [ "$dry" = 1 ] || export PATH="$venv/bin:$PATH"
        MOEJIT_PYTHON=$venv_py
    else
        MOEJIT_PYTHON=python3
    fi
    export MOEJIT_PYTHON
    if [ "$dry" = 1 ]; then
        echo "setup: MOEJIT_SETUP_DRY_RUN=1: nothing was installed; stopping here"
        return 3
    fi
    if [ "$n_missing" != 0 ]; then
        # Installed: check again, for real this time.
        local recheck
        # torch is optional: its install failing was reported above and its tests skip.
        recheck=$(MOEJIT_SETUP=check MOEJIT_SETUP_PRETEND_MISSING='' MOEJIT_VENV="$venv" MOEJIT_TORCH_TESTS=0 \
            bash "$root/scripts/setup.sh" "$purpose" 2>&1) || {
            echo "$recheck" >&2; echo "setup: still missing after installing (above)" >&2; return 1; }
        echo "setup: done ($(setup_describe "$purpose" "$venv"))"
    fi
}

setup_cxx20() {
    local cxx=${CXX:-c++}
    command -v "$cxx" >/dev/null || cxx=g++
    echo 'int main() { return [] { return 0; }(); }' |
        "$cxx" -std=c++20 -x c++ - -fsyntax-only >/dev/null 2>&1
}
setup_has_header() {
    echo "#include <$1>" | "${CXX:-c++}" -std=c++20 -x c++ - -fsyntax-only >/dev/null 2>&1 ||
        echo "#include <$1>" | g++ -std=c++20 -x c++ - -fsyntax-only >/dev/null 2>&1
}
setup_meson_ok() {
    local v
    v=$(meson --version 2>/dev/null) || return 1
    [ "$(printf '%s\n1.0.0\n' "$v" | sort -V | head -1)" = 1.0.0 ]
}
# A venv can be made (Debian's python3 has venv only with python3-venv: ensurepip).
setup_venv_ok() { [ -x "$1/bin/python" ] || python3 -c 'import venv, ensurepip'; }
setup_run() {
    local what=$1; shift
    [ -z "$what" ] || echo "setup: $what"
    if [ "${MOEJIT_SETUP_DRY_RUN:-0}" = 1 ]; then
        echo "setup:   would run: $*"
        return 0
    fi
    echo "setup:   \$ $*"
    "$@"
}
setup_describe() {
    local out
    out="meson $(meson --version 2>/dev/null || echo '?'), ninja $(ninja --version 2>/dev/null || echo '?')"
    out+=", $(${CXX:-c++} --version 2>/dev/null | head -1)"
    if [ "$1" = test ] && [ -x "$2/bin/python" ]; then
        out+=", venv $2"
        "$2/bin/python" -c 'import torch' 2>/dev/null && out+=" with torch"
    fi
    echo "$out"
}

# For the two commands: set up or end the calling script (a dry run ends it with 0).
setup_or_exit() {
    local rc=0
    setup_main "$1" || rc=$?
    case $rc in 0) ;; 3) exit 0 ;; *) echo "scripts/$1.sh: setup failed (above); MOEJIT_SETUP=0 skips it" >&2; exit "$rc" ;; esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run, not sourced
    set -uo pipefail
    rc=0
    setup_main "${1:-test}" || rc=$?
    [ $rc = 3 ] && rc=0
    exit $rc
fi
