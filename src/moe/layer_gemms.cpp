#include "moe/layer_gemms.hpp"

#include <algorithm>
#include <utility>

#include "base/checked_math.hpp"
#include "gemm/tile_schedule.hpp"

namespace moejit {

LayerSpecs layer_specs(const PlanDesc &d, const Config &config, int cc) {
    const bool merged = d.fc1_layout != Fc1Layout::split;  // merged or interleaved: one [.,2I] fc1
    // Weights stored for x·W ([E,K,N] in the forward) flip every GEMM's B layout.
    const bool xw = d.weights_transposed != 0;
    const std::int64_t H = d.hidden_size, I = d.intermediate_size, E = d.num_experts;
    const std::int64_t fc1_n = merged ? 2 * I : I;
    // Typical scattered rows, for the tile heuristic (4096 tokens when the caller gives no hint).
    const std::int64_t rows_hint = checked_rows(d.tokens_hint > 0 ? d.tokens_hint : 4096, d.top_k, "desc->tokens_hint");
    const DType t = d.dtype, wg = d.weight_grad_dtype;
    const bool acc = d.weight_grad_accumulate != 0;
    const std::optional<ForcedTile> forced_config = forced_tile(config);
    const ForcedTile *forced = forced_config ? &*forced_config : nullptr;
    LayerSpecs s;
    s.fc1 = make_nk_spec(t, t, fc1_n, H, !xw, false, rows_hint, E, cc, forced);
    s.fc2 = make_nk_spec(t, t, H, I, !xw, false, rows_hint, E, cc, forced);
    s.fc2_dgrad = make_nk_spec(t, t, I, H, xw, false, rows_hint, E, cc, forced);
    // Split fc1: dxs = dg·W_gate + du·W_up. The wgmma engine reduces over both operand pairs in
    // one GEMM (K = 2I, k_split = I; the same fp32 sum as merged fc1's single GEMM). Elsewhere
    // dxs = dg·W_gate, then += du·W_up, rounding dxs to the layer dtype in between, so the two
    // layouts' dx may differ by rounding there (the one-GEMM form exists because the accumulating
    // second GEMM took 2-5x the first, reading C in its register epilogue; docs/PERF_LOG.md).
    s.fc1_dgrad = make_nk_spec(t, t, H, fc1_n, xw, false, rows_hint, E, cc, forced);
    s.fc1_dgrad_acc = make_nk_spec(t, t, H, fc1_n, xw, true, rows_hint, E, cc, forced);
    if (!merged && I % 64 == 0 && s.fc1_dgrad.tile.engine == GemmEngine::wgmma) {
        s.fc1_dgrad.k = 2 * I;
        s.fc1_dgrad.k_split = I;
    }
    // Weight gradients in the weights' layout: dW_down [E,H,I] = dyᵀ·aw, [E,I,H] = awᵀ·dy (x·W),
    // and likewise for fc1 (LayerGemms swaps the operands).
    s.fc2_wgrad = xw ? make_mn_spec(t, wg, I, H, acc, rows_hint, E, cc, forced)
                     : make_mn_spec(t, wg, H, I, acc, rows_hint, E, cc, forced);
    s.fc1_wgrad = xw ? make_mn_spec(t, wg, H, fc1_n, acc, rows_hint, E, cc, forced)
                     : make_mn_spec(t, wg, fc1_n, H, acc, rows_hint, E, cc, forced);
    // fc1 gathers x's rows (no forward scatter) where that wins: the saved [S,H] pass is worth
    // more than the gathering producer costs the GEMM while I is small (docs/DECISIONS.md, device
    // run 3: +4-16 % forward up to I = 2048, -4 % at I = 2880 and 14336). The context's gather
    // setting (options->gather, MOEJIT_GATHER) overrides the rule. Backward GEMMs gather
    // nothing: their gathered variants measured slower than one scatter of dout and x.
    s.gathered = config.gather.value.value_or(I <= 2048) && s.fc1.tile.engine == GemmEngine::wgmma;
    // fc1 can compute SwiGLU in its epilogue on the wgmma engine: g and u (saved for the
    // backward) and aw out of one GEMM over N = 2I, without the activation's read of [S, 2I].
    // Opt-in (options->fuse_swiglu, MOEJIT_FUSE_SWIGLU=1): it measured 1-14 % slower than the
    // two GEMMs and the standalone kernel (docs/DECISIONS.md, docs/PERF_LOG.md).
    // The epilogue computes SwiGLU over [gate | up] column blocks without biases, for weights
    // stored [E,N,K]: other activations, layouts and biases use the standalone kernel.
    const bool epilogue_fits = d.activation == Activation::swiglu && d.fc1_layout != Fc1Layout::interleaved &&
                               !xw && !d.has_bias;
    s.fused_swiglu = config.fuse_swiglu.value && epilogue_fits &&
                     s.fc1.tile.engine == GemmEngine::wgmma;
    if (s.fused_swiglu) {
        GemmNkSpec f = s.fc1;
        f.n = 2 * I;
        f.swiglu.on = true;
        f.swiglu.limit = d.swiglu_limit > 0.0f;
        f.swiglu.merged = merged;
        s.fc1 = with_chosen_tile(f, rows_hint, E, cc, forced);
    }
    s.fc1.gather_a = s.gathered;
    if (config.store_ring.value && !forced) {
        // The store ring (opt-in, MOEJIT_STORE_RING=1, until its rule is measured): a cooperative
        // TMA-store tile that gains a stage by it (BN 256) stores C in 64 x 64 chunks and takes
        // the deeper operand ring that leaves room for, where the rows per expert are enough
        // (with_store_ring).
        const auto experts = static_cast<std::int32_t>(E);
        for (GemmNkSpec *nk : {&s.fc1, &s.fc2, &s.fc2_dgrad, &s.fc1_dgrad, &s.fc1_dgrad_acc})
            *nk = with_store_ring(*nk, rows_hint, experts, cc);
        for (GemmMnSpec *mn : {&s.fc2_wgrad, &s.fc1_wgrad}) *mn = with_store_ring(*mn, rows_hint, experts, cc);
    }
    return s;
}

std::vector<KernelSource> layer_gemm_sources(const PlanDesc &d, const Config &config, int cc) {
    return layer_gemm_sources(d, layer_specs(d, config, cc));
}

bool runs_fc1_dgrad_acc(const PlanDesc &d, const LayerSpecs &s) {
    return d.fc1_layout == Fc1Layout::split && s.fc1_dgrad.k_split == 0;
}

std::vector<LayerGemmRole> layer_gemm_roles(const PlanDesc &d, const LayerSpecs &s) {
    std::vector<LayerGemmRole> roles = {
        {&LayerKernels::fc1, group_gemm_kernels(s.fc1)},
        {&LayerKernels::fc2, group_gemm_kernels(s.fc2)},
        {&LayerKernels::fc2_dgrad, group_gemm_kernels(s.fc2_dgrad)},
        {&LayerKernels::fc1_dgrad, group_gemm_kernels(s.fc1_dgrad)},
        {&LayerKernels::fc2_wgrad, group_gemm_kernels(s.fc2_wgrad)},
        {&LayerKernels::fc1_wgrad, group_gemm_kernels(s.fc1_wgrad)},
    };
    if (runs_fc1_dgrad_acc(d, s))
        roles.push_back({&LayerKernels::fc1_dgrad_acc, group_gemm_kernels(s.fc1_dgrad_acc)});
    return roles;
}

std::vector<KernelSource> layer_gemm_sources(const PlanDesc &d, const LayerSpecs &s) {
    std::vector<KernelSource> out;
    for (LayerGemmRole &role : layer_gemm_roles(d, s))
        for (KernelSource &k : role.sources) out.push_back(std::move(k));
    return out;
}

LayerGemms::LayerGemms(Context &ctx, const PlanDesc &desc, const LayerSpecs &specs,
                       const LayerKernels *kernels, std::int64_t rows, const std::int32_t *offsets,
                       const std::int32_t *row_token, void *stream, void *split_workspace,
                       std::size_t split_workspace_bytes)
    : ctx_(ctx), desc_(desc), specs_(specs), kernels_(kernels), rows_(rows), offsets_(offsets),
      row_token_(row_token), stream_(stream), split_workspace_(split_workspace),
      split_workspace_bytes_(split_workspace_bytes) {}

std::size_t wgrad_split_workspace_bytes(const PlanDesc &d, std::int64_t rows, bool fc2_only) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size;
    const std::int64_t fc1_n = d.fc1_layout != Fc1Layout::split ? 2 * I : I;
    // (M, N) of each weight gradient as layer_specs sets them.
    auto bytes = [&](std::int64_t m, std::int64_t n) {
        if (d.weights_transposed) std::swap(m, n);
        return mn_split_workspace_bytes(mn_split(rows, m, n), d.num_experts, m, n);
    };
    return fc2_only ? bytes(H, I) : std::max(bytes(H, I), bytes(fc1_n, H));
}

