// The grouped GEMMs of one MoE layer, named by their role (docs/DESIGN.md §2), with the operand
// shapes, B layouts and output dtypes of the plan's descriptor decided in one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/context.hpp"
#include "runtime/kernel_source.hpp"
#include "moe/plan_desc.hpp"
#include "gemm/group_gemm.hpp"

namespace moejit {

// The specs of the layer's GEMMs. B layouts: forward weights are [E,N,K] (b_transposed);
// input gradients use the same weights as [E,K,N].
// gathered: fc1 (wgmma engine) reads x's rows by row_token, so forward never scatters x; the
// backward scatters dout and x into its workspace either way (layer_specs has the rule).
// Split fc1's dgrad is one GEMM over both operand pairs (fc1_dgrad.k_split = I) where the wgmma
// engine runs it; otherwise fc1_dgrad then fc1_dgrad_acc (C += du·W_up).
// fused_swiglu: fc1 is one GEMM with the SwiGLU epilogue (fc1.swiglu), writing g, u and aw.
// gathered and fused_swiglu follow the context's configuration (Config::gather, fuse_swiglu)
// where the layer can honour it; every tile is the configuration's forced one or the heuristic's.
struct LayerSpecs {
    GemmNkSpec fc1, fc2, fc2_dgrad, fc1_dgrad, fc1_dgrad_acc;
    GemmMnSpec fc2_wgrad, fc1_wgrad;
    bool gathered = false;
    bool fused_swiglu = false;
};
LayerSpecs layer_specs(const PlanDesc &desc, const Config &config, int compute_capability);
// Whether the layer runs fc1_dgrad_acc: split fc1 whose dgrad is not one k_split GEMM.
bool runs_fc1_dgrad_acc(const PlanDesc &desc, const LayerSpecs &specs);

// The kernels of a LayerSpecs, fetched once when a plan is created, so that the layer's
// launches neither render nor look up (null: a GEMM the layout does not run).
struct LayerKernels {
    GemmKernels fc1, fc2, fc2_dgrad, fc1_dgrad, fc1_dgrad_acc, fc2_wgrad, fc1_wgrad;
};
// Each GEMM the layer runs, with the sources of its kernels (group_gemm_kernels order) and
// where LayerKernels keeps them.
struct LayerGemmRole {
    GemmKernels LayerKernels::*kernels;
    std::vector<KernelSource> sources;
};
std::vector<LayerGemmRole> layer_gemm_roles(const PlanDesc &desc, const LayerSpecs &specs);

// Every GEMM specialization a plan of `desc` launches with `config` (pure; for warmup); the
// second form for specs already chosen (a plan's own).
std::vector<KernelSource> layer_gemm_sources(const PlanDesc &desc, const Config &config,
                                             int compute_capability);
std::vector<KernelSource> layer_gemm_sources(const PlanDesc &desc, const LayerSpecs &specs);

// Scratch the weight gradients need to split long reductions (gemm/tile_schedule.hpp,
// mn_split) for S = rows; arch-independent so the plan's size queries need no device.
// fc2_only: fc2's alone (the backward's DOWN part), else the larger of fc2's and fc1's.
std::size_t wgrad_split_workspace_bytes(const PlanDesc &desc, std::int64_t rows, bool fc2_only = false);

class LayerGemms {
public:
    // rows: S, the scattered tensors' row count — the launch bound of every GEMM.
    // split_workspace: wgrad_split_workspace_bytes of scratch for the weight gradients.
    // row_token: [S], the token of each scattered row, for the gathering specs: fc1's xs is
    // then x itself (specs.gathered), else its scatter.
    // kernels: the specs' kernels (LayerKernels), or null to look them up per launch.
    LayerGemms(Context &ctx, const PlanDesc &desc, const LayerSpecs &specs, const LayerKernels *kernels,
               std::int64_t rows, const std::int32_t *offsets, const std::int32_t *row_token, void *stream,
               void *split_workspace = nullptr, std::size_t split_workspace_bytes = 0);

    // forward
    // fc1 with SwiGLU (specs.fused_swiglu): split: w_gate, w_up → gate, up [S,I]; merged:
    // w_gate_up (w_up null) → gate = gate_up [S,2I], up = gate_up + I. aw = silu(g')·u'·w_s.
    void fc1_swiglu(const void *xs, const void *w_gate, const void *w_up, void *gate, void *up, void *aw,
                    const float *w_s);
    void fc1_split(const void *xs, const void *w, void *out);         // [S,H]·[E,I,H]ᵀ → [S,I]
    void fc1_merged(const void *xs, const void *w_gate_up, void *gu); // → [S,2I]
    void fc2(const void *aw, const void *w_down, void *y);            // [S,I]·[E,H,I]ᵀ → [S,H]
    // backward
    void fc2_dgrad(const void *dy, const void *w_down, void *daw);    // [S,H]·[E,H,I] → [S,I]
    void fc2_wgrad(const void *dy, const void *aw, void *dw_down);    // dyᵀ·aw → [E,H,I]
    void fc1_dgrad_split(const void *dg, const void *w_gate, const void *du, const void *w_up,
                         void *dxs);                                  // dg·Wg + du·Wu → [S,H]
    void fc1_dgrad_merged(const void *dgu, const void *w_gate_up, void *dxs);
    void fc1_wgrad_split(const void *d, const void *xs, void *dw);    // dᵀ·xs → [E,I,H]
    void fc1_wgrad_merged(const void *dgu, const void *xs, void *dw); // → [E,2I,H]

private:
    GemmOperands operands(const void *a, const void *b, void *c) const;  // the layer's rows, offsets, stream
    const GemmKernels *bound(GemmKernels LayerKernels::*role) const {
        return kernels_ && (kernels_->*role).main ? &(kernels_->*role) : nullptr;
    }
    void nk(const GemmNkSpec &spec, GemmKernels LayerKernels::*role, const void *a, const void *b, void *c,
            const void *a2 = nullptr, const void *b2 = nullptr);
    void mn(const GemmMnSpec &spec, GemmKernels LayerKernels::*role, const void *a, const void *b, void *c);

    Context &ctx_;
    const PlanDesc &desc_;
    const LayerSpecs &specs_;
    const LayerKernels *kernels_;
    std::int64_t rows_;
    const std::int32_t *offsets_;
    const std::int32_t *row_token_;
    void *stream_;
    void *split_workspace_;
    std::size_t split_workspace_bytes_;
};

}  // namespace moejit
