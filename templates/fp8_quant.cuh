// The FP8 quantizers (e4m3, block scales; the recipe of docs issue 31): activations per 1 x 128
// tile of a row, weights per 128 x 128 block of each expert's [N, K] matrix. One pass over the
// bf16 input, deterministic (a tile's amax does not depend on the order of the max).
//
// The rules, mirrored on the host by src/fp8/e4m3.hpp (the CPU and GPU tests hold the two to
// each other bit for bit):
//   amax  = max |x| over the tile's elements, NaN ignored (fmaxf), starting from 0;
//   scale = amax / 448 (IEEE division, round to nearest), or 1 when that is 0 (a tile of zeros,
//           of NaNs only, or so small that amax / 448 underflows fp32);
//   q     = e4m3(x · inv), inv = 1 / scale rounded to nearest once per tile (an IEEE division
//           per element made the quantizers ALU bound: ~1.8 TB/s on an H200), the product
//           rounded to nearest, then round to nearest even with saturation to +-448
//           (cvt.rn.satfinite); NaN stays NaN (0x7F / 0xFF). Where 1 / scale overflows (scale
//           below 2^-128, a tile whose amax is below ~1.3e-36) q = e4m3(x / scale), IEEE
//           division, so a zero stays zero.
// Non-finite values stay in their own tile: a NaN quantizes to NaN and does not change the
// scale; an inf makes its tile's amax and scale +inf, so the tile's finite elements quantize to
// (signed) zero and the inf itself to NaN (inf / inf); every dequantized element of that tile
// (q * scale = 0 * inf) is NaN, and so are the GEMM outputs of that row (activations) or of
// that block's columns (weights). Other tiles are untouched.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"
#include "group_gemm_schedule.cuh"
#include "expert_scan.cuh"

