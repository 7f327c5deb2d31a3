#include "moe/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "base/dtype.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan_checks.hpp"
#include "moe/plan_fp8.hpp"
#include "moe/plan_swiglu.hpp"
#include "ops/expert_rows.hpp"
#include "ops/routing.hpp"
#include "ops/scatter_gather.hpp"
#include "ops/swiglu.hpp"

namespace moejit {
namespace {

bool has_limit(const PlanDesc &d) { return d.swiglu_limit > 0.0f; }
bool has_bias(const PlanDesc &d) { return d.has_bias != 0; }

PlanLayout checked_layout(const PlanDesc &d, std::int64_t num_tokens, bool gathered, bool consume_saved = false) {
    // PlanLayout validates T (>= 0, T·k <= 2^31-1) and every size with checked arithmetic.
    return PlanLayout(d, num_tokens, gathered, "args->num_tokens", consume_saved);
}

SwigluSpec swiglu_spec_of(const PlanDesc &d) {
    SwigluSpec s;
    s.dtype = d.dtype;
    s.intermediate = d.intermediate_size;
    s.merged = fc1_merged(d);
    s.has_limit = has_limit(d);
    s.has_weights = true;
    s.interleaved = d.fc1_layout == Fc1Layout::interleaved;
    s.activation = d.activation;
    s.has_bias = has_bias(d);  // the forward's; render_swiglu_backward drops it
    return s;
}

GatherSpec gather_spec_of(const PlanDesc &d, bool bias) {
    GatherSpec g{d.dtype, d.hidden_size, d.top_k, static_cast<DType>(0)};
    g.bias = bias;
    return g;
}

BiasGradSpec bias_grad_spec_of(const PlanDesc &d, bool scaled) {
    return BiasGradSpec{d.dtype, d.weight_grad_dtype, scaled, d.weight_grad_accumulate != 0};
}

// The backward's parts: a known part of a bf16 plan (the FP8 backward has no parts yet).
void require_backward_part(const PlanDesc &d, BackwardPart part) {
    MOEJIT_REQUIRE(part == BackwardPart::down || part == BackwardPart::up,
                   "part is {}, expected MOEJIT_BACKWARD_PART_DOWN (1) or MOEJIT_BACKWARD_PART_UP (2)",
                   static_cast<int>(part));
    if (d.recipe == Recipe::fp8_block)
        fail(Status::unsupported, "moejit_plan_backward_part: the plan's desc->recipe is MOEJIT_RECIPE_FP8_BLOCK, whose "
                                  "backward has no parts yet (use moejit_plan_backward)");
}

}  // namespace

void validate_plan_desc(const PlanDesc &d) {
    MOEJIT_REQUIRE(is_half_precision(d.dtype), "desc->dtype is {} ({}), expected MOEJIT_DTYPE_BF16 or MOEJIT_DTYPE_FP16",
                   static_cast<int>(d.dtype), dtype_name(d.dtype));
    MOEJIT_REQUIRE(d.hidden_size > 0 && d.hidden_size % 8 == 0,
                   "desc->hidden_size is {}, expected a positive multiple of 8", d.hidden_size);
    MOEJIT_REQUIRE(d.intermediate_size > 0 && d.intermediate_size % 8 == 0,
                   "desc->intermediate_size is {}, expected a positive multiple of 8", d.intermediate_size);
    MOEJIT_REQUIRE(d.num_experts >= 1 && d.num_experts <= 4096,
                   "desc->num_experts is {}, expected 1..4096", d.num_experts);
    MOEJIT_REQUIRE(d.top_k >= 1 && d.top_k <= std::min<std::int32_t>(64, d.num_experts * 64),
                   "desc->top_k is {}, expected 1..64", d.top_k);
    MOEJIT_REQUIRE(d.fc1_layout == Fc1Layout::split || d.fc1_layout == Fc1Layout::merged ||
                       d.fc1_layout == Fc1Layout::interleaved,
                   "desc->fc1_layout is {}, expected MOEJIT_FC1_SPLIT (0), MOEJIT_FC1_MERGED (1) or "
                   "MOEJIT_FC1_INTERLEAVED (2)",
                   static_cast<int>(d.fc1_layout));
    MOEJIT_REQUIRE(d.activation == Activation::swiglu || d.activation == Activation::gpt_oss,
                   "desc->activation is {}, expected MOEJIT_ACTIVATION_SWIGLU (0) or MOEJIT_ACTIVATION_GPT_OSS (1)",
                   static_cast<int>(d.activation));
    MOEJIT_REQUIRE(std::isfinite(d.swiglu_limit), "desc->swiglu_limit is not finite");
    MOEJIT_REQUIRE(std::isfinite(d.activation_alpha) && d.activation_alpha >= 0.0f,
                   "desc->activation_alpha is {}, expected a finite value >= 0 (0: 1.702)", d.activation_alpha);
    MOEJIT_REQUIRE(d.weights_transposed == 0 || d.weights_transposed == 1,
                   "desc->weights_transposed is {}, expected 0 or 1", d.weights_transposed);
    MOEJIT_REQUIRE(d.has_bias == 0 || d.has_bias == 1, "desc->has_bias is {}, expected 0 or 1", d.has_bias);
    MOEJIT_REQUIRE(d.routing_weights_in_backward == 0 || d.routing_weights_in_backward == 1,
                   "desc->routing_weights_in_backward is {}, expected 0 or 1", d.routing_weights_in_backward);
    if (d.fc1_layout == Fc1Layout::split) {
        // The split layout's separate W_gate/W_up would need two biases and transposed pairs;
        // the models that have them store fc1 merged.
        if (d.weights_transposed)
            fail(Status::unsupported,
                 "desc->weights_transposed is 1 with desc->fc1_layout MOEJIT_FC1_SPLIT: transposed weights need "
                 "MOEJIT_FC1_MERGED or MOEJIT_FC1_INTERLEAVED");
        if (d.has_bias)
            fail(Status::unsupported,
                 "desc->has_bias is 1 with desc->fc1_layout MOEJIT_FC1_SPLIT: biases need MOEJIT_FC1_MERGED or "
                 "MOEJIT_FC1_INTERLEAVED");
    }
    MOEJIT_REQUIRE(d.weight_grad_dtype == d.dtype || d.weight_grad_dtype == DType::fp32,
                   "desc->weight_grad_dtype is {}, expected the layer dtype ({}) or MOEJIT_DTYPE_FP32",
                   dtype_name(d.weight_grad_dtype), dtype_name(d.dtype));
    MOEJIT_REQUIRE(!d.weight_grad_accumulate || d.weight_grad_dtype == DType::fp32,
                   "desc->weight_grad_accumulate is set, which requires weight_grad_dtype MOEJIT_DTYPE_FP32 (got {})",
                   dtype_name(d.weight_grad_dtype));
    MOEJIT_REQUIRE(d.index_dtype == DType::int32 || d.index_dtype == DType::int64,
                   "desc->index_dtype is {}, expected MOEJIT_DTYPE_INT32 or MOEJIT_DTYPE_INT64", dtype_name(d.index_dtype));
    MOEJIT_REQUIRE(d.routing_dtype == d.dtype || d.routing_dtype == DType::fp32,
                   "desc->routing_dtype is {}, expected the layer dtype ({}) or MOEJIT_DTYPE_FP32",
                   dtype_name(d.routing_dtype), dtype_name(d.dtype));
    MOEJIT_REQUIRE(d.tokens_hint >= 0, "desc->tokens_hint is {}, expected >= 0", d.tokens_hint);
    MOEJIT_REQUIRE(d.recipe == Recipe::bf16 || d.recipe == Recipe::fp8_block,
                   "desc->recipe is {}, expected MOEJIT_RECIPE_BF16 (0) or MOEJIT_RECIPE_FP8_BLOCK (1)",
                   static_cast<int>(d.recipe));
    if (d.recipe == Recipe::fp8_block) validate_fp8_desc(d);
}

LayerSpecs plan_layer_specs(const PlanDesc &d, const Config &config, int compute_capability) {
    LayerSpecs specs = layer_specs(d, config, compute_capability);
    if (d.recipe == Recipe::fp8_block) {
        specs.gathered = false;
        specs.fused_swiglu = false;
    }
    return specs;
}

std::vector<KernelSource> plan_kernel_sources(const PlanDesc &d, const Config &config,
                                              int compute_capability) {
    validate_plan_desc(d);
    if (d.recipe == Recipe::fp8_block && compute_capability != 90)
        fail(Status::unsupported,
             "desc->recipe is MOEJIT_RECIPE_FP8_BLOCK, which needs an sm_90a context (Hopper); this context's "
             "arch is sm_{}",
             compute_capability);
    return plan_kernel_sources(d, plan_layer_specs(d, config, compute_capability));
}

namespace {

// Every kernel of a plan with where PlanKernels keeps it (one source may serve two places).
struct BoundSources {
    std::vector<KernelSource> sources;
    std::vector<std::function<void(PlanKernels &, Kernel *)>> bind;
    void add(KernelSource source, std::function<void(PlanKernels &, Kernel *)> where) {
        sources.push_back(std::move(source));
        bind.push_back(std::move(where));
    }
};

BoundSources plan_bound_sources(const PlanDesc &d, const LayerSpecs &gemms) {
    BoundSources b;
    RoutingKernels routing = render_routing_index(RoutingSpec{d.index_dtype, d.num_experts});
    b.add(std::move(routing.histogram), [](PlanKernels &p, Kernel *k) { p.routing.histogram = k; });
    b.add(std::move(routing.row_scan), [](PlanKernels &p, Kernel *k) { p.routing.row_scan = k; });
    b.add(std::move(routing.rank), [](PlanKernels &p, Kernel *k) { p.routing.rank = k; });
    const bool fp8 = d.recipe == Recipe::fp8_block;
    if (!fp8)  // the FP8 recipe's scatters quantize (fp8_layer_sources)
        b.add(render_scatter(ScatterSpec{d.dtype, d.hidden_size, d.top_k}),
              [](PlanKernels &p, Kernel *k) { p.scatter = k; });
    b.add(render_gather(gather_spec_of(d, false)), [](PlanKernels &p, Kernel *k) { p.gather = k; });
    if (has_bias(d)) {
        b.add(render_gather(gather_spec_of(d, true)), [](PlanKernels &p, Kernel *k) { p.gather_bias = k; });
        b.add(render_bias_row_dot(d.dtype), [](PlanKernels &p, Kernel *k) { p.bias_row_dot = k; });
        b.add(render_bias_grad_partial(bias_grad_spec_of(d, true)),
              [](PlanKernels &p, Kernel *k) { p.bias_grad_scaled.partial = k; });
        b.add(render_bias_grad_partial(bias_grad_spec_of(d, false)),
              [](PlanKernels &p, Kernel *k) { p.bias_grad.partial = k; });
        b.add(render_bias_grad_reduce(bias_grad_spec_of(d, false)), [](PlanKernels &p, Kernel *k) {
            p.bias_grad.reduce = k;
            p.bias_grad_scaled.reduce = k;  // the reduction does not depend on the scale
        });
    }
    if (!fp8) {  // the experts entry has no FP8 form
        b.add(render_prepare_rows(false, gemms.gathered), [](PlanKernels &p, Kernel *k) { p.prepare_rows = k; });
        b.add(render_prepare_rows(true, gemms.gathered),
              [](PlanKernels &p, Kernel *k) { p.prepare_rows_weighted = k; });
        if (has_bias(d))
            b.add(render_add_row_bias(d.dtype), [](PlanKernels &p, Kernel *k) { p.add_row_bias = k; });
        b.add(render_check_offsets(), [](PlanKernels &p, Kernel *k) { p.check_offsets = k; });
        b.add(render_zero_unassigned_rows(), [](PlanKernels &p, Kernel *k) { p.zero_unassigned_rows = k; });
    }
    b.add(render_scatter_weights(d.routing_dtype), [](PlanKernels &p, Kernel *k) { p.scatter_weights = k; });
    b.add(render_gather_weights(d.routing_dtype), [](PlanKernels &p, Kernel *k) { p.gather_weights = k; });
    SwigluSpec act = swiglu_spec_of(d);
    if (!gemms.fused_swiglu && !fp8)  // FP8: fp8_swiglu_quantize (fp8_layer_sources)
        b.add(render_swiglu_forward(act), [](PlanKernels &p, Kernel *k) { p.swiglu_forward = k; });
    if (!fp8)  // FP8: fp8_swiglu_backward_quantize (fp8_layer_sources)
        b.add(render_swiglu_backward(act), [](PlanKernels &p, Kernel *k) { p.swiglu_backward = k; });
    for (LayerGemmRole &role : layer_gemm_roles(d, gemms)) {
        GemmKernels LayerKernels::*where = role.kernels;
        if (fp8) continue;  // every GEMM of the FP8 recipe is FP8
        for (std::size_t i = 0; i < role.sources.size(); ++i)
            b.add(std::move(role.sources[i]), [where, i](PlanKernels &p, Kernel *k) {
                (i == 0 ? (p.gemms.*where).main : (p.gemms.*where).reduce) = k;
            });
    }
    if (fp8)  // the FP8 launchers fetch these from the context's memory cache when they launch
        for (KernelSource &source : fp8_layer_sources(d)) b.add(std::move(source), [](PlanKernels &, Kernel *) {});
    return b;
}

}  // namespace

std::vector<KernelSource> plan_kernel_sources(const PlanDesc &d, const LayerSpecs &gemms) {
    std::vector<KernelSource> all = plan_bound_sources(d, gemms).sources;
    // Remove duplicates (e.g. the same GEMM shape used twice), keeping the first.
    std::set<std::string> seen;
    std::vector<KernelSource> unique;
    for (KernelSource &s : all)
        if (seen.insert(s.source).second) unique.push_back(std::move(s));
    return unique;
}

Plan::Plan(Context &ctx, const PlanDesc &desc)
    : ctx_(ctx), desc_(desc),
      gemm_specs_((validate_plan_desc(desc), plan_layer_specs(desc, ctx.config(), ctx.compute_capability()))) {
    if (desc.recipe == Recipe::fp8_block) require_fp8_arch(ctx.arch());
    // Compile or load every kernel now, the missing ones in parallel, so forward and backward
    // only launch. A source that serves two places (the same GEMM shape twice) resolves once.
    BoundSources bound = plan_bound_sources(desc_, gemm_specs_);
    std::vector<Kernel *> kernels = ctx_.kernels(bound.sources);
    kernels_.routing.spec = RoutingSpec{desc.index_dtype, desc.num_experts};
    for (std::size_t i = 0; i < kernels.size(); ++i) bound.bind[i](kernels_, kernels[i]);
}

const void *Plan::scatter_rows(const std::int32_t *scatter_index, std::int64_t num_tokens, const void *tokens,
                               void *out, void *stream) {
    scatter(ctx_, ScatterArgs{ScatterSpec{desc_.dtype, desc_.hidden_size, desc_.top_k}, tokens, scatter_index,
                              num_tokens, out, stream},
            *kernels_.scatter);
    return out;
}

float *Plan::scatter_routing_weights(const std::int32_t *scatter_index, std::int64_t num_tokens,
                                     const void *routing_weights, float *w_s, std::int32_t *row_token, void *stream) {
    scatter_weights(ctx_, WeightsScatterArgs{desc_.routing_dtype, routing_weights, scatter_index, num_tokens,
                                             desc_.top_k, w_s, row_token, stream},
                    *kernels_.scatter_weights);
    return w_s;
}

const float *Plan::backward_w_s(const PlanLayout &L, const BackwardArgs &a) {
    if (L.w_s_saved) return L.w_s.in<float>(a.saved);
    if (a.num_tokens == 0) return nullptr;  // no rows read it
    return scatter_routing_weights(L.scatter_index.in<std::int32_t>(a.saved), a.num_tokens, a.routing_weights,
                                   L.w_s_backward.in<float>(a.workspace), nullptr, a.stream);
}

void Plan::run_experts_forward(const ForwardRows &r, const ExpertWeights &w) {
    const PlanDesc &d = desc_;
    const std::int64_t S = r.rows, I = d.intermediate_size;
    const std::size_t el = dtype_size(d.dtype);
    LayerGemms gemms(ctx_, d, gemm_specs_, &kernels_.gemms, S, r.offsets, r.row_token, r.stream);
    char *gate_up = r.gate_up;
    void *g = gate_up;
    void *u = gate_up + split_half_bytes(d, S);
    if (gemm_specs_.fused_swiglu) {
        // g, u (saved for the backward) and aw from fc1's epilogue.
        if (fc1_merged(d))
            gemms.fc1_swiglu(r.xs, w.w_gate_up, nullptr, gate_up, gate_up + I * el, r.aw, r.w_s);
        else
            gemms.fc1_swiglu(r.xs, w.w_gate, w.w_up, g, u, r.aw, r.w_s);
    } else {
        if (fc1_merged(d)) {
            gemms.fc1_merged(r.xs, w.w_gate_up, gate_up);
        } else {
            gemms.fc1_split(r.xs, w.w_gate, g);
            gemms.fc1_split(r.xs, w.w_up, u);
        }
        SwigluForwardArgs act = plan_swiglu_forward_args(d, S, gate_up, r.w_s, r.aw, r.stream);
        if (has_bias(d)) {
            act.bias = w.b_gate_up;  // g, u += b_gate_up[e], written back to the saved gate_up
            act.offsets = r.offsets;
            act.num_experts = d.num_experts;
        }
        swiglu_forward(ctx_, act, kernels_.swiglu_forward);
    }
    gemms.fc2(r.aw, w.w_down, r.y);
}

void Plan::run_experts_backward(const BackwardRows &r, const ExpertWeights &w, const ExpertGrads &g) {
    run_backward_down(r, w, g);
    run_backward_up(r, w, g);
}

void Plan::run_backward_down(const BackwardRows &r, const ExpertWeights &w, const ExpertGrads &g) {
    const PlanDesc &d = desc_;
    const std::int64_t S = r.rows, H = d.hidden_size;
    // Weight gradients of every expert are written even with no rows (zeros, or untouched when
    // accumulating), so the GEMMs run whatever the row count; the row ops are skipped then.
    LayerGemms gemms(ctx_, d, gemm_specs_, &kernels_.gemms, r.bound, r.offsets, nullptr /* backward gathers nothing */,
                     r.stream, r.wgrad_split, r.wgrad_split_bytes);
    gemms.fc2_dgrad(r.dy, w.w_down, r.daw);

    // The SwiGLU backward reads d(a·w) and writes a·w, recomputed from the saved g and u, in
    // its place (each element by the thread that read it): the forward keeps no a·w.
    const SwigluBackwardArgs act =
        plan_swiglu_backward_args(d, S, r.gate_up, r.w_s, r.daw, r.d_gate_up, r.d_w_s, r.stream);
    if (S > 0) swiglu_backward(ctx_, act, kernels_.swiglu_backward);
    gemms.fc2_wgrad(r.dy, r.daw, g.dw_down);
    if (has_bias(d)) {
        // d_w_s += dy·b_down[e]; db_down[e] = Σ w_s·dy over e's rows (written with no rows too,
        // like the weight gradients).
        if (S > 0)
            bias_row_dot(ctx_, BiasRowDotArgs{r.dy, w.b_down, r.offsets, d.num_experts, S, H, r.d_w_s, r.stream},
                         *kernels_.bias_row_dot);
        bias_grad(ctx_, bias_grad_spec_of(d, true),
                  BiasGradArgs{r.dy, r.w_s, r.offsets, d.num_experts, S, H, g.db_down, r.bias_partial,
                               r.bias_partial_bytes, r.stream},
                  kernels_.bias_grad_scaled);
    }
}

void Plan::run_backward_up(const BackwardRows &r, const ExpertWeights &w, const ExpertGrads &g) {
    const PlanDesc &d = desc_;
    const std::int64_t S = r.rows, I = d.intermediate_size;
    void *split = r.fc1_wgrad_split ? r.fc1_wgrad_split : r.wgrad_split;
    const std::size_t split_bytes = r.fc1_wgrad_split ? r.fc1_wgrad_split_bytes : r.wgrad_split_bytes;
    LayerGemms gemms(ctx_, d, gemm_specs_, &kernels_.gemms, r.bound, r.offsets, nullptr, r.stream, split, split_bytes);
    // db_gate_up[e] = Σ d_gate_up over e's rows (written with no rows too).
    if (has_bias(d))
        bias_grad(ctx_, bias_grad_spec_of(d, false),
                  BiasGradArgs{r.d_gate_up, nullptr, r.offsets, d.num_experts, S, 2 * I, g.db_gate_up,
                               r.bias_partial, r.bias_partial_bytes, r.stream},
                  kernels_.bias_grad);
    // dy is dead from here: x's rows may take its place (the layer's workspace, DESIGN.md §2.7), and
    // fc1's weight gradients read them before its dgrad writes dxs there.
    const void *xs = r.xs;
    if (r.late_x.x) xs = scatter_rows(r.late_x.index, r.late_x.tokens, r.late_x.x, r.late_x.xs, r.stream);
    if (fc1_merged(d)) {
        gemms.fc1_wgrad_merged(r.d_gate_up, xs, g.dw_gate_up);
        gemms.fc1_dgrad_merged(r.d_gate_up, w.w_gate_up, r.dxs);
    } else {
        const char *d_gate = r.d_gate_up, *d_up = r.d_gate_up + split_half_bytes(d, S);
        gemms.fc1_wgrad_split(d_gate, xs, g.dw_gate);
        gemms.fc1_wgrad_split(d_up, xs, g.dw_up);
        gemms.fc1_dgrad_split(d_gate, w.w_gate, d_up, w.w_up, r.dxs);
    }
}

std::size_t Plan::saved_bytes(std::int64_t num_tokens) const {
    if (desc_.recipe == Recipe::fp8_block) return Fp8Layout(desc_, num_tokens).saved_bytes;
    return layout(num_tokens).saved_bytes;
}

std::size_t Plan::workspace_bytes(std::int64_t num_tokens, bool consume_saved) const {
    if (desc_.recipe == Recipe::fp8_block) return Fp8Layout(desc_, num_tokens).workspace_bytes;
    return layout(num_tokens, consume_saved).workspace_bytes;
}

namespace {
void require_fp8_plan(const PlanDesc &d, const char *query) {
    if (d.recipe != Recipe::fp8_block)
        fail(Status::unsupported,
             "{}: the plan's desc->recipe is MOEJIT_RECIPE_BF16; a weight cache holds FP8 weights, for "
             "MOEJIT_RECIPE_FP8_BLOCK plans only",
             query);
}
}  // namespace

std::size_t Plan::weight_cache_bytes() const {
    require_fp8_plan(desc_, "moejit_plan_weight_cache_size");
    return Fp8WeightCacheLayout(desc_).bytes;
}

std::size_t Plan::cached_workspace_bytes(std::int64_t num_tokens) const {
    require_fp8_plan(desc_, "moejit_plan_cached_workspace_size");
    return Fp8Layout(desc_, num_tokens).cached_workspace_bytes;
}

void Plan::forward(const ForwardArgs &a) {
    if (desc_.recipe == Recipe::fp8_block) return fp8_forward(a);
    const PlanDesc &d = desc_;
    check_weight_cache(d, a.weight_cache);  // a bf16 plan: NONE only
    // The forward's regions are the same in both layouts; the consuming one's size (0.12) is the
    // smaller bound it checks: moejit_plan_consuming_workspace_size is enough for a forward.
    PlanLayout L = checked_layout(d, a.num_tokens, gemm_specs_.gathered, true);
    const bool T0 = a.num_tokens > 0;
    const ExpertWeights &w = a.weights;
    require_tensor(a.x, "args->x", T0);
    require_tensor(a.selected_experts, "args->selected_experts", T0);
    require_tensor(a.routing_weights, "args->routing_weights", T0);
    require_weights(d, w, true);
    require_tensor(w.b_gate_up, "args->b_gate_up", has_bias(d));
    require_tensor(a.out, "args->out", T0);
    require_layer_buffers(L, a);
    ctx_.require_device("moejit_plan_forward");

    auto *offsets = L.offsets.in<std::int32_t>(a.saved);
    auto *scatter_index = L.scatter_index.in<std::int32_t>(a.saved);
    // Only a gathering fc1 reads row_token (in the workspace); otherwise it is not written.
    auto *row_token = gemm_specs_.gathered ? L.row_token.in<std::int32_t>(a.workspace) : nullptr;
    void *y = L.y.in<char>(a.workspace);
    float *w_s = L.w_s_saved ? L.w_s.in<float>(a.saved) : L.w_s.in<float>(a.workspace);

    routing_index(ctx_, RoutingIndexArgs{d.index_dtype, a.selected_experts, a.num_tokens, d.top_k, d.num_experts,
                                         L.counts.in<std::int32_t>(a.workspace), offsets, scatter_index,
                                         L.routing.in<char>(a.workspace), L.routing.bytes, a.stream},
                  kernels_.routing);
    if (!T0) return;  // offsets are zero; nothing else to do (out has no rows)
    scatter_routing_weights(scatter_index, a.num_tokens, a.routing_weights, w_s, row_token, a.stream);
    // fc1 reads x's rows by row_token (gathered) or from its scatter.
    const void *xs = gemm_specs_.gathered ? a.x : scatter_rows(scatter_index, a.num_tokens, a.x, L.xs.in<char>(a.workspace), a.stream);
    run_experts_forward(ForwardRows{L.rows, offsets, row_token, xs, w_s, L.gate_up.in<char>(a.saved),
                                    L.aw.in<char>(a.workspace), y, a.stream},
                        w);
    // y holds w·(a·W_down) per row; the gather adds w·b_down[e] (out = Σ_j w·(fc2 + b_down)).
    GatherArgs fc2_out{gather_spec_of(d, has_bias(d)), y, scatter_index, nullptr, a.num_tokens, a.out, a.stream};
    if (has_bias(d)) {
        fc2_out.bias = w.b_down;
        fc2_out.bias_scale = w_s;
        fc2_out.offsets = offsets;
        fc2_out.num_experts = d.num_experts;
    }
    gather(ctx_, fc2_out, has_bias(d) ? *kernels_.gather_bias : *kernels_.gather);
}

void Plan::backward(const BackwardArgs &a) {
    if (desc_.recipe == Recipe::fp8_block) return fp8_backward(a);
    const PlanDesc &d = desc_;
    check_weight_cache(d, a.weight_cache);  // a bf16 plan: NONE only
    PlanLayout L = checked_layout(d, a.num_tokens, gemm_specs_.gathered, consumes_saved(a.consume_saved));
    const bool T0 = a.num_tokens > 0;
    const ExpertWeights &w = a.weights;
    const ExpertGrads &g = a.grads;
    require_tensor(a.x, "args->x", T0);
    require_tensor(a.dout, "args->dout", T0);
    require_tensor(a.routing_weights, "args->routing_weights", T0 && !L.w_s_saved);
    require_weights(d, w, T0);
    require_tensor(a.dx, "args->dx", T0);
    require_tensor(a.d_routing_weights, "args->d_routing_weights", T0);
    require_grads(d, g);
    require_layer_buffers(L, a);
    ctx_.require_device("moejit_plan_backward");

    const auto *scatter_index = L.scatter_index.in<std::int32_t>(a.saved);
    float *d_w_s = L.d_w_s.in<float>(a.workspace);
    void *dxs = L.dxs.in<char>(a.workspace);
    // dout's rows scattered for fc2's GEMMs now, x's for fc1's weight gradient later, into the
    // same region (T = 0: nothing to read).
    const void *dy = a.dout;
    if (T0) dy = scatter_rows(scatter_index, a.num_tokens, a.dout, L.dy.in<char>(a.workspace), a.stream);
    const float *w_s = backward_w_s(L, a);
    // A consuming call writes d_gate_up over the saved g and u: the caller gave saved up to it.
    char *d_gate_up = L.consumes_saved ? L.gate_up.in<char>(const_cast<void *>(a.saved))
                                       : L.d_gate_up.in<char>(a.workspace);
    BackwardRows rows{L.rows, backward_gemm_bound(L, a.num_tokens), L.offsets.in<std::int32_t>(a.saved),
                      a.x, dy, w_s, L.gate_up.in<char>(a.saved), L.daw.in<char>(a.workspace), d_gate_up, d_w_s, dxs,
                      L.wgrad_split.in<char>(a.workspace), L.wgrad_split.bytes,
                      L.bias_partial.in<char>(a.workspace), L.bias_partial.bytes, a.stream, {}};
    if (T0) rows.late_x = {scatter_index, a.num_tokens, a.x, L.xs.in<char>(a.workspace)};
    run_experts_backward(rows, w, g);
    if (!T0) return;
    gather_weights(ctx_, WeightsGatherArgs{d.routing_dtype, d_w_s, scatter_index, a.num_tokens, d.top_k,
                                           a.d_routing_weights, a.stream},
                   *kernels_.gather_weights);
    gather(ctx_, GatherArgs{gather_spec_of(d, false), dxs, scatter_index, nullptr, a.num_tokens, a.dx, a.stream},
           *kernels_.gather);
}

std::size_t Plan::backward_part_workspace_bytes(std::int64_t num_tokens, BackwardPart part) const {
    require_backward_part(desc_, part);
    const PlanLayout L = layout(num_tokens, true);
    return part == BackwardPart::down ? L.down_workspace_bytes : L.up_workspace_bytes;
}

void Plan::backward_part(BackwardPart part, const BackwardArgs &a) {
    require_backward_part(desc_, part);
    const PlanDesc &d = desc_;
    check_weight_cache(d, a.weight_cache);  // a bf16 plan: NONE only
    MOEJIT_REQUIRE(consumes_saved(a.consume_saved),
                   "args->consume_saved is 0, expected 1: the parts hand the SwiGLU gradient over in saved (DOWN "
                   "writes it over the saved g and u, UP reads it there)");
    const PlanLayout L = checked_layout(d, a.num_tokens, gemm_specs_.gathered, true);
    const bool T0 = a.num_tokens > 0, down = part == BackwardPart::down;
    const ExpertWeights &w = a.weights;
    const ExpertGrads &g = a.grads;
    if (down) {
        require_tensor(a.dout, "args->dout", T0);
        require_tensor(a.routing_weights, "args->routing_weights", T0 && !L.w_s_saved);
        require_tensor(a.d_routing_weights, "args->d_routing_weights", T0);
    } else {
        require_tensor(a.x, "args->x", T0);
        require_tensor(a.dx, "args->dx", T0);
    }
    require_weights(d, w, T0, down ? WeightHalf::fc2 : WeightHalf::fc1);
    require_grads(d, g, down ? WeightHalf::fc2 : WeightHalf::fc1);
    require_layer_buffers(L.tokens, L.saved_bytes, down ? L.down_workspace_bytes : L.up_workspace_bytes,
                          down ? "moejit_plan_backward_part_workspace_size(DOWN)"
                               : "moejit_plan_backward_part_workspace_size(UP)",
                          a.saved, a.saved_size, a.workspace, a.workspace_size);
    ctx_.require_device("moejit_plan_backward_part");

    const auto *scatter_index = L.scatter_index.in<std::int32_t>(a.saved);
    char *gate_up = L.gate_up.in<char>(const_cast<void *>(a.saved));  // d_gate_up after DOWN
    BackwardRows rows{L.rows, backward_gemm_bound(L, a.num_tokens), L.offsets.in<std::int32_t>(a.saved),
                      nullptr, nullptr, nullptr, gate_up, nullptr, gate_up, nullptr,
                      L.xs.in<char>(a.workspace), nullptr, 0, nullptr, 0, a.stream, {}};
    if (down) {
        float *d_w_s = L.d_w_s.in<float>(a.workspace);
        rows.dy = T0 ? scatter_rows(scatter_index, a.num_tokens, a.dout, L.dy.in<char>(a.workspace), a.stream) : a.dout;
        rows.w_s = backward_w_s(L, a);
        rows.daw = L.daw.in<char>(a.workspace);
        rows.d_w_s = d_w_s;
        rows.wgrad_split = L.wgrad_split.in<char>(a.workspace);
        rows.wgrad_split_bytes = L.down_split_bytes;  // fc2's split: DOWN's workspace ends there
        rows.bias_partial = L.bias_partial.in<char>(a.workspace);
        rows.bias_partial_bytes = L.bias_partial.bytes;
        run_backward_down(rows, w, g);
        if (T0)
            gather_weights(ctx_, WeightsGatherArgs{d.routing_dtype, d_w_s, scatter_index, a.num_tokens, d.top_k,
                                                   a.d_routing_weights, a.stream},
                           *kernels_.gather_weights);
        return;
    }
    rows.xs = a.x;
    if (T0) {
        rows.late_x = {scatter_index, a.num_tokens, a.x, L.xs.in<char>(a.workspace)};
        // dx is written by UP's last kernel alone: until then its bytes are fc1's split scratch.
        rows.fc1_wgrad_split = a.dx;
        rows.fc1_wgrad_split_bytes = L.xs.bytes / static_cast<std::size_t>(d.top_k);  // T·H elements (S = T·k)
    }
    rows.bias_partial = L.up_bias_partial.in<char>(a.workspace);
    rows.bias_partial_bytes = L.up_bias_partial.bytes;
    run_backward_up(rows, w, g);
    if (T0)
        gather(ctx_, GatherArgs{gather_spec_of(d, false), rows.dxs, scatter_index, nullptr, a.num_tokens, a.dx, a.stream},
               *kernels_.gather);
}

namespace {

// The experts entry's saved and workspace buffers against its own size queries for R.
template <class Args> void require_experts_buffers(const ExpertsLayout &L, const Args &a) {
    require_tensor(a.saved, "args->saved", L.saved_bytes > 0);
    require_tensor(a.workspace, "args->workspace", L.workspace_bytes > 0);
    MOEJIT_REQUIRE(a.saved_size >= L.saved_bytes,
                   "args->saved_size is {}, expected >= {} (moejit_plan_experts_saved_size for R={})", a.saved_size,
                   L.saved_bytes, L.rows);
    MOEJIT_REQUIRE(a.workspace_size >= L.workspace_bytes,
                   "args->workspace_size is {}, expected >= {} (moejit_plan_experts_workspace_size for R={})",
                   a.workspace_size, L.workspace_bytes, L.rows);
}

// The entry has no FP8 form yet: `entry` refused for an FP8 plan.
void refuse_fp8_experts(const PlanDesc &d, const char *entry) {
    if (d.recipe == Recipe::fp8_block)
        fail(Status::unsupported, "{}: the plan's desc->recipe is MOEJIT_RECIPE_FP8_BLOCK, and the experts entry has "
                                  "no FP8 form yet (use a MOEJIT_RECIPE_BF16 plan)",
             entry);
}

void require_expert_offsets(const std::int32_t *offsets) {
    MOEJIT_REQUIRE(offsets != nullptr, "args->expert_offsets is NULL (int32 [E+1] on the device)");
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(offsets) % 4 == 0,
                   "args->expert_offsets ({}) is not 4-byte aligned (int32)", static_cast<const void *>(offsets));
}

void require_row_weights(const float *p, const char *name) {
    if (!p) return;
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % 4 == 0, "{} ({}) is not 4-byte aligned (fp32)", name,
                   static_cast<const void *>(p));
}

}  // namespace

