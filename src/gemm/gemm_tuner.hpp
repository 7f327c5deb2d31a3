// The timing half of the opt-in tile tuning (gemm/tuning.hpp): which tile a tunable
// grouped-GEMM launch uses.
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/context.hpp"
#include "gemm/tile_config.hpp"

namespace moejit {

// The stored winner for the problem if there is one; otherwise, when `may_repeat` (C is
// overwritten, not accumulated) and the stream is not being captured into a graph, runs
// `launch` for every candidate (once to compile and warm up, then timed), stores the fastest
// and returns it; otherwise `fallback`. Candidates that cannot compile or run here
// (Status::unsupported, compile, jit_disabled) are skipped; any other error propagates.
GemmTileConfig tuned_tile(Context &ctx, const GemmProblem &problem, std::int64_t rows, void *stream,
                          const GemmTileConfig &fallback, bool may_repeat,
                          const std::function<void(const GemmTileConfig &)> &launch);

}  // namespace moejit