namespace moejit {
namespace quant {

constexpr float kE4m3Max = 448.0f;
constexpr int kTile = 128;

// x / scale as the rules above compute it, inv = __frcp_rn(scale) (a per-tile constant: the
// compiler computes it once for all of a tile's calls).
__device__ __forceinline__ float scaled_value(float x, float scale, float inv) {
    return isinf(inv) ? __fdiv_rn(x, scale) : __fmul_rn(x, inv);
}

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

// Four bf16 (8 bytes) -> floats.
__device__ __forceinline__ void load_bf16x4(const __nv_bfloat16 *p, float v[4]) {
    const uint2 raw = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.y));
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

// Four floats / scale -> four e4m3 bytes in one word (column order).
__device__ __forceinline__ unsigned e4m3x4(const float v[4], float scale) {
    const float inv = __frcp_rn(scale);
    const unsigned lo = e4m3x2(scaled_value(v[0], scale, inv), scaled_value(v[1], scale, inv));
    const unsigned hi = e4m3x2(scaled_value(v[2], scale, inv), scaled_value(v[3], scale, inv));
    return lo | (hi << 16);
}

// ---------------------------------------------------------------- 1 x 128 tiles, a warp each

// Tiles a warp holds at once in the warp-per-tile kernels: with one, a warp had 256 bytes in
// flight and the quantizers read at ~2.1 TB/s on an H200 (latency bound); the launchers size
// their grids with the host's copy of this number (kFp8RowTilesPerWarp).
constexpr int kRowTilesPerWarp = 4;

// The warp-per-tile kernels' loop (here and in fp8_quant_layer.cuh, so they all walk the tiles
// alike): warp w of the grid takes the kRowTilesPerWarp tiles from w * kRowTilesPerWarp, then
// the next group of the grid's stride, of the rows x ceil(K/128) tiles; each lane has 4 columns
// of a tile. load(row, kb, col, tile, v) reads the lane's 4 values of a tile into v (every tile
// of the group is loaded before any is finished), finish(row, kb, col, tile, v) does the rest:
// the tile's row and column block, the lane's first column, the tile's index row * KB + kb (a
// [rows, KB] scale's index).
template <int THREADS, int K, class Load, class Finish>
__device__ __forceinline__ void for_each_row_tile(long long rows, Load load, Finish finish) {
    constexpr int KB = (K + kTile - 1) / kTile, U = kRowTilesPerWarp;
    const int lane = threadIdx.x & 31;
    const long long tiles = rows * KB;
    const long long stride = static_cast<long long>(gridDim.x) * (THREADS / 32) * U;
    for (long long t0 = (global_thread_id() >> 5) * U; t0 < tiles; t0 += stride) {
        float v[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long t = t0 + u, row = t / KB;
            const int kb = static_cast<int>(t - row * KB);
            if (t < tiles) load(row, kb, kb * kTile + lane * 4, t, v[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long t = t0 + u, row = t / KB;
            const int kb = static_cast<int>(t - row * KB);
            if (t < tiles) finish(row, kb, kb * kTile + lane * 4, t, v[u]);
        }
    }
}

// The scale of a 1 x 128 tile from each lane's 4 values (the amax over the whole warp).
__device__ __forceinline__ float warp_tile_scale(const float v[4]) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    return tile_scale(warp_max(amax));
}

// ---------------------------------------------------------------- 128 x 128 blocks, a CTA each

// The CTA-per-block kernels' loop (both weight quantizers): CTA c takes blocks c, c + gridDim.x,
// ... of the E x ceil(N/128) x ceil(K/128) blocks. body(e, nb, kb, block): the expert, the row
// and column block, the block's index ((e * NB) + nb) * KB + kb (the scales' order).
template <int N, int K, class Body>
__device__ __forceinline__ void for_each_block(int num_experts, Body body) {
    constexpr int NB = (N + kTile - 1) / kTile, KB = (K + kTile - 1) / kTile;
    const long long blocks = static_cast<long long>(num_experts) * NB * KB;
    for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
        const long long e = b / (NB * KB);
        body(e, static_cast<int>((b / KB) % NB), static_cast<int>(b % KB), b);
    }
}

// Thread t (of 256)'s share of a 128 x 128 block of a row-major [N, K] bf16 matrix, as both
// weight quantizers read it: 8 columns at w_e + col of rows n0 + t / 16 + 16 i (i < 8) into v,
// so the block is read once; returns their amax. RAGGED (w_e the matrix, col a column of it):
// rows past N and columns past K read as zeros; without it N and K are multiples of 128 and
// nothing is checked.
template <int N, int K, bool RAGGED>
__device__ __forceinline__ float load_block_share(const __nv_bfloat16 *w_e, int n0, int col, int tid,
                                                  float (&v)[8][8]) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int n = n0 + (tid >> 4) + 16 * i;
        uint4 raw = make_uint4(0u, 0u, 0u, 0u);
        if (!RAGGED || (n < N && col < K))
            raw = *reinterpret_cast<const uint4 *>(w_e + static_cast<long long>(n) * K + col);
        const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&words[j]));
            v[i][2 * j] = f.x;
            v[i][2 * j + 1] = f.y;
            amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
    }
    return amax;
}

// The block's amax from each of the 256 threads' `amax`, through warp_amax[8] (shared): the
// caller syncs before warp_amax is written again.
__device__ __forceinline__ float block_amax_256(float amax, float *warp_amax, int tid) {
    amax = warp_max(amax);
    if ((tid & 31) == 0) warp_amax[tid >> 5] = amax;
    __syncthreads();
    float block_amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) block_amax = fmaxf(block_amax, warp_amax[i]);
    return block_amax;
}

