// The layer's FP8 block-scaled recipe (moe/plan_fp8.hpp has the data flow).
#include "moe/plan_fp8.hpp"

#include <algorithm>
#include <cstdint>

#include "base/checked_math.hpp"
#include "base/dtype.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan.hpp"
#include "moe/plan_checks.hpp"
#include "moe/plan_swiglu.hpp"
#include "ops/routing.hpp"
#include "ops/scatter_gather.hpp"
#include "ops/swiglu.hpp"

namespace moejit {
namespace {

constexpr std::int64_t kTile = 128;

// block_n 256 where N allows it (the faster variant on an H200), else 128.
Fp8GemmSpec gemm(std::int64_t n, std::int64_t k, std::int32_t experts) {
    return make_fp8_gemm_spec(n, k, DType::bf16, experts, n % 256 == 0 ? 256 : 128);
}

// fp8_weight_grad's calls, dW[e] = A_eᵀ·B_e as [E, m, n] (the layer's [E,H,I] / [E,2I,H] /
// [E,I,H] weights; the FP8 recipe refuses transposed ones): fc2 a = dout's rows (m = H), b = aw
// (n = I); fc1 a = d_gate_up (m = 2I; split: d_gate, then d_up, m = I), b = x's rows (n = H).
// dout's and x's rows are gathered by row_token inside the column quantizer.
struct WgradShape {
    std::int64_t m, n;
};
std::vector<WgradShape> wgrad_shapes(const PlanDesc &d) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size;
    return {{H, I}, {fc1_merged(d) ? 2 * I : I, H}};
}

Fp8WgradSpec wgrad_spec(const PlanDesc &d, const WgradShape &s) {
    return make_fp8_wgrad_spec(s.m, s.n, d.weight_grad_dtype, d.num_experts, d.weight_grad_accumulate != 0,
                               kFp8WgradOverlap);
}

// The scratch of the largest call, plus slack to start it on 256 bytes (fp8_weight_grad's
// alignment; the caller's workspace need only be 16-byte aligned).
std::size_t wgrad_scratch_bytes(const PlanDesc &d, std::int64_t rows) {
    std::size_t bytes = 0;
    for (const WgradShape &s : wgrad_shapes(d))
        bytes = std::max(bytes, fp8_weight_grad_workspace_bytes(rows, d.num_experts, s.m, s.n));
    return bytes > 0 ? bytes + 256 : 0;
}

// The fused SwiGLU quantizers' spec and their runtime values for this descriptor, read once from
// the SwiGLU op's view of it (layout, activation, limit, alpha).
struct SwigluQuant {
    Fp8SwigluQuantSpec spec;
    float limit, alpha;
};
SwigluQuant swiglu_quant(const PlanDesc &d) {
    const SwigluForwardArgs act = plan_swiglu_forward_args(d, 0, nullptr, nullptr, nullptr, nullptr);
    const Fp8GateUpLayout layout = act.interleaved ? Fp8GateUpLayout::interleaved
                                   : act.merged    ? Fp8GateUpLayout::merged
                                                   : Fp8GateUpLayout::split;
    return {Fp8SwigluQuantSpec{d.intermediate_size, layout, act.activation, act.limit > 0.0f}, act.limit, act.alpha};
}


}  // namespace

