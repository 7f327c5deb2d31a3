// The FP8 weight gradient's launchers: the column quantizer, the GEMM, and fp8_weight_grad,
// which runs both on a workspace the caller sized with fp8_weight_grad_workspace_bytes.
#include <algorithm>

#include "fp8/fp8.hpp"
#include "fp8/fp8_launch_common.hpp"
#include "gemm/gemm_common.hpp"
#include "gemm/group_gemm_sm90.hpp"
#include "gemm/tile_schedule.hpp"
#include "runtime/driver.hpp"

namespace moejit {
namespace {

std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

// The workspace: qa [m, P] e4m3, qb [n, P] e4m3, sa [P/128, m] fp32, sb [P/128, n] fp32, each
// region 256-byte aligned.
struct WgradWorkspace {
    std::size_t qa = 0, qb = 0, sa = 0, sb = 0, bytes = 0;
    WgradWorkspace(std::int64_t padded_rows, std::int64_t m, std::int64_t n) {
        const auto p = static_cast<std::size_t>(padded_rows), mm = static_cast<std::size_t>(m),
                   nn = static_cast<std::size_t>(n), blocks = p / 128;
        qb = round_up(qa + mm * p, 256);
        sa = round_up(qb + nn * p, 256);
        sb = round_up(sa + blocks * mm * sizeof(float), 256);
        bytes = round_up(sb + blocks * nn * sizeof(float), 256);
    }
};

}  // namespace

std::size_t fp8_weight_grad_workspace_bytes(std::int64_t rows, std::int32_t num_experts, std::int64_t m,
                                            std::int64_t n) {
    if (rows <= 0 || num_experts <= 0 || m <= 0 || n <= 0) return 0;
    return WgradWorkspace(fp8_wgrad_padded_rows(rows, num_experts), m, n).bytes;
}

void fp8_quantize_cols(Context &ctx, const Fp8QuantColsSpec &spec, const Fp8QuantColsOperands &ops) {
    require_implementable(ctx, spec, ops);
    ctx.require_device("fp8_quantize_cols");
    if (ops.rows == 0) return;
    const Kernel &kernel = ctx.kernel(render_fp8_quant_cols(spec));
    // Work items: every padded block the bound allows x 64-column tiles; the kernel skips the
    // blocks past the routing's own count.
    const std::int64_t items = ops.padded_rows / 128 * (spec.c / 64);
    LaunchShape shape;
    shape.grid_x = fp8_grid_for(ctx, items, 8);
    shape.block_x = 256;
    shape.shared_bytes = static_cast<std::uint32_t>((ops.num_experts + 1) * sizeof(int));  // cum[E+1]
    ctx.launch(kernel, shape, ops.stream,
               kargs::Fp8QuantColsArgs{ops.x, ops.offsets, ops.q, ops.scales, static_cast<int>(ops.rows),
                                       ops.num_experts, static_cast<int>(ops.padded_rows / 128), ops.row_token,
                                       static_cast<int>(ops.tokens)});
}

void fp8_wgrad_gemm(Context &ctx, const Fp8WgradSpec &requested, const Fp8WgradGemmOperands &ops) {
    require_implementable(ctx, requested, ops);
    ctx.require_device("fp8_wgrad_gemm");
    // TMA stores need a 16-byte aligned dW; otherwise the register epilogue (another kernel).
    Fp8WgradSpec spec = requested;
    spec.tma_store = spec.tma_store && aligned(ops.c, 16);
    const Kernel &kernel = ctx.kernel(render_fp8_wgrad_gemm(spec));
    // e4m3 bytes, the padded rows innermost: qa [m, P] and qb [n, P] in 128 x 128 boxes; dW
    // [E, m, n] bf16 in 64 x 64 boxes.
    const kargs::TmaDesc tma_a =
        encode_tma_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ops.a, {ops.padded_rows, spec.m}, {128, 128});
    const kargs::TmaDesc tma_b =
        encode_tma_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ops.b, {ops.padded_rows, spec.n}, {128, 128});
    const kargs::TmaDesc tma_c =
        spec.tma_store ? encode_tma_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ops.c,
                                        {spec.n, spec.m, std::int64_t{ops.num_experts}}, {64, 64, 1})
                       : tma_b;  // unused by the register epilogue
    const std::int64_t tiles = mn_tile_count(ops.num_experts, spec.m, 128, spec.n, 128);
    ctx.launch(kernel, fp8_gemm_launch_shape(ctx, tiles, fp8_wgrad_smem_bytes(spec, ops.num_experts)), ops.stream,
               kargs::Sm90Fp8WgradArgs{tma_a, tma_b, tma_c, ops.c, ops.a_scale, ops.b_scale, ops.offsets,
                                       static_cast<int>(ops.rows), ops.num_experts,
                                       static_cast<int>(ops.padded_rows / 128)});
}

void fp8_weight_grad(Context &ctx, const Fp8WgradArgs &args) {
    if (auto r = can_implement(ctx.arch(), args)) throw Error(r->status, r->message);
    ctx.require_device("fp8_weight_grad");
    if (args.rows == 0) {  // no rows: dW = 0 (every expert is empty), or dW += 0
        if (!args.accumulate)
            MOEJIT_CU(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(args.dw), 0,
                                      static_cast<std::size_t>(args.num_experts * args.m * args.n) *
                                          dtype_size(args.dw_dtype),
                                      static_cast<CUstream>(args.stream)));
        return;
    }
    const std::int64_t padded = fp8_wgrad_padded_rows(args.rows, args.num_experts);
    const WgradWorkspace ws(padded, args.m, args.n);
    auto *const base = static_cast<unsigned char *>(args.workspace);
    void *const qa = base + ws.qa, *const qb = base + ws.qb;
    float *const sa = reinterpret_cast<float *>(base + ws.sa), *const sb = reinterpret_cast<float *>(base + ws.sb);
    auto operand = [&](const void *x, void *q, float *scales, bool gathered) {
        return Fp8QuantColsOperands{x,      args.offsets, q, scales, args.rows, args.num_experts, padded, args.stream,
                                    gathered ? args.row_token : nullptr, gathered ? args.tokens : 0};
    };
    fp8_quantize_cols(ctx, {args.m}, operand(args.a, qa, sa, args.gather_a));
    if (!args.b_quantized) fp8_quantize_cols(ctx, {args.n}, operand(args.b, qb, sb, args.gather_b));
    const Fp8WgradSpec spec =
        make_fp8_wgrad_spec(args.m, args.n, args.dw_dtype, args.num_experts, args.accumulate, args.overlap);
    fp8_wgrad_gemm(ctx, spec,
                   {qa, sa, qb, sb, args.dw, args.offsets, args.rows, args.num_experts, padded, args.stream});
}

}  // namespace moejit
