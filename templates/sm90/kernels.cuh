// The wgmma engine's kernels: each takes its one argument struct (kernel_args.h) and calls the
// engine's device function (sm90/group_gemm.cuh, sm90/split_reduce.cuh). __grid_constant__ keeps
// the tensor maps inside the struct in parameter space, where TMA reads them. The JIT renders
// only an explicit instantiation of one of these.
#pragma once

#include "kernel_args.h"
#include "sm90/group_gemm.cuh"

namespace moejit {
namespace sm90 {

template <int THREADS, class Cfg, int N, int K, int K_SPLIT, bool B_TRANSPOSED, bool ACCUMULATE, bool GATHER_A,
          class Glu>
__global__ void __launch_bounds__(THREADS, 1) group_gemm_nk_kernel(const __grid_constant__ kargs::Sm90NkArgs args) {
    group_gemm_nk_sm90<Cfg, N, K, K_SPLIT, B_TRANSPOSED, ACCUMULATE, GATHER_A, Glu>(
        args.tma_a, args.tma_b, args.tma_c, args.tma_a2, args.tma_b2, args.tma_c2,
        static_cast<typename Cfg::CT *>(args.c), static_cast<const typename Cfg::T *>(args.gather_src),
        args.row_token, args.offsets, args.rows, args.num_experts, args.m_tile_bound, args.glu);
}

template <int THREADS, class Cfg, int M, int N, bool ACCUMULATE>
__global__ void __launch_bounds__(THREADS, 1) group_gemm_mn_kernel(const __grid_constant__ kargs::Sm90MnArgs args) {
    const kargs::MnSplitTarget &o = args.out;
    group_gemm_mn_sm90<Cfg, M, N, ACCUMULATE>(args.tma_a, args.tma_b, args.tma_c, static_cast<typename Cfg::CT *>(o.c),
                                              o.offsets, o.rows, o.num_experts, o.split_rows, o.max_slots,
                                              args.partials_index, args.partials);
}

template <int THREADS, class CT, int M, int N, bool ACCUMULATE>
__global__ void __launch_bounds__(THREADS) split_reduce_kernel(const __grid_constant__ kargs::SplitReduceArgs args) {
    const kargs::MnSplitTarget &o = args.out;
    split_reduce_sm90<CT, M, N, ACCUMULATE, THREADS>(static_cast<CT *>(o.c), o.offsets, o.rows, o.num_experts,
                                                     o.split_rows, o.max_slots, args.index, args.partials);
}

}  // namespace sm90
}  // namespace moejit
