// The gated activations, forward and backward (docs/DESIGN.md §2), for the scattered rows [S, I].
//
// One warp owns one row: lanes stride over the row's 16-byte vectors in a fixed order, so the
// backward's per-row reduction d_w_s[s] = Σ_i a·daw is bitwise deterministic (a fixed per-lane
// chain, then a fixed xor butterfly) and needs no shared memory or atomics.
//
// Layouts of gate/up (kLayout): split (two [S,I] tensors), merged ([S,2I], gate columns then
// up) and interleaved ([S,2I], column 2i gate i, 2i+1 up i, as gpt-oss stores fc1). The math
// does not depend on the layout, so every layout gives bitwise-equal results.
// Activations (kAct): SwiGLU h = silu(g')·u'; gpt-oss h = (u'+1)·g'·σ(α·g').
// Limit semantics (gpt-oss / DeepSeek-V4): g' = min(g, L), u' = clamp(u, -L, L). The gradient
// masks are inclusive: [g <= L] and [-L <= u <= L], so at g == L (or u == ±L) the gradient
// passes (as torch.clamp's backward does). Comparisons are written so that NaN inputs propagate
// to the outputs instead of being clamped away (a NaN must stay visible, docs/DESIGN.md §3).
// Bias (kBias, merged or interleaved): the forward adds bias[e] ([E,2I] in the layout's column
// order, e the row's expert from offsets) to g and u and writes the biased values back in
// place, so the backward (which reads them) needs no bias.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace swiglu_detail {

constexpr int kWarpSize = 32;
// 16-byte vectors per input a lane loads before computing: bytes in flight to hide latency.
constexpr int kSwigluUnroll = 2;

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + __expf(-z)); }

enum Layout { kSplit = 0, kMergedLayout = 1, kInterleaved = 2 };
enum Activation { kSwiglu = 0, kGptOss = 1 };

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

// h from g, u (after bias): the activation of kAct with its limit.
template <int kAct, bool kLimit>
__device__ __forceinline__ float activation_value(float g, float u, float limit, float alpha) {
    if (kAct == kSwiglu) return swiglu_value<kLimit>(g, u, limit);
    if (kLimit) {
        g = clamp_gate(g, limit);
        u = clamp_up(u, limit);
    }
    return (u + 1.0f) * (g * sigmoid(alpha * g));
}

// One element of the backward (gated_backward's math, shared with the FP8 layer's fused
// backward so both give the same bits): from g, u, d = d(a·w) and w = w_s, the masked dg and du
// and a = h(g', u') (a·w for fc2's weight gradient is act * w, rounded by the caller).
template <int kAct, bool kLimit>
__device__ __forceinline__ void gated_backward_value(float g, float u, float d, float w, float limit, float alpha,
                                                     float &dg, float &du, float &act) {
    const float gc = kLimit ? clamp_gate(g, limit) : g;
    const float uc = kLimit ? clamp_up(u, limit) : u;
    const float da = d * w;
    if (kAct == kSwiglu) {
        const float s = sigmoid(gc);
        const float silu = gc * s;
        act = silu * uc;
        du = da * silu;
        dg = da * uc * (s * (1.0f + gc * (1.0f - s)));
    } else {
        const float s = sigmoid(alpha * gc);
        const float glu = gc * s;
        act = (uc + 1.0f) * glu;
        du = da * glu;
        dg = da * (uc + 1.0f) * (s * (1.0f + alpha * gc * (1.0f - s)));
    }
    // Masks: the gradient is cut only strictly outside [-L, L] (passes at == L).
    if (kLimit && (u > limit || u < -limit)) du = 0.0f;
    if (kLimit && g > limit) dg = 0.0f;
}

template <class T> __device__ __forceinline__ Vec16<T> load_vec(const void *base, long long index) {
    return reinterpret_cast<const Vec16<T> *>(base)[index];
}
template <class T> __device__ __forceinline__ void store_vec(void *base, long long index,
                                                             const Vec16<T> &v) {
    reinterpret_cast<Vec16<T> *>(base)[index] = v;
}

