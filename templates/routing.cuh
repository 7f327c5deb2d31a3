// Routing index: a stable counting sort of the S = T·k routes by expert (docs/DESIGN.md §2).
//
// Three launches, no atomics on global memory and no host synchronisation, so the result is
// bitwise deterministic and the sequence is CUDA-graph capturable. The S routes, flattened
// row-major, are cut into chunks of kWarps · rows_per_warp consecutive routes, one per block;
// inside a chunk, warp w owns the w-th run of rows_per_warp routes.
//   1. routing_histogram: block c counts its chunk per expert into hist[e][c].
//   2. routing_row_scan:  one warp per expert turns hist[e][*] into its exclusive prefix over
//                         chunks (in place) and writes counts[e] (at most kMaxChunks chunks).
//   3. routing_rank:      each block scans counts into offsets (block 0 stores them), recounts
//                         its chunk per warp, and every warp walks its routes in order:
//                         index = offsets[e] + routes to e in earlier chunks + in earlier warps
//                         of this chunk + earlier in this warp's run (ranked with match_any).
// Each term counts only routes that precede (t,j) in row-major order, so the rank is stable.
//
// An expert id outside [0,E) (e.g. -1 for a dropped route) is not counted: its scatter_index is
// -1, and offsets[E] is the number of valid routes (S when all are valid). Nothing is written
// out of bounds.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace routing {

// A route's expert in [0,E), or -1 when the id is out of range.
template <int E, class Id> __device__ __forceinline__ int expert_of(Id id) {
    return (id >= Id(0) && id < Id(E)) ? static_cast<int>(id) : -1;
}

__device__ __forceinline__ unsigned lanemask_lt() {
    unsigned mask;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
    return mask;
}

// Inclusive warp prefix sum.
__device__ __forceinline__ int warp_inclusive_scan(int v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += n;
    }
    return v;
}

// Exclusive block prefix sum of one value per thread; `total` receives the block's sum.
// warp_s: 32 ints of shared memory. Every thread of the block must call it.
template <int kThreads>
__device__ __forceinline__ int block_exclusive_scan(int v, int *warp_s, int &total) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int incl = warp_inclusive_scan(v);
    if (lane == 31) warp_s[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int t = lane < kWarps ? warp_s[lane] : 0;
        const int t_incl = warp_inclusive_scan(t);
        __syncwarp();
        warp_s[lane] = t_incl;
    }
    __syncthreads();
    total = warp_s[kWarps - 1];
    const int result = (warp > 0 ? warp_s[warp - 1] : 0) + incl - v;
    __syncthreads();  // warp_s may be reused by the caller
    return result;
}

// Launch: grid = num_chunks, block = kWarps·32.
template <class Id, int E, int kWarps>
__device__ __forceinline__ void histogram(const Id *__restrict__ selected, long long rows,
                                          int rows_per_warp, int num_chunks,
                                          int *__restrict__ hist) {
    constexpr int kThreads = kWarps * 32;
    __shared__ int count_s[E];
    for (int e = threadIdx.x; e < E; e += kThreads) count_s[e] = 0;
    __syncthreads();

    const long long chunk_rows = static_cast<long long>(kWarps) * rows_per_warp;
    const long long begin = blockIdx.x * chunk_rows;
    const long long end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
    // Order does not matter for a count; the loop bound is uniform so match_any sees full warps.
    // The next id is loaded one step ahead to overlap its latency with this step.
    int e_next = begin + threadIdx.x < end ? expert_of<E>(selected[begin + threadIdx.x]) : -1;
    for (long long base = begin; base < end; base += kThreads) {
        const int e = e_next;
        const long long p_next = base + kThreads + threadIdx.x;
        e_next = p_next < end ? expert_of<E>(selected[p_next]) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (e >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&count_s[e], __popc(peers));
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += kThreads)
        hist[static_cast<long long>(e) * num_chunks + blockIdx.x] = count_s[e];
}

// Launch: grid = ceil(num_experts / 8), block = 256 (one warp per expert); num_chunks <=
// kMaxChunks. Each lane loads its contiguous run of chunks at once (no serial round trips),
// sums it, and one warp scan gives every run its start.
template <int kMaxChunks>
__device__ __forceinline__ void row_scan(int *__restrict__ hist, int num_chunks, int num_experts,
                                         int *__restrict__ counts) {
    constexpr int kPerLane = (kMaxChunks + 31) / 32;
    const int lane = threadIdx.x & 31;
    const int e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (e >= num_experts) return;  // the whole warp leaves together
    int *row = hist + static_cast<long long>(e) * num_chunks;
    int v[kPerLane];
    int sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int c = lane * kPerLane + i;
        v[i] = c < num_chunks ? row[c] : 0;
        sum += v[i];
    }
    const int incl = warp_inclusive_scan(sum);
    int run = incl - sum;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int c = lane * kPerLane + i;
        if (c < num_chunks) row[c] = run;
        run += v[i];
    }
    if (lane == 31) counts[e] = incl;
}

