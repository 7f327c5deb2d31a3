// SwiGLU activation ops (docs/DESIGN.md §2): pure render functions (spec -> KernelSource, usable on
// a compile-only context for warmup) and launchers taking device pointers (used by the C ABI
// and by the layer plan).
//
// Shapes: S = `rows` scattered rows (the launch bound comes from S, never from T), I =
// `intermediate`. Split layout: gate, up [S,I]. Merged: gate_up [S,2I], gate columns [0,I),
// up columns [I,2I). Outputs a, aw, daw [S,I] in `dtype`; gradients of gate/up in the input
// layout; w_s and d_w_s fp32 [S]. All tensors row-major, contiguous, 16-byte aligned (fp32
// vectors: 4-byte aligned).
//
// Limit L > 0: g' = min(g,L), u' = clamp(u,-L,L); the gradient masks are inclusive
// ([g <= L], [-L <= u <= L]): at g == L exactly the gate gradient passes. limit <= 0: none.
// Determinism: one warp per row; d_w_s is summed in a fixed order, so every output is bitwise
// identical across runs, and split and merged layouts give bitwise-equal results.
#pragma once

#include <cstdint>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "runtime/kernel_source.hpp"
#include "ops/activation.hpp"

namespace moejit {

// The compile-time part of a SwiGLU kernel. The limit value itself is a kernel argument.
struct SwigluSpec {
    DType dtype = DType::bf16;  // bf16 or fp16
    std::int64_t intermediate = 0;             // I, a positive multiple of 8
    bool merged = false;
    bool has_limit = false;
    bool has_weights = false;  // w_s given (else w_s = 1)
    // Merged storage [S,2I] with gate and up columns interleaved (2i, 2i+1; requires merged).
    bool interleaved = false;
    Activation activation = Activation::swiglu;
    // Forward only: bias [E,2I] added to g and u per row's expert (requires merged), the biased
    // values written back in place.
    bool has_bias = false;
};

// Throws Status::invalid_argument / Status::unsupported naming the bad field.
void validate_swiglu_spec(const SwigluSpec &spec);

// Pure: the full translation unit of one specialization (validates the spec first).
KernelSource render_swiglu_forward(const SwigluSpec &spec);
KernelSource render_swiglu_backward(const SwigluSpec &spec);

struct SwigluForwardArgs {
    DType dtype = DType::bf16;
    std::int64_t rows = 0;          // S >= 0
    std::int64_t intermediate = 0;  // I
    bool merged = false;
    float limit = 0.0f;  // <= 0: no limit; must not be NaN or infinite
    const void *gate = nullptr;     // split [S,I]
    const void *up = nullptr;       // split [S,I]
    const void *gate_up = nullptr;  // merged [S,2I]
    const float *w_s = nullptr;     // [S] or null (= 1)
    void *a = nullptr;              // [S,I] or null
    void *aw = nullptr;             // [S,I] or null (at least one of a, aw)
    void *stream = nullptr;         // CUstream
    bool interleaved = false;       // gate_up's columns interleaved (requires merged)
    Activation activation = Activation::swiglu;
    float alpha = 1.702f;           // Activation::gpt_oss's α
    // [E,2I] (merged only): g, u += bias[e] for the row's expert e (offsets [E+1], device), and
    // gate_up is overwritten with the biased values.
    const void *bias = nullptr;
    const std::int32_t *offsets = nullptr;
    std::int32_t num_experts = 0;
};

struct SwigluBackwardArgs {
    DType dtype = DType::bf16;
    std::int64_t rows = 0;
    std::int64_t intermediate = 0;
    bool merged = false;
    float limit = 0.0f;
    const void *gate = nullptr;     // split [S,I]
    const void *up = nullptr;       // split [S,I]
    const void *gate_up = nullptr;  // merged [S,2I]
    const float *w_s = nullptr;     // [S] or null (= 1)
    const void *daw = nullptr;      // [S,I]
    void *d_gate = nullptr;         // split [S,I]; may be exactly `gate` (in place)
    void *d_up = nullptr;           // split [S,I]; may be exactly `up`
    void *d_gate_up = nullptr;      // merged [S,2I]; may be exactly `gate_up`
    float *d_w_s = nullptr;         // [S] Σ_i a·daw, or null
    // Optional: aw = a·w_s recomputed from g, u (for the fc2 weight gradient, so the forward
    // need not keep aw). Not reachable through the C ABI's backward (there `aw` is forward's).
    void *aw = nullptr;
    void *stream = nullptr;
    bool interleaved = false;
    Activation activation = Activation::swiglu;
    float alpha = 1.702f;
};

// The spec a launch needs (has_limit = limit > 0, has_weights = w_s != null).
SwigluSpec swiglu_spec(const SwigluForwardArgs &args);
SwigluSpec swiglu_spec(const SwigluBackwardArgs &args);

// Validate every argument (before touching the device, so that works on a compile-only
// context), then compile/load and launch. rows == 0 launches nothing; null tensors are then
// accepted. A compile-only context is rejected after validation. `bound`: the kernel of
// render_swiglu_*(swiglu_spec(args)), fetched once by a caller that launches repeatedly (the
// layer plan); else it is looked up per call.
void swiglu_forward(Context &ctx, const SwigluForwardArgs &args, const Kernel *bound = nullptr);
void swiglu_backward(Context &ctx, const SwigluBackwardArgs &args, const Kernel *bound = nullptr);

// Rows handled by one block (one warp per row); grid = ceil(S / this).
inline constexpr int kSwigluWarpsPerBlock = 4;

}  // namespace moejit
