// The FP8 family's launchers: validate once (can_implement), then render, load and launch.
#include <algorithm>

#include "fp8/fp8.hpp"
#include "fp8/fp8_launch_common.hpp"
#include "gemm/gemm_common.hpp"
#include "gemm/group_gemm_sm90.hpp"
#include "gemm/tile_schedule.hpp"
#include "runtime/driver.hpp"

namespace moejit {
namespace {

constexpr int kQuantThreads = 256;

}  // namespace

void fp8_quantize_rows(Context &ctx, const Fp8QuantRowsSpec &spec, const Fp8QuantRowsOperands &ops) {
    require_implementable(ctx, spec, ops);
    ctx.require_device("fp8_quantize_rows");
    if (ops.rows == 0) return;
    const Kernel &kernel = ctx.kernel(render_fp8_quant_rows(spec));
    const std::int64_t tiles = ops.rows * ((spec.k + 127) / 128);
    LaunchShape shape;
    shape.grid_x = fp8_grid_for(ctx, fp8_row_tile_ctas(tiles), 16);
    shape.block_x = kFp8RowTileThreads;
    ctx.launch(kernel, shape, ops.stream, kargs::Fp8QuantRowsArgs{ops.x, ops.q, ops.scales, ops.rows});
}

void fp8_quantize_blocks(Context &ctx, const Fp8QuantBlocksSpec &spec, const Fp8QuantBlocksOperands &ops) {
    require_implementable(ctx, spec, ops);
    ctx.require_device("fp8_quantize_blocks");
    const Kernel &kernel = ctx.kernel(render_fp8_quant_blocks(spec));
    const std::int64_t blocks = std::int64_t{ops.num_experts} * ((spec.n + 127) / 128) * ((spec.k + 127) / 128);
    LaunchShape shape;
    shape.grid_x = fp8_grid_for(ctx, blocks, 8);
    shape.block_x = 256;
    ctx.launch(kernel, shape, ops.stream, kargs::Fp8QuantBlocksArgs{ops.w, ops.q, ops.scales, ops.num_experts});
}

void fp8_group_gemm_nk(Context &ctx, const Fp8GemmSpec &requested, const Fp8GemmOperands &ops) {
    require_implementable(ctx, requested, ops);
    ctx.require_device("fp8_group_gemm_nk");
    if (ops.rows == 0) return;
    // TMA stores need a 16-byte aligned C; otherwise the register epilogue (another kernel).
    Fp8GemmSpec spec = requested;
    spec.tma_store = spec.tma_store && aligned(ops.c, 16);
    const Kernel &kernel = ctx.kernel(render_fp8_group_gemm_nk(spec));
    constexpr int kBlockM = 128;
    // e4m3 travels as bytes: A [S, K] in 128 x 128 boxes (rows past S zero-filled), B as 3D
    // [E, N, K] in 128 x BN boxes (per expert), C [S, N] bf16 in 64 x 64 boxes.
    const auto box_k = static_cast<cuuint32_t>(128), box_m = static_cast<cuuint32_t>(kBlockM),
               box_n = static_cast<cuuint32_t>(spec.block_n);
    const kargs::TmaDesc tma_a = encode_tma_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ops.a, {spec.k, ops.rows}, {box_k, box_m});
    const kargs::TmaDesc tma_b = encode_tma_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ops.b,
                                                {spec.k, spec.n, std::int64_t{ops.num_experts}}, {box_k, box_n, 1});
    const kargs::TmaDesc tma_c = spec.tma_store ? encode_tma_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ops.c,
                                                                 {spec.n, ops.rows}, {64, 64})
                                                : tma_b;  // unused by the register epilogue
    // The launch bound from S (never from T): ceil(S / 128) + min(E, S) M-tiles.
    const std::int64_t bound = m_tile_bound(ops.rows, ops.num_experts, kBlockM);
    const std::int64_t tiles = nk_tile_bound(ops.rows, ops.num_experts, kBlockM, spec.n, spec.block_n);
    ctx.launch(kernel, fp8_gemm_launch_shape(ctx, tiles, fp8_gemm_smem_bytes(spec, ops.num_experts)), ops.stream,
               kargs::Sm90Fp8NkArgs{tma_a, tma_b, tma_c, ops.c, ops.a_scale, ops.b_scale, ops.offsets,
                                    static_cast<int>(ops.rows), ops.num_experts, static_cast<int>(bound)});
}

}  // namespace moejit
