// The fused MoE layer (docs/DESIGN.md §2): one plan per layer shape; forward and backward compose
// the routing, scatter/gather, grouped-GEMM and SwiGLU ops on the caller's stream, with every
// buffer caller-provided (saved activations and scratch workspace), no allocation and no host
// synchronisation, so a whole training step can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/context.hpp"
#include "runtime/kernel_source.hpp"
#include "moe/fp8_weights.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan_desc.hpp"
#include "moe/plan_layout.hpp"
#include "ops/expert_bias.hpp"
#include "ops/routing.hpp"

namespace moejit {

// Throws Status::invalid_argument / unsupported naming the bad field.
void validate_plan_desc(const PlanDesc &desc);

// Every kernel specialization a plan of `desc` launches on a context with `config` and
// `compute_capability` (pure; used by plan creation and by warmup on a compile-only context).
// Duplicates removed. The second form takes the layer's GEMM specs already chosen for a
// validated `desc` (a plan's own).
std::vector<KernelSource> plan_kernel_sources(const PlanDesc &desc, const Config &config,
                                              int compute_capability);
std::vector<KernelSource> plan_kernel_sources(const PlanDesc &desc, const LayerSpecs &gemms);
// The bf16 GEMM specs a plan of a validated `desc` uses: layer_specs, except that the FP8 recipe
// scatters x (no gathering fc1) and runs the SwiGLU on its own (no fused epilogue), and keeps
// only the weight gradients' bf16 GEMMs.
LayerSpecs plan_layer_specs(const PlanDesc &desc, const Config &config, int compute_capability);

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
    // Its caller's offsets bounded on the device, and the rows no expert owns zeroed (issue 29).
    Kernel *check_offsets = nullptr, *zero_unassigned_rows = nullptr;
};

// The experts' parameters and their gradients (null where the layout has none).
struct ExpertWeights {
    const void *w_gate = nullptr, *w_up = nullptr, *w_gate_up = nullptr, *w_down = nullptr;
    const void *b_gate_up = nullptr, *b_down = nullptr;
};
struct ExpertGrads {
    void *dw_gate = nullptr, *dw_up = nullptr, *dw_gate_up = nullptr, *dw_down = nullptr;
    void *db_gate_up = nullptr, *db_down = nullptr;
};

// The arguments of a plan's calls: moejit_forward_args_t, moejit_backward_args_t and the
// experts entry's structs, field for field, with the weights and gradients grouped
// (capi/capi_convert.cpp makes them). Shapes and rules: capi/moejit.h. Every check names the C
// field (args->...).
struct ForwardArgs {
    std::int64_t num_tokens = 0;  // T
    const void *x = nullptr;      // [T,H]
    const void *selected_experts = nullptr;
    const void *routing_weights = nullptr;
    ExpertWeights weights;
    void *out = nullptr;  // [T,H]
    void *saved = nullptr;
    std::size_t saved_size = 0;
    void *workspace = nullptr;
    std::size_t workspace_size = 0;
    void *stream = nullptr;
    WeightCacheArgs weight_cache;  // the FP8 recipe's (moe/fp8_weights.hpp)
};
struct BackwardArgs {
    std::int64_t num_tokens = 0;
    const void *dout = nullptr;
    const void *routing_weights = nullptr;
    ExpertWeights weights;  // no b_gate_up: the backward does not read it
    const void *saved = nullptr;
    std::size_t saved_size = 0;
    void *dx = nullptr;
    void *d_routing_weights = nullptr;
    ExpertGrads grads;
    void *workspace = nullptr;
    std::size_t workspace_size = 0;
    void *stream = nullptr;
    const void *x = nullptr;  // the forward's input
    WeightCacheArgs weight_cache;
    // 1: the backward may write over `saved` (its SwiGLU gradient over g and u) and needs only
    // workspace_bytes(T, true); saved is spent after the call. 0: saved is only read.
    std::int32_t consume_saved = 0;
};
// The backward's two parts (moejit_backward_part_t): DOWN, fc2's side (d_routing_weights,
// dw_down, db_down; the SwiGLU gradient written over the saved g and u), then UP, fc1's side
// from that gradient (dx, fc1's weight and bias gradients). A caller allocates each part's
// outputs and workspace just before it, so the step's peak holds d(a·w) or fc1's gradients,
// never both (DESIGN.md §2.7).
enum class BackwardPart : int { down = 1, up = 2 };

