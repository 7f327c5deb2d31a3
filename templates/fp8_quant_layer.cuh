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
//   dequantize_rows_kernel   e4m3 [rows, K] + 1 x 128 scales -> bf16 (the saved gate/up);
//   swiglu_quantize_kernel   fc1's bf16 g, u -> the saved e4m3 g, u and fc2's e4m3 a·w in one
//                            pass (the forward's row quantizer, SwiGLU and row quantizer; a·w is
//                            rounded to bf16 first, as the SwiGLU kernel writes it, so every byte
//                            and scale equals that three-kernel path's);
//   swiglu_backward_quantize_kernel  the backward's dequantizer, SwiGLU backward and d_gate_up's
//                            row quantizer in one pass (the same bf16 d_gate_up and a·w; d_w_s
//                            summed in its own fixed order).
#pragma once

#include "fp8_quant.cuh"
#include "swiglu.cuh"

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

// (row, tile) items a warp of swiglu_quantize_kernel loads at once (the launcher sizes its grid
// with the same number). Two at 51 registers (4 CTAs an SM) keep more items in flight than one
// at 40 (6 CTAs, no spill; 32 spills).
constexpr int kSwigluQuantItemsPerWarp = 2;

// Eight bf16 (16 bytes) -> floats.
__device__ __forceinline__ void bf16x8_to_float(const uint4 raw, float v[8]) {
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&words[j]));
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
    }
}

// A half-warp's 16 lanes x 8 values as one 1 x 128 tile: each lane's 8 e4m3 bytes at q + off,
// the tile's scale (lane 0 of the half, hl == 0) at scales[off / 128].
__device__ __forceinline__ void quantize_half_warp_tile(const float v[8], unsigned char *q, float *scales,
                                                        long long off, int hl) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
    for (int d = 8; d > 0; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const float scale = tile_scale(amax);
    *reinterpret_cast<uint2 *>(q + off) = make_uint2(e4m3x4(v, scale), e4m3x4(v + 4, scale));
    if (hl == 0) scales[off / kTile] = scale;
}

// The (g, u) pair of the j-th of the 4 columns a lane computes in the fused SwiGLU quantizers
// (every lane of the warp calls it: split and merged exchange across the halves). Interleaved:
// the lane's own pairs. Split and merged: lane hl of half 0 holds g, of half 1 u, of columns
// 8 hl.. 8 hl + 7; half 0 takes columns 0-3 and half 1 columns 4-7, each getting the value it
// lacks (u for half 0, g for half 1) from its partner.
template <int LAYOUT>
__device__ __forceinline__ void column_pair(const float v[8], int j, int half, float &g, float &u) {
    if (LAYOUT == swiglu_detail::kInterleaved) {
        g = v[2 * j];
        u = v[2 * j + 1];
    } else {
        const float got = __shfl_xor_sync(0xffffffffu, half ? v[j] : v[4 + j], 16);
        g = half ? got : v[j];
        u = half ? v[4 + j] : got;
    }
}

