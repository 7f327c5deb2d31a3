// The grouped-GEMM kernels' per-CTA exclusive prefix sum over experts (e.g. of each expert's
// M-tiles), shared by the mma.sync and wgmma engines. Every CTA computes it from `offsets`
// (E+1 ints from L2): cheaper than another kernel and needs no host round trip.
#pragma once

#include "group_gemm_schedule.cuh"

namespace moejit {

// cum[0..E] = exclusive prefix sum of value(e), THREADS experts at a time, by the whole CTA;
// returns the total. warp_sums: THREADS/32 ints of shared scratch. Ends with a __syncthreads,
// so cum (and anything written before the call) is visible to every thread.
template <int THREADS, class Value>
__device__ __forceinline__ int scan_experts(int num_experts, int *warp_sums, int *cum, Value value) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int carry = 0;
    for (int first = 0; first < num_experts; first += THREADS) {
        const int e = first + tid;
        int v = e < num_experts ? value(e) : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, v, d);
            if (lane >= d) v += u;
        }
        if (lane == 31) warp_sums[warp] = v;
        __syncthreads();
        int before = 0, total = 0;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) {
            const int s = warp_sums[w];
            before += w < warp ? s : 0;
            total += s;
        }
        if (e < num_experts) cum[e + 1] = carry + before + v;
        carry += total;
        __syncthreads();
    }
    if (tid == 0) cum[0] = 0;
    __syncthreads();
    return carry;
}

// same_nk: cum = the exclusive scan of each expert's M-tiles, and the M-tile count. The host's
// bound is never smaller than the true count (clamped offsets guarantee it); taking the minimum
// keeps every kernel exactly what the CPU emulation of the schedule checks.
template <int THREADS>
__device__ __forceinline__ int scan_nk_m_tiles(const int *offsets, int rows, int num_experts, int block_m,
                                               int m_tile_bound, int *warp_sums, int *cum) {
    const int carry = scan_experts<THREADS>(num_experts, warp_sums, cum, [&](int e) {
        return sched::expert_m_tiles(offsets, e, rows, block_m);
    });
    return sched::min_int(carry, m_tile_bound);
}

}  // namespace moejit
