// The FP8 quantizers (e4m3, block scales; the recipe of docs issue 31): activations per 1 x 128
// tile of a row, weights per 128 x 128 block of each expert's [N, K] matrix. One pass over the
// bf16 input, deterministic (a tile's amax does not depend on the order of the max).
//
// The rules, mirrored on the host by src/fp8/e4m3.hpp (the CPU and GPU tests hold the two to
// each other bit for bit):
//   amax  = max |x| over the tile's elements, NaN ignored (fmaxf), starting from 0;
//   scale = amax / 448 (IEEE division, round to nearest), or 1 when that is 0 (a tile of zeros,
//           of NaNs only, or so small that amax / 448 underflows fp32);
//   q     = e4m3(x / scale): IEEE division, then round to nearest even with saturation to
//           +-448 (cvt.rn.satfinite); NaN stays NaN (0x7F / 0xFF).
// Non-finite values stay in their own tile: a NaN quantizes to NaN and does not change the
// scale; an inf makes its tile's amax and scale +inf, so the tile's finite elements quantize to
// (signed) zero and the inf itself to NaN (inf / inf); every dequantized element of that tile
// (q * scale = 0 * inf) is NaN, and so are the GEMM outputs of that row (activations) or of
// that block's columns (weights). Other tiles are untouched.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace quant {

constexpr float kE4m3Max = 448.0f;
constexpr int kTile = 128;

// Two floats -> two e4m3 bytes, `lo` in the low byte (cvt puts its first source in the high one).
__device__ __forceinline__ unsigned e4m3x2(float lo, float hi) {
    unsigned short d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}

__device__ __forceinline__ float tile_scale(float amax) {
    const float s = __fdiv_rn(amax, kE4m3Max);
    return s > 0.0f ? s : 1.0f;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}

// Activations: one warp per (row, 128-column tile), each lane 4 columns (8 bytes of bf16 in,
// 4 bytes of e4m3 out), grid-stride over the rows x ceil(K/128) tiles. K % 16 == 0 (the host
// checks), so a lane's 4 columns are all in or all past K.
template <int THREADS, int K>
__global__ void __launch_bounds__(THREADS) quantize_rows_kernel(const __grid_constant__ kargs::Fp8QuantRowsArgs args) {
    constexpr int KB = (K + kTile - 1) / kTile;
    static_assert(K % 16 == 0, "K must be a multiple of 16");
    const __nv_bfloat16 *__restrict__ x = static_cast<const __nv_bfloat16 *>(args.x);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int lane = threadIdx.x & 31;
    const long long tiles = args.rows * KB;
    const long long warps = static_cast<long long>(gridDim.x) * (THREADS / 32);
    for (long long t = global_thread_id() >> 5; t < tiles; t += warps) {
        const long long row = t / KB;
        const int kb = static_cast<int>(t - row * KB);
        const int col = kb * kTile + lane * 4;
        const bool in = col < K;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (in) {
            const uint2 raw = *reinterpret_cast<const uint2 *>(x + row * K + col);
            const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.x));
            const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.y));
            v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
        }
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
        const float scale = tile_scale(warp_max(amax));
        if (in) {
            const unsigned lo = e4m3x2(__fdiv_rn(v[0], scale), __fdiv_rn(v[1], scale));
            const unsigned hi = e4m3x2(__fdiv_rn(v[2], scale), __fdiv_rn(v[3], scale));
            *reinterpret_cast<unsigned *>(q + row * K + col) = lo | (hi << 16);
        }
        if (lane == 0) args.scales[t] = scale;  // [rows, KB] row-major: index row * KB + kb = t
    }
}

// Weights: one CTA of 256 threads per 128 x 128 block (expert e, row block nb, column block kb);
// thread t holds 16-byte column group t % 16 of rows t / 16 + 16 i (i < 8) in registers, so the
// block is read once. Blocks are numbered ((e * NB) + nb) * KB + kb, the scale's index.
template <int N, int K>
__global__ void __launch_bounds__(256) quantize_blocks_kernel(const __grid_constant__ kargs::Fp8QuantBlocksArgs args) {
    constexpr int NB = (N + kTile - 1) / kTile, KB = (K + kTile - 1) / kTile;
    static_assert(K % 16 == 0, "K must be a multiple of 16");
    __shared__ float warp_amax[8];
    const __nv_bfloat16 *__restrict__ w = static_cast<const __nv_bfloat16 *>(args.w);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int tid = threadIdx.x;
    const long long blocks = static_cast<long long>(args.num_experts) * NB * KB;
    for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
        const long long e = b / (NB * KB);
        const int nb = static_cast<int>((b / KB) % NB), kb = static_cast<int>(b % KB);
        const int col = kb * kTile + (tid & 15) * 8;
        const long long base = e * N * static_cast<long long>(K);
        float v[8][8];
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int n = nb * kTile + (tid >> 4) + 16 * i;
            const bool in = n < N && col < K;
            uint4 raw = make_uint4(0u, 0u, 0u, 0u);
            if (in) raw = *reinterpret_cast<const uint4 *>(w + base + static_cast<long long>(n) * K + col);
            const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&words[j]));
                v[i][2 * j] = f.x;
                v[i][2 * j + 1] = f.y;
                amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
            }
        }
        amax = warp_max(amax);
        if ((tid & 31) == 0) warp_amax[tid >> 5] = amax;
        __syncthreads();
        float block_amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) block_amax = fmaxf(block_amax, warp_amax[i]);
        __syncthreads();  // warp_amax is rewritten by the next block
        const float scale = tile_scale(block_amax);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int n = nb * kTile + (tid >> 4) + 16 * i;
            if (n >= N || col >= K) continue;
            uint2 out;
            out.x = e4m3x2(__fdiv_rn(v[i][0], scale), __fdiv_rn(v[i][1], scale)) |
                    (e4m3x2(__fdiv_rn(v[i][2], scale), __fdiv_rn(v[i][3], scale)) << 16);
            out.y = e4m3x2(__fdiv_rn(v[i][4], scale), __fdiv_rn(v[i][5], scale)) |
                    (e4m3x2(__fdiv_rn(v[i][6], scale), __fdiv_rn(v[i][7], scale)) << 16);
            *reinterpret_cast<uint2 *>(q + base + static_cast<long long>(n) * K + col) = out;
        }
        if (tid == 0) args.scales[b] = scale;
    }
}

}  // namespace quant
}  // namespace moejit