// The gate and up vectors of output vector v (kCount elements each) of the row whose
// first vector is `base` (in 16-byte vectors). Split: gate and up are separate tensors;
// merged: up sits kVecs vectors after gate in one row; interleaved: vectors 2v and 2v+1 hold
// the pairs (g, u) of the kCount columns.
template <class T, int kLayout, int kVecs>
__device__ __forceinline__ void load_gate_up(const void *gate, const void *up, long long base, int v,
                                             Vec16<T> &g, Vec16<T> &u) {
    constexpr int kN = Vec16<T>::kCount;
    if (kLayout == kSplit) {
        g = load_vec<T>(gate, base + v);
        u = load_vec<T>(up, base + v);
    } else if (kLayout == kMergedLayout) {
        g = load_vec<T>(gate, base + v);
        u = load_vec<T>(gate, base + kVecs + v);
    } else {
        const Vec16<T> lo = load_vec<T>(gate, base + 2LL * v);
        const Vec16<T> hi = load_vec<T>(gate, base + 2LL * v + 1);
#pragma unroll
        for (int j = 0; j < kN / 2; ++j) {
            g.v[j] = lo.v[2 * j];
            u.v[j] = lo.v[2 * j + 1];
            g.v[kN / 2 + j] = hi.v[2 * j];
            u.v[kN / 2 + j] = hi.v[2 * j + 1];
        }
    }
}
// The inverse of load_gate_up.
template <class T, int kLayout, int kVecs>
__device__ __forceinline__ void store_gate_up(void *gate, void *up, long long base, int v, const Vec16<T> &g,
                                              const Vec16<T> &u) {
    constexpr int kN = Vec16<T>::kCount;
    if (kLayout == kSplit) {
        store_vec<T>(gate, base + v, g);
        store_vec<T>(up, base + v, u);
    } else if (kLayout == kMergedLayout) {
        store_vec<T>(gate, base + v, g);
        store_vec<T>(gate, base + kVecs + v, u);
    } else {
        Vec16<T> lo, hi;
#pragma unroll
        for (int j = 0; j < kN / 2; ++j) {
            lo.v[2 * j] = g.v[j];
            lo.v[2 * j + 1] = u.v[j];
            hi.v[2 * j] = g.v[kN / 2 + j];
            hi.v[2 * j + 1] = u.v[kN / 2 + j];
        }
        store_vec<T>(gate, base + 2LL * v, lo);
        store_vec<T>(gate, base + 2LL * v + 1, hi);
    }
}

}  // namespace swiglu_detail

// Row `row` of the warp; rows past the end (the last block) return at once.
template <int kWarpsPerBlock> __device__ __forceinline__ long long swiglu_row() {
    return static_cast<long long>(blockIdx.x) * kWarpsPerBlock +
           threadIdx.x / swiglu_detail::kWarpSize;
}

