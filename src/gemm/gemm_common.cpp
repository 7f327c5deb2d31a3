#include "gemm/gemm_common.hpp"

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "gemm/tile_schedule.hpp"

namespace moejit {

GemmUnit gemm_unit(const char *kind, std::string name, std::string kind_args) {
    GemmUnit u;
    u.kind = kind;
    u.name = std::move(name);
    u.kind_args = std::move(kind_args);
    return u;
}

KernelSource render_gemm_instance(const GemmUnit &u, const char *args_type, std::size_t param_bytes) {
    return render_instance({u.name, u.template_name, fmt::format("grouped GEMM same_{}{}: {}", u.kind, u.title, u.name),
                            fmt::format("using Cfg = {};\n", u.cfg),
                            fmt::format("{}::group_gemm_{}_kernel", u.ns, u.kind),
                            fmt::format("{}, Cfg, {}", u.bounds, u.kind_args)},
                           args_type, param_bytes);
}

std::string gemm_kernel_name(const GemmNkSpec &s) {
    const std::string glu = !s.swiglu.on ? "" : fmt::format("_swiglu{}{}", s.swiglu.limit ? "_l" : "", s.swiglu.merged ? "_m" : "");
    return fmt::format("group_gemm_nk_{}_c{}_n{}_k{}{}_{}{}{}{}_{}", dtype_name(s.dtype), dtype_name(s.c_dtype), s.n,
                       s.k, s.k_split > 0 ? fmt::format("_ks{}", s.k_split) : "", s.b_transposed ? "bt" : "bn",
                       s.accumulate ? "_acc" : "", s.gather_a ? "_ga" : "", glu, to_string(s.tile));
}

std::string gemm_kernel_name(const GemmMnSpec &s) {
    return fmt::format("group_gemm_mn_{}_c{}_m{}_n{}{}_{}", dtype_name(s.dtype), dtype_name(s.c_dtype), s.m, s.n,
                       s.accumulate ? "_acc" : "", to_string(s.tile));
}

LaunchShape gemm_launch_shape(const Context &ctx, const GemmTileConfig &tile, GemmKind kind, std::int64_t tiles,
                              std::int32_t num_experts) {
    LaunchShape shape;
    shape.grid_x = persistent_ctas(
        tiles, std::int64_t{blocks_per_sm(tile, kind, num_experts, ctx.compute_capability())} * ctx.sm_count());
    shape.block_x = static_cast<std::uint32_t>(tile.threads());
    shape.shared_bytes = static_cast<std::uint32_t>(gemm_smem_bytes(tile, kind, num_experts));
    return shape;
}

}  // namespace moejit
