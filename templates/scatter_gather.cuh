// Scatter and gather between token order [T,·] and expert-sorted order [S,·] (S = T·k) through
// scatter_index (docs/DESIGN.md §2). Rows move as 16-byte vectors; H is a compile-time constant.
//
// Row geometry (rendered by the host): kThreadsPerRow threads share a row; thread c of a row
// handles vectors c, c + kThreadsPerRow, ... (at most kVecsPerThread), so neighbouring threads
// touch neighbouring 16 bytes and a warp's accesses coalesce. A block holds kRowsPerBlock rows.
//
// A scatter_index outside [0,S) (a dropped route, see routing.cuh) is skipped by scatter and
// contributes nothing to gather.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace sg {

template <int kThreadsPerRow, int kRowsPerBlock>
__device__ __forceinline__ long long row_of_thread() {
    return static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
}

__device__ __forceinline__ bool valid_row(int index, long long rows) {
    return index >= 0 && index < rows;
}

// xs[scatter_index[t,j], :] = x[t, :]. Reads each token row once and writes it k times.
template <class T, int H, int K, int kThreadsPerRow, int kVecsPerThread, int kRowsPerBlock>
__device__ __forceinline__ void scatter(const T *__restrict__ x,
                                        const int *__restrict__ scatter_index,
                                        long long num_tokens, T *__restrict__ xs) {
    using V = Vec16<T>;
    constexpr int kVecs = H / V::kCount;
    const long long t = row_of_thread<kThreadsPerRow, kRowsPerBlock>();
    if (t >= num_tokens) return;
    const int col = threadIdx.x % kThreadsPerRow;
    const long long rows = num_tokens * K;

    const V *src = reinterpret_cast<const V *>(x) + t * kVecs;
    V v[kVecsPerThread];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
        const int c = col + i * kThreadsPerRow;
        if (c < kVecs) v[i] = src[c];
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int dst = scatter_index[t * K + j];
        if (!valid_row(dst, rows)) continue;
        V *out = reinterpret_cast<V *>(xs) + static_cast<long long>(dst) * kVecs;
#pragma unroll
        for (int i = 0; i < kVecsPerThread; ++i) {
            const int c = col + i * kThreadsPerRow;
            if (c < kVecs) out[c] = v[i];
        }
    }
}

// out[t, :] = sum_j w[t,j] · ys[scatter_index[t,j], :], accumulated in fp32 in j order (so the
// result does not depend on the launch geometry). W is the weight type; kWeighted = false
// means every weight is 1 (weights is not read). kBias: each route also adds
// bias_scale[s]·bias[e, :] for its row s = scatter_index[t,j] and that row's expert e (from
// offsets): fc2's expert bias times the routing weight, when ys already holds w·(h·W_down).
template <class T, class W, bool kWeighted, bool kBias, int H, int K, int kThreadsPerRow, int kVecsPerThread,
          int kRowsPerBlock>
__device__ __forceinline__ void gather(const T *__restrict__ ys,
                                       const int *__restrict__ scatter_index,
                                       const W *__restrict__ weights, long long num_tokens,
                                       T *__restrict__ out, const T *__restrict__ bias,
                                       const float *__restrict__ bias_scale,
                                       const int *__restrict__ offsets, int num_experts) {
    using V = Vec16<T>;
    constexpr int kVecs = H / V::kCount;
    constexpr int kN = V::kCount;
    const long long t = row_of_thread<kThreadsPerRow, kRowsPerBlock>();
    if (t >= num_tokens) return;
    const int col = threadIdx.x % kThreadsPerRow;
    const long long rows = num_tokens * K;

    float acc[kVecsPerThread][kN];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
        for (int n = 0; n < kN; ++n) acc[i][n] = 0.0f;

#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int src_row = scatter_index[t * K + j];
        if (!valid_row(src_row, rows)) continue;
        const V *src = reinterpret_cast<const V *>(ys) + static_cast<long long>(src_row) * kVecs;
        const float w = kWeighted ? to_float(weights[t * K + j]) : 1.0f;
        const V *brow = nullptr;
        float bs = 0.0f;
        if (kBias) {
            brow = reinterpret_cast<const V *>(bias) +
                   static_cast<long long>(expert_of_row(offsets, num_experts, src_row)) * kVecs;
            bs = bias_scale[src_row];
        }
#pragma unroll
        for (int i = 0; i < kVecsPerThread; ++i) {
            const int c = col + i * kThreadsPerRow;
            if (c < kVecs) {
                const V y = src[c];
#pragma unroll
                for (int n = 0; n < kN; ++n)
                    acc[i][n] = kWeighted ? fmaf(w, to_float(y.v[n]), acc[i][n])
                                          : acc[i][n] + to_float(y.v[n]);
                if (kBias) {
                    const V b = brow[c];
#pragma unroll
                    for (int n = 0; n < kN; ++n) acc[i][n] = fmaf(bs, to_float(b.v[n]), acc[i][n]);
                }
            }
        }
    }

    V *dst = reinterpret_cast<V *>(out) + t * kVecs;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
        const int c = col + i * kThreadsPerRow;
        if (c < kVecs) {
            V r;
#pragma unroll
            for (int n = 0; n < kN; ++n) r.v[n] = from_float<T>(acc[i][n]);
            dst[c] = r;
        }
    }
}