// Activations: one warp per (row, 128-column tile), each lane 4 columns (8 bytes of bf16 in,
// 4 bytes of e4m3 out), grid-stride over the rows x ceil(K/128) tiles. K % 16 == 0 (the host
// checks), so a lane's 4 columns are all in or all past K.
template <int THREADS, int K>
__global__ void __launch_bounds__(THREADS) quantize_rows_kernel(const __grid_constant__ kargs::Fp8QuantRowsArgs args) {
    static_assert(K % 16 == 0, "K must be a multiple of 16");
    const __nv_bfloat16 *__restrict__ x = static_cast<const __nv_bfloat16 *>(args.x);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int lane = threadIdx.x & 31;
    for_each_row_tile<THREADS, K>(
        args.rows,
        [&](long long row, int, int col, long long, float(&v)[4]) {
            v[0] = v[1] = v[2] = v[3] = 0.0f;
            if (col < K) load_bf16x4(x + row * K + col, v);
        },
        [&](long long row, int, int col, long long t, float(&v)[4]) {
            const float scale = warp_tile_scale(v);
            if (col < K) *reinterpret_cast<unsigned *>(q + row * K + col) = e4m3x4(v, scale);
            if (lane == 0) args.scales[t] = scale;  // [rows, KB] row-major: index row * KB + kb = t
        });
}

// Weights: one CTA of 256 threads per 128 x 128 block (expert e, row block nb, column block kb);
// thread t holds 16-byte column group t % 16 of rows t / 16 + 16 i (i < 8) in registers, so the
// block is read once. Blocks are numbered ((e * NB) + nb) * KB + kb, the scale's index.
template <int N, int K>
__global__ void __launch_bounds__(256) quantize_blocks_kernel(const __grid_constant__ kargs::Fp8QuantBlocksArgs args) {
    static_assert(K % 16 == 0, "K must be a multiple of 16");
    __shared__ float warp_amax[8];
    const __nv_bfloat16 *__restrict__ w = static_cast<const __nv_bfloat16 *>(args.w);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int tid = threadIdx.x;
    for_each_block<N, K>(args.num_experts, [&](long long e, int nb, int kb, long long b) {
        const int col = kb * kTile + (tid & 15) * 8;
        const long long base = e * N * static_cast<long long>(K);
        float v[8][8];
        const float amax = load_block_share<N, K, true>(w + base, nb * kTile, col, tid, v);
        const float block_amax = block_amax_256(amax, warp_amax, tid);
        __syncthreads();  // warp_amax is rewritten by the next block
        const float scale = tile_scale(block_amax);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int n = nb * kTile + (tid >> 4) + 16 * i;
            if (n >= N || col >= K) continue;
            uint2 out;
            out.x = e4m3x4(v[i], scale);
            out.y = e4m3x4(v[i] + 4, scale);
            *reinterpret_cast<uint2 *>(q + base + static_cast<long long>(n) * K + col) = out;
        }
        if (tid == 0) args.scales[b] = scale;
    });
}

