# Sourced by the GPU passes (release_suites.sh, tile_sweep.sh, fp8_*.sh, ...): the fresh build on
# the device, the environment the tests and benchmarks need, and the list of GPU suites the build
# made. Expects $out (the log folder); sets $b (the build folder). A pass may set, before sourcing:
#   build_dir      the build folder (default /tmp/moejit-build)
#   build_targets  the ninja targets, a list (default: everything); a pass that names its targets
#                  always runs ninja on them (REUSE_BUILD below is for the whole build)
b=${build_dir:-/tmp/moejit-build}
export MOEJIT_CACHE_DIR=/tmp/moejit-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# A later call on the same warm machine reuses the build (ninja rebuilds what changed).
[ -f $b/build.ninja ] || meson setup $b --buildtype=release >"$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }
# REUSE_BUILD=1: a later call of the same session keeps the library built by an earlier one
# (the tree copied afresh may look newer to ninja than it is).
# The library's ninja target carries its version (capi/libmoejit.so.X.Y.Z; the unversioned name
# is a link made with it): a pass may name it capi/libmoejit.so.
if [ -n "${build_targets:-}" ]; then
  lib_target=$(ninja -C $b -t targets all | grep -o '^capi/libmoejit\.so\.[0-9]*\.[0-9]*\.[0-9]*' | head -1)
  build_targets=$(echo " $build_targets " | sed "s# capi/libmoejit\.so # $lib_target #")
fi
if [ -n "${build_targets:-}" ] || [ -z "${REUSE_BUILD:-}" ] || [ ! -f $b/capi/libmoejit.so ]; then
  # shellcheck disable=SC2086  # build_targets is a list of targets
  ninja -C $b ${build_targets:-} >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
fi
export MOEJIT_LIBRARY=$b/capi/libmoejit.so PYTHONPATH=python:bench

# The names of the GPU suite executables (tests/test_gpu_<name>).
gpu_suites() { find "$b/tests" -maxdepth 1 -type f -name 'test_gpu_*' -perm -u+x -printf '%f\n' | sed 's/^test_gpu_//' | sort; }
