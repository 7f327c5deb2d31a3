// The FP8 recipe's quantized weights and the caller's weight cache (moe/fp8_weights.hpp).
#include "moe/fp8_weights.hpp"

#include <cstdint>

#include "base/checked_math.hpp"
#include "base/error.hpp"
#include "fp8/fp8.hpp"
#include "fp8/fp8_layer_quant.hpp"
#include "moe/plan.hpp"

namespace moejit {
namespace {

constexpr std::int64_t kTile = 128;

const char *mode_name(WeightCacheMode m) {
    switch (m) {
    case WeightCacheMode::none: return "MOEJIT_WEIGHT_CACHE_NONE";
    case WeightCacheMode::fill: return "MOEJIT_WEIGHT_CACHE_FILL";
    case WeightCacheMode::use: return "MOEJIT_WEIGHT_CACHE_USE";
    }
    return "?";
}

}  // namespace

Fp8WeightRegions take_fp8_weight_regions(const PlanDesc &d, RegionAllocator &regions) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size, E = d.num_experts;
    const char *arg = regions.arg;
    auto bytes = [arg](std::initializer_list<std::int64_t> f) { return checked_bytes(f, arg); };
    // The block grid is the same either way round, so both layouts have these sizes.
    Fp8WeightRegions r;
    r.w1_q = regions.take(bytes({E, 2, I, H}));
    r.w1_scale = regions.take(bytes({E, 2 * I / kTile, H / kTile, 4}));
    r.w2_q = regions.take(bytes({E, H, I}));
    r.w2_scale = regions.take(bytes({E, H / kTile, I / kTile, 4}));
    return r;
}

Fp8WeightCacheLayout::Fp8WeightCacheLayout(const PlanDesc &desc) {
    RegionAllocator regions{"desc"};
    forward = take_fp8_weight_regions(desc, regions);
    transposed = take_fp8_weight_regions(desc, regions);
    bytes = regions.end;
}

Fp8QuantWeights fp8_weights_in(const Fp8WeightRegions &r, void *base) {
    return Fp8QuantWeights{r.w1_q.in<char>(base), r.w1_scale.in<float>(base), r.w2_q.in<char>(base),
                           r.w2_scale.in<float>(base)};
}

WeightCacheMode check_weight_cache(const PlanDesc &d, const WeightCacheArgs &c) {
    MOEJIT_REQUIRE(c.mode >= 0 && c.mode <= 2,
                   "args->weight_cache_mode is {}, expected MOEJIT_WEIGHT_CACHE_NONE (0), MOEJIT_WEIGHT_CACHE_FILL (1) "
                   "or MOEJIT_WEIGHT_CACHE_USE (2)",
                   c.mode);
    MOEJIT_REQUIRE(c.reserved == 0, "args->reserved_0_11 is {}, expected 0", c.reserved);
    const auto mode = static_cast<WeightCacheMode>(c.mode);
    if (mode == WeightCacheMode::none) return mode;
    if (d.recipe != Recipe::fp8_block)
        fail(Status::unsupported,
             "args->weight_cache_mode is {} but desc->recipe is MOEJIT_RECIPE_BF16: the weight cache holds FP8 "
             "weights, for MOEJIT_RECIPE_FP8_BLOCK plans only (leave it at MOEJIT_WEIGHT_CACHE_NONE)",
             mode_name(mode));
    MOEJIT_REQUIRE(c.buffer != nullptr, "args->weight_cache is NULL with args->weight_cache_mode {}", mode_name(mode));
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(c.buffer) % 16 == 0,
                   "args->weight_cache ({}) is not 16-byte aligned; moejit moves rows as 16-byte vectors", c.buffer);
    const std::size_t need = Fp8WeightCacheLayout(d).bytes;
    MOEJIT_REQUIRE(c.size >= need, "args->weight_cache_size is {}, expected >= {} (moejit_plan_weight_cache_size)",
                   c.size, need);
    return mode;
}

