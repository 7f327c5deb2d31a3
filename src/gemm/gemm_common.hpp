// What both grouped-GEMM engines share: the translation unit a specialization renders to, the
// kernel names (the same for both engines: the tile's text tells them apart), the persistent
// launch shape, the alignment test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/context.hpp"
#include "gemm/tile_config.hpp"
#include "runtime/kernel_source.hpp"
#include "gemm/group_gemm.hpp"

namespace moejit {

// One grouped-GEMM kernel: the instantiation
// `<engine namespace>::group_gemm_<kind>_kernel<<bounds>, Cfg, <kind_args>>` of the engine's
// typed kernel template, with `using Cfg = <cfg>;` among the constants.
struct GemmUnit {
    const char *kind = "nk";           // "nk" or "mn"
    const char *title = "";            // appended to the "same_<kind>" comment line
    const char *template_name = "";    // the engine's template
    const char *ns = "";               // the engine's namespace, e.g. "moejit::gg"
    std::string name;                  // gemm_kernel_name(spec)
    std::string cfg;                   // the engine's Config<...> type
    std::string bounds;                // the leading template arguments: __launch_bounds__'s
    std::string kind_args;             // the kind's template arguments after Cfg
};
// The engine-independent fields of a unit (kind, name, kind_args); the engine adds its
// template, namespace, config and bounds.
GemmUnit gemm_unit(const char *kind, std::string name, std::string kind_args);

KernelSource render_gemm_instance(const GemmUnit &unit, const char *args_type, std::size_t param_bytes);
template <class Args> KernelSource render_gemm_unit(const GemmUnit &unit) {
    static_assert(kernel_args_type<Args> != nullptr, "not a kernel argument struct of templates/kernel_args.h");
    return render_gemm_instance(unit, kernel_args_type<Args>, sizeof(Args));
}

std::string gemm_kernel_name(const GemmNkSpec &spec);
std::string gemm_kernel_name(const GemmMnSpec &spec);

inline const char *bool_text(bool b) { return b ? "true" : "false"; }

inline bool aligned(const void *p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// One CTA per tile up to blocks_per_sm x SMs (the wgmma engine: one per SM), the config's
// threads and dynamic shared memory.
LaunchShape gemm_launch_shape(const Context &ctx, const GemmTileConfig &tile, GemmKind kind, std::int64_t tiles,
                              std::int32_t num_experts);

}  // namespace moejit