void validate_fp8_desc(const PlanDesc &d) {
    if (d.dtype != DType::bf16)
        fail(Status::unsupported,
             "desc->dtype is {} with desc->recipe MOEJIT_RECIPE_FP8_BLOCK: the FP8 recipe takes bf16 x and weights "
             "(MOEJIT_DTYPE_BF16)",
             dtype_name(d.dtype));
    if (d.hidden_size % kTile != 0)
        fail(Status::unsupported,
             "desc->hidden_size is {} with desc->recipe MOEJIT_RECIPE_FP8_BLOCK: the FP8 recipe supports hidden_size "
             "and intermediate_size multiples of 128 (its 1x128 and 128x128 scale blocks)",
             d.hidden_size);
    if (d.intermediate_size % kTile != 0)
        fail(Status::unsupported,
             "desc->intermediate_size is {} with desc->recipe MOEJIT_RECIPE_FP8_BLOCK: the FP8 recipe supports "
             "hidden_size and intermediate_size multiples of 128 (its 1x128 and 128x128 scale blocks)",
             d.intermediate_size);
    if (d.weights_transposed)
        fail(Status::unsupported,
             "desc->weights_transposed is 1 with desc->recipe MOEJIT_RECIPE_FP8_BLOCK: the FP8 recipe supports "
             "[E,2I,H] / [E,H,I] weights only (not yet transposed ones)");
    if (d.has_bias)
        fail(Status::unsupported,
             "desc->has_bias is 1 with desc->recipe MOEJIT_RECIPE_FP8_BLOCK: the FP8 recipe has no expert biases yet");
}

void require_fp8_arch(const std::string &arch) {
    if (arch != "sm_90a")
        fail(Status::unsupported,
             "desc->recipe is MOEJIT_RECIPE_FP8_BLOCK, which needs an sm_90a context (Hopper); this context's arch "
             "is {} (no bf16 fallback: create the plan with MOEJIT_RECIPE_BF16 there)",
             arch);
}

Fp8LayerSpecs fp8_layer_specs(const PlanDesc &d) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size;
    const std::int32_t E = d.num_experts;
    return Fp8LayerSpecs{gemm(fc1_merged(d) ? 2 * I : I, H, E), gemm(H, I, E), gemm(I, H, E), gemm(H, 2 * I, E)};
}

std::vector<KernelSource> fp8_layer_sources(const PlanDesc &d) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size;
    const Fp8LayerSpecs g = fp8_layer_specs(d);
    std::vector<KernelSource> s;
    // forward
    s.push_back(render_fp8_quant_scatter(Fp8QuantScatterSpec{H, d.top_k}));
    s.push_back(render_fp8_quant_blocks(Fp8QuantBlocksSpec{fc1_merged(d) ? 2 * I : I, H}));
    s.push_back(render_fp8_quant_blocks(Fp8QuantBlocksSpec{H, I}));
    s.push_back(render_fp8_group_gemm_nk(g.fc1));
    s.push_back(render_fp8_swiglu_quant(swiglu_quant(d).spec));  // saved g, u and fc2's a·w
    s.push_back(render_fp8_group_gemm_nk(g.fc2));
    // backward (dout's rows: the forward's quantizing scatter, H and top_k the same)
    s.push_back(render_fp8_quant_blocks_t(Fp8QuantBlocksTSpec{H, I}));
    s.push_back(render_fp8_group_gemm_nk(g.fc2_dgrad));
    s.push_back(render_fp8_swiglu_backward_quant(swiglu_quant(d).spec));  // d_gate_up, its tiles, d_w_s, a·w
    s.push_back(render_fp8_quant_blocks_t(Fp8QuantBlocksTSpec{fc1_merged(d) ? 2 * I : I, H}));
    s.push_back(render_fp8_group_gemm_nk(g.fc1_dgrad));
    // the weight gradients: each operand's column quantizer, each GEMM
    std::vector<std::int64_t> cols;
    for (const WgradShape &w : wgrad_shapes(d))
        for (std::int64_t c : {w.m, w.n})
            if (std::find(cols.begin(), cols.end(), c) == cols.end()) cols.push_back(c);
    for (std::int64_t c : cols) s.push_back(render_fp8_quant_cols(Fp8QuantColsSpec{c}));
    for (const WgradShape &w : wgrad_shapes(d)) s.push_back(render_fp8_wgrad_gemm(wgrad_spec(d, w)));
    return s;
}

