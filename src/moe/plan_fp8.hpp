// The layer's FP8 block-scaled recipe (issue 31; PlanDesc::recipe == Recipe::fp8_block): what it
// accepts, where it keeps its tensors, and the kernels it runs. The calls themselves are Plan's
// (moe/plan_fp8.cpp), so the routing, scatter, gather and SwiGLU kernels are the bf16 plan's.
//
// Forward (S = T·k scattered rows; every GEMM's launch bound from S):
//   routing index, w_s scatter (bf16 plan's kernels);
//   xq = e4m3 1x128 tiles of x, quantized once per token and written to its k scattered rows;
//   W_gate_up (split: W_gate, W_up) and W_down quantized per 128x128 block (on every call, or
//   once into the caller's weight cache: moe/fp8_weights.hpp);
//   gate_up = FP8 GEMM(xq, W1q) in bf16; one pass over it (fp8_swiglu_quantize) keeps it as
//   e4m3 1x128 tiles + scales in saved and makes awq = e4m3 1x128 tiles of SwiGLU(g, u)·w_s
//   (rounded to bf16 first: the bytes of the SwiGLU kernel's aw quantized);
//   y = FP8 GEMM(awq, W2q) -> weighted gather.
// Backward:
//   dyq = dout's 1x128 tiles, quantized once per token into its scattered rows (no bf16 copy);
//   daw = FP8 GEMM(dyq, W_downᵀ quantized per block, or the cache's);
//   one pass (fp8_swiglu_backward_quantize) over the saved g, u (dequantized to bf16) and daw:
//   the SwiGLU backward's d_gate_up (bf16) and its 1x128 tiles dguq, d_w_s, aw recomputed;
//   weight gradients through fp8_weight_grad (Plan::fp8_weight_grads: both operands e4m3 per
//   128 rows x 1 column, the expert's rows padded to 128-row blocks, dout's and x's rows read
//   through row_token by the column quantizer; dW in weight_grad_dtype);
//   dxs = FP8 GEMM(d_gate_up quantized 1x128 over [S, 2I], W_gate_upᵀ per block) -> gather.
// Saved between the calls: offsets, scatter_index, w_s, row_token and gate_up as e4m3 + fp32
// scales: 2·I + I/16 bytes per row instead of the bf16 plan's 4·I.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fp8/fp8.hpp"
#include "fp8/fp8_layer_quant.hpp"
#include "moe/fp8_weights.hpp"
#include "moe/plan_desc.hpp"
#include "moe/plan_layout.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

// The FP8 recipe's refusals of a descriptor (called by validate_plan_desc for that recipe):
// Status::unsupported naming the field and what is supported (dtype bf16, hidden_size and
// intermediate_size multiples of 128, no weights_transposed, no has_bias).
void validate_fp8_desc(const PlanDesc &desc);
// The FP8 kernels run on sm_90a: Status::unsupported naming `arch` otherwise (never a bf16
// fallback).
void require_fp8_arch(const std::string &arch);

// The layer's FP8 GEMMs (C bf16; block_n 256 where N allows it).
struct Fp8LayerSpecs {
    Fp8GemmSpec fc1;        // N = 2I merged/interleaved, I split (run for gate, then up); K = H
    Fp8GemmSpec fc2;        // N = H, K = I
    Fp8GemmSpec fc2_dgrad;  // N = I, K = H   (B = W_downᵀ)
    Fp8GemmSpec fc1_dgrad;  // N = H, K = 2I  (B = W_gate_upᵀ; split: [W_gateᵀ | W_upᵀ])
};
Fp8LayerSpecs fp8_layer_specs(const PlanDesc &desc);

// The weight gradients' GEMM with the overlapped promotion (the next k blocks' wgmmas run while the last ones
// are promoted): 1.2-1.4x the plain promotion on the four weight gradients measured on an H200
// (docs/PERF_LOG.md, "FP8 layer, first measurement"), and held to the same float64 bound by
// the GPU suite's wgrad_overlapped_promotion cases.
inline constexpr bool kFp8WgradOverlap = true;

// Every FP8 kernel of the layer (GEMMs and quantizers), for plan creation and warmup.
std::vector<KernelSource> fp8_layer_sources(const PlanDesc &desc);

// The FP8 plan's saved buffer and workspace for T tokens (validated as PlanLayout validates
// it). Regions shared by name with PlanLayout mean the same thing.
struct Fp8Layout {
    Fp8Layout(const PlanDesc &desc, std::int64_t num_tokens, const char *tokens_arg = "num_tokens");

