// What the FP8 family's launchers share (fp8/fp8_launch.cpp, fp8/fp8_wgrad.cpp): the
// validator's refusal thrown, and their launch shapes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/error.hpp"
#include "gemm/tile_schedule.hpp"
#include "runtime/context.hpp"

namespace moejit {

// can_implement's refusal (fp8/fp8.hpp), if any, as the Error the launcher throws.
template <class Spec, class Ops> void require_implementable(const Context &ctx, const Spec &spec, const Ops &ops) {
    if (auto r = can_implement(ctx.arch(), spec, &ops)) throw Error(r->status, r->message);
}

// Enough CTAs to fill every SM `per_sm` times, at most one per work item (grid-stride kernels).
inline std::uint32_t fp8_grid_for(const Context &ctx, std::int64_t items, int per_sm) {
    return static_cast<std::uint32_t>(std::min<std::int64_t>(items, std::int64_t{per_sm} * std::max(ctx.sm_count(), 1)));
}

// The warp-per-tile quantizers (1 x 128 tiles): 256 threads a CTA, kFp8RowTilesPerWarp tiles
// a warp at once (templates/fp8_quant.cuh, kRowTilesPerWarp); the CTAs that cover `tiles`.
inline constexpr int kFp8RowTileThreads = 256;
inline constexpr int kFp8RowTilesPerWarp = 4;
inline std::int64_t fp8_row_tile_ctas(std::int64_t tiles) {
    constexpr std::int64_t per_cta = kFp8RowTileThreads / 32 * kFp8RowTilesPerWarp;
    return (tiles + per_cta - 1) / per_cta;
}

// The FP8 GEMMs' persistent launch: one CTA per SM (at most one per tile), a producer and two
// consumer warpgroups, `shared_bytes` of dynamic shared memory.
inline LaunchShape fp8_gemm_launch_shape(const Context &ctx, std::int64_t tiles, std::size_t shared_bytes) {
    LaunchShape shape;
    shape.grid_x = persistent_ctas(tiles, std::max(ctx.sm_count(), 1));
    shape.block_x = 384;
    shape.shared_bytes = static_cast<std::uint32_t>(shared_bytes);
    return shape;
}

}  // namespace moejit