Fp8Layout::Fp8Layout(const PlanDesc &desc, std::int64_t num_tokens, const char *tokens_arg)
    : tokens(num_tokens), rows(checked_rows(num_tokens, desc.top_k, tokens_arg)) {
    const std::int64_t S = rows, H = desc.hidden_size, I = desc.intermediate_size, E = desc.num_experts;
    const char *arg = tokens_arg;
    auto bytes = [arg](std::initializer_list<std::int64_t> f) { return checked_bytes(f, arg); };

    RegionAllocator saved{arg};
    offsets = saved.take(bytes({E + 1, 4}));
    scatter_index = saved.take(bytes({S, 4}));
    w_s = saved.take(bytes({S, 4}));
    row_token = saved.take(bytes({S, 4}));
    gate_up_q = saved.take(bytes({S, 2, I}));
    gate_up_scale = saved.take(bytes({S, 2 * I / kTile, 4}));
    saved_bytes = saved.end;
    saved_payload = saved.payload;
    saved_regions = saved.regions;

    // Each call's regions share bytes where their lives (kFp8ForwardLives, kFp8BackwardLives)
    // do not meet. Forward: a·w's tiles first; from `fc1_regions` fc1's input and output (dead
    // once the fused SwiGLU quantizer has run), then y over them.
    RegionAllocator fwd{arg};
    awq = fwd.take(bytes({S, I}));
    aw_scale = fwd.take(bytes({S, I / kTile, 4}));
    const std::size_t fc1_regions = fwd.end;
    gate_up = fwd.take(bytes({S, 2, I, 2}));
    counts = fwd.take(bytes({E, 4}));
    routing = fwd.take(routing_index_workspace_size(num_tokens, desc.top_k, desc.num_experts));
    xq = fwd.take(bytes({S, H}));
    x_scale = fwd.take(bytes({S, H / kTile, 4}));
    y = fwd.take_over(fc1_regions, bytes({S, H, 2}));

    // Backward: what lives to the end first (fc1's dgrad operand, d_w_s); from
    // `dead_by_fc1_dgrad` d(a·w) and d_gate_up (read by the weight gradients), then from
    // `dead_by_wgrads` dout's tiles (dead after fc2's dgrad) with the weight gradients' scratch
    // over them; dxs (fc1's dgrad, last) over all of those.
    RegionAllocator bwd{arg};
    dguq = bwd.take(bytes({S, 2, I}));
    dgu_scale = bwd.take(bytes({S, 2 * I / kTile, 4}));
    d_w_s = bwd.take(bytes({S, 4}));
    const std::size_t dead_by_fc1_dgrad = bwd.end;
    daw = bwd.take(bytes({S, I, 2}));
    d_gate_up = bwd.take(bytes({S, 2, I, 2}));
    const std::size_t dead_by_wgrads = bwd.end;
    dyq = bwd.take(bytes({S, H}));
    dy_scale = bwd.take(bytes({S, H / kTile, 4}));
    wgrad = bwd.take_over(dead_by_wgrads, wgrad_scratch_bytes(desc, rows));
    dxs = bwd.take_over(dead_by_fc1_dgrad, bytes({S, H, 2}));
    cached_workspace_bytes = std::max(fwd.end, bwd.end);

    // The weights last (both calls: forward's layout, or backward's transposed one).
    RegionAllocator last{arg};
    last.end = cached_workspace_bytes;
    weights = take_fp8_weight_regions(desc, last);
    workspace_bytes = last.end;
}