// w_s[scatter_index[p]] = float(weights[p]) for the S flattened routes p, and (when row_token
// is not NULL) row_token[scatter_index[p]] = p / top_k, the token a scattered row comes from,
// which the wgmma GEMMs gather their rows by. Launch: 1-D, one thread per route.
template <class W>
__device__ __forceinline__ void scatter_weights(const W *__restrict__ weights,
                                                const int *__restrict__ scatter_index,
                                                long long rows, float *__restrict__ w_s,
                                                int *__restrict__ row_token, int top_k) {
    const long long p = global_thread_id();
    if (p >= rows) return;
    const int dst = scatter_index[p];
    if (!valid_row(dst, rows)) return;
    w_s[dst] = to_float(weights[p]);
    if (row_token != nullptr) row_token[dst] = static_cast<int>(p / top_k);
}

// d_weights[p] = d_w_s[scatter_index[p]] in W (0 for a dropped route).
template <class W>
__device__ __forceinline__ void gather_weights(const float *__restrict__ d_w_s,
                                               const int *__restrict__ scatter_index,
                                               long long rows, W *__restrict__ d_weights) {
    const long long p = global_thread_id();
    if (p >= rows) return;
    const int src = scatter_index[p];
    d_weights[p] = from_float<W>(valid_row(src, rows) ? d_w_s[src] : 0.0f);
}

// ---------------------------------------------------------------- kernels
// Each takes its one argument struct (kernel_args.h); the JIT renders an explicit instantiation.

template <int THREADS, class T, int H, int K, int kThreadsPerRow, int kVecsPerThread, int kRowsPerBlock>
__global__ void __launch_bounds__(THREADS) scatter_kernel(const __grid_constant__ kargs::ScatterArgs args) {
    scatter<T, H, K, kThreadsPerRow, kVecsPerThread, kRowsPerBlock>(
        static_cast<const T *>(args.x), args.scatter_index, args.num_tokens, static_cast<T *>(args.xs));
}

template <int THREADS, class T, class W, bool kWeighted, bool kBias, int H, int K, int kThreadsPerRow,
          int kVecsPerThread, int kRowsPerBlock>
__global__ void __launch_bounds__(THREADS) gather_kernel(const __grid_constant__ kargs::GatherArgs args) {
    gather<T, W, kWeighted, kBias, H, K, kThreadsPerRow, kVecsPerThread, kRowsPerBlock>(
        static_cast<const T *>(args.ys), args.scatter_index, static_cast<const W *>(args.weights), args.num_tokens,
        static_cast<T *>(args.out), static_cast<const T *>(args.bias), args.bias_scale, args.offsets,
        args.num_experts);
}

template <int THREADS, class W>
__global__ void __launch_bounds__(THREADS) scatter_weights_kernel(const __grid_constant__ kargs::ScatterWeightsArgs args) {
    scatter_weights<W>(static_cast<const W *>(args.weights), args.scatter_index, args.rows, args.w_s, args.row_token,
                       args.top_k);
}

template <int THREADS, class W>
__global__ void __launch_bounds__(THREADS) gather_weights_kernel(const __grid_constant__ kargs::GatherWeightsArgs args) {
    gather_weights<W>(args.d_w_s, args.scatter_index, args.rows, static_cast<W *>(args.d_weights));
}

}  // namespace sg
}  // namespace moejit
