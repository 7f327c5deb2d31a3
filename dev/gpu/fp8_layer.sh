#!/usr/bin/env bash
# The layer's FP8 recipe on an H200 in one call (issue 31, layer and API): a fresh release build
# of its tests only, the CPU test (warmup compiles every FP8 layer kernel, refusals, saved bytes),
# the GPU test (the layer's quantizer forms vs the host mirror; forward and backward vs float64
# on duplicate routes, all-to-one, empty experts, T = 1, T = 0, outliers 1e4, K = 7168; relative
# error per output printed) and the layer benchmark (FP8 vs bf16 forward and forward+backward on
# qwen3-30b-a3b, deepseek-v3, mixtral-8x7b). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
build_dir=${FP8_LAYER_BUILD:-/tmp/moejit-fp8-layer-build} build_targets="tests/test_cpu_fp8_layer tests/test_gpu_fp8_layer"
# shellcheck source=dev/gpu/common.sh
. dev/gpu/common.sh  # builds (or reuses) $b; MOEJIT_LIBRARY, PYTHONPATH
timeout 300 $b/tests/test_cpu_fp8_layer --report_level=short >"$out/cpu_fp8_layer.log" 2>&1; echo "cpu fp8_layer rc=$?"
grep -E "error|failure|passed|failed|kernels|saved FP8" "$out/cpu_fp8_layer.log" | head -20
timeout 420 $b/tests/test_gpu_fp8_layer --report_level=short >"$out/gpu_fp8_layer.log" 2>&1; echo "gpu fp8_layer rc=$?"
grep -E "error|failure|passed|failed|skipping|SKIPPED|^fp8 layer|cache:" "$out/gpu_fp8_layer.log" | head -80
timeout 400 $b/tests/test_gpu_fp8_layer --run_test=benchmark --report_level=short >"$out/bench_fp8_layer.log" 2>&1; echo "bench fp8_layer rc=$?"
grep -E "error|failure|benchmark" "$out/bench_fp8_layer.log" | head -20
