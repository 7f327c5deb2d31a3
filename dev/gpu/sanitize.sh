#!/usr/bin/env bash
# The GPU suites under compute-sanitizer (issue 16 item 7): memcheck, racecheck and synccheck,
# each with --error-exitcode 1, so any report fails; a summary table last. One H200, within one
# 10-minute device call (build + runs within SANITIZE_BUDGET_S = 500 s; every run has its own
# timeout, and runs left when the budget is spent are listed NOTRUN):
#   memcheck  : bad_input (tests/gpu/test_bad_input_gpu.c), routing, swiglu and jit in full;
#               group_gemm, gemm_sm90 and moe_layer one case per feature (left out: every tile
#               config, tuning, the H=2880 shapes and the realistic layer shapes, the slowest);
#   racecheck, synccheck: a subset covering each kernel family once — routing index and
#               scatter/gather, SwiGLU, the mma grouped GEMMs (nk, mn, split-K), the sm_90a
#               wgmma/TMA engine (plain and SwiGLU epilogue) and a whole layer, small shapes
#               (racecheck is 10-100x slower than memcheck).
# Runs of one tool are sequential; the three tools run side by side (the GPU is big enough).
# usage: dev/gpu/sanitize.sh [BUILD_DIR]   (logs under $OUT, default ./out)
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:-$PWD/out}; logs=/tmp/moejit-sanitize; rm -rf "$logs"; mkdir -p "$logs" "$final"
trap 'tar czf "$final/sanitize_logs.tgz" -C "$logs" . 2>/dev/null' EXIT
b=${1:-/tmp/moejit-build}
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")}
[ -x "$cs" ] || { echo "compute-sanitizer not found ($cs)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$cs" --version | tail -1
t0=$(date +%s)
[ -f "$b/build.ninja" ] || meson setup "$b" --buildtype=release >"$logs/setup.log" 2>&1
ninja -C "$b" >"$logs/build.log" 2>&1 || { grep -E "error|FAILED" "$logs/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

# Subsets (Boost.Test --run_test filters, ':'-separated).
layer_mem='seed/all_routes_to_expert0_realistic:softmax_topk/deepseek_v2_lite_empty_experts:features/swiglu_limit_10_duplicate_routes:features/intermediate_not_a_multiple_of_64:features/fused_swiglu_epilogue:features/empty_experts_accumulate:features/single_token:features/zero_tokens:features/fp16:reproducibility/cuda_graph_replay_matches_eager'
sm90_mem='all_routes_to_one_expert,empty_experts,one_expert_and_tiny_batches,ragged_n_and_k,gathered_a_rows,two_operand_pairs,swiglu_epilogue'
routing_race='routing_index_int32,routing_index_drops_out_of_range_ids,scatter_gather_bf16_and_fp16'
swiglu_race='ragged_widths_and_row_counts,zero_rows_is_a_no_op'
gemm_mem='nk_random_routing,nk_seed_pattern_all_routes_to_one_expert,nk_empty_experts,nk_one_expert_and_k_equals_e,nk_tiny_batches,nk_zero_rows_accepts_null_tensors,nk_c_dtypes_and_accumulate,nk_fp16,nk_cuda_graph_capture,mn_random_routing,mn_seed_pattern_and_empty_experts,mn_one_expert_k_equals_e_tiny,mn_fp16,mn_split_long_reductions,mn_split_stays_inside_its_workspace'
gemm_race='nk_tiny_batches,nk_empty_experts,mn_one_expert_k_equals_e_tiny,mn_split_stays_inside_its_workspace'
sm90_race='empty_experts,one_expert_and_tiny_batches,swiglu_epilogue'
layer_race='features/single_token:features/zero_tokens:features/empty_experts_accumulate'

# Everything (build included) ends within SANITIZE_BUDGET_S seconds, so the table always prints
# inside one device call: a run gets min(its own limit, what is left), NOTRUN when under 20 s.
budget=${SANITIZE_BUDGET_S:-500}

# run TOOL NAME TIMEOUT EXE [FILTER]: one sanitized run; its result line goes to $logs/TOOL.NAME.res
run() {
    local tool=$1 name=$2 limit=$3 exe=$4 filter=${5:-} args=() start rc errors left
    [ -n "$filter" ] && args=(--run_test="$filter")
    start=$(date +%s)
    left=$(( t0 + budget - start ))
    if [ $left -lt 20 ]; then
        printf '%-10s %-12s %-8s %6s %5ss  %s\n' "$tool" "$name" NOTRUN - 0 "(out of time)" >"$logs/$tool.$name.res"
        return
    fi
    [ $limit -gt $left ] && limit=$left
    timeout "$limit" "$cs" --tool "$tool" --error-exitcode 1 --print-limit 20 \
        "$exe" "${args[@]}" >"$logs/$tool.$name.log" 2>&1
    rc=$?
    errors=$(grep -o 'ERROR SUMMARY: [0-9]*' "$logs/$tool.$name.log" | tail -1 | grep -o '[0-9]*$')
    local verdict=PASS
    [ $rc = 77 ] && verdict=SKIP
    [ $rc = 124 ] && verdict=TIMEOUT
    [ $rc != 0 ] && [ $rc != 77 ] && [ $rc != 124 ] && verdict=FAIL
    printf '%-10s %-12s %-8s %6s %5ss  %s\n' "$tool" "$name" "$verdict" "${errors:-?}" "$(( $(date +%s) - start ))" \
        "${filter:+(subset)}" >"$logs/$tool.$name.res"
}

T=$b/tests
(
    run memcheck bad_input 60 "$T/test_gpu_bad_input"
    run memcheck routing 60 "$T/test_gpu_routing"
    run memcheck swiglu 60 "$T/test_gpu_swiglu"
    run memcheck jit 40 "$T/test_gpu_jit"
    run memcheck group_gemm 90 "$T/test_gpu_group_gemm" "$gemm_mem"
    run memcheck gemm_sm90 60 "$T/test_gpu_gemm_sm90" "$sm90_mem"
    run memcheck moe_layer 90 "$T/test_gpu_moe_layer" "$layer_mem"
) &
m=$!
(
    run racecheck routing 80 "$T/test_gpu_routing" "$routing_race"
    run racecheck swiglu 60 "$T/test_gpu_swiglu" "$swiglu_race"
    run racecheck group_gemm 100 "$T/test_gpu_group_gemm" "$gemm_race"
    run racecheck gemm_sm90 80 "$T/test_gpu_gemm_sm90" "$sm90_race"
    run racecheck moe_layer 80 "$T/test_gpu_moe_layer" "$layer_race"
) &
r=$!
(
    run synccheck bad_input 40 "$T/test_gpu_bad_input"
    run synccheck routing 60 "$T/test_gpu_routing" "$routing_race"
    run synccheck swiglu 40 "$T/test_gpu_swiglu" "$swiglu_race"
    run synccheck group_gemm 80 "$T/test_gpu_group_gemm" "$gemm_race"
    run synccheck gemm_sm90 60 "$T/test_gpu_gemm_sm90" "$sm90_race"
    run synccheck moe_layer 60 "$T/test_gpu_moe_layer" "$layer_race"
) &
s=$!
wait $m $r $s

# Failing runs: their first reports.
for f in "$logs"/*.res; do
    if ! grep -q ' PASS \| SKIP ' "$f"; then
        log=${f%.res}.log
        echo "== $(basename "$log")"
        grep -E '=========|error|FAILED|failure' "$log" | head -25
    fi
done
echo
printf '%-10s %-12s %-8s %6s %6s\n' tool suite result errors time
cat "$logs"/memcheck.*.res "$logs"/racecheck.*.res "$logs"/synccheck.*.res
echo "total: $(( $(date +%s) - t0 )) s"
! grep -l -v ' PASS \| SKIP ' "$logs"/*.res >/dev/null
