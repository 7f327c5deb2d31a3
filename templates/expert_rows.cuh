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

// The caller's expert offsets as the kernels may trust them (issue 29): a monotone sequence in
// [0, R] with checked[0] = 0 and checked[e] = clamp(offsets[e], checked[e-1], R), i.e.
// min(R, max(0, offsets[1..e])), an inclusive prefix maximum. Well-formed offsets pass
// unchanged; any entry changed sets kDeviceErrorExpertOffsets in the context's error word. One
// block, THREADS entries per step, a Hillis-Steele maximum scan in shared memory.
template <int THREADS>
__device__ __forceinline__ void check_offsets(const int *__restrict__ offsets, int *__restrict__ checked,
                                              unsigned *errors, int num_experts, int rows) {
    __shared__ int scan[THREADS];
    __shared__ int carry;
    if (threadIdx.x == 0) carry = 0;
    bool bad = false;
    for (int base = 0; base <= num_experts; base += THREADS) {
        const int e = base + static_cast<int>(threadIdx.x);
        const int x = e <= num_experts ? offsets[e] : 0;
        __syncthreads();  // carry written, scan free
        scan[threadIdx.x] = e == 0 ? 0 : x;
        __syncthreads();
        for (int d = 1; d < THREADS; d <<= 1) {
            const int other = threadIdx.x >= static_cast<unsigned>(d) ? scan[threadIdx.x - d] : 0;
            __syncthreads();
            scan[threadIdx.x] = max(scan[threadIdx.x], other);
            __syncthreads();
        }
        const int prefix = max(carry, scan[threadIdx.x]);
        if (e <= num_experts) {
            const int s = min(rows, prefix);
            checked[e] = s;
            bad |= s != x;
        }
        __syncthreads();  // every thread has read carry
        if (threadIdx.x == THREADS - 1) carry = prefix;
    }
    if (bad) atomicOr(errors, kargs::kDeviceErrorExpertOffsets);
}

// Zero the rows [offsets[E], R) that no expert owns (offsets checked): what the experts entry
// writes for them, so nothing it returns is left undefined. Grid-stride: the grid is small and
// the count is only known on the device.
__device__ __forceinline__ void zero_unassigned(uint4 *__restrict__ data, float *__restrict__ values,
                                                const int *__restrict__ offsets, int num_experts, long long rows,
                                                long long row_vecs) {
    const long long first = offsets[num_experts];
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    if (data)
        for (long long i = first * row_vecs + global_thread_id(); i < rows * row_vecs; i += stride)
            data[i] = make_uint4(0, 0, 0, 0);
    if (values)
        for (long long r = first + global_thread_id(); r < rows; r += stride) values[r] = 0.0f;
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

template <int THREADS>
__global__ void __launch_bounds__(THREADS) check_offsets_kernel(const __grid_constant__ kargs::CheckOffsetsArgs args) {
    check_offsets<THREADS>(args.offsets, args.checked, args.errors, args.num_experts, args.rows);
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    zero_unassigned_kernel(const __grid_constant__ kargs::ZeroUnassignedRowsArgs args) {
    zero_unassigned(static_cast<uint4 *>(args.data), args.values, args.offsets, args.num_experts, args.rows,
                    args.row_vecs);
}

}  // namespace rows
}  // namespace moejit