// Weight-gradient operands (the transposed tiling): the rows of x [rows, C] in expert order,
// per 128-row block x 1 column. Each expert's rows start a new block and its last block is padded
// with zero rows, so expert e owns padded blocks [cum[e], cum[e+1]) (cum: exclusive prefix sum of
// ceil(count_e / 128), every CTA computes it from offsets; no host sync) and no block mixes two
// experts. With row_token the rows are gathered from the unscattered x (the layer's dout and x:
// no scattered bf16 copy of either exists). Output transposed so the GEMM reads the reduction (rows) K-major: q[c, 128 pb + r] is
// row r of padded block pb, column c; scales[pb, c]. Blocks at or past block_bound (only offsets
// that are not monotone ask for them) are not written.
// One work item = padded block pb x 64 columns, 256 threads: the 128 x 64 bf16 box goes to
// shared memory (16-byte loads, rows past the expert's end read as zeros), then thread
// (c = t % 64, g = t / 64) takes rows 32 g.. of column c (a warp reads 32 adjacent columns of a
// row: conflict-free), the four partial maxima meet in shared memory, and each thread writes
// its 32 e4m3 bytes of column c as two 16-byte stores.
// 8 CTAs an SM: 32 registers, no spill (ptxas -v), with the column read twice from shared memory.
template <int C>
__global__ void __launch_bounds__(256, 8) quantize_cols_kernel(const __grid_constant__ kargs::Fp8QuantColsArgs args) {
    constexpr int CB = 64, COL_TILES = C / CB, PITCH = CB + 8;  // pitch 144 bytes: 16-byte rows, no conflicts
    static_assert(C % CB == 0, "C must be a multiple of 64");
    __shared__ __align__(16) __nv_bfloat16 tile[kTile * PITCH];
    __shared__ float part_amax[4][CB];
    __shared__ int warp_sums[8];
    extern __shared__ int cum[];  // [E+1]
    const __nv_bfloat16 *__restrict__ x = static_cast<const __nv_bfloat16 *>(args.x);
    unsigned char *__restrict__ q = static_cast<unsigned char *>(args.q);
    const int *__restrict__ offsets = args.offsets;
    const int tid = threadIdx.x, E = args.num_experts, rows = args.rows;
    const int total = scan_experts<256>(E, warp_sums, cum, [&](int e) {
        return sched::expert_m_tiles(offsets, e, rows, kTile);
    });
    const int blocks = sched::min_int(total, args.block_bound);
    const long long ld = static_cast<long long>(args.block_bound) * kTile;  // q's row pitch, P
    const int c = tid & (CB - 1), g = tid >> 6;
    for (long long w = blockIdx.x; w < static_cast<long long>(blocks) * COL_TILES; w += gridDim.x) {
        const int pb = static_cast<int>(w / COL_TILES), col0 = static_cast<int>(w % COL_TILES) * CB;
        const int e = sched::last_at_most(cum, E, pb);
        const sched::RowRange rr = sched::expert_rows(offsets, e, rows);
        const int row0 = rr.begin + (pb - cum[e]) * kTile;
        const int valid = sched::min_int(kTile, rr.end - row0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int u = tid + 256 * i, r = u >> 3, cu = u & 7;
            uint4 raw = make_uint4(0u, 0u, 0u, 0u);
            // The source row: the scattered row itself, or (row_token) its token's row of x.
            long long src = r < valid ? row0 + r : -1;
            if (src >= 0 && args.row_token) {
                const int t = args.row_token[src];
                src = t >= 0 && t < args.tokens ? t : -1;
            }
            if (src >= 0) raw = *reinterpret_cast<const uint4 *>(x + src * C + col0 + cu * 8);
            *reinterpret_cast<uint4 *>(tile + r * PITCH + cu * 8) = raw;
        }
        __syncthreads();
        // Two reads of the column from shared memory (amax, then the bytes) rather than 32 values
        // held in registers: 53 registers a thread held the kernel to half the SM's threads.
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(__bfloat162float(tile[(g * 32 + i) * PITCH + c])));
        part_amax[g][c] = amax;
        __syncthreads();
        const float scale =
            tile_scale(fmaxf(fmaxf(part_amax[0][c], part_amax[1][c]), fmaxf(part_amax[2][c], part_amax[3][c])));
        unsigned words[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            float v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) v[i] = __bfloat162float(tile[(g * 32 + 4 * j + i) * PITCH + c]);
            words[j] = e4m3x4(v, scale);
        }
        uint4 *const dst = reinterpret_cast<uint4 *>(q + static_cast<long long>(col0 + c) * ld +
                                                     static_cast<long long>(pb) * kTile + g * 32);
        dst[0] = make_uint4(words[0], words[1], words[2], words[3]);
        dst[1] = make_uint4(words[4], words[5], words[6], words[7]);
        if (g == 0) args.scales[static_cast<long long>(pb) * C + col0 + c] = scale;
        __syncthreads();  // tile and part_amax are rewritten by the next item
    }
}

}  // namespace quant
}  // namespace moejit
