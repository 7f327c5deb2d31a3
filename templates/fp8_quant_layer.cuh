// The FP8 layer's own quantizer forms (moe/plan_fp8.cpp), on the rules of fp8_quant.cuh (same
// amax, scale and rounding functions, so a tile quantizes to the same bytes whichever kernel
// does it):
//   quantize_scatter_kernel  x [T, K] bf16 -> each token's 1 x 128 tiles quantized once and
//                            written to its k scattered rows (the bf16 scatter's place in the
//                            layer: x is read once, no bf16 [S, K] copy);
//   quantize_rows_ld_kernel  bf16 [rows, K] -> e4m3 rows of a wider matrix (row stride q_ld,
//                            scale row stride scale_ld): the split layout's d_gate and d_up go
//                            side by side into one [S, 2I] operand;
//   quantize_blocks_t_kernel bf16 [E, N, K] -> e4m3 [E, K, q_ld] transposed, per 128 x 128 block
//                            (the backward's B operands: W_down as [E, I, H], W_gate_up as
//                            [E, H, 2I]); bytes and scales equal the transpose of
//                            quantize_blocks_kernel's;
//   dequantize_rows_kernel   e4m3 [rows, K] + 1 x 128 scales -> bf16 (the saved gate/up).
#pragma once

#include "fp8_quant.cuh"

namespace moejit {
namespace quant {

// Two e4m3 bytes (low byte first) -> two floats, exactly (every e4m3 value is an f16).
__device__ __forceinline__ float2 e4m3x2_to_float2(unsigned short two) {
    unsigned h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(two));
    return __half22float2(*reinterpret_cast<const __half2 *>(&h2));
}

// One warp per (token, 128-column tile), each lane 4 columns; the tile's bytes and scale go to
// every scattered row s = scatter_index[t, j] in [0, rows) (others, dropped routes, are skipped
// as the bf16 scatter skips them). K % 128 == 0 (the layer's rule).
template <int THREADS, int K, int TOPK>
__global__ void __launch_bounds__(THREADS) quantize_scatter_kernel(const __grid_constant__ kargs::Fp8QuantScatterArgs args) {
    constexpr int KB = K / kTile;
    static_assert(K % kTile == 0, "K must be a multiple of 128");
    const __nv_bfloat16 *__restrict__ x = static_cast<const __nv_bfloat16 *>(args.x);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int lane = threadIdx.x & 31;
    const long long rows = args.num_tokens * TOPK;
    for_each_row_tile<THREADS, K>(
        args.num_tokens, [&](long long t, int, int col, long long, float(&v)[4]) { load_bf16x4(x + t * K + col, v); },
        [&](long long t, int kb, int col, long long, float(&v)[4]) {
            const float scale = warp_tile_scale(v);
            const unsigned word = e4m3x4(v, scale);
#pragma unroll
            for (int j = 0; j < TOPK; ++j) {
                const int s = args.scatter_index[t * TOPK + j];
                if (s < 0 || s >= rows) continue;
                *reinterpret_cast<unsigned *>(q + static_cast<long long>(s) * K + col) = word;
                if (lane == 0) args.scales[static_cast<long long>(s) * KB + kb] = scale;
            }
        });
}

// quantize_rows_kernel with the destination's row strides: row r's bytes at q + r * q_ld, its
// scales at scales + r * scale_ld. K % 128 == 0.
template <int THREADS, int K>
__global__ void __launch_bounds__(THREADS) quantize_rows_ld_kernel(const __grid_constant__ kargs::Fp8QuantRowsLdArgs args) {
    static_assert(K % kTile == 0, "K must be a multiple of 128");
    const __nv_bfloat16 *__restrict__ x = static_cast<const __nv_bfloat16 *>(args.x);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int lane = threadIdx.x & 31;
    for_each_row_tile<THREADS, K>(
        args.rows, [&](long long row, int, int col, long long, float(&v)[4]) { load_bf16x4(x + row * K + col, v); },
        [&](long long row, int kb, int col, long long, float(&v)[4]) {
            const float scale = warp_tile_scale(v);
            *reinterpret_cast<unsigned *>(q + row * args.q_ld + col) = e4m3x4(v, scale);
            if (lane == 0) args.scales[row * args.scale_ld + kb] = scale;
        });
}

// One CTA of 256 threads per 128 x 128 block of w[e] ([N, K]): read as quantize_blocks_kernel
// reads it (thread t: 8 columns at (t % 16) * 8 of rows t / 16 + 16 i), same amax and scale,
// the bytes transposed through shared memory (row stride 132: 4-byte aligned, fewer bank
// conflicts), then written as 128 rows k of 128 bytes n: q[e][k][n] at
// q + (e * K + k) * q_ld + n, the scale at scales[(e * K/128 + kb) * scale_ld + nb].
template <int N, int K>
__global__ void __launch_bounds__(256) quantize_blocks_t_kernel(const __grid_constant__ kargs::Fp8QuantBlocksTArgs args) {
    constexpr int KB = K / kTile;
    constexpr int kStride = kTile + 4;
    static_assert(N % kTile == 0 && K % kTile == 0, "N and K must be multiples of 128");
    __shared__ float warp_amax[8];
    __shared__ __align__(16) unsigned char tile[kTile * kStride];
    const __nv_bfloat16 *__restrict__ w = static_cast<const __nv_bfloat16 *>(args.w);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int tid = threadIdx.x;
    for_each_block<N, K>(args.num_experts, [&](long long e, int nb, int kb, long long) {
        const int col = (tid & 15) * 8;  // within the block
        const long long base = e * N * static_cast<long long>(K);
        float v[8][8];
        const float amax = load_block_share<N, K, false>(w + base + kb * kTile, nb * kTile, col, tid, v);
        const float scale = tile_scale(block_amax_256(amax, warp_amax, tid)), inv = __frcp_rn(scale);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int n = (tid >> 4) + 16 * i;  // within the block
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                const unsigned two =
                    e4m3x2(scaled_value(v[i][j], scale, inv), scaled_value(v[i][j + 1], scale, inv));
                tile[(col + j) * kStride + n] = static_cast<unsigned char>(two & 0xFF);
                tile[(col + j + 1) * kStride + n] = static_cast<unsigned char>(two >> 8);
            }
        }
        __syncthreads();
        // 128 rows x 32 words: thread t writes word t % 32 of rows t / 32 + 8 r.
        unsigned char *dst = q + (e * K + static_cast<long long>(kb) * kTile) * args.q_ld + nb * kTile;
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const int k = (tid >> 5) + 8 * r;
            const unsigned word = *reinterpret_cast<const unsigned *>(&tile[k * kStride + (tid & 31) * 4]);
            *reinterpret_cast<unsigned *>(dst + static_cast<long long>(k) * args.q_ld + (tid & 31) * 4) = word;
        }
        if (tid == 0) args.scales[(e * KB + kb) * args.scale_ld + nb] = scale;
        __syncthreads();  // tile and warp_amax are rewritten by the next block
    });
}