void Plan::experts_forward(const ExpertsForwardArgs &a) {
    refuse_fp8_experts(desc_, "moejit_plan_experts_forward");
    const PlanDesc &d = desc_;
    const ExpertsLayout L(d, a.num_rows, gemm_specs_.gathered, "args->num_rows");
    const bool R0 = a.num_rows > 0;
    const ExpertWeights &w = a.weights;
    require_tensor(a.xs, "args->xs", R0);
    require_expert_offsets(a.expert_offsets);
    require_row_weights(a.row_weights, "args->row_weights");
    require_weights(d, w, true);
    require_tensor(w.b_gate_up, "args->b_gate_up", has_bias(d));
    require_tensor(a.ys, "args->ys", R0);
    require_experts_buffers(L, a);
    ctx_.require_device("moejit_plan_experts_forward");
    if (!R0) return;  // no rows: nothing to write (the backward still writes weight gradients)

    // Every kernel below reads the offsets as bounded on the device, never the caller's.
    const std::int32_t *offsets = checked_offsets(a.expert_offsets, a.num_rows, L.offsets.in<std::int32_t>(a.workspace),
                                                  a.stream);
    auto *w_s = L.w_s.in<float>(a.saved);
    auto *row_token = gemm_specs_.gathered ? L.row_token.in<std::int32_t>(a.workspace) : nullptr;
    prepare_rows(ctx_, PrepareRowsArgs{a.row_weights, a.num_rows, w_s, row_token, a.stream},
                 a.row_weights ? *kernels_.prepare_rows_weighted : *kernels_.prepare_rows);
    run_experts_forward(ForwardRows{a.num_rows, offsets, row_token, a.xs, w_s, L.gate_up.in<char>(a.saved),
                                    L.aw.in<char>(a.workspace), a.ys, a.stream},
                        w);
    if (has_bias(d))
        add_row_bias(ctx_, AddRowBiasArgs{a.ys, w.b_down, w_s, offsets, d.num_experts, a.num_rows,
                                          d.hidden_size, a.stream},
                     *kernels_.add_row_bias);
    // Rows no expert owns (past offsets[E]) get zeros, not whatever ys held.
    zero_unassigned_rows(ctx_,
                         ZeroUnassignedRowsArgs{a.ys, nullptr, offsets, d.num_experts, a.num_rows,
                                                d.hidden_size * static_cast<std::int64_t>(dtype_size(d.dtype)), a.stream},
                         *kernels_.zero_unassigned_rows);
}

