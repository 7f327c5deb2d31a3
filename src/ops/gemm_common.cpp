#include "ops/gemm_common.hpp"

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "dispatch/tile_schedule.hpp"

namespace moejit {

GemmUnit gemm_unit(const char *kind, std::string name, const GemmTileConfig &tile, std::string params,
                   std::string call) {
    GemmUnit u;
    u.kind = kind;
    u.name = std::move(name);
    u.threads = tile.threads();
    u.params = std::move(params);
    u.call = std::move(call);
    return u;
}

KernelSource render_gemm_unit(const GemmUnit &u) {
    KernelSource ks;
    ks.name = u.name;
    ks.template_name = u.template_name;
    ks.entry = fmt::format("moejit_group_gemm_{}{}", u.kind, u.entry_suffix);
    ks.source = fmt::format(
        "// moejit grouped GEMM same_{kind}{title}: {name}\n"
        "#include \"moejit_common.cuh\"\n"
        "#include \"{template_name}\"\n"
        "\n"
        "namespace {{\n"
        "using Cfg = {cfg};\n"
        "}}  // namespace\n"
        "\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}, {min_blocks})\n"
        "{entry}({operands}{params}) {{\n"
        "    {call}\n"
        "}}\n",
        fmt::arg("kind", u.kind), fmt::arg("title", u.title), fmt::arg("name", ks.name),
        fmt::arg("template_name", u.template_name), fmt::arg("cfg", u.cfg), fmt::arg("threads", u.threads),
        fmt::arg("min_blocks", u.min_blocks), fmt::arg("entry", ks.entry), fmt::arg("operands", u.operands),
        fmt::arg("params", u.params), fmt::arg("call", u.call));
    return ks;
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