void Plan::fp8_forward(const ForwardArgs &a) {
    const PlanDesc &d = desc_;
    const Fp8Layout L(d, a.num_tokens, "args->num_tokens");
    const bool T0 = a.num_tokens > 0;
    const ExpertWeights &w = a.weights;
    require_tensor(a.x, "args->x", T0);
    require_tensor(a.selected_experts, "args->selected_experts", T0);
    require_tensor(a.routing_weights, "args->routing_weights", T0);
    require_weights(d, w, true);  // no biases in this recipe (validate_fp8_desc)
    require_tensor(a.out, "args->out", T0);
    const WeightCacheMode cache_mode = check_weight_cache(d, a.weight_cache);
    require_layer_buffers(L, a, cache_mode != WeightCacheMode::none);
    ctx_.require_device("moejit_plan_forward");

    const std::int64_t S = L.rows, H = d.hidden_size, I = d.intermediate_size;
    const std::int32_t E = d.num_experts;
    void *stream = a.stream;
    auto *offsets = L.offsets.in<std::int32_t>(a.saved);
    auto *scatter_index = L.scatter_index.in<std::int32_t>(a.saved);
    auto *w_s = L.w_s.in<float>(a.saved);
    routing_index(ctx_, RoutingIndexArgs{d.index_dtype, a.selected_experts, a.num_tokens, d.top_k, d.num_experts,
                                         L.counts.in<std::int32_t>(a.workspace), offsets, scatter_index,
                                         L.routing.in<char>(a.workspace), L.routing.bytes, stream},
                  kernels_.routing);
    // The weights per 128x128 block: quantized into the workspace, or (FILL) into the cache, T = 0
    // included, or (USE) the cache's.
    Fp8QuantWeights wq;
    if (T0 || cache_mode == WeightCacheMode::fill)
        wq = fp8_call_weights(ctx_, d, w, a.weight_cache, cache_mode, L.weights, a.workspace, false, stream);
    if (!T0) return;  // offsets are zero, nothing else is read (out has no rows)
    // row_token is for the backward's gathered weight-gradient operands.
    scatter_weights(ctx_, WeightsScatterArgs{d.routing_dtype, a.routing_weights, scatter_index, a.num_tokens,
                                             d.top_k, w_s, L.row_token.in<std::int32_t>(a.saved), stream},
                    *kernels_.scatter_weights);
    // x's 1x128 tiles, quantized once per token, straight into the scattered rows.
    auto *xq = L.xq.in<char>(a.workspace);
    auto *x_scale = L.x_scale.in<float>(a.workspace);
    fp8_quantize_scatter(ctx_, Fp8QuantScatterSpec{H, d.top_k}, a.x, scatter_index, a.num_tokens, xq, x_scale, stream);

    // fc1 -> gate_up (bf16), kept for the backward as e4m3 tiles + scales.
    const Fp8LayerSpecs g = fp8_layer_specs(d);
    auto *gate_up = L.gate_up.in<char>(a.workspace);
    fp8_group_gemm_nk(ctx_, g.fc1, Fp8GemmOperands{xq, x_scale, wq.w1_q, wq.w1_scale, gate_up, offsets, S, E, stream});
    if (!fc1_merged(d)) {  // up's blocks follow gate's
        const std::size_t half_q = static_cast<std::size_t>(E) * I * H;
        const std::size_t half_scale = static_cast<std::size_t>(E) * (I / kTile) * (H / kTile);
        fp8_group_gemm_nk(ctx_, g.fc1,
                          Fp8GemmOperands{xq, x_scale, wq.w1_q + half_q, wq.w1_scale + half_scale, gate_up + S * I * 2,
                                          offsets, S, E, stream});
    }
    // g, u kept for the backward as e4m3 tiles + scales, and aw = SwiGLU(g, u)·w_s (bf16-rounded)
    // quantized for fc2, in one pass over gate_up.
    const SwigluQuant act = swiglu_quant(d);
    auto *awq = L.awq.in<char>(a.workspace);
    auto *aw_scale = L.aw_scale.in<float>(a.workspace);
    fp8_swiglu_quantize(ctx_, act.spec, gate_up, w_s, S, act.limit, act.alpha,
                        L.gate_up_q.in<char>(a.saved), L.gate_up_scale.in<float>(a.saved), awq, aw_scale, stream);
    void *y = L.y.in<char>(a.workspace);
    fp8_group_gemm_nk(ctx_, g.fc2, Fp8GemmOperands{awq, aw_scale, wq.w2_q, wq.w2_scale, y, offsets, S, E, stream});
    gather(ctx_,
           GatherArgs{GatherSpec{d.dtype, d.hidden_size, d.top_k, static_cast<DType>(0)}, y, scatter_index, nullptr,
                      a.num_tokens, a.out, stream},
           *kernels_.gather);
}

