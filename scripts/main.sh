#!/usr/bin/env bash
# The main job: build moejit, warm the JIT cache for the default model preset (qwen3-30b-a3b;
# MOEJIT_PRESET overrides), and on a GPU host run one layer forward+backward and check it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
preset=${MOEJIT_PRESET:-qwen3-30b-a3b}
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release
ninja -C "$build"
if [ -e /dev/nvidia0 ] || ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
    arch_args=()        # a GPU host: the device's own arch
else
    arch_args=(--arch "${MOEJIT_ARCH:-sm_90a}")  # no GPU: compile for Hopper
fi
"$build/tools/moejit-warmup" --preset "$preset" "${arch_args[@]}"
if [ ${#arch_args[@]} -eq 0 ]; then
    "$build/capi/examples/forward_backward"
fi
