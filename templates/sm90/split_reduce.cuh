// The second launch of a split same_mn (sm90/group_gemm.cuh): sums the fp32 partial tiles into
// C. Plain CUDA: it uses none of the wgmma machinery.
#pragma once

#include "moejit_common.cuh"
#include "group_gemm_schedule.cuh"

namespace moejit {
namespace sm90 {

// C[e] (+)= the sum of partials[first .. first + count) in slot order, this block's share of
// C[e]'s M*N elements, four at a time.
template <class CT, int M, int N, bool ACCUMULATE, int THREADS>
__device__ __forceinline__ void sum_expert_partials(CT *__restrict__ c_e, int first, int count,
                                                    const float *__restrict__ partials) {
    constexpr long long MN = static_cast<long long>(M) * N;
    const long long stride = static_cast<long long>(gridDim.x) * THREADS * 4;
    for (long long i = (static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x) * 4; i < MN; i += stride) {
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = 0; s < count; ++s) {
            const float4 p = *reinterpret_cast<const float4 *>(partials + (first + s) * MN + i);
            sum.x += p.x;
            sum.y += p.y;
            sum.z += p.z;
            sum.w += p.w;
        }
        CT *const out = c_e + i;
        if constexpr (ACCUMULATE) {
            const float2 a = load2(out), b = load2(out + 2);
            sum.x += a.x;
            sum.y += a.y;
            sum.z += b.x;
            sum.w += b.y;
        }
        store2(out, sum.x, sum.y);
        store2(out + 2, sum.z, sum.w);
    }
}

// After a split same_mn launch: C[e] (+)= sum over s of partials[index[e] + s] in s order, for
// every expert with more than split_rows rows (the others were written by the GEMM), reading
// only slots below max_slots. A grid-stride loop of a few blocks per SM over each split expert's
// M*N elements: most experts are not split, and a block per (expert, element range) cost more
// in empty blocks than the sums (docs/PERF_LOG.md). float4 reads, deterministic.
// Which experts are split is read THREADS experts at a time, one per thread, into a shared
// flag per expert: a serial walk over every expert's offsets in every thread cost ~30 us per
// launch with 128 experts and none split (0.8.0 profile), about the whole launch.
template <class CT, int M, int N, bool ACCUMULATE, int THREADS>
__device__ __forceinline__ void split_reduce_sm90(CT *__restrict__ c, const int *__restrict__ offsets, int rows,
                                                  int num_experts, int split_rows, int max_slots,
                                                  const int *__restrict__ index,
                                                  const float *__restrict__ partials) {
    constexpr long long MN = static_cast<long long>(M) * N;
    __shared__ unsigned char split[THREADS];
    for (int base = 0; base < num_experts; base += THREADS) {
        const int mine = base + static_cast<int>(threadIdx.x);
        bool is_split = false;
        if (mine < num_experts) {
            const sched::RowRange rr = sched::expert_rows(offsets, mine, rows);
            is_split = sched::mn_is_split(rr.end - rr.begin, split_rows);
        }
        split[threadIdx.x] = is_split ? 1 : 0;
        if (__syncthreads_or(is_split) == 0) continue;  // also publishes the flags
        for (int j = 0; j < sched::min_int(num_experts - base, THREADS); ++j) {
            if (!split[j]) continue;
            const int e = base + j;
            const int first = sched::min_int(index[e], max_slots), last = sched::min_int(index[e + 1], max_slots);
            sum_expert_partials<CT, M, N, ACCUMULATE, THREADS>(c + e * MN, first, last - first, partials);
        }
        __syncthreads();  // the flags are read before the next block of experts overwrites them
    }
}

}  // namespace sm90
}  // namespace moejit