// One warp per (row, 128-column tile): x = bf16(e4m3 · scale), each lane 4 columns.
template <int THREADS, int K>
__global__ void __launch_bounds__(THREADS) dequantize_rows_kernel(const __grid_constant__ kargs::Fp8DequantRowsArgs args) {
    static_assert(K % kTile == 0, "K must be a multiple of 128");
    const unsigned char *__restrict__ q = static_cast<const unsigned char *>(args.q);
    __nv_bfloat16 *__restrict__ x = static_cast<__nv_bfloat16 *>(args.x);
    // load: the tile's e4m3 values (exact in fp32) times its scale; finish: rounded to bf16.
    for_each_row_tile<THREADS, K>(
        args.rows,
        [&](long long row, int, int col, long long w, float(&v)[4]) {
            const float scale = args.scales[w];  // [rows, KB]: index row * KB + kb = w
            const unsigned word = *reinterpret_cast<const unsigned *>(q + row * K + col);
            const float2 a = e4m3x2_to_float2(static_cast<unsigned short>(word & 0xFFFF));
            const float2 b = e4m3x2_to_float2(static_cast<unsigned short>(word >> 16));
            v[0] = a.x * scale, v[1] = a.y * scale, v[2] = b.x * scale, v[3] = b.y * scale;
        },
        [&](long long row, int, int col, long long, float(&v)[4]) {
            const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]);
            const __nv_bfloat162 hi = __floats2bfloat162_rn(v[2], v[3]);
            uint2 out;
            out.x = *reinterpret_cast<const unsigned *>(&lo);
            out.y = *reinterpret_cast<const unsigned *>(&hi);
            *reinterpret_cast<uint2 *>(x + row * K + col) = out;
        });
}

}  // namespace quant
}  // namespace moejit
