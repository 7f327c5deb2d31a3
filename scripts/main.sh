#!/usr/bin/env bash
# The main job: build moejit, warm the JIT cache for the default model preset (qwen3-30b-a3b;
# MOEJIT_PRESET overrides), and on a GPU host run one layer forward+backward and check it.
# On a fresh Debian/Ubuntu machine with only the CUDA toolkit it first installs what the build
# needs (scripts/setup.sh says what and why; MOEJIT_SETUP=check only checks, =0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
source scripts/setup.sh
setup_or_exit main
build=${BUILD_DIR:-build}
preset=${MOEJIT_PRESET:-qwen3-30b-a3b}
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release
ninja -C "$build"
ran=("build ($build)"); skipped=()
if [ -e /dev/nvidia0 ] || ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
    arch_args=()        # a GPU host: the device's own arch
    why_no_gpu=""
else
    arch_args=(--arch "${MOEJIT_ARCH:-sm_90a}")  # no GPU: compile for Hopper
    why_no_gpu="no GPU here (no /dev/nvidia0, no libcuda.so.1)"
fi
"$build/tools/moejit-warmup" --preset "$preset" "${arch_args[@]}"
ran+=("JIT cache warm-up for $preset (${arch_args[*]:-for the GPU here})")
if [ -z "$why_no_gpu" ]; then
    "$build/capi/examples/forward_backward"
    ran+=("one layer forward+backward, checked (capi/examples/forward_backward)")
else
    skipped+=("the layer forward+backward check: $why_no_gpu")
fi
echo "main job: ran:"; printf '  - %s\n' "${ran[@]}"
if [ ${#skipped[@]} -gt 0 ]; then echo "main job: skipped:"; printf '  - %s\n' "${skipped[@]}"; fi
