// SwiGLU activation, forward and backward (docs/DESIGN.md §2), for the scattered rows [S, I].
//
// One warp owns one row: lanes stride over the row's 16-byte vectors in a fixed order, so the
// backward's per-row reduction d_w_s[s] = Σ_i a·daw is bitwise deterministic (a fixed per-lane
// chain, then a fixed xor butterfly) and needs no shared memory or atomics.
//
// Split and merged layouts share one code path: the launcher passes `up` = gate_up + I for the
// merged layout and the row stride is 2I instead of I. The math is identical, so
// split and merged results are bitwise equal.
//
// Limit semantics (gpt-oss / DeepSeek-V4): g' = min(g, L), u' = clamp(u, -L, L). The gradient
// masks are inclusive: [g <= L] and [-L <= u <= L], so at g == L (or u == ±L) the gradient
// passes (as torch.clamp's backward does). Comparisons are written so that NaN inputs propagate
// to the outputs instead of being clamped away (a NaN must stay visible, docs/DESIGN.md §3).
#pragma once

#include "moejit_common.cuh"

namespace moejit {
namespace swiglu_detail {

constexpr int kWarpSize = 32;
// 16-byte vectors per input a lane loads before computing: bytes in flight to hide latency.
constexpr int kSwigluUnroll = 2;

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + __expf(-z)); }

// min(g, L) that propagates NaN (fminf would return L for a NaN g).
__device__ __forceinline__ float clamp_gate(float g, float limit) { return g > limit ? limit : g; }
// clamp(u, -L, L) that propagates NaN.
__device__ __forceinline__ float clamp_up(float u, float limit) {
    return u > limit ? limit : (u < -limit ? -limit : u);
}

// a = silu(g')·u' from the stored (rounded) g and u: the fc1 GEMM's fused epilogue and the
// standalone kernel share it, so both give bitwise-equal a and aw.
template <bool kLimit> __device__ __forceinline__ float swiglu_value(float g, float u, float limit) {
    if (kLimit) {
        g = clamp_gate(g, limit);
        u = clamp_up(u, limit);
    }
    return g * sigmoid(g) * u;
}

template <class T> __device__ __forceinline__ Vec16<T> load_vec(const void *base, long long index) {
    return reinterpret_cast<const Vec16<T> *>(base)[index];
}
template <class T> __device__ __forceinline__ void store_vec(void *base, long long index,
                                                             const Vec16<T> &v) {
    reinterpret_cast<Vec16<T> *>(base)[index] = v;
}

}  // namespace swiglu_detail

// Row `row` of the warp; rows past the end (the last block) return at once.
template <int kWarpsPerBlock> __device__ __forceinline__ long long swiglu_row() {
    return static_cast<long long>(blockIdx.x) * kWarpsPerBlock +
           threadIdx.x / swiglu_detail::kWarpSize;
}

// a = silu(g')·u' and aw = a·w_s (w_s = 1 without weights). `a` and `aw` may each be null.
// gate/up point at element 0 of their first row; rows are I (split) or 2I (merged) apart.
template <class T, int kI, bool kMerged, bool kLimit, bool kWeights, int kWarpsPerBlock>
__device__ __forceinline__ void swiglu_forward(const void *gate, const void *up, const float *w_s,
                                               void *a, void *aw, long long rows, float limit) {
    using namespace swiglu_detail;
    constexpr int kVec = Vec16<T>::kCount;
    static_assert(kI % kVec == 0, "I must be a multiple of the 16-byte vector width");
    constexpr int kVecsPerRow = kI / kVec;
    constexpr long long kInVecStride = (kMerged ? 2LL : 1LL) * kVecsPerRow;
    // A row of at most 32 vectors gives each lane one: no second slot to keep registers for.
    constexpr int kUnroll = kVecsPerRow <= kWarpSize ? 1 : kSwigluUnroll;
    constexpr int kChunk = kUnroll * kWarpSize;

    const long long row = swiglu_row<kWarpsPerBlock>();
    if (row >= rows) return;
    const int lane = threadIdx.x % kWarpSize;
    const float w = kWeights ? w_s[row] : 1.0f;
    const long long in_base = row * kInVecStride;
    const long long out_base = row * kVecsPerRow;

#pragma unroll 1
    for (int base = lane; base < kVecsPerRow; base += kChunk) {
        // All loads of the chunk first: gate/up may not be assumed free of aliasing with the
        // outputs, so the compiler would not hoist them past the stores by itself.
        Vec16<T> gv[kUnroll], uv[kUnroll];
#pragma unroll
        for (int r = 0; r < kUnroll; ++r) {
            const int v = base + r * kWarpSize;
            if (v < kVecsPerRow) {
                gv[r] = load_vec<T>(gate, in_base + v);
                uv[r] = load_vec<T>(up, in_base + v);
            }
        }
#pragma unroll
        for (int r = 0; r < kUnroll; ++r) {
            const int v = base + r * kWarpSize;
            if (v >= kVecsPerRow) break;
            Vec16<T> av, awv;
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float act = swiglu_value<kLimit>(to_float(gv[r].v[j]), to_float(uv[r].v[j]), limit);
                av.v[j] = from_float<T>(act);
                awv.v[j] = from_float<T>(act * w);  // from the fp32 a: one rounding, not two
            }
            if (a) store_vec<T>(a, out_base + v, av);
            if (aw) store_vec<T>(aw, out_base + v, awv);
        }
    }
}