// One warp per (row, 128-column tile t of a·w): it holds g's and u's tiles t (split and merged:
// lanes 0-15 g, 16-31 u, 8 columns each; interleaved: memory tiles 2t and 2t+1, 4 (g, u) pairs
// a lane). Each half-warp's 128 loaded elements are one saved tile (its element offset / 128 is
// the scale's index in every layout); then a·w's tile from the pairs, 4 columns a lane (split and
// merged: each half computes half of its 8 columns, after one exchange of 4 values). Two items a warp,
// loaded before either is finished. LAYOUT: swiglu_detail's kSplit, kMergedLayout, kInterleaved.
template <int THREADS, int I, int LAYOUT, int ACT, bool LIMIT>
__global__ void __launch_bounds__(THREADS) swiglu_quantize_kernel(const __grid_constant__ kargs::Fp8SwigluQuantArgs args) {
    using namespace swiglu_detail;
    static_assert(I % kTile == 0, "I must be a multiple of 128");
    constexpr int TB = I / kTile, U = kSwigluQuantItemsPerWarp;
    const __nv_bfloat16 *__restrict__ gu = static_cast<const __nv_bfloat16 *>(args.gate_up);
    unsigned char *__restrict__ sq = static_cast<unsigned char *>(args.saved_q);
    unsigned char *__restrict__ aq = static_cast<unsigned char *>(args.awq);
    const int lane = threadIdx.x & 31, half = lane >> 4, hl = lane & 15;
    const long long S = args.rows, items = S * TB;
    const long long stride = static_cast<long long>(gridDim.x) * (THREADS / 32) * U;
    // The element offset of this lane's 8 loaded values (the saved layout is gate_up's).
    auto offset = [&](long long row, int t) -> long long {
        if (LAYOUT == kSplit) return half * S * I + row * I + t * kTile + hl * 8;
        if (LAYOUT == kMergedLayout) return row * 2LL * I + half * I + t * kTile + hl * 8;
        return row * 2LL * I + t * 2LL * kTile + lane * 8;
    };
    for (long long i0 = (global_thread_id() >> 5) * U; i0 < items; i0 += stride) {
        uint4 raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long i = i0 + u, row = i / TB;
            if (i < items) raw[u] = *reinterpret_cast<const uint4 *>(gu + offset(row, static_cast<int>(i - row * TB)));
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long i = i0 + u, row = i / TB;
            if (i >= items) break;
            const int t = static_cast<int>(i - row * TB);
            const long long off = offset(row, t);
            float v[8];
            bf16x8_to_float(raw[u], v);
            quantize_half_warp_tile(v, sq, args.saved_scales, off, hl);  // the saved tile
            // a·w, rounded to bf16 as the SwiGLU kernel stores it: 4 columns a lane, the tile's
            // 128 over the whole warp. Split and merged: lane hl of half 0 holds g and of half 1
            // u of columns 8 hl.. 8 hl + 7; half 0 computes the first four, half 1 the last four,
            // each taking the partner's 4 values it lacks (one exchange of 4, not of 8).
            const float w = args.w_s[row];
            float aw[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float g, up;
                column_pair<LAYOUT>(v, j, half, g, up);
                aw[j] = __bfloat162float(__float2bfloat16_rn(activation_value<ACT, LIMIT>(g, up, args.limit, args.alpha) * w));
            }
            float a_max = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) a_max = fmaxf(a_max, fabsf(aw[j]));
            const float a_scale = tile_scale(warp_max(a_max));
            // Lane order is column order: interleaved lane l has columns 4 l..; split and merged
            // lane (half, hl) has 8 hl + 4 half.. = 4 (2 hl + half).
            const int col4 = LAYOUT == kInterleaved ? lane : 2 * hl + half;
            *reinterpret_cast<unsigned *>(aq + row * I + t * kTile + col4 * 4) = e4m3x4(aw, a_scale);
            if (lane == 0) args.aw_scales[row * TB + t] = a_scale;
        }
    }
}