struct ExpertsForwardArgs {
    std::int64_t num_rows = 0;  // R
    const void *xs = nullptr;   // [R,H], grouped by expert
    const std::int32_t *expert_offsets = nullptr;
    const float *row_weights = nullptr;
    ExpertWeights weights;
    void *ys = nullptr;
    void *saved = nullptr;
    std::size_t saved_size = 0;
    void *workspace = nullptr;
    std::size_t workspace_size = 0;
    void *stream = nullptr;
};
struct ExpertsBackwardArgs {
    std::int64_t num_rows = 0;
    const void *xs = nullptr;
    const std::int32_t *expert_offsets = nullptr;
    const float *row_weights = nullptr;
    const void *dys = nullptr;
    ExpertWeights weights;  // no b_gate_up
    const void *saved = nullptr;
    std::size_t saved_size = 0;
    void *dxs = nullptr;
    float *d_row_weights = nullptr;
    ExpertGrads grads;
    void *workspace = nullptr;
    std::size_t workspace_size = 0;
    void *stream = nullptr;
};

class Plan {
public:
    Plan(Context &ctx, const PlanDesc &desc);
    virtual ~Plan() = default;
    Plan(const Plan &) = delete;
    Plan &operator=(const Plan &) = delete;

    const PlanDesc &desc() const { return desc_; }
    Context &context() const { return ctx_; }
    const LayerSpecs &gemm_specs() const { return gemm_specs_; }
    PlanLayout layout(std::int64_t num_tokens, bool consume_saved = false) const {
        return PlanLayout(desc_, num_tokens, gemm_specs_.gathered, "num_tokens", consume_saved);
    }
    // moejit_plan_saved_size / moejit_plan_workspace_size: the recipe's layout (PlanLayout, or
    // Fp8Layout for the FP8 recipe).
    std::size_t saved_bytes(std::int64_t num_tokens) const;
    // consume_saved: moejit_plan_consuming_workspace_size, a forward's and a consuming backward's
    // (the FP8 recipe consumes nothing: the same size).
    std::size_t workspace_bytes(std::int64_t num_tokens, bool consume_saved = false) const;
    // moejit_plan_weight_cache_size / moejit_plan_cached_workspace_size: FP8 plans only
    // (Status::unsupported for a bf16 plan).
    std::size_t weight_cache_bytes() const;
    std::size_t cached_workspace_bytes(std::int64_t num_tokens) const;

    void forward(const ForwardArgs &args);
    void backward(const BackwardArgs &args);
    // moejit_plan_backward_part_workspace_size / moejit_plan_backward_part: bf16 plans, consuming
    // (args.consume_saved 1), DOWN then UP on the same saved.
    std::size_t backward_part_workspace_bytes(std::int64_t num_tokens, BackwardPart part) const;
    void backward_part(BackwardPart part, const BackwardArgs &args);

    // The pre-dispatched experts entry (moejit.h): rows already grouped by expert.
    ExpertsLayout experts_layout(std::int64_t num_rows) const {
        return ExpertsLayout(desc_, num_rows, gemm_specs_.gathered);
    }
    void experts_forward(const ExpertsForwardArgs &args);
    void experts_backward(const ExpertsBackwardArgs &args);

protected:
    // How many rows the backward's grouped GEMMs are launched for: the launch bound S, the
    // scattered tensors' rows (docs/DESIGN.md §3). Virtual so that the regression suite can
    // substitute the historical bug (T) and prove that its checks catch it (DESIGN.md §3.6).
    virtual std::int64_t backward_gemm_bound(const PlanLayout &L, std::int64_t /*num_tokens*/) const {
        return L.rows;
    }

private:
    // The FP8 recipe's calls (moe/plan_fp8.cpp), reached from forward and backward.
    void fp8_forward(const ForwardArgs &args);
    void fp8_backward(const BackwardArgs &args);
    // The weight gradients of the FP8 recipe from rows grouped by expert, through
    // fp8_weight_grad: fc2's from dout's rows and aw, then fc1's from d_gate_up (split: d_gate
    // then d_up) and x's rows; dout's and x's rows gathered by row_token, never scattered.
    struct Fp8WeightGradRows {
        std::int64_t rows;  // S (0: every expert's gradient is still written)
        const std::int32_t *offsets;
        const std::int32_t *row_token;  // [S] the token of each scattered row
        std::int64_t tokens;            // T
        const void *dout;               // [T,H] bf16
        const void *aw;                 // [S,I] bf16
        const char *d_gate_up;          // [S,2I] bf16
        const void *x;                  // [T,H] bf16
        void *workspace;                // Fp8Layout::wgrad: the FP8 weight gradient's scratch
        std::size_t workspace_bytes;
        void *stream;
    };
    void fp8_weight_grads(const Fp8WeightGradRows &rows, const ExpertGrads &grads);

