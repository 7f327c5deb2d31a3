#include "ops/group_gemm_sm90.hpp"

#include <climits>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "dispatch/tile_config.hpp"
#include "dispatch/tile_schedule.hpp"
#include "driver/driver.hpp"

namespace moejit {
namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;  // as the mma.sync kernels
constexpr int kMaxStages = 6;
constexpr std::size_t kSm90SmemPerBlock = 227 * 1024;

void check_shape(const GemmNkSm90Spec &s, const char *prefix) {
    MOEJIT_REQUIRE(is_half_precision(s.dtype),
                   "{}dtype must be MOEJIT_DTYPE_BF16 or MOEJIT_DTYPE_FP16, got {} ({})", prefix,
                   static_cast<int>(s.dtype), dtype_name(s.dtype));
    MOEJIT_REQUIRE(s.c_dtype == s.dtype || s.c_dtype == MOEJIT_DTYPE_FP32,
                   "{}c_dtype must be the operand dtype ({}) or MOEJIT_DTYPE_FP32, got {} ({})",
                   prefix, dtype_name(s.dtype), static_cast<int>(s.c_dtype), dtype_name(s.c_dtype));
    for (auto [v, name] : {std::pair{s.n, "n"}, std::pair{s.k, "k"}}) {
        MOEJIT_REQUIRE(v > 0 && v % 8 == 0,
                       "{}{} must be a positive multiple of 8 (16-byte rows), got {}", prefix,
                       name, v);
        if (v > kMaxDim)
            fail(MOEJIT_ERROR_UNSUPPORTED, "{}{} = {} exceeds the supported maximum of {}",
                 prefix, name, v, kMaxDim);
    }
}

void check_tiling(const GemmNkSm90Spec &s, std::int32_t num_experts, const char *prefix) {
    if (s.block_n != 64 && s.block_n != 128 && s.block_n != 256)
        fail(MOEJIT_ERROR_UNSUPPORTED, "{}block_n must be 64, 128 or 256 for the sm_90a kernel, got {}",
             prefix, s.block_n);
    if (s.stages < 2 || s.stages > 8)
        fail(MOEJIT_ERROR_UNSUPPORTED, "{}stages must be in [2, 8], got {}", prefix, s.stages);
    if (s.group_m < 1 || s.group_m > 64)
        fail(MOEJIT_ERROR_UNSUPPORTED, "{}group_m must be in [1, 64], got {}", prefix, s.group_m);
    MOEJIT_REQUIRE(num_experts >= 1, "{}num_experts must be >= 1, got {}", prefix, num_experts);
    const std::size_t smem = sm90_smem_bytes(s, num_experts);
    if (smem > kSm90SmemPerBlock)
        fail(MOEJIT_ERROR_UNSUPPORTED,
             "{}block_n = {}, stages = {} with num_experts = {} need {} bytes of shared memory, "
             "sm_90 allows {} per block",
             prefix, s.block_n, s.stages, num_experts, smem, kSm90SmemPerBlock);
}

bool aligned(const void *p, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

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

std::size_t sm90_smem_bytes(const GemmNkSm90Spec &s, std::int32_t num_experts) {
    const std::size_t stage = static_cast<std::size_t>(kSm90BlockM + s.block_n) * kSm90BlockK * 2;
    const std::size_t stages = static_cast<std::size_t>(s.stages < 0 ? 0 : s.stages);
    const std::size_t experts = static_cast<std::size_t>(num_experts < 0 ? 0 : num_experts);
    // 1024 alignment slack (128B-swizzled TMA/wgmma tiles), stages, 2 barriers x 8 B per stage,
    // 16 ints of scan scratch, cum[E+1].
    return 1024 + stages * stage + stages * 16 + 16 * 4 + (experts + 1) * 4;
}

GemmNkSm90Spec make_nk_sm90_spec(moejit_dtype_t dtype, moejit_dtype_t c_dtype, std::int64_t n,
                                 std::int64_t k, bool accumulate, std::int32_t num_experts) {
    GemmNkSm90Spec s;
    s.dtype = dtype;
    s.c_dtype = c_dtype;
    s.n = n;
    s.k = k;
    s.accumulate = accumulate;
    s.block_n = n <= 64 ? 64 : 128;
    s.stages = 2;
    for (int st = kMaxStages; st > 2; --st) {
        s.stages = st;
        if (sm90_smem_bytes(s, num_experts) <= kSm90SmemPerBlock) break;
        s.stages = 2;
    }
    return s;
}

void validate_nk_sm90_spec(const GemmNkSm90Spec &spec, std::int32_t num_experts) {
    check_shape(spec, "");
    check_tiling(spec, num_experts, "");
}

KernelSource render_group_gemm_nk_sm90(const GemmNkSm90Spec &s) {
    check_shape(s, "");
    check_tiling(s, 1, "");
    KernelSource ks;
    ks.name = fmt::format("group_gemm_nk_sm90_{}_c{}_n{}_k{}_bt{}_bn{}_s{}_g{}", dtype_name(s.dtype),
                          dtype_name(s.c_dtype), s.n, s.k, s.accumulate ? "_acc" : "", s.block_n,
                          s.stages, s.group_m);
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
        fmt::arg("CT", dtype_cuda_type(s.c_dtype)), fmt::arg("bn", s.block_n),
        fmt::arg("stages", s.stages), fmt::arg("group", s.group_m),
        fmt::arg("threads", kSm90Threads), fmt::arg("entry", ks.entry), fmt::arg("n", s.n),
        fmt::arg("k", s.k), fmt::arg("acc", s.accumulate ? "true" : "false"));
    return ks;
}

void launch_group_gemm_nk_sm90(Context &ctx, const GemmNkSm90Spec &spec, const GemmOperands &ops) {
    constexpr const char *what = "launch_group_gemm_nk_sm90";
    check_shape(spec, "");
    MOEJIT_REQUIRE(ops.rows >= 0 && ops.rows <= INT32_MAX,
                   "rows must be in [0, 2147483647] (offsets are int32), got {}", ops.rows);
    MOEJIT_REQUIRE(ops.num_experts >= 1, "num_experts must be >= 1, got {}", ops.num_experts);
    check_tiling(spec, ops.num_experts, "");
    if (ctx.compute_capability() != 90 || ctx.arch() != "sm_90a")
        fail(MOEJIT_ERROR_UNSUPPORTED, "{} needs an sm_90a context (wgmma, setmaxnreg), got {}",
             what, ctx.arch());
    if (ops.rows > 0) {
        MOEJIT_REQUIRE(ops.a != nullptr, "a is NULL (rows = {})", ops.rows);
        MOEJIT_REQUIRE(ops.b != nullptr, "b is NULL (rows = {})", ops.rows);
        MOEJIT_REQUIRE(ops.c != nullptr, "c is NULL (rows = {})", ops.rows);
        MOEJIT_REQUIRE(ops.offsets != nullptr, "offsets is NULL (rows = {})", ops.rows);
        MOEJIT_REQUIRE(aligned(ops.a, 16), "a must be 16-byte aligned (TMA)");
        MOEJIT_REQUIRE(aligned(ops.b, 16), "b must be 16-byte aligned (TMA)");
        MOEJIT_REQUIRE(aligned(ops.c, 2 * dtype_size(spec.c_dtype)), "c must be {}-byte aligned",
                       2 * dtype_size(spec.c_dtype));
        MOEJIT_REQUIRE(aligned(ops.offsets, 4), "offsets must be 4-byte aligned");
    }
    const std::int64_t m_bound = m_tile_bound(ops.rows, ops.num_experts, kSm90BlockM);
    const std::int64_t tiles =
        nk_tile_bound(ops.rows, ops.num_experts, kSm90BlockM, spec.n, spec.block_n);
    if (tiles > INT32_MAX)
        fail(MOEJIT_ERROR_UNSUPPORTED, "{}: {} tiles exceed the 32-bit tile index", what, tiles);
    ctx.require_device(what);
    if (ops.rows == 0) return;  // nothing to write: no launch, no compile

    Kernel &kernel = ctx.kernel(render_group_gemm_nk_sm90(spec));
    const std::uint64_t elem = 2;
    const cuuint32_t bk = kSm90BlockK;
    // A [S, K]: rows past S are zero-filled, so the last tile never reads out of bounds.
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(spec.k), static_cast<cuuint64_t>(ops.rows)};
    const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(spec.k) * elem};
    const cuuint32_t a_box[2] = {bk, static_cast<cuuint32_t>(kSm90BlockM)};
    const CUtensorMap tma_a = encode_map(spec.dtype, ops.a, 2, a_dims, a_strides, a_box);
    // B [E, N, K] as 3D, so a ragged last column block is zero-filled inside each expert.
    const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(spec.k), static_cast<cuuint64_t>(spec.n),
                                  static_cast<cuuint64_t>(ops.num_experts)};
    const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(spec.k) * elem,
                                     static_cast<cuuint64_t>(spec.n * spec.k) * elem};
    const cuuint32_t b_box[3] = {bk, static_cast<cuuint32_t>(spec.block_n), 1};
    const CUtensorMap tma_b = encode_map(spec.dtype, ops.b, 3, b_dims, b_strides, b_box);

    LaunchShape shape;
    shape.grid_x = persistent_ctas(tiles, ctx.sm_count());  // one CTA per SM
    shape.block_x = kSm90Threads;
    shape.shared_bytes = static_cast<std::uint32_t>(sm90_smem_bytes(spec, ops.num_experts));
    void *c = ops.c;
    const std::int32_t *offsets = ops.offsets;
    const int rows = static_cast<int>(ops.rows), experts = ops.num_experts;
    const int bound = static_cast<int>(m_bound);
    ctx.launch(kernel, shape, ops.stream, tma_a, tma_b, c, offsets, rows, experts, bound);
}

}  // namespace moejit
