# Sourced by the GPU passes (release_suites.sh, tile_sweep.sh): the fresh build on the device, the
# environment the tests and benchmarks need, and the list of GPU suites the build made.
# Expects $out (the log folder); sets $b (the build folder).
b=/tmp/moejit-build
export MOEJIT_CACHE_DIR=/tmp/moejit-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# A later call on the same warm machine reuses the build (ninja rebuilds what changed).
[ -f $b/build.ninja ] || meson setup $b --buildtype=release >"$out/setup.log" 2>&1
# REUSE_BUILD=1: a later call of the same session keeps the library built by an earlier one
# (the tree copied afresh may look newer to ninja than it is).
if [ -z "${REUSE_BUILD:-}" ] || [ ! -f $b/capi/libmoejit.so ]; then
  ninja -C $b >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
fi
export MOEJIT_LIBRARY=$b/capi/libmoejit.so PYTHONPATH=python:bench

# The names of the GPU suite executables (tests/test_gpu_<name>).
gpu_suites() { find "$b/tests" -maxdepth 1 -type f -name 'test_gpu_*' -perm -u+x -printf '%f\n' | sed 's/^test_gpu_//' | sort; }