    // The [S,H] scatter of a [T,H] tensor (x or dout) into `out`, for GEMMs that do not gather.
    const void *scatter_rows(const std::int32_t *scatter_index, std::int64_t num_tokens, const void *tokens, void *out,
                             void *stream);
    // The routing weights [T,k] in scattered order, fp32, into `w_s` [S] (the forward's and
    // again the backward's: not saved); row_token, when not NULL, gets each row's token.
    float *scatter_routing_weights(const std::int32_t *scatter_index, std::int64_t num_tokens,
                                   const void *routing_weights, float *w_s, std::int32_t *row_token, void *stream);
    // The backward's w_s: saved's (desc.routing_weights_in_backward 0), else scattered again
    // from args->routing_weights into its workspace region (NULL when T = 0).
    const float *backward_w_s(const PlanLayout &layout, const BackwardArgs &args);

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
        void *aw;       // forward workspace: fc2's input (the backward recomputes it)
        void *y;
        void *stream;
    };
    void run_experts_forward(const ForwardRows &rows, const ExpertWeights &w);
    // Backward: dxs, d_w_s (fp32, written) and the weight and bias gradients from dy.
    struct BackwardRows {
        std::int64_t rows, bound;  // bound: the GEMMs' launch bound (backward_gemm_bound)
        const std::int32_t *offsets;
        const void *xs, *dy;  // xs: ignored when late_x.x is set
        const float *w_s;
        const char *gate_up;
        void *daw;  // fc2's dgrad output, then (in place) a·w recomputed for fc2's weight gradient
        char *d_gate_up;
        float *d_w_s;
        void *dxs;
        void *wgrad_split;
        std::size_t wgrad_split_bytes;
        void *bias_partial;
        std::size_t bias_partial_bytes;
        void *stream;
        // The layer entry with T > 0: x's rows are scattered into `xs` once fc2's GEMMs, the
        // SwiGLU backward and the bias gradients are done with dy, whose rows `xs` may overwrite.
        struct LateScatter {
            const std::int32_t *index = nullptr;
            std::int64_t tokens = 0;
            const void *x = nullptr;
            void *xs = nullptr;
        } late_x;
        // fc1's weight gradients' split scratch when it is not wgrad_split (UP lends dx).
        void *fc1_wgrad_split = nullptr;
        std::size_t fc1_wgrad_split_bytes = 0;
    };
    // The whole backward: run_backward_down, then run_backward_up on the same rows.
    void run_experts_backward(const BackwardRows &rows, const ExpertWeights &w, const ExpertGrads &g);
    // fc2's side: daw, d_gate_up, d_w_s, dw_down (and d_w_s's bias term, db_down), from dy.
    void run_backward_down(const BackwardRows &rows, const ExpertWeights &w, const ExpertGrads &g);
    // fc1's side from d_gate_up: db_gate_up, fc1's weight gradients (x's rows) and dxs.
    void run_backward_up(const BackwardRows &rows, const ExpertWeights &w, const ExpertGrads &g);
    // The experts entry's offsets bounded on the device into `checked` (ops/expert_rows.hpp,
    // check_offsets), which it returns; bad ones set a bit of the context's device error word.
    const std::int32_t *checked_offsets(const std::int32_t *offsets, std::int64_t rows, std::int32_t *checked,
                                        void *stream);

    Context &ctx_;
    PlanDesc desc_;
    LayerSpecs gemm_specs_;  // chosen once: tiles depend on the shape, not on T
    PlanKernels kernels_;
};

}  // namespace moejit