// a = h(g, u) and aw = a·w_s (w_s = 1 without weights). `a` and `aw` may each be null.
// gate points at element 0 of the first row (split: gate [S,I] and up [S,I]; merged and
// interleaved: gate_up [S,2I], `up` unused). kBias: bias [E,2I] row offsets-owner added to g
// and u, and the biased g and u written back in place (same thread, same element).
template <class T, int kI, int kLayout, int kAct, bool kLimit, bool kWeights, bool kBias, int kWarpsPerBlock>
__device__ __forceinline__ void gated_forward(const void *gate, const void *up, const float *w_s, void *a,
                                              void *aw, long long rows, float limit, float alpha,
                                              const void *bias, const int *offsets, int num_experts) {
    using namespace swiglu_detail;
    constexpr int kVec = Vec16<T>::kCount;
    static_assert(kI % kVec == 0, "I must be a multiple of the 16-byte vector width");
    static_assert(!kBias || kLayout != kSplit, "the bias is [E,2I]: merged or interleaved layouts");
    constexpr int kVecsPerRow = kI / kVec;
    constexpr long long kInVecStride = (kLayout == kSplit ? 1LL : 2LL) * kVecsPerRow;
    // A row of at most 32 vectors gives each lane one: no second slot to keep registers for.
    constexpr int kUnroll = kVecsPerRow <= kWarpSize ? 1 : kSwigluUnroll;
    constexpr int kChunk = kUnroll * kWarpSize;

    const long long row = swiglu_row<kWarpsPerBlock>();
    if (row >= rows) return;
    const int lane = threadIdx.x % kWarpSize;
    const float w = kWeights ? w_s[row] : 1.0f;
    const long long in_base = row * kInVecStride;
    const long long out_base = row * kVecsPerRow;
    const long long bias_base = kBias ? expert_of_row(offsets, num_experts, row) * kInVecStride : 0;

#pragma unroll 1
    for (int base = lane; base < kVecsPerRow; base += kChunk) {
        // All loads of the chunk first: gate/up may not be assumed free of aliasing with the
        // outputs, so the compiler would not hoist them past the stores by itself.
        Vec16<T> gv[kUnroll], uv[kUnroll], gb[kUnroll], ub[kUnroll];
#pragma unroll
        for (int r = 0; r < kUnroll; ++r) {
            const int v = base + r * kWarpSize;
            if (v < kVecsPerRow) {
                load_gate_up<T, kLayout, kVecsPerRow>(gate, up, in_base, v, gv[r], uv[r]);
                if (kBias) load_gate_up<T, kLayout, kVecsPerRow>(bias, nullptr, bias_base, v, gb[r], ub[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < kUnroll; ++r) {
            const int v = base + r * kWarpSize;
            if (v >= kVecsPerRow) break;
            Vec16<T> av, awv;
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                float g = to_float(gv[r].v[j]), u = to_float(uv[r].v[j]);
                if (kBias) {
                    // The saved g and u are the biased values as the model rounds them.
                    gv[r].v[j] = from_float<T>(g + to_float(gb[r].v[j]));
                    uv[r].v[j] = from_float<T>(u + to_float(ub[r].v[j]));
                    g = to_float(gv[r].v[j]);
                    u = to_float(uv[r].v[j]);
                }
                const float act = activation_value<kAct, kLimit>(g, u, limit, alpha);
                av.v[j] = from_float<T>(act);
                awv.v[j] = from_float<T>(act * w);  // from the fp32 a: one rounding, not two
            }
            if (kBias) store_gate_up<T, kLayout, kVecsPerRow>(const_cast<void *>(gate), nullptr, in_base, v, gv[r], uv[r]);
            if (a) store_vec<T>(a, out_base + v, av);
            if (aw) store_vec<T>(aw, out_base + v, awv);
        }
    }
}

// Given daw: da = daw·w_s, du = da·∂h/∂u'·[-L <= u <= L], dg = da·∂h/∂g'·[g <= L],
// d_w_s[row] = Σ_i a·daw (fp32; a recomputed from g, u). SwiGLU: ∂h/∂u' = silu(g'),
// ∂h/∂g' = u'·σ(g')(1 + g'(1-σ(g'))); gpt-oss: ∂h/∂u' = g'σ(αg'), ∂h/∂g' = (u'+1)·σ(αg')(1 +
// αg'(1-σ(αg'))). d_w_s and aw (a recomputed a·w_s, for the fc2 weight gradient) may be null.
// d_gate/d_up use the input layout. Each element is read and written by the same thread, so
// the gradients may overwrite their inputs in place.
template <class T, int kI, int kLayout, int kAct, bool kLimit, bool kWeights, int kWarpsPerBlock>
__device__ __forceinline__ void gated_backward(const void *gate, const void *up, const float *w_s, const void *daw,
                                               void *d_gate, void *d_up, float *d_w_s, void *aw, long long rows,
                                               float limit, float alpha) {
    using namespace swiglu_detail;
    constexpr int kVec = Vec16<T>::kCount;
    static_assert(kI % kVec == 0, "I must be a multiple of the 16-byte vector width");
    constexpr int kVecsPerRow = kI / kVec;
    constexpr long long kInVecStride = (kLayout == kSplit ? 1LL : 2LL) * kVecsPerRow;
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
                load_gate_up<T, kLayout, kVecsPerRow>(gate, up, in_base, v, gv[r], uv[r]);
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
                const float d = to_float(dv[r].v[j]);
                float act, du, dg;
                gated_backward_value<kAct, kLimit>(to_float(gv[r].v[j]), to_float(uv[r].v[j]), d, w, limit, alpha, dg,
                                                   du, act);
                duv.v[j] = from_float<T>(du);
                dgv.v[j] = from_float<T>(dg);
                awv.v[j] = from_float<T>(act * w);
                partial += act * d;
            }
            store_gate_up<T, kLayout, kVecsPerRow>(d_gate, d_up, in_base, v, dgv, duv);
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

// ---------------------------------------------------------------- kernels
// Each takes its one argument struct (kernel_args.h); the JIT renders an explicit instantiation.

template <int THREADS, class T, int kI, int kLayout, int kAct, bool kLimit, bool kWeights, bool kBias,
          int kWarpsPerBlock>
__global__ void __launch_bounds__(THREADS) gated_forward_kernel(const __grid_constant__ kargs::GatedForwardArgs args) {
    gated_forward<T, kI, kLayout, kAct, kLimit, kWeights, kBias, kWarpsPerBlock>(
        args.gate, args.up, args.w_s, args.a, args.aw, args.rows, args.limit, args.alpha, args.bias, args.offsets,
        args.num_experts);
}

template <int THREADS, class T, int kI, int kLayout, int kAct, bool kLimit, bool kWeights, int kWarpsPerBlock>
__global__ void __launch_bounds__(THREADS) gated_backward_kernel(const __grid_constant__ kargs::GatedBackwardArgs args) {
    gated_backward<T, kI, kLayout, kAct, kLimit, kWeights, kWarpsPerBlock>(
        args.gate, args.up, args.w_s, args.daw, args.d_gate, args.d_up, args.d_w_s, args.aw, args.rows, args.limit,
        args.alpha);
}

}  // namespace moejit