void quantize_fp8_weights(Context &ctx, const PlanDesc &d, const ExpertWeights &w, const Fp8QuantWeights &q,
                          void *stream) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size;
    const std::int32_t E = d.num_experts;
    if (fc1_merged(d)) {
        fp8_quantize_blocks(ctx, Fp8QuantBlocksSpec{2 * I, H}, Fp8QuantBlocksOperands{w.w_gate_up, q.w1_q, q.w1_scale, E, stream});
    } else {  // gate's [E, I, H] then up's, each with its own blocks
        const std::size_t half_q = static_cast<std::size_t>(E) * I * H;
        const std::size_t half_scale = static_cast<std::size_t>(E) * (I / kTile) * (H / kTile);
        fp8_quantize_blocks(ctx, Fp8QuantBlocksSpec{I, H}, Fp8QuantBlocksOperands{w.w_gate, q.w1_q, q.w1_scale, E, stream});
        fp8_quantize_blocks(ctx, Fp8QuantBlocksSpec{I, H},
                            Fp8QuantBlocksOperands{w.w_up, q.w1_q + half_q, q.w1_scale + half_scale, E, stream});
    }
    fp8_quantize_blocks(ctx, Fp8QuantBlocksSpec{H, I}, Fp8QuantBlocksOperands{w.w_down, q.w2_q, q.w2_scale, E, stream});
}

void quantize_fp8_weights_transposed(Context &ctx, const PlanDesc &d, const ExpertWeights &w,
                                     const Fp8QuantWeights &q, void *stream) {
    const std::int64_t H = d.hidden_size, I = d.intermediate_size;
    const std::int32_t E = d.num_experts;
    // W_downᵀ [E, I, H] for fc2's dgrad.
    fp8_quantize_blocks_t(ctx, Fp8QuantBlocksTSpec{H, I}, w.w_down, E, q.w2_q, H, q.w2_scale, H / kTile, stream);
    // W_gate_upᵀ [E, H, 2I] for fc1's dgrad (split: [W_gateᵀ | W_upᵀ], side by side per row).
    if (fc1_merged(d)) {
        fp8_quantize_blocks_t(ctx, Fp8QuantBlocksTSpec{2 * I, H}, w.w_gate_up, E, q.w1_q, 2 * I, q.w1_scale,
                              2 * I / kTile, stream);
    } else {
        const Fp8QuantBlocksTSpec spec{I, H};
        fp8_quantize_blocks_t(ctx, spec, w.w_gate, E, q.w1_q, 2 * I, q.w1_scale, 2 * I / kTile, stream);
        fp8_quantize_blocks_t(ctx, spec, w.w_up, E, q.w1_q + I, 2 * I, q.w1_scale + I / kTile, 2 * I / kTile, stream);
    }
}

Fp8QuantWeights fp8_call_weights(Context &ctx, const PlanDesc &d, const ExpertWeights &w, const WeightCacheArgs &cache,
                                 WeightCacheMode mode, const Fp8WeightRegions &workspace_regions, void *workspace,
                                 bool transposed, void *stream) {
    if (mode == WeightCacheMode::none) {
        const Fp8QuantWeights q = fp8_weights_in(workspace_regions, workspace);
        if (transposed)
            quantize_fp8_weights_transposed(ctx, d, w, q, stream);
        else
            quantize_fp8_weights(ctx, d, w, q, stream);
        return q;
    }
    const Fp8WeightCacheLayout C(d);
    const Fp8QuantWeights fwd = fp8_weights_in(C.forward, cache.buffer);
    const Fp8QuantWeights bwd = fp8_weights_in(C.transposed, cache.buffer);
    if (mode == WeightCacheMode::fill) {
        quantize_fp8_weights(ctx, d, w, fwd, stream);
        quantize_fp8_weights_transposed(ctx, d, w, bwd, stream);
    }
    return transposed ? bwd : fwd;
}

}  // namespace moejit