    std::int64_t tokens = 0, rows = 0;  // T, S
    // saved
    Region offsets, scatter_index, w_s;
    Region row_token;      // [S] int32: the token of each scattered row (the weight gradients' gathers)
    Region gate_up_q;      // [S, 2I] e4m3 (split: g rows [S, I] then u rows [S, I])
    Region gate_up_scale;  // [S, 2I/128] fp32 (split: [2S, I/128])
    std::size_t saved_bytes = 0, saved_payload = 0, saved_regions = 0;
    // forward
    Region gate_up;         // [S, 2I] bf16: fc1's output
    Region counts, routing;
    Region xq, x_scale;     // [S, H] e4m3, [S, H/128]
    Region awq, aw_scale;   // [S, I] e4m3, [S, I/128]
    Region y;               // [S, H] bf16 (over gate_up, counts, routing, xq, x_scale: kFp8ForwardLives)
    // backward
    Region dxs;             // [S, H] bf16: fc1's dgrad, gathered into dx (over daw, d_gate_up, dyq, wgrad)
    Region dyq, dy_scale;   // [S, H] e4m3, [S, H/128]
    Region daw;             // [S, I] bf16: d(a·w), then a·w recomputed
    Region d_gate_up;       // [S, 2I] bf16 (split: d_gate then d_up)
    Region dguq, dgu_scale; // [S, 2I] e4m3, [S, 2I/128] (split too: d_gate | d_up per row)
    Region d_w_s;           // [S] fp32
    Region wgrad;           // fp8_weight_grad's scratch for its largest call (+ alignment slack)
    // A call with a weight cache needs the workspace up to here (moejit_plan_cached_workspace_size).
    // Regions of one call share bytes only where their lives do not meet (the tables below).
    std::size_t cached_workspace_bytes = 0;
    // Last, so that a cache can replace them: the weights as this call quantizes them without a
    // cache (forward [E, N, K], backward transposed; moe/fp8_weights.hpp).
    Fp8WeightRegions weights;
    std::size_t workspace_bytes = 0;
};

// When each workspace region of a call is alive, in the call's steps (Plan::fp8_forward and
// fp8_backward run them in this order on one stream): written at `first`, last read at `last`.
// Two regions of a call may share bytes only if their lives do not meet; the CPU tests hold
// Fp8Layout to these tables, so a step that reads a region later must move its `last` here.
struct Fp8RegionLife {
    Region Fp8Layout::*region;
    const char *name;
    int first, last;
};
// Forward: 0 routing index, 1 x's quantizing scatter, 2 fc1, 3 the fused SwiGLU quantizer,
// 4 fc2, 5 the weighted gather.
inline constexpr Fp8RegionLife kFp8ForwardLives[] = {
    {&Fp8Layout::counts, "counts", 0, 0},     {&Fp8Layout::routing, "routing", 0, 0},
    {&Fp8Layout::xq, "xq", 1, 2},             {&Fp8Layout::x_scale, "x_scale", 1, 2},
    {&Fp8Layout::gate_up, "gate_up", 2, 3},   {&Fp8Layout::awq, "awq", 3, 4},
    {&Fp8Layout::aw_scale, "aw_scale", 3, 4}, {&Fp8Layout::y, "y", 4, 5},
};
// Backward: 0 dout's quantizing scatter, 1 fc2's dgrad, 2 the fused SwiGLU backward, 3 the
// weight gradients (their column quantizers read a·w from daw and d_gate_up), 4 fc1's dgrad,
// 5 the gathers of d_w_s and dxs.
inline constexpr Fp8RegionLife kFp8BackwardLives[] = {
    {&Fp8Layout::dyq, "dyq", 0, 1},           {&Fp8Layout::dy_scale, "dy_scale", 0, 1},
    {&Fp8Layout::daw, "daw", 1, 3},           {&Fp8Layout::d_gate_up, "d_gate_up", 2, 3},
    {&Fp8Layout::dguq, "dguq", 2, 4},         {&Fp8Layout::dgu_scale, "dgu_scale", 2, 4},
    {&Fp8Layout::d_w_s, "d_w_s", 2, 5},       {&Fp8Layout::wgrad, "wgrad", 3, 3},
    {&Fp8Layout::dxs, "dxs", 4, 5},
};

}  // namespace moejit
