#!/usr/bin/env bash
# Installs this build into a temporary folder (meson install --destdir, no rebuild) and builds
# small consumers outside the tree against it: C and C++ through pkg-config, both through the
# CMake package; each runs (no GPU needed: a context is created or says NO_DRIVER/NO_DEVICE).
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moejit-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

read -r prefix libdir includedir sanitize < <(meson introspect --buildoptions "$build" | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["libdir"], o["includedir"], o.get("b_sanitize", "none"))')
if [ "$sanitize" != none ]; then
    # Consumers would need the sanitizer runtime too; the plain build checks the install.
    echo "skipped: a -Db_sanitize=$sanitize build is not what users install"
    exit 77
fi
stage=$tmp/stage
meson install -C "$build" --no-rebuild --quiet --destdir "$stage" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "meson install"; }
root=$stage$prefix
case $libdir in /*) lib=$stage$libdir ;; *) lib=$root/$libdir ;; esac
case $includedir in /*) inc=$stage$includedir ;; *) inc=$root/$includedir ;; esac

for f in "$inc/moejit/moejit.h" "$inc/moejit/moejit_version.h" "$inc/moejit/moejit.hpp" \
         "$lib/libmoejit.so.0" "$lib/pkgconfig/moejit.pc" \
         "$lib/cmake/moejit/moejitConfig.cmake" "$lib/cmake/moejit/moejitConfigVersion.cmake"; do
    [ -e "$f" ] || fail "not installed: ${f#"$stage"}"
done
# Run-time needs: libcuda and NVRTC are dlopened, fmt is header-only.
needed=$(readelf -d "$lib/libmoejit.so.0" | grep NEEDED || true)
for bad in libfmt libnvrtc libcuda; do
    if grep -q "$bad" <<<"$needed"; then fail "libmoejit.so links $bad:"$'\n'"$needed"; fi
done
echo "installed under $prefix: $(echo "$needed" | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"

# Outside the source and build trees, as a user would.
cp "$src"/tests/install/consumer/* "$tmp/"
cd "$tmp"
# No LD_LIBRARY_PATH: the .pc file's Libs carry -Wl,-rpath,${libdir}, and --define-variable
# moves its prefix to the staged copy (as if installed there), so the consumers must find
# libmoejit through their run path alone.
unset LD_LIBRARY_PATH
export PKG_CONFIG_PATH=$lib/pkgconfig
pc() { pkg-config --define-variable=prefix="$root" "$@" moejit; }
cflags=$(pc --cflags) || fail "pkg-config --cflags moejit"
libs=$(pc --libs) || fail "pkg-config --libs moejit"
case $libs in *"-rpath,$lib"*) ;; *) fail "pkg-config --libs moejit has no run path to $lib: $libs" ;; esac
cxx_std=$(pc --variable=cxx_std)
${CC:-cc} -std=c99 -Wall -Wextra -Werror -pedantic consumer.c $cflags $libs -o consumer_c_pc ||
    fail "C consumer (pkg-config: $cflags $libs)"
./consumer_c_pc || fail "C consumer (pkg-config) run without LD_LIBRARY_PATH"
${CXX:-c++} -std=c++"$cxx_std" -Wall -Wextra -Werror consumer.cpp $cflags $libs -o consumer_cpp_pc ||
    fail "C++ consumer (pkg-config, C++$cxx_std: $cflags $libs)"
./consumer_cpp_pc || fail "C++ consumer (pkg-config) run without LD_LIBRARY_PATH"

if ! command -v cmake >/dev/null; then
    echo "cmake not found: the CMake package was installed but not tried"
    exit 77
fi
cmake -S . -B cmake-build -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release \
    >cmake.log 2>&1 || { cat cmake.log; fail "cmake configure (find_package(moejit CONFIG))"; }
cmake --build cmake-build >>cmake.log 2>&1 || { cat cmake.log; fail "cmake build"; }
./cmake-build/consumer_c || fail "C consumer (CMake) run"
./cmake-build/consumer_cpp || fail "C++ consumer (CMake) run"
echo "install test: C and C++ through pkg-config and CMake: ok"
