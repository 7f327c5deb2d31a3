#!/usr/bin/env bash
# One full GPU session on a lent H200: build fresh, run the CPU and GPU suites (the GPU suite
# twice on one cache folder: the second run must show compiles=0), then the benchmarks.
# Logs under $OUT (or ./out). Usage: dev/gpu/run_suites.sh [tests|bench|all] [meson test args]
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}; shift || true
out=${OUT:-$PWD/out}; mkdir -p "$out"
build=/tmp/moejit-build
export MOEJIT_CACHE_DIR=/tmp/moejit-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee "$out/gpu.txt"
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --buildtype=release >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }
fi
ninja -C "$build" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
echo "build ok"
if [ "$what" = tests ] || [ "$what" = all ]; then
    meson test -C "$build" --suite cpu --num-processes 8 "$@" >"$out/cpu.log" 2>&1
    echo "cpu suite: $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/cpu.log" | tr -s ' ' | tr '\n' ' ')"
    for pass in 1 2; do
        meson test -C "$build" --suite gpu --print-errorlogs -v "$@" >"$out/gpu$pass.log" 2>&1
        echo "gpu suite pass $pass: $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/gpu$pass.log" | tr -s ' ' | tr '\n' ' ')"
        grep -E " cache: " "$out/gpu$pass.log" | sed 's/^/  /'
    done
    grep -E "FAIL|error:|Error|failed" "$out/gpu1.log" | head -40
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    export MOEJIT_LIBRARY="$build/capi/libmoejit.so"
    if [ -f tools/bench_group_gemm.py ]; then
        PYTHONUNBUFFERED=1 timeout 300 python3 tools/bench_group_gemm.py --json "$out/bench_gemm.json" >"$out/bench_gemm.log" 2>&1
        tail -25 "$out/bench_gemm.log"
    fi
fi