GemmOperands LayerGemms::operands(const void *a, const void *b, void *c) const {
    GemmOperands ops{a, b, c, offsets_, rows_, desc_.num_experts, stream_};
    ops.row_token = row_token_;  // read only by gathering specs
    return ops;
}

void LayerGemms::nk(const GemmNkSpec &spec, GemmKernels LayerKernels::*role, const void *a, const void *b, void *c,
                    const void *a2, const void *b2) {
    GemmOperands ops = operands(a, b, c);
    ops.a2 = a2;
    ops.b2 = b2;
    launch_group_gemm_nk(ctx_, spec, ops, bound(role));
}

void LayerGemms::mn(const GemmMnSpec &spec, GemmKernels LayerKernels::*role, const void *a, const void *b, void *c) {
    GemmOperands ops = operands(a, b, c);
    ops.workspace = split_workspace_;
    ops.workspace_bytes = split_workspace_bytes_;
    launch_group_gemm_mn(ctx_, spec, ops, bound(role));
}

void LayerGemms::fc1_swiglu(const void *xs, const void *w_gate, const void *w_up, void *gate, void *up, void *aw,
                            const float *w_s) {
    GemmOperands ops = operands(xs, w_gate, gate);
    ops.b2 = w_up;
    ops.glu.up = up;
    ops.glu.aw = aw;
    ops.glu.w_s = w_s;
    ops.glu.limit = desc_.swiglu_limit;
    launch_group_gemm_nk(ctx_, specs_.fc1, ops, bound(&LayerKernels::fc1));
}