// Given daw: da = daw·w_s, du = da·silu(g')·[-L <= u <= L], dg = da·u'·silu'(g')·[g <= L],
// d_w_s[row] = Σ_i a·daw (fp32; a recomputed from g, u). d_w_s and aw (a recomputed a·w_s,
// for the fc2 weight gradient) may be null. d_gate/d_up use the input layout (row stride).
// Each element is read and written by the same thread, so d_gate == gate, d_up == up (and
// d_gate_up == gate_up) in place is safe.
template <class T, int kI, bool kMerged, bool kLimit, bool kWeights, int kWarpsPerBlock>
__device__ __forceinline__ void swiglu_backward(const void *gate, const void *up,
                                                const float *w_s, const void *daw, void *d_gate,
                                                void *d_up, float *d_w_s, void *aw,
                                                long long rows, float limit) {
    using namespace swiglu_detail;
    constexpr int kVec = Vec16<T>::kCount;
    static_assert(kI % kVec == 0, "I must be a multiple of the 16-byte vector width");
    constexpr int kVecsPerRow = kI / kVec;
    constexpr long long kInVecStride = (kMerged ? 2LL : 1LL) * kVecsPerRow;
    // A row of at most 32 vectors gives each lane one: no second slot to keep registers for.
    constexpr int kUnroll = kVecsPerRow <= kWarpSize ? 1 : kSwigluUnroll;
    constexpr int kChunk = kUnroll * kWarpSize;

    const long long row = swiglu_row<kWarpsPerBlock>();
    if (row >= rows) return;  // whole warps exit together: the shuffles below see full warps
    const int lane = threadIdx.x % kWarpSize;
    const float w = kWeights ? w_s[row] : 1.0f;
    const long long in_base = row * kInVecStride;
    const long long out_base = row * kVecsPerRow;

    // Fixed order: each lane sums its own vectors v = lane, lane+32, ... element by element.
    float partial = 0.0f;
#pragma unroll 1
    for (int base = lane; base < kVecsPerRow; base += kChunk) {
        Vec16<T> gv[kUnroll], uv[kUnroll], dv[kUnroll];
#pragma unroll
        for (int r = 0; r < kUnroll; ++r) {
            const int v = base + r * kWarpSize;
            if (v < kVecsPerRow) {
                gv[r] = load_vec<T>(gate, in_base + v);
                uv[r] = load_vec<T>(up, in_base + v);
                dv[r] = load_vec<T>(daw, out_base + v);
            }
        }
#pragma unroll
        for (int r = 0; r < kUnroll; ++r) {
            const int v = base + r * kWarpSize;
            if (v >= kVecsPerRow) break;
            Vec16<T> dgv, duv, awv;
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float g = to_float(gv[r].v[j]);
                const float u = to_float(uv[r].v[j]);
                const float d = to_float(dv[r].v[j]);
                const float gc = kLimit ? clamp_gate(g, limit) : g;
                const float uc = kLimit ? clamp_up(u, limit) : u;
                const float s = sigmoid(gc);
                const float silu = gc * s;
                const float act = silu * uc;
                const float da = d * w;
                const float du = da * silu;
                const float dg = da * uc * (s * (1.0f + gc * (1.0f - s)));
                // Masks: the gradient is cut only strictly outside [-L, L] (passes at == L).
                duv.v[j] = from_float<T>(kLimit && (u > limit || u < -limit) ? 0.0f : du);
                dgv.v[j] = from_float<T>(kLimit && g > limit ? 0.0f : dg);
                awv.v[j] = from_float<T>(act * w);
                partial += act * d;
            }
            store_vec<T>(d_gate, in_base + v, dgv);
            store_vec<T>(d_up, in_base + v, duv);
            if (aw) store_vec<T>(aw, out_base + v, awv);
        }
    }
    if (d_w_s) {
        // Xor butterfly: every lane ends with the same sum (fp32 addition is commutative).
#pragma unroll
        for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
            partial += __shfl_xor_sync(0xffffffffu, partial, offset);
        if (lane == 0) d_w_s[row] = partial;
    }
}

}  // namespace moejit