void Plan::fp8_backward(const BackwardArgs &a) {
    const PlanDesc &d = desc_;
    const Fp8Layout L(d, a.num_tokens, "args->num_tokens");
    const bool T0 = a.num_tokens > 0;
    const ExpertWeights &w = a.weights;
    const ExpertGrads &gr = a.grads;
    const WeightCacheMode cache_mode = check_weight_cache(d, a.weight_cache);
    // The FP8 backward writes nothing of saved (its d_gate_up is wider than the e4m3 g and u): a
    // consuming call is an ordinary one, with the same workspace.
    consumes_saved(a.consume_saved);
    require_tensor(a.x, "args->x", T0);
    require_tensor(a.dout, "args->dout", T0);
    if (T0 || cache_mode == WeightCacheMode::fill) require_weights(d, w, true);
    require_tensor(a.dx, "args->dx", T0);
    require_tensor(a.d_routing_weights, "args->d_routing_weights", T0);
    require_grads(d, gr);
    require_layer_buffers(L, a, cache_mode != WeightCacheMode::none);
    ctx_.require_device("moejit_plan_backward");

    const std::int64_t S = L.rows, H = d.hidden_size;
    const std::int32_t E = d.num_experts;
    void *stream = a.stream;
    const auto *offsets = L.offsets.in<std::int32_t>(a.saved);
    const auto *scatter_index = L.scatter_index.in<std::int32_t>(a.saved);
    const auto *w_s = L.w_s.in<float>(a.saved);
    auto *daw = L.daw.in<char>(a.workspace);
    auto *d_gate_up = L.d_gate_up.in<char>(a.workspace);
    auto *d_w_s = L.d_w_s.in<float>(a.workspace);
    const Fp8WeightGradRows wgrad_rows{S,    offsets, L.row_token.in<std::int32_t>(a.saved), a.num_tokens, a.dout,
                                       daw,  d_gate_up, a.x, L.wgrad.in<char>(a.workspace), L.wgrad.bytes, stream};
    // Wᵀ per 128x128 block for both dgrads: quantized into the workspace, or (FILL) both layouts
    // into the cache, T = 0 included, or (USE) the cache's.
    Fp8QuantWeights wt;
    if (T0 || cache_mode == WeightCacheMode::fill)
        wt = fp8_call_weights(ctx_, d, w, a.weight_cache, cache_mode, L.weights, a.workspace, true, stream);
    if (!T0) {  // no rows: only the weight gradients (zeros, or untouched when accumulating)
        fp8_weight_grads(wgrad_rows, gr);
        return;
    }
    const Fp8LayerSpecs g = fp8_layer_specs(d);

    // fc2's dgrad: daw = dyq · (W_down quantized per block, transposed to [E, I, H]); dout's
    // 1x128 tiles quantized once per token into its scattered rows (no bf16 copy of them).
    auto *dyq = L.dyq.in<char>(a.workspace);
    auto *dy_scale = L.dy_scale.in<float>(a.workspace);
    fp8_quantize_scatter(ctx_, Fp8QuantScatterSpec{H, d.top_k}, a.dout, scatter_index, a.num_tokens, dyq, dy_scale,
                         stream);
    fp8_group_gemm_nk(ctx_, g.fc2_dgrad, Fp8GemmOperands{dyq, dy_scale, wt.w2_q, wt.w2_scale, daw, offsets, S, E, stream});

    // One pass over the saved g, u and daw: d_gate_up (bf16, for fc1's weight gradient), its
    // 1x128 tiles over [S, 2I] for fc1's dgrad with W_gate_upᵀ (wt: [E, H, 2I], split
    // [W_gateᵀ | W_upᵀ]; split rows as [d_gate | d_up]), d_w_s, and a·w over daw for fc2's.
    auto *dguq = L.dguq.in<char>(a.workspace);
    auto *dgu_scale = L.dgu_scale.in<float>(a.workspace);
    const SwigluQuant act = swiglu_quant(d);
    fp8_swiglu_backward_quantize(ctx_, act.spec, L.gate_up_q.in<char>(a.saved),
                                 L.gate_up_scale.in<float>(a.saved), daw, w_s, S, act.limit, act.alpha, d_gate_up,
                                 d_w_s, dguq, dgu_scale, stream);
    // The weight gradients gather dout's and x's rows themselves.
    fp8_weight_grads(wgrad_rows, gr);
    void *dxs = L.dxs.in<char>(a.workspace);
    fp8_group_gemm_nk(ctx_, g.fc1_dgrad, Fp8GemmOperands{dguq, dgu_scale, wt.w1_q, wt.w1_scale, dxs, offsets, S, E, stream});
    gather_weights(ctx_, WeightsGatherArgs{d.routing_dtype, d_w_s, scatter_index, a.num_tokens, d.top_k,
                                           a.d_routing_weights, stream},
                   *kernels_.gather_weights);
    gather(ctx_,
           GatherArgs{GatherSpec{d.dtype, H, d.top_k, static_cast<DType>(0)}, dxs, scatter_index, nullptr, a.num_tokens,
                      a.dx, stream},
           *kernels_.gather);
}