// Launch: grid = max(num_chunks, 1) (block 0 always stores offsets, even for S = 0),
// block = kWarps·32. chunk_prefix is the row-scanned hist.
template <class Id, int E, int kWarps>
__device__ __forceinline__ void rank(const Id *__restrict__ selected, long long rows,
                                     int rows_per_warp, int num_chunks,
                                     const int *__restrict__ chunk_prefix,
                                     const int *__restrict__ counts, int *__restrict__ offsets,
                                     int *__restrict__ scatter_index) {
    constexpr int kThreads = kWarps * 32;
    // base_s[w][e]: first index warp w hands to its next route to expert e.
    __shared__ int base_s[kWarps][E];
    __shared__ int warp_s[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    for (int i = threadIdx.x; i < kWarps * E; i += kThreads) (&base_s[0][0])[i] = 0;
    __syncthreads();

    const long long chunk_rows = static_cast<long long>(kWarps) * rows_per_warp;
    const long long wbegin = blockIdx.x * chunk_rows + static_cast<long long>(warp) * rows_per_warp;
    const long long wend = wbegin + rows_per_warp < rows ? wbegin + rows_per_warp : rows;

    // Per-warp counts of this chunk. Only warp w touches row w; one leader per expert. Ids are
    // loaded one step ahead (__syncwarp keeps the compiler from hoisting the loads itself).
    int e_next = wbegin + lane < wend ? expert_of<E>(selected[wbegin + lane]) : -1;
    for (long long base = wbegin; base < wend; base += 32) {
        const int e = e_next;
        const long long p_next = base + 32 + lane;
        e_next = p_next < wend ? expert_of<E>(selected[p_next]) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (e >= 0 && lane == __ffs(peers) - 1) base_s[warp][e] += __popc(peers);
        __syncwarp();
    }
    __syncthreads();

    // offsets = exclusive scan of counts; thread i owns a contiguous group of experts.
    constexpr int kPer = (E + kThreads - 1) / kThreads;
    const int e0 = threadIdx.x * kPer;
    int sum = 0;
    for (int i = 0; i < kPer; ++i)
        if (e0 + i < E) sum += counts[e0 + i];
    int total = 0;
    int offset = block_exclusive_scan<kThreads>(sum, warp_s, total);
    const bool have_chunk = static_cast<int>(blockIdx.x) < num_chunks;
    for (int i = 0; i < kPer; ++i) {
        const int e = e0 + i;
        if (e >= E) break;
        if (blockIdx.x == 0) offsets[e] = offset;
        int run = offset;
        if (have_chunk) run += chunk_prefix[static_cast<long long>(e) * num_chunks + blockIdx.x];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const int n = base_s[w][e];
            base_s[w][e] = run;
            run += n;
        }
        offset += counts[e];
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) offsets[E] = total;
    __syncthreads();

    // Stable ranks: lanes are in row-major order, so a route's rank inside its warp step is the
    // number of lower lanes with the same expert.
    e_next = wbegin + lane < wend ? expert_of<E>(selected[wbegin + lane]) : -1;
    for (long long base = wbegin; base < wend; base += 32) {
        const long long p = base + lane;
        const bool in = p < wend;
        const int e = e_next;
        const long long p_next = p + 32;
        e_next = p_next < wend ? expert_of<E>(selected[p_next]) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        int index = -1;
        if (e >= 0) index = base_s[warp][e] + __popc(peers & lanemask_lt());
        __syncwarp();
        if (e >= 0 && lane == __ffs(peers) - 1) base_s[warp][e] += __popc(peers);
        if (in) scatter_index[p] = index;
        __syncwarp();
    }
}

// ---------------------------------------------------------------- kernels
// Each takes its one argument struct (kernel_args.h); the JIT renders an explicit instantiation.

template <int THREADS, class Id, int E, int kWarps>
__global__ void __launch_bounds__(THREADS) histogram_kernel(const __grid_constant__ kargs::RoutingHistogramArgs args) {
    histogram<Id, E, kWarps>(static_cast<const Id *>(args.selected), args.rows, args.rows_per_warp, args.num_chunks,
                             args.hist);
}

template <int THREADS, int kMaxChunks>
__global__ void __launch_bounds__(THREADS) row_scan_kernel(const __grid_constant__ kargs::RoutingRowScanArgs args) {
    row_scan<kMaxChunks>(args.hist, args.num_chunks, args.num_experts, args.counts);
}

template <int THREADS, class Id, int E, int kWarps>
__global__ void __launch_bounds__(THREADS) rank_kernel(const __grid_constant__ kargs::RoutingRankArgs args) {
    rank<Id, E, kWarps>(static_cast<const Id *>(args.selected), args.rows, args.rows_per_warp, args.num_chunks,
                        args.chunk_prefix, args.counts, args.offsets, args.scatter_index);
}

}  // namespace routing
}  // namespace moejit
