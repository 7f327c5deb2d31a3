// Per-row steps of the pre-dispatched experts entry (docs/DESIGN.md §2.6): rows already grouped
// by expert, so there is no routing index, scatter or gather; what the layer's scatter and
// gather did per row is done here in place.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace rows {

// w_s[r] = weights[r] (1 without weights): the experts' own copy of the routing weight per row
// (kept in `saved` for the backward). row_token[r] = r when fc1 is the gathering GEMM, which
// then reads xs through the identity.
template <bool kWeights, bool kRowToken>
__device__ __forceinline__ void prepare(const float *__restrict__ weights, long long rows, float *__restrict__ w_s,
                                        int *__restrict__ row_token) {
    const long long r = global_thread_id();
    if (r >= rows) return;
    w_s[r] = kWeights ? weights[r] : 1.0f;
    if (kRowToken) row_token[r] = static_cast<int>(r);
}

// ys[r, :] += w_s[r]·b_down[e(r), :], fp32 then rounded (the layer adds it in its gather). One
// thread per 16-byte vector of a row.
template <class T>
__device__ __forceinline__ void add_bias(T *__restrict__ ys, const T *__restrict__ bias, const float *__restrict__ w_s,
                                         const int *__restrict__ offsets, int num_experts, long long rows,
                                         long long cols) {
    using V = Vec16<T>;
    const long long vecs = cols / V::kCount;
    const long long i = global_thread_id();
    if (i >= rows * vecs) return;
    const long long r = i / vecs, v = i % vecs;
    if (r >= offsets[num_experts]) return;  // not an expert's row
    V *y = reinterpret_cast<V *>(ys) + i;
    const V b = reinterpret_cast<const V *>(bias)[expert_of_row(offsets, num_experts, r) * vecs + v];
    const float w = w_s[r];
    V out = *y;
#pragma unroll
    for (int n = 0; n < V::kCount; ++n) out.v[n] = from_float<T>(fmaf(w, to_float(b.v[n]), to_float(out.v[n])));
    *y = out;
}

// ---------------------------------------------------------------- kernels
// Each takes its one argument struct (kernel_args.h); the JIT renders an explicit instantiation.

template <int THREADS, bool kWeights, bool kRowToken>
__global__ void __launch_bounds__(THREADS) prepare_kernel(const __grid_constant__ kargs::PrepareRowsArgs args) {
    prepare<kWeights, kRowToken>(args.weights, args.rows, args.w_s, args.row_token);
}

template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) add_bias_kernel(const __grid_constant__ kargs::AddRowBiasArgs args) {
    add_bias<T>(static_cast<T *>(args.ys), static_cast<const T *>(args.bias), args.w_s, args.offsets,
                args.num_experts, args.rows, args.cols);
}

}  // namespace rows
}  // namespace moejit
