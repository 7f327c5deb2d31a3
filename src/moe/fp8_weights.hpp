// The FP8 recipe's weights, quantized per 128x128 block: where a call finds them, and who
// quantizes them. Without a weight cache each call quantizes the layout it reads into its
// workspace (forward: W as [E, N, K]; backward: Wᵀ for the input gradients). With one
// (moejit_weight_cache_mode_t, args->weight_cache) a FILL call quantizes both layouts into the
// caller's buffer and later USE calls read them from there, quantizing nothing: the weights of
// one optimizer step are read and quantized once, not once per call (issue 31). Whether the
// weights changed is the caller's to say; the library cannot see it without reading them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/plan_desc.hpp"
#include "moe/plan_layout.hpp"

namespace moejit {

class Context;
struct ExpertWeights;

// moejit_weight_cache_mode_t.
enum class WeightCacheMode : std::int32_t { none = 0, fill = 1, use = 2 };

// The weight-cache fields of moejit_forward_args_t / moejit_backward_args_t.
struct WeightCacheArgs {
    void *buffer = nullptr;  // args->weight_cache
    std::size_t size = 0;
    std::int32_t mode = 0;   // WeightCacheMode, as the caller set it (validated by the calls)
    std::int32_t reserved = 0;
};

// One layout of the quantized weights: fc1's (split: gate's then up's) and fc2's, e4m3 with
// fp32 scales per 128x128 block.
struct Fp8WeightRegions {
    Region w1_q, w1_scale;  // forward [E, 2I, H]; transposed [E, H, 2I] (split: [W_gateᵀ | W_upᵀ])
    Region w2_q, w2_scale;  // forward [E, H, I]; transposed [E, I, H]
};

// The caller's weight cache: both layouts, from offset 0 (moejit_plan_weight_cache_size).
struct Fp8WeightCacheLayout {
    explicit Fp8WeightCacheLayout(const PlanDesc &desc);
    Fp8WeightRegions forward, transposed;
    std::size_t bytes = 0;
};

// Takes one layout's regions from `regions` (the workspace's weights, or the cache's).
Fp8WeightRegions take_fp8_weight_regions(const PlanDesc &desc, RegionAllocator &regions);

// A layout's device pointers inside its buffer.
struct Fp8QuantWeights {
    char *w1_q = nullptr;
    float *w1_scale = nullptr;
    char *w2_q = nullptr;
    float *w2_scale = nullptr;
};
Fp8QuantWeights fp8_weights_in(const Fp8WeightRegions &regions, void *base);

// The call's weight-cache fields, checked before anything runs: the mode (NONE, FILL or USE),
// reserved_0_11 zero, a bf16 plan refuses FILL and USE (Status::unsupported), and with FILL or
// USE the buffer (non-NULL, 16-byte aligned) and its size. Returns the mode.
WeightCacheMode check_weight_cache(const PlanDesc &desc, const WeightCacheArgs &cache);

// Quantizes the caller's weights into one layout: forward (W per block) or transposed (Wᵀ per
// block, for the input gradients' GEMMs).
void quantize_fp8_weights(Context &ctx, const PlanDesc &desc, const ExpertWeights &w, const Fp8QuantWeights &dst,
                          void *stream);
void quantize_fp8_weights_transposed(Context &ctx, const PlanDesc &desc, const ExpertWeights &w,
                                     const Fp8QuantWeights &dst, void *stream);

// The layout a call reads (`transposed` for the backward), by the cache mode: NONE quantizes it
// into `workspace_regions` of the workspace; FILL quantizes both layouts into the cache and
// returns the one asked for; USE returns the cache's as it is.
Fp8QuantWeights fp8_call_weights(Context &ctx, const PlanDesc &desc, const ExpertWeights &w,
                                 const WeightCacheArgs &cache, WeightCacheMode mode,
                                 const Fp8WeightRegions &workspace_regions, void *workspace, bool transposed,
                                 void *stream);

}  // namespace moejit
