// The expert biases' backward ops (docs/DESIGN.md §2): gradients of per-expert biases as
// deterministic per-expert column sums over the scattered rows, and the routing weight's share
// of fc2's bias. The forward adds the biases inside the gated activation (fc1) and the gather
// (fc2); see ops/swiglu.hpp and ops/scatter_gather.hpp.
//
// Expert e owns scattered rows [offsets[e], offsets[e+1]) (offsets int32 [E+1] on the device);
// rows past offsets[E] (dropped routes) are ignored. The launch bound is `rows` (S, the
// scattered tensors' size), never T.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

// out[e, c] = Σ_{r of e} scale[r]·m[r, c] (scale null: 1), fp32 in a fixed order.
struct BiasGradSpec {
    DType dtype = DType::bf16;      // m: bf16 or fp16
    DType out_dtype = DType::fp32;  // dtype or fp32
    bool scaled = false;
    bool accumulate = false;                       // out += (requires FP32)
};
struct BiasGradKernels {
    const Kernel *partial = nullptr;
    const Kernel *reduce = nullptr;
};
struct BiasGradArgs {
    const void *m = nullptr;                // [S, cols]
    const float *scale = nullptr;           // [S] when spec.scaled
    const std::int32_t *offsets = nullptr;  // [E+1]
    std::int32_t num_experts = 0;
    std::int64_t rows = 0;                  // S
    std::int64_t cols = 0;                  // a positive multiple of 8
    void *out = nullptr;                    // [E, cols] in out_dtype
    void *workspace = nullptr;              // bias_grad_workspace_bytes
    std::size_t workspace_bytes = 0;
    void *stream = nullptr;
};
void validate_bias_grad_spec(const BiasGradSpec &spec);
KernelSource render_bias_grad_partial(const BiasGradSpec &spec);
KernelSource render_bias_grad_reduce(const BiasGradSpec &spec);
// Scratch of the partial sums for S = rows: (ceil(S / chunk) + E) · cols fp32.
std::size_t bias_grad_workspace_bytes(std::int64_t rows, std::int32_t num_experts, std::int64_t cols);
// Launches stage 1 and 2 (rows == 0: only stage 2, which writes zeros or leaves `out` when
// accumulating). Arguments are validated first.
void bias_grad(Context &ctx, const BiasGradSpec &spec, const BiasGradArgs &args, const BiasGradKernels &kernels);

// d_w_s[r] += Σ_c dy[r, c]·bias[e(r), c].
struct BiasRowDotArgs {
    const void *dy = nullptr;               // [S, cols]
    const void *bias = nullptr;             // [E, cols]
    const std::int32_t *offsets = nullptr;  // [E+1]
    std::int32_t num_experts = 0;
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    float *d_w_s = nullptr;                 // [S]
    void *stream = nullptr;
};
KernelSource render_bias_row_dot(DType dtype);
void bias_row_dot(Context &ctx, const BiasRowDotArgs &args, const Kernel &kernel);

}  // namespace moejit
