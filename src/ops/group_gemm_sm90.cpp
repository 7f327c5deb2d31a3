#include "ops/group_gemm_sm90.hpp"

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "dispatch/tile_config.hpp"
#include "dispatch/tile_schedule.hpp"
#include "driver/driver.hpp"

namespace moejit {
namespace {

CUtensorMapDataType tma_type(moejit_dtype_t dtype) {
    return dtype == MOEJIT_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// Row-major [outer..., inner] tensor of 16-bit elements, boxes of box[] elements, 128-byte
// swizzle (the box's inner extent is exactly 128 bytes), out-of-bounds elements read as 0.
CUtensorMap encode_map(moejit_dtype_t dtype, const void *ptr, cuuint32_t rank,
                       const cuuint64_t *dims, const cuuint64_t *strides_bytes,
                       const cuuint32_t *box) {
    CUtensorMap map;
    const cuuint32_t element_strides[3] = {1, 1, 1};
    MOEJIT_CU(cuTensorMapEncodeTiled(&map, tma_type(dtype), rank, const_cast<void *>(ptr), dims,
                                     strides_bytes, box, element_strides,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

}  // namespace

KernelSource render_group_gemm_nk_sm90(const GemmNkSpec &s) {
    MOEJIT_REQUIRE(s.tile.engine == GemmEngine::wgmma, "render_group_gemm_nk_sm90: tile {} is not a wgmma config",
                   to_string(s.tile));
    KernelSource ks;
    ks.name = fmt::format("group_gemm_nk_{}_c{}_n{}_k{}_{}{}_{}", dtype_name(s.dtype), dtype_name(s.c_dtype),
                          s.n, s.k, s.b_transposed ? "bt" : "bn", s.accumulate ? "_acc" : "", to_string(s.tile));
    ks.template_name = "group_gemm_sm90.cuh";
    ks.entry = "moejit_group_gemm_nk_sm90";
    ks.source = fmt::format(
        "// moejit grouped GEMM same_nk, sm_90a wgmma/TMA: {name}\n"
        "#include \"moejit_common.cuh\"\n"
        "#include \"group_gemm_sm90.cuh\"\n"
        "\n"
        "namespace {{\n"
        "using Cfg = moejit::sm90::Config<{T}, {CT}, {bn}, {stages}, {group}>;\n"
        "}}  // namespace\n"
        "\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}, 1)\n"
        "{entry}(const __grid_constant__ moejit::sm90::TmaDesc tma_a,\n"
        "        const __grid_constant__ moejit::sm90::TmaDesc tma_b, {CT} *c,\n"
        "        const int *offsets, int rows, int num_experts, int m_tile_bound) {{\n"
        "    moejit::sm90::group_gemm_nk_sm90<Cfg, {n}, {k}, {acc}>(tma_a, tma_b, c, offsets, rows,\n"
        "                                                          num_experts, m_tile_bound);\n"
        "}}\n",
        fmt::arg("name", ks.name), fmt::arg("T", dtype_cuda_type(s.dtype)),
        fmt::arg("CT", dtype_cuda_type(s.c_dtype)), fmt::arg("bn", s.tile.block_n),
        fmt::arg("stages", s.tile.stages), fmt::arg("group", s.tile.group_m),
        fmt::arg("threads", s.tile.threads()), fmt::arg("entry", ks.entry), fmt::arg("n", s.n),
        fmt::arg("k", s.k), fmt::arg("acc", s.accumulate ? "true" : "false"));
    return ks;
}

void launch_group_gemm_nk_sm90(Context &ctx, const GemmNkSpec &spec, const GemmOperands &ops,
                               std::int64_t tiles, std::int64_t m_tile_bound) {
    if (ctx.arch() != "sm_90a")
        fail(MOEJIT_ERROR_UNSUPPORTED, "the wgmma grouped GEMM needs an sm_90a context, got {}", ctx.arch());
    Kernel &kernel = ctx.kernel(render_group_gemm_nk_sm90(spec));
    const std::uint64_t elem = 2;
    const auto bk = static_cast<cuuint32_t>(spec.tile.block_k);
    // A [S, K]: rows past S are zero-filled, so the last tile never reads out of bounds.
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(spec.k), static_cast<cuuint64_t>(ops.rows)};
    const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(spec.k) * elem};
    const cuuint32_t a_box[2] = {bk, static_cast<cuuint32_t>(spec.tile.block_m)};
    const CUtensorMap tma_a = encode_map(spec.dtype, ops.a, 2, a_dims, a_strides, a_box);
    // B [E, N, K] as 3D, so a ragged last column block is zero-filled inside each expert.
    const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(spec.k), static_cast<cuuint64_t>(spec.n),
                                  static_cast<cuuint64_t>(ops.num_experts)};
    const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(spec.k) * elem,
                                     static_cast<cuuint64_t>(spec.n * spec.k) * elem};
    const cuuint32_t b_box[3] = {bk, static_cast<cuuint32_t>(spec.tile.block_n), 1};
    const CUtensorMap tma_b = encode_map(spec.dtype, ops.b, 3, b_dims, b_strides, b_box);

    LaunchShape shape;
    shape.grid_x = persistent_ctas(tiles, ctx.sm_count());  // one CTA per SM
    shape.block_x = static_cast<std::uint32_t>(spec.tile.threads());
    shape.shared_bytes =
        static_cast<std::uint32_t>(gemm_smem_bytes(spec.tile, GemmKind::same_nk, ops.num_experts));
    void *c = ops.c;
    const std::int32_t *offsets = ops.offsets;
    const int rows = static_cast<int>(ops.rows), experts = ops.num_experts;
    const int bound = static_cast<int>(m_tile_bound);
    ctx.launch(kernel, shape, ops.stream, tma_a, tma_b, c, offsets, rows, experts, bound);
}

}  // namespace moejit
