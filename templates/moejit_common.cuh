// Shared device helpers for every moejit template. Keep includes minimal: NVRTC compile time
// is dominated by headers (docs/DESIGN.md §6), and every specialization pays it at cold start.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace moejit {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}

// 16-byte vector of elements, for coalesced 128-bit loads and stores.
template <class T> struct alignas(16) Vec16 {
    static constexpr int kCount = 16 / sizeof(T);
    T v[kCount];
};

// Two adjacent elements of an output row (the mma/wgmma accumulator layouts give each thread
// column pairs), converted from/to fp32.
__device__ __forceinline__ void store2(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ float2 load2(const float *p) {
    return *reinterpret_cast<const float2 *>(p);
}
__device__ __forceinline__ float2 load2(const __nv_bfloat16 *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}
__device__ __forceinline__ float2 load2(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}

// The expert that owns scattered row `row`: the largest e in [0, E) with offsets[e] <= row
// (offsets [E+1], non-decreasing; an empty expert e has offsets[e] == offsets[e+1], so the
// largest such e is the non-empty one whose rows hold `row`). Rows past offsets[E] (dropped
// routes) map to the last expert; callers skip them.
__device__ __forceinline__ int expert_of_row(const int *__restrict__ offsets, int num_experts,
                                             long long row) {
    int lo = 0, hi = num_experts - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (offsets[mid] <= row) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__device__ __forceinline__ long long global_thread_id() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

}  // namespace moejit
