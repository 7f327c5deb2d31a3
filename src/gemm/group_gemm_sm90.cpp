#include "gemm/group_gemm_sm90.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "gemm/tile_config.hpp"
#include "gemm/tile_schedule.hpp"
#include "runtime/driver.hpp"
#include "gemm/gemm_common.hpp"

namespace moejit {
namespace {

// The kernels' TmaDesc (templates/kernel_args.h) holds the driver's CUtensorMap byte for byte
// (copied in, so the host's alignment of either does not matter). Its own 64-byte alignment is
// what TMA needs of a descriptor in parameter space; CUDA 13's cuda.h aligns CUtensorMap to 128
// (CUDA 12's to 64), so the assertion is "at least as strict", not "equal".
static_assert(sizeof(kargs::TmaDesc) == sizeof(CUtensorMap), "kargs::TmaDesc must have CUtensorMap's size");
static_assert(alignof(kargs::TmaDesc) == 64 && alignof(CUtensorMap) % alignof(kargs::TmaDesc) == 0,
              "kargs::TmaDesc must be 64-byte aligned, and CUtensorMap at least as strictly");
static_assert(std::is_trivially_copyable_v<CUtensorMap>, "tensor maps are copied bytewise into the arguments");

constexpr cuuint32_t kChunk = 64;  // elements in one 128-byte swizzle row
constexpr int kReduceThreads = 256;

CUtensorMapDataType tma_type(DType dtype) {
    return dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// Row-major tensor of 16-bit elements (encode_tma_map's 128-byte-swizzled boxes).
kargs::TmaDesc encode_map(DType dtype, const void *ptr, std::initializer_list<std::int64_t> dims,
                       std::initializer_list<cuuint32_t> box, std::int64_t row_elems = 0) {
    return encode_tma_map(tma_type(dtype), 2, ptr, dims, box, row_elems);
}

void require_wgmma(const Context &ctx, const GemmTileConfig &tile, const char *fn) {
    MOEJIT_REQUIRE(tile.engine == GemmEngine::wgmma, "{}: tile {} is not a wgmma config", fn, to_string(tile));
    if (ctx.arch() != "sm_90a")
        fail(Status::unsupported, "the wgmma grouped GEMM needs an sm_90a context, got {}", ctx.arch());
}

// The wgmma engine's unit: sm90::Config, one CTA per SM (the tensor maps travel inside the
// argument struct, sm90/kernels.cuh).
GemmUnit wgmma_unit(const char *kind, std::string name, const GemmTileConfig &t, DType dtype, DType c_dtype,
                    std::string kind_args) {
    GemmUnit u = gemm_unit(kind, std::move(name), std::move(kind_args));
    u.title = ", sm_90a wgmma/TMA";
    u.template_name = "sm90/kernels.cuh";
    u.ns = "moejit::sm90";
    // The ping-pong and store-ring flags are rendered only when set, so other kernels keep their
    // source.
    u.cfg = fmt::format("moejit::sm90::Config<{}, {}, {}, {}, {}, {}{}>", dtype_cuda_type(dtype),
                        dtype_cuda_type(c_dtype), t.block_n, t.stages, t.group_m, bool_text(t.tma_store),
                        t.store_ring                ? fmt::format(", {}, true", t.pingpong)
                        : t.pingpong == 1 ? std::string(", true")
                        : t.pingpong == 2 ? std::string(", 2")
                                          : std::string());
    u.bounds = std::to_string(t.threads());
    return u;
}

// The epilogue policy type of group_gemm_nk_sm90 (templates/sm90/group_gemm.cuh).
std::string glu_policy(const GemmNkSpec &s) {
    if (!s.swiglu.on) return "moejit::sm90::NoGlu";
    const std::int64_t I = s.n / 2;
    return fmt::format("moejit::sm90::SwigluGlu<{}, {}, {}>", bool_text(s.swiglu.limit), s.swiglu.merged ? 2 * I : I,
                       s.swiglu.merged ? I : 0);
}

}  // namespace

// Row-major tensor, dims innermost first (dims[0] contiguous), boxes of box[] elements with
// 128-byte swizzle (box[0] * elem_bytes = 128 bytes); out-of-bounds elements read as 0.
// row_elems > 0: dims[1]'s stride in elements, when rows are wider than dims[0] (a column range
// of a wider matrix).
kargs::TmaDesc encode_tma_map(CUtensorMapDataType type, std::size_t elem_bytes, const void *ptr,
                              std::initializer_list<std::int64_t> dims, std::initializer_list<cuuint32_t> box,
                              std::int64_t row_elems) {
    cuuint64_t d[3], strides[2];
    cuuint32_t b[3];
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const auto rank = static_cast<cuuint32_t>(dims.size());
    std::uint64_t stride = elem_bytes;
    int i = 0;
    for (std::int64_t v : dims) {
        d[i] = static_cast<cuuint64_t>(v);
        if (i > 0) strides[i - 1] = stride;
        stride *= static_cast<std::uint64_t>(v);
        ++i;
    }
    if (row_elems > 0) strides[0] = static_cast<cuuint64_t>(row_elems) * elem_bytes;
    i = 0;
    for (cuuint32_t v : box) b[i++] = v;
    CUtensorMap map;
    MOEJIT_CU(cuTensorMapEncodeTiled(&map, type, rank, const_cast<void *>(ptr), d, strides, b,
                                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    kargs::TmaDesc desc;
    std::memcpy(&desc, &map, sizeof desc);
    return desc;
}

KernelSource render_group_gemm_nk_sm90(const GemmNkSpec &s) {
    MOEJIT_REQUIRE(s.tile.engine == GemmEngine::wgmma, "render_group_gemm_nk_sm90: tile {} is not a wgmma config",
                   to_string(s.tile));
    return render_gemm_unit<kargs::Sm90NkArgs>(
        wgmma_unit("nk", gemm_kernel_name(s), s.tile, s.dtype, s.c_dtype,
                   fmt::format("{}, {}, {}, {}, {}, {}, {}", s.n, s.k, s.k_split, bool_text(s.b_transposed),
                               bool_text(s.accumulate), bool_text(s.gather_a), glu_policy(s))));
}

KernelSource render_group_gemm_mn_sm90(const GemmMnSpec &s) {
    MOEJIT_REQUIRE(s.tile.engine == GemmEngine::wgmma, "render_group_gemm_mn_sm90: tile {} is not a wgmma config",
                   to_string(s.tile));
    return render_gemm_unit<kargs::Sm90MnArgs>(wgmma_unit("mn", gemm_kernel_name(s), s.tile, s.dtype, s.c_dtype,
                                                        fmt::format("{}, {}, {}", s.m, s.n, bool_text(s.accumulate))));
}

KernelSource render_split_reduce_sm90(const GemmMnSpec &s) {
    const std::string name =
        fmt::format("split_reduce_c{}_m{}_n{}{}", dtype_name(s.c_dtype), s.m, s.n, s.accumulate ? "_acc" : "");
    return instantiate_kernel<kargs::SplitReduceArgs>(
        {name, "sm90/kernels.cuh", "split same_mn reduction: " + name, "", "moejit::sm90::split_reduce_kernel",
         fmt::format("{}, {}, {}, {}, {}", kReduceThreads, dtype_cuda_type(s.c_dtype), s.m, s.n,
                     bool_text(s.accumulate))});
}

namespace {

// Whether the kernel stores the SwiGLU epilogue's aw through the store ring: the host mirror of
// templates/sm90/epilogue.cuh's aw_through_ring (a whole number of ring rounds per tile: BN 256).
bool aw_through_ring(const GemmNkSpec &s) {
    return s.swiglu.on && s.tile.tma_store && s.tile.store_ring && s.tile.block_n == 256;
}

}  // namespace

void launch_group_gemm_nk_sm90(Context &ctx, const GemmNkSpec &requested, const GemmOperands &ops,
                               std::int64_t tiles, std::int64_t m_tile_bound, const GemmKernels *bound) {
    require_wgmma(ctx, requested.tile, "launch_group_gemm_nk_sm90");
    // TMA stores need a 16-byte aligned C (and g, u, and aw where the ring stores it); otherwise
    // the register epilogue (another kernel), ring and staging both dropped: the tile's stages
    // then fit without staging (dropping the ring alone could leave a ring tile's deeper stages
    // next to the whole-tile staging, more shared memory than the SM has).
    GemmNkSpec spec = requested;
    const bool aw_by_tma = aw_through_ring(spec);
    spec.tile.tma_store = spec.tile.tma_store && aligned(ops.c, 16) &&
                          (!spec.swiglu.on || aligned(ops.glu.up, 16)) && (!aw_by_tma || aligned(ops.glu.aw, 16));
    spec.tile.store_ring = spec.tile.store_ring && spec.tile.tma_store;
    const Kernel &kernel = bound && spec.tile.tma_store == requested.tile.tma_store
                               ? *bound->main
                               : ctx.kernel(render_group_gemm_nk_sm90(spec));
    const auto bk = static_cast<cuuint32_t>(spec.tile.block_k);
    const bool gather_a = spec.gather_a;
    // B as 3D per expert, so ragged column / k blocks are zero-filled inside each expert:
    // [E, N, K] K-major boxes of BN rows, or [E, K, N] MN-major boxes of 64 columns.
    // The SwiGLU epilogue loads B in two boxes of BN/2 rows (gate, up) from [E, I, K] maps, or
    // from one [E, 2I, K] map when merged.
    const bool glu = spec.swiglu.on;
    const std::int64_t b_rows = glu && !spec.swiglu.merged ? spec.n / 2 : spec.n;
    const auto b_box = static_cast<cuuint32_t>(glu ? spec.tile.block_n / 2 : spec.tile.block_n);
    auto b_map = [&](const void *b, std::int64_t k) {
        return spec.b_transposed ? encode_map(spec.dtype, b, {k, b_rows, ops.num_experts}, {bk, b_box, 1})
                                 : encode_map(spec.dtype, b, {spec.n, k, ops.num_experts}, {kChunk, bk, 1});
    };
    // A [S, K]: rows past S are zero-filled, so the last tile never reads out of bounds.
    auto a_map = [&](const void *a, std::int64_t k) {
        return encode_map(spec.dtype, a, {k, ops.rows}, {bk, static_cast<cuuint32_t>(spec.tile.block_m)});
    };
    // Two operand pairs split K at k_split; each map covers its own pair's K.
    const std::int64_t k1 = spec.k_split > 0 ? spec.k_split : spec.k;
    const kargs::TmaDesc tma_b = b_map(ops.b, k1);
    // A gathered A has no map, nor has a missing second pair (B's stands in, never read).
    const kargs::TmaDesc tma_a = gather_a ? tma_b : a_map(ops.a, k1);
    // tma_a2: the second pair's A, or (the SwiGLU epilogue with the store ring) aw [S, I], whose
    // chunks the ring stores where the kernel's aw_through_ring holds (BN 256); unread otherwise.
    const kargs::TmaDesc tma_a2 = spec.k_split > 0 ? a_map(ops.a2, spec.k - k1)
                                  : aw_through_ring(spec)
                                      ? encode_map(spec.c_dtype, ops.glu.aw, {spec.n / 2, ops.rows}, {kChunk, kChunk})
                                      : tma_b;
    const kargs::TmaDesc tma_b2 = spec.k_split > 0              ? b_map(ops.b2, spec.k - k1)
                               : glu && !spec.swiglu.merged ? b_map(ops.b2, spec.k)
                                                            : tma_b;
    // C [S, N] in 64 x 64 boxes (the register epilogue has none: B's map stands in); with the SwiGLU epilogue g (C) and u (tma_c2), each [S, I] with
    // row stride I (split) or 2I (merged, u at column I), so ragged chunks clip at I.
    const std::int64_t I = spec.n / 2, ld = spec.swiglu.merged ? spec.n : I;
    const kargs::TmaDesc tma_c = !spec.tile.tma_store ? tma_b
                              : glu ? encode_map(spec.c_dtype, ops.c, {I, ops.rows}, {kChunk, kChunk}, ld)
                                    : encode_map(spec.c_dtype, ops.c, {spec.n, ops.rows}, {kChunk, kChunk});
    const kargs::TmaDesc tma_c2 = spec.tile.tma_store && glu
                                   ? encode_map(spec.c_dtype, ops.glu.up, {I, ops.rows}, {kChunk, kChunk}, ld)
                                   : tma_b;
    const LaunchShape shape = gemm_launch_shape(ctx, spec.tile, GemmKind::same_nk, tiles, ops.num_experts);
    ctx.launch(kernel, shape, ops.stream,
               kargs::Sm90NkArgs{tma_a, tma_b, tma_c, tma_a2, tma_b2, tma_c2, ops.c, gather_a ? ops.a : nullptr,
                               gather_a ? ops.row_token : nullptr, ops.offsets, static_cast<int>(ops.rows),
                               ops.num_experts, static_cast<int>(m_tile_bound),
                               kargs::GluArgs{ops.glu.up, ops.glu.aw, ops.glu.w_s, ops.glu.limit}});
}

void launch_group_gemm_mn_sm90(Context &ctx, const GemmMnSpec &requested, const GemmOperands &ops,
                               std::int64_t tiles, const GemmKernels *bound) {
    MOEJIT_REQUIRE(ops.split_rows <= 0 || ops.split_rows % 64 == 0,
                   "split_rows must be -1, 0 or a positive multiple of 64, got {}", ops.split_rows);
    require_wgmma(ctx, requested.tile, "launch_group_gemm_mn_sm90");
    GemmMnSpec spec = requested;
    spec.tile.tma_store = spec.tile.tma_store && aligned(ops.c, 16);
    spec.tile.store_ring = spec.tile.store_ring && spec.tile.tma_store;
    // The split reduction does not depend on tma_store: a bound one serves either variant.
    const bool variant_bound = bound && spec.tile.tma_store == requested.tile.tma_store;
    const Kernel &kernel = variant_bound ? *bound->main : ctx.kernel(render_group_gemm_mn_sm90(spec));
    const auto bk = static_cast<cuuint32_t>(spec.tile.block_k);
    // A [S, M] and B [S, N], MN-major boxes of 64 columns x BK rows (rows past S read as 0).
    // With rows == 0 nothing is read (a and b may be NULL), but a map needs a 16-byte aligned
    // address and a non-zero extent: C's address rounded down stands in, never dereferenced.
    const bool empty = ops.rows == 0;
    const void *stand_in = reinterpret_cast<const void *>(reinterpret_cast<std::uintptr_t>(ops.c) & ~std::uintptr_t{15});
    const void *a = empty ? stand_in : ops.a, *b = empty ? stand_in : ops.b;
    const std::int64_t map_rows = empty ? 1 : ops.rows;
    const kargs::TmaDesc tma_a = encode_map(spec.dtype, a, {spec.m, map_rows}, {kChunk, bk});
    const kargs::TmaDesc tma_b = encode_map(spec.dtype, b, {spec.n, map_rows}, {kChunk, bk});
    // C [E, M, N] in 64 x 64 boxes, clipped at M and N inside each expert.
    const kargs::TmaDesc tma_c = spec.tile.tma_store ? encode_map(spec.c_dtype, ops.c, {spec.n, spec.m, ops.num_experts},
                                                               {kChunk, kChunk, 1})
                                                  : tma_a;
    // The split (long reductions in segments, fp32 partials in the workspace) when the
    // workspace holds it; the tile bound then grows by one item per possible segment.
    MnSplit split;
    if (ops.split_rows > 0) {
        split.split_rows = ops.split_rows;
        split.slots = 2 * ops.rows / ops.split_rows;
    } else if (ops.split_rows < 0) {
        split = mn_split_within(ops.rows, spec.m, spec.n, ops.num_experts, ops.workspace ? ops.workspace_bytes : 0);
    }
    if (split.split_rows > 0 &&
        (ops.workspace == nullptr ||
         ops.workspace_bytes < mn_split_workspace_bytes(split, ops.num_experts, spec.m, spec.n)))
        split = MnSplit{};
    if (split.split_rows > 0)  // one more item per possible segment
        tiles += mn_tile_count(static_cast<std::int32_t>(split.slots), spec.m, spec.tile.block_m, spec.n,
                               spec.tile.block_n);
    const LaunchShape shape = gemm_launch_shape(ctx, spec.tile, GemmKind::same_mn, tiles, ops.num_experts);
    const int rows = static_cast<int>(ops.rows), experts = ops.num_experts, split_rows = split.split_rows;
    const int max_slots = static_cast<int>(split.slots);  // what the workspace was checked to hold
    auto *index = split.split_rows > 0 ? static_cast<std::int32_t *>(ops.workspace) : nullptr;
    float *partials = split.split_rows > 0 ? reinterpret_cast<float *>(static_cast<char *>(ops.workspace) +
                                                                         mn_split_partials_offset(experts))
                                           : nullptr;
    const kargs::MnSplitTarget out{ops.c, ops.offsets, rows, experts, split_rows, max_slots};
    ctx.launch(kernel, shape, ops.stream, kargs::Sm90MnArgs{tma_a, tma_b, tma_c, out, index, partials});
    if (split.split_rows == 0) return;
    const Kernel &reduce = bound && bound->reduce ? *bound->reduce : ctx.kernel(render_split_reduce_sm90(spec));
    LaunchShape rshape;
    const std::int64_t quads = (spec.m * spec.n + 3) / 4;
    // Enough blocks to fill every SM (8 x 256 threads each), at most one per 256 quads of C[e].
    rshape.grid_x = static_cast<std::uint32_t>(
        std::min<std::int64_t>((quads + kReduceThreads - 1) / kReduceThreads, std::int64_t{8} * ctx.sm_count()));
    rshape.block_x = kReduceThreads;
    ctx.launch(reduce, rshape, ops.stream, kargs::SplitReduceArgs{out, index, partials});
}

}  // namespace moejit