void Plan::fp8_weight_grads(const Fp8WeightGradRows &r, const ExpertGrads &g) {
    const PlanDesc &d = desc_;
    const std::int64_t S = r.rows, H = d.hidden_size, I = d.intermediate_size;
    // The scratch from its first 256-byte boundary (Fp8Layout::wgrad has the slack).
    const auto base = reinterpret_cast<std::uintptr_t>(r.workspace);
    const std::uintptr_t start = (base + 255) / 256 * 256;
    const bool has_scratch = S > 0 && r.workspace_bytes >= start - base;
    void *scratch = has_scratch ? reinterpret_cast<void *>(start) : nullptr;
    const std::size_t scratch_bytes = has_scratch ? r.workspace_bytes - (start - base) : 0;
    // dW = Aᵀ·B per expert into the caller's gradient: written, or added to with
    // weight_grad_accumulate (as the bf16 GEMMs do); no rows: zeros, or left as they are.
    // gather: which operand is a [T, ·] tensor read through row_token; b_quantized: b's e4m3
    // form is the previous call's.
    auto wgrad = [&](const void *a, std::int64_t m, const void *b, std::int64_t n, void *dw, bool gather_a,
                     bool gather_b, bool b_quantized) {
        Fp8WgradArgs args;
        args.a = a;
        args.b = b;
        args.dw = dw;
        args.offsets = r.offsets;
        args.rows = S;
        args.num_experts = d.num_experts;
        args.m = m;
        args.n = n;
        args.dw_dtype = d.weight_grad_dtype;
        args.accumulate = d.weight_grad_accumulate != 0;
        args.overlap = kFp8WgradOverlap;
        args.workspace = scratch;
        args.workspace_bytes = scratch_bytes;
        args.stream = r.stream;
        args.row_token = r.row_token;
        args.tokens = r.tokens;
        args.gather_a = gather_a;
        args.gather_b = gather_b;
        args.b_quantized = b_quantized;
        fp8_weight_grad(ctx_, args);
    };
    wgrad(r.dout, H, r.aw, I, g.dw_down, true, false, false);  // [E,H,I] = dyᵀ·aw
    if (fc1_merged(d)) {
        wgrad(r.d_gate_up, 2 * I, r.x, H, g.dw_gate_up, false, true, false);  // [E,2I,H] (interleaved)
    } else {  // [E,I,H] twice, x's rows quantized once
        wgrad(r.d_gate_up, I, r.x, H, g.dw_gate, false, true, false);
        wgrad(r.d_gate_up + S * I * 2, I, r.x, H, g.dw_up, false, true, S > 0);
    }
}

}  // namespace moejit
