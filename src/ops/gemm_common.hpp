// What both grouped-GEMM engines share: the translation unit a specialization renders to, the
// kernel names (the same for both engines: the tile's text tells them apart), the persistent
// launch shape, the alignment test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/context.hpp"
#include "dispatch/tile_config.hpp"
#include "jit/kernel_source.hpp"
#include "ops/group_gemm.hpp"

namespace moejit {

struct GemmUnit {
    const char *kind = "nk";           // "nk" or "mn": the entry is moejit_group_gemm_<kind><suffix>
    const char *entry_suffix = "";     // "" (mma.sync) or "_sm90"
    const char *title = "";            // appended to the "same_<kind>" comment line
    const char *template_name = "";    // the engine's template
    std::string name;                  // gemm_kernel_name(spec)
    std::string cfg;                   // the engine's Config<...> type
    int threads = 0;
    int min_blocks = 1;                // __launch_bounds__ minimum blocks per SM
    std::string operands;              // the engine's leading parameters, through "int rows, "
    std::string params;                // the kind's extra parameters
    std::string call;                  // the templated device function it forwards to
};
// The engine-independent fields of a unit (kind, name, threads, params, call); the engine adds
// its template, config, operands and occupancy.
GemmUnit gemm_unit(const char *kind, std::string name, const GemmTileConfig &tile, std::string params,
                   std::string call);
KernelSource render_gemm_unit(const GemmUnit &unit);

std::string gemm_kernel_name(const GemmNkSpec &spec);
std::string gemm_kernel_name(const GemmMnSpec &spec);

inline const char *bool_text(bool b) { return b ? "true" : "false"; }

inline bool aligned(const void *p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// One CTA per tile up to blocks_per_sm x SMs (the wgmma engine: one per SM), the config's
// threads and dynamic shared memory.
LaunchShape gemm_launch_shape(const Context &ctx, const GemmTileConfig &tile, GemmKind kind, std::int64_t tiles,
                              std::int32_t num_experts);

}  // namespace moejit
