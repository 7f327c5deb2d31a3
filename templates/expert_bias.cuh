// The expert biases' backward (docs/DESIGN.md §2): per-expert column sums over the scattered
// rows, and the routing weight's share of fc2's bias.
//
// Column sums out[e, c] = Σ_{rows r of expert e} scale[r]·m[r, c] run in two fixed-order
// stages, so they are bitwise deterministic without atomics and stay parallel when one expert
// owns every row: stage 1 cuts the rows into chunks of kChunkRows and sums each (chunk b,
// expert e) intersection into partial slot b + e (unique: along the rows, b and e never both
// decrease, so b + e is strictly increasing over the intersections); stage 2 adds the slots of
// each expert in chunk order. Rows past offsets[E] (dropped routes) are not summed.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace bias {

// Stage 1: one block per (chunk, column block), one thread per column.
template <class T, bool kScale, int kChunkRows>
__device__ __forceinline__ void colsum_partial(const T *__restrict__ m, const float *__restrict__ scale,
                                               const int *__restrict__ offsets, int num_experts, long long cols,
                                               float *__restrict__ partial) {
    const long long b = blockIdx.x;
    const long long c = static_cast<long long>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const long long valid = offsets[num_experts];
    const long long r0 = b * kChunkRows;
    if (r0 >= valid) return;
    const long long r1 = r0 + kChunkRows < valid ? r0 + kChunkRows : valid;
    int e = expert_of_row(offsets, num_experts, r0);
    long long next = offsets[e + 1];
    float acc = 0.0f;
    for (long long r = r0; r < r1; ++r) {
        if (r >= next) {  // expert e's rows in this chunk end here: store them, find the next owner
            partial[(b + e) * cols + c] = acc;
            acc = 0.0f;
            while (r >= next) next = offsets[++e + 1];
        }
        const float v = to_float(m[r * cols + c]);
        acc = kScale ? fmaf(scale[r], v, acc) : acc + v;
    }
    partial[(b + e) * cols + c] = acc;
}

// Stage 2: one block per (expert, column block). An expert without rows gets 0 (or keeps its
// value when accumulating).
template <class O, bool kAccumulate, int kChunkRows>
__device__ __forceinline__ void colsum_reduce(const float *__restrict__ partial, const int *__restrict__ offsets,
                                              long long cols, O *__restrict__ out) {
    const int e = blockIdx.x;
    const long long c = static_cast<long long>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const long long lo = offsets[e], hi = offsets[e + 1];
    float acc = 0.0f;
    if (hi > lo)
        for (long long b = lo / kChunkRows; b <= (hi - 1) / kChunkRows; ++b) acc += partial[(b + e) * cols + c];
    O *dst = out + static_cast<long long>(e) * cols + c;
    *dst = from_float<O>(kAccumulate ? to_float(*dst) + acc : acc);
}

// d_w_s[r] += Σ_c dy[r, c]·bias[e(r), c]: the routing weight's gradient through fc2's bias
// (out = Σ_j w·(y + bias)). One warp per row, fixed per-lane order then an xor butterfly.
template <class T, int kWarpsPerBlock>
__device__ __forceinline__ void row_dot(const T *__restrict__ dy, const T *__restrict__ bias,
                                        const int *__restrict__ offsets, int num_experts, long long rows,
                                        long long cols, float *__restrict__ d_w_s) {
    using V = Vec16<T>;
    const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (row >= rows || row >= offsets[num_experts]) return;  // whole warps exit together
    const int lane = threadIdx.x % 32;
    const long long vecs = cols / V::kCount;
    const V *d = reinterpret_cast<const V *>(dy) + row * vecs;
    const V *bv = reinterpret_cast<const V *>(bias) + expert_of_row(offsets, num_experts, row) * vecs;
    float acc = 0.0f;
    for (long long v = lane; v < vecs; v += 32) {
        const V x = d[v], y = bv[v];
#pragma unroll
        for (int n = 0; n < V::kCount; ++n) acc = fmaf(to_float(x.v[n]), to_float(y.v[n]), acc);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) d_w_s[row] += acc;
}

// ---------------------------------------------------------------- kernels
// Each takes its one argument struct (kernel_args.h); the JIT renders an explicit instantiation.

template <int THREADS, class T, bool kScale, int kChunkRows>
__global__ void __launch_bounds__(THREADS) colsum_partial_kernel(const __grid_constant__ kargs::BiasPartialArgs args) {
    colsum_partial<T, kScale, kChunkRows>(static_cast<const T *>(args.m), args.scale, args.offsets, args.num_experts,
                                          args.cols, args.partial);
}

template <int THREADS, class O, bool kAccumulate, int kChunkRows>
__global__ void __launch_bounds__(THREADS) colsum_reduce_kernel(const __grid_constant__ kargs::BiasReduceArgs args) {
    colsum_reduce<O, kAccumulate, kChunkRows>(args.partial, args.offsets, args.cols, static_cast<O *>(args.out));
}

template <int THREADS, class T, int kWarpsPerBlock>
__global__ void __launch_bounds__(THREADS) row_dot_kernel(const __grid_constant__ kargs::BiasRowDotArgs args) {
    row_dot<T, kWarpsPerBlock>(static_cast<const T *>(args.dy), static_cast<const T *>(args.bias), args.offsets,
                               args.num_experts, args.rows, args.cols, args.d_w_s);
}

}  // namespace bias
}  // namespace moejit