// The backward's counterpart: one warp per row, its a·w tiles t = 0, 1, ... in order (d_w_s's
// sum has one fixed order: each lane's chain over the tiles, then an xor butterfly). Per tile the
// lanes hold what swiglu_quantize_kernel loads, as e4m3: each half-warp dequantizes one saved tile
// (rounded to bf16, as the dequantizer writes it); each lane puts 4 columns through
// gated_backward_value (the SwiGLU backward's own math; split and merged: the halves exchange the
// g or u they lack, then the dg or du the partner keeps), dg, du go to d_gate_up in its layout,
// each half's 128 of them quantized as one tile of dguq, and a·w over daw.
template <int THREADS, int I, int LAYOUT, int ACT, bool LIMIT>
__global__ void __launch_bounds__(THREADS, 1280 / THREADS)  // 46 registers, no spill: 5 CTAs an SM (at 6, 40 registers spilled)
    swiglu_backward_quantize_kernel(const __grid_constant__ kargs::Fp8SwigluBackwardQuantArgs args) {
    using namespace swiglu_detail;
    static_assert(I % kTile == 0, "I must be a multiple of 128");
    constexpr int TB = I / kTile;
    const unsigned char *__restrict__ sq = static_cast<const unsigned char *>(args.saved_q);
    __nv_bfloat16 *__restrict__ daw = static_cast<__nv_bfloat16 *>(args.daw);
    __nv_bfloat16 *__restrict__ dgu = static_cast<__nv_bfloat16 *>(args.d_gate_up);
    unsigned char *__restrict__ dq = static_cast<unsigned char *>(args.dguq);
    const int lane = threadIdx.x & 31, half = lane >> 4, hl = lane & 15;
    const long long S = args.rows;
    const long long row = static_cast<long long>(blockIdx.x) * (THREADS / 32) + (threadIdx.x >> 5);
    if (row >= S) return;  // whole warps
    const float w = args.w_s[row];
    float partial = 0.0f;
#pragma unroll 1
    for (int t = 0; t < TB; ++t) {
        // This lane's 8 saved elements (gate_up's layout) and where its dguq bytes go ([S, 2I]:
        // split rows as [d_gate | d_up], so merged's offsets).
        long long off, qoff;
        if (LAYOUT == kSplit) {
            off = half * S * I + row * I + t * kTile + hl * 8;
            qoff = row * 2LL * I + half * I + t * kTile + hl * 8;
        } else if (LAYOUT == kMergedLayout) {
            off = qoff = row * 2LL * I + half * I + t * kTile + hl * 8;
        } else {
            off = qoff = row * 2LL * I + t * 2LL * kTile + lane * 8;
        }
        // The 4 columns of a·w this lane computes, from c0: interleaved lane l has 4 l..; split
        // and merged lane (half, hl) holds g (half 0) or u (half 1) of 8 hl.. 8 hl + 7 and
        // computes 8 hl + 4 half.. (each half half of them: the work is not done twice).
        const int c0 = t * kTile + (LAYOUT == kInterleaved ? lane : 2 * hl + half) * 4;
        const uint2 raw = *reinterpret_cast<const uint2 *>(sq + off);
        const float scale = args.saved_scales[off / kTile];
        float d[4];
        load_bf16x4(daw + row * I + c0, d);
        float v[8];
        const unsigned words[2] = {raw.x, raw.y};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = e4m3x2_to_float2(static_cast<unsigned short>(words[j >> 1] >> (16 * (j & 1))));
            v[2 * j] = __bfloat162float(__float2bfloat16_rn(f.x * scale));
            v[2 * j + 1] = __bfloat162float(__float2bfloat16_rn(f.y * scale));
        }
        float out[8], aw[4];  // this lane's dg or du (its layout's order), and a·w of its 4 columns
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float g, u;
            column_pair<LAYOUT>(v, j, half, g, u);
            float dg, du, act;
            gated_backward_value<ACT, LIMIT>(g, u, d[j], w, args.limit, args.alpha, dg, du, act);
            aw[j] = act * w;
            partial += act * d[j];
            if (LAYOUT == kInterleaved) {
                out[2 * j] = dg;
                out[2 * j + 1] = du;
            } else {  // half 0 keeps dg of its columns and gets the partner's; half 1 the same for du
                const float sent = __shfl_xor_sync(0xffffffffu, half ? dg : du, 16);
                out[half * 4 + j] = half ? du : dg;
                out[(1 - half) * 4 + j] = sent;
            }
        }
        // d_gate_up in bf16, and the same bf16 values quantized as this half-warp's tile.
        float r[8];
        unsigned packed[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const __nv_bfloat162 p = __floats2bfloat162_rn(out[2 * j], out[2 * j + 1]);
            packed[j] = *reinterpret_cast<const unsigned *>(&p);
            const float2 f = __bfloat1622float2(p);
            r[2 * j] = f.x;
            r[2 * j + 1] = f.y;
        }
        *reinterpret_cast<uint4 *>(dgu + off) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        quantize_half_warp_tile(r, dq, args.dgu_scales, qoff, hl);
        // a·w over d(a·w) in place: each lane overwrites exactly the 4 values it read.
        const __nv_bfloat162 lo = __floats2bfloat162_rn(aw[0], aw[1]), hi = __floats2bfloat162_rn(aw[2], aw[3]);
        *reinterpret_cast<uint2 *>(daw + row * I + c0) =
            make_uint2(*reinterpret_cast<const unsigned *>(&lo), *reinterpret_cast<const unsigned *>(&hi));
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) partial += __shfl_xor_sync(0xffffffffu, partial, m);
    if (lane == 0) args.d_w_s[row] = partial;
}

}  // namespace quant
}  // namespace moejit
