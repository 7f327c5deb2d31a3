// The fused MoE layer (docs/DESIGN.md §2): one plan per layer shape; forward and backward compose
// the routing, scatter/gather, grouped-GEMM and SwiGLU ops on the caller's stream, with every
// buffer caller-provided (saved activations and scratch workspace), no allocation and no host
// synchronisation, so a whole training step can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/context.hpp"
#include "jit/kernel_source.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan_layout.hpp"
#include "moejit.h"
#include "ops/expert_bias.hpp"
#include "ops/routing.hpp"

namespace moejit {

// Throws MOEJIT_ERROR_INVALID_ARGUMENT / UNSUPPORTED naming the bad field.
void validate_plan_desc(const moejit_plan_desc_t &desc);

// Every kernel specialization a plan of `desc` launches on a context with `config` and
// `compute_capability` (pure; used by plan creation and by warmup on a compile-only context).
// Duplicates removed. The second form takes the layer's GEMM specs already chosen for a
// validated `desc` (a plan's own).
std::vector<KernelSource> plan_kernel_sources(const moejit_plan_desc_t &desc, const Config &config,
                                              int compute_capability);
std::vector<KernelSource> plan_kernel_sources(const moejit_plan_desc_t &desc, const LayerSpecs &gemms);

// Test-only hooks. backward_bound_from_tokens reproduces the historical bug: the backward
// grouped GEMMs bounded by T instead of S, so with duplicate routes rows past T are never
// written and weight gradients miss them. The regression suite must fail with it set.
struct PlanTestHooks {
    bool backward_bound_from_tokens = false;
};

// Every kernel a plan launches, fetched when the plan is created: forward and backward only
// fill in arguments and launch (no render, hash, cache lookup or lock on that path).
struct PlanKernels {
    LoadedRoutingKernels routing;
    Kernel *scatter = nullptr, *gather = nullptr, *scatter_weights = nullptr, *gather_weights = nullptr;
    Kernel *swiglu_forward = nullptr;  // null when fc1 has the SwiGLU epilogue
    Kernel *swiglu_backward = nullptr;
    LayerKernels gemms;
    // has_bias: the forward's gather adding fc2's bias, and the bias gradients' kernels.
    Kernel *gather_bias = nullptr, *bias_row_dot = nullptr;
    BiasGradKernels bias_grad_scaled, bias_grad;
    // The pre-dispatched experts entry: its rows' weights (with and without caller weights) and
    // fc2's bias added in place.
    Kernel *prepare_rows = nullptr, *prepare_rows_weighted = nullptr, *add_row_bias = nullptr;
};

// The experts' parameters and their gradients (the C arguments' pointers; null where the
// layout has none).
struct ExpertWeights {
    const void *w_gate = nullptr, *w_up = nullptr, *w_gate_up = nullptr, *w_down = nullptr;
    const void *b_gate_up = nullptr, *b_down = nullptr;
};
struct ExpertGrads {
    void *dw_gate = nullptr, *dw_up = nullptr, *dw_gate_up = nullptr, *dw_down = nullptr;
    void *db_gate_up = nullptr, *db_down = nullptr;
};

class Plan {
public:
    Plan(Context &ctx, const moejit_plan_desc_t &desc);

    const moejit_plan_desc_t &desc() const { return desc_; }
    Context &context() const { return ctx_; }
    const LayerSpecs &gemm_specs() const { return gemm_specs_; }
    PlanLayout layout(std::int64_t num_tokens) const { return PlanLayout(desc_, num_tokens, gemm_specs_.gathered); }

    void forward(const moejit_forward_args_t &args);
    void backward(const moejit_backward_args_t &args);

    // The pre-dispatched experts entry (moejit.h): rows already grouped by expert.
    ExpertsLayout experts_layout(std::int64_t num_rows) const {
        return ExpertsLayout(desc_, num_rows, gemm_specs_.gathered);
    }
    void experts_forward(const moejit_experts_forward_args_t &args);
    void experts_backward(const moejit_experts_backward_args_t &args);

    PlanTestHooks test_hooks;

private:
    // The [S,H] scatter of a [T,H] tensor (x or dout) into `out`, for GEMMs that do not gather.
    const void *scatter_rows(const std::int32_t *scatter_index, std::int64_t num_tokens, const void *tokens, void *out,
                             void *stream);

    // The experts on rows grouped by expert, shared by the layer and the experts entry.
    // Forward: fc1 (+ activation, fc1's bias) and fc2 into y = w·(h·W2ᵀ); fc2's bias is the
    // caller's (the layer's gather, the entry's add_row_bias).
    struct ForwardRows {
        std::int64_t rows;  // S or R: the launch bound
        const std::int32_t *offsets;
        const std::int32_t *row_token;  // the gathering fc1's row order (null: xs is grouped)
        const void *xs;
        const float *w_s;
        char *gate_up;  // saved
        void *aw;       // saved
        void *y;
        void *stream;
    };
    void run_experts_forward(const ForwardRows &rows, const ExpertWeights &w);
    // Backward: dxs, d_w_s (fp32, written) and the weight and bias gradients from dy.
    struct BackwardRows {
        std::int64_t rows, bound;  // bound: the GEMMs' launch bound (rows, but for the test hook)
        const std::int32_t *offsets;
        const void *xs, *dy;
        const float *w_s;
        const char *gate_up;
        const void *aw;
        void *daw;
        char *d_gate_up;
        float *d_w_s;
        void *dxs;
        void *wgrad_split;
        std::size_t wgrad_split_bytes;
        void *bias_partial;
        std::size_t bias_partial_bytes;
        void *stream;
    };
    void run_experts_backward(const BackwardRows &rows, const ExpertWeights &w, const ExpertGrads &g);

    Context &ctx_;
    moejit_plan_desc_t desc_;
    LayerSpecs gemm_specs_;  // chosen once: tiles depend on the shape, not on T
    PlanKernels kernels_;
};

}  // namespace moejit

struct moejit_plan_s {
    moejit::Plan impl;
    moejit_plan_s(moejit::Context &ctx, const moejit_plan_desc_t &desc) : impl(ctx, desc) {}
};