void LayerGemms::fc1_split(const void *xs, const void *w, void *out) {
    nk(specs_.fc1, &LayerKernels::fc1, xs, w, out);
}
void LayerGemms::fc1_merged(const void *xs, const void *w, void *gu) {
    nk(specs_.fc1, &LayerKernels::fc1, xs, w, gu);
}
void LayerGemms::fc2(const void *aw, const void *w_down, void *y) {
    nk(specs_.fc2, &LayerKernels::fc2, aw, w_down, y);
}
void LayerGemms::fc2_dgrad(const void *dy, const void *w_down, void *daw) {
    nk(specs_.fc2_dgrad, &LayerKernels::fc2_dgrad, dy, w_down, daw);
}
// Weights stored for x·W ([E,K,N]) take their gradient transposed: the operands swap.
void LayerGemms::fc2_wgrad(const void *dy, const void *aw, void *dw_down) {
    const bool xw = desc_.weights_transposed != 0;
    mn(specs_.fc2_wgrad, &LayerKernels::fc2_wgrad, xw ? aw : dy, xw ? dy : aw, dw_down);
}
void LayerGemms::fc1_dgrad_split(const void *dg, const void *w_gate, const void *du, const void *w_up,
                                 void *dxs) {
    if (specs_.fc1_dgrad.k_split > 0) return nk(specs_.fc1_dgrad, &LayerKernels::fc1_dgrad, dg, w_gate, dxs, du, w_up);
    nk(specs_.fc1_dgrad, &LayerKernels::fc1_dgrad, dg, w_gate, dxs);
    nk(specs_.fc1_dgrad_acc, &LayerKernels::fc1_dgrad_acc, du, w_up, dxs);
}
void LayerGemms::fc1_dgrad_merged(const void *dgu, const void *w_gate_up, void *dxs) {
    nk(specs_.fc1_dgrad, &LayerKernels::fc1_dgrad, dgu, w_gate_up, dxs);
}
void LayerGemms::fc1_wgrad_split(const void *d, const void *xs, void *dw) {
    mn(specs_.fc1_wgrad, &LayerKernels::fc1_wgrad, d, xs, dw);
}
void LayerGemms::fc1_wgrad_merged(const void *dgu, const void *xs, void *dw) {
    const bool xw = desc_.weights_transposed != 0;
    mn(specs_.fc1_wgrad, &LayerKernels::fc1_wgrad, xw ? xs : dgu, xw ? dgu : xs, dw);
}

}  // namespace moejit