void Plan::experts_backward(const ExpertsBackwardArgs &a) {
    refuse_fp8_experts(desc_, "moejit_plan_experts_backward");
    const PlanDesc &d = desc_;
    const ExpertsLayout L(d, a.num_rows, gemm_specs_.gathered, "args->num_rows");
    const bool R0 = a.num_rows > 0;
    const ExpertWeights &w = a.weights;
    const ExpertGrads &g = a.grads;
    require_tensor(a.xs, "args->xs", R0);
    require_tensor(a.dys, "args->dys", R0);
    require_expert_offsets(a.expert_offsets);
    require_row_weights(a.row_weights, "args->row_weights");
    require_row_weights(a.d_row_weights, "args->d_row_weights");
    MOEJIT_REQUIRE((a.d_row_weights != nullptr) == (a.row_weights != nullptr) || !R0,
                   "args->d_row_weights is {} but args->row_weights is {}: the row-weight gradient is given exactly "
                   "when the forward had row weights",
                   a.d_row_weights ? "set" : "NULL", a.row_weights ? "set" : "NULL");
    require_weights(d, w, R0);
    require_tensor(a.dxs, "args->dxs", R0);
    require_grads(d, g);
    require_experts_buffers(L, a);
    ctx_.require_device("moejit_plan_experts_backward");

    // The row weights' gradient goes straight to the caller's fp32 buffer.
    float *d_w_s = a.d_row_weights ? a.d_row_weights : L.d_w_s.in<float>(a.workspace);
    // Every kernel below reads the offsets as bounded on the device, never the caller's (R = 0
    // too: the weight-gradient GEMMs still run over every expert).
    const std::int32_t *offsets =
        checked_offsets(a.expert_offsets, a.num_rows, L.offsets.in<std::int32_t>(a.workspace), a.stream);
    run_experts_backward(BackwardRows{a.num_rows, a.num_rows, offsets, a.xs, a.dys, L.w_s.in<float>(a.saved),
                                      L.gate_up.in<char>(a.saved), L.daw.in<char>(a.workspace), L.d_gate_up.in<char>(a.workspace), d_w_s, a.dxs,
                                      L.wgrad_split.in<char>(a.workspace), L.wgrad_split.bytes,
                                      L.bias_partial.in<char>(a.workspace), L.bias_partial.bytes, a.stream, {}},
                         w, g);
    // Rows no expert owns (past offsets[E]): zero input gradient and row-weight gradient.
    zero_unassigned_rows(ctx_,
                         ZeroUnassignedRowsArgs{a.dxs, a.d_row_weights, offsets, d.num_experts, a.num_rows,
                                                d.hidden_size * static_cast<std::int64_t>(dtype_size(d.dtype)), a.stream},
                         *kernels_.zero_unassigned_rows);
}

const std::int32_t *Plan::checked_offsets(const std::int32_t *offsets, std::int64_t rows, std::int32_t *checked,
                                          void *stream) {
    check_offsets(ctx_, CheckOffsetsArgs{offsets, checked, ctx_.device_errors(), desc_.num_experts, rows, stream},
                  *kernels_.check_offsets);
    return checked;
}

}  // namespace moejit
