// The FP8 grouped GEMM for weight gradients (sm_90a): dW[e] (+)= A_eᵀ · B_e, where A [S, M] and
// B [S, N] are the scattered rows grouped per expert by `offsets` (varlen-K: the reduction runs
// over each expert's rows). Both operands come from quantize_cols_kernel (fp8_quant.cuh):
// e4m3 transposed and padded, qa [M, P] and qb [N, P] with P = 128 * block_bound, so the
// reduction is K-major in memory and expert e owns the padded 128-row blocks [cum[e], cum[e+1])
// (cum: the same exclusive prefix sum of ceil(count_e / 128) the quantizer computes); the rows
// padding a block are zeros in both operands and add nothing. Scales: one fp32 per 128 rows x 1
// column, a_scale [P/128, M] and b_scale [P/128, N].
//
// Promotion per 128-row block kb: the four m64n128k32 wgmmas of the block go to a temporary
// accumulator, which is added into the fp32 registers as acc[m, n] += part[m, n] * sa[kb, m] *
// sb[kb, n]: the scale varies along both output dimensions (the outer product of the block's
// two scale vectors), two FP32 operations per element per block.
//
// Schedule: a fixed M/128 x N/128 tile block per expert (sched::mn_tile), persistent CTAs over
// E x M_TILES x N_TILES tiles; every tile is written by one CTA with plain stores
// (deterministic, no atomics); an empty expert writes exact zeros (left untouched when
// ACCUMULATE). Everything else is the FP8 same_nk GEMM's (sm90/fp8_gemm.cuh: its Config, the
// e4m3 wgmma), the ring (sm90/pipeline.cuh) and the epilogues (sm90/epilogue.cuh).
#pragma once

#include "sm90/fp8_gemm.cuh"

namespace moejit {
namespace sm90 {
namespace fp8 {

// The expert's padded blocks, bounded by the workspace's block_bound (offsets that are not
// monotone can ask for more; those blocks were never quantized and are not read).
struct BlockRange {
    int begin, end;
};
__device__ __forceinline__ BlockRange expert_blocks(const int *cum, int e, int block_bound) {
    BlockRange r;
    r.begin = sched::min_int(cum[e], block_bound);
    r.end = sched::max_int(sched::min_int(cum[e + 1], block_bound), r.begin);
    return r;
}

// A consumer thread's scales of one 128-row block: sa of its two rows (r_base, r_base + 8) and
// sb of its 32 columns (8 j + 2 (lane % 4) + {0, 1}, j < 16), as the accumulator layout holds them.
struct WgradScales {
    float a[2];
    float2 b[16];
};
__device__ __forceinline__ void load_wgrad_scales(WgradScales &s, const float *__restrict__ sa_rows,
                                                  const float *__restrict__ sb_cols) {
    s.a[0] = __ldg(sa_rows);
    s.a[1] = __ldg(sa_rows + 8);
#pragma unroll
    for (int j = 0; j < 16; ++j) s.b[j] = __ldg(reinterpret_cast<const float2 *>(sb_cols + 8 * j));
}

// acc += part * sa(row) * sb(col): accumulator i is row r_base + 8 ((i >> 1) & 1), column
// 8 (i >> 2) + 2 (lane % 4) + (i & 1).
__device__ __forceinline__ void promote_outer(float (&acc)[64], const float (&part)[64], const WgradScales &s) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            acc[4 * j + 2 * h] = fmaf(part[4 * j + 2 * h], s.a[h] * s.b[j].x, acc[4 * j + 2 * h]);
            acc[4 * j + 2 * h + 1] = fmaf(part[4 * j + 2 * h + 1], s.a[h] * s.b[j].y, acc[4 * j + 2 * h + 1]);
        }
}

// tma_a: qa [M, P] e4m3, 2D dims {P, M}, box {128, 128}; tma_b: qb [N, P], dims {P, N}, box
// {128, 128}; tma_c (EPI_TMA): dW [E, M, N] 16-bit, 3D dims {N, M, E}, box {64, 64, 1}.
template <class Cfg, int M, int N, bool ACCUMULATE>
__device__ __forceinline__ void group_gemm_wgrad(const TmaDesc &tma_a, const TmaDesc &tma_b, const TmaDesc &tma_c,
                                                 typename Cfg::CT *__restrict__ c, const float *__restrict__ a_scale,
                                                 const float *__restrict__ b_scale, const int *__restrict__ offsets,
                                                 int rows, int num_experts, int block_bound) {
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, THREADS = Cfg::THREADS;
    constexpr int M_TILES = M / BM, N_TILES = N / BN;
    static_assert(BN == 128 && BK == 128, "one m64n128 temporary per consumer; 128-row scale blocks");
    static_assert(M % BM == 0 && N % BN == 0, "M and N multiples of 128");
    static_assert(!(Cfg::EPI_TMA && ACCUMULATE), "the TMA-store epilogue overwrites dW");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<Cfg> m = carve_smem<Cfg>(smem_raw);
    int *const warp_sums = m.scratch;
    int *const cum = m.scratch + 16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) init_ring<Cfg, false>(m, tma_a, tma_b);
    // The quantizer's block scan (its __syncthreads also publish the barrier initialization).
    scan_experts<THREADS>(num_experts, warp_sums, cum, [&](int e) {
        return sched::expert_m_tiles(offsets, e, rows, BK);
    });
    const int total_tiles = num_experts * M_TILES * N_TILES;
    const int wg = warp >> 2;

    if (wg == 0) {
        // ------------------------------------------------ producer: one thread issues every TMA
        setmaxnreg_dec<Cfg::PRODUCER_REGS>();
        if (tid != 0) return;
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::TileCoord tc = sched::mn_tile(M_TILES, N_TILES, Cfg::GROUP_M, t);
            const BlockRange kr = expert_blocks(cum, tc.expert, block_bound);
            const int m0 = tc.m_block * BM, n0 = tc.n_block * BN;
            for (int kb = kr.begin; kb < kr.end; ++kb, ++pos.it) {
                const unsigned stage = producer_wait(m, pos);
                const unsigned bar = m.full(pos.stage());
                mbar_arrive_expect_tx(bar, Cfg::STAGE_BYTES);
                tma_load_2d(stage, &tma_a, bar, kb * BK, m0);
                tma_load_2d(stage + Cfg::A_BYTES, &tma_b, bar, kb * BK, n0);
            }
        }
        return;
    }

    // ---------------------------------------------------- consumers: 64 rows of M each
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    const int cw = wg - 1;
    const int r_base = cw * 64 + (warp & 3) * 16 + (lane >> 2);  // this thread's M rows: r_base, r_base + 8
    RingPos<Cfg::STAGES> pos;
    float part[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) part[i] = 0.0f;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
        const sched::TileCoord tc = sched::mn_tile(M_TILES, N_TILES, Cfg::GROUP_M, t);
        const BlockRange kr = expert_blocks(cum, tc.expert, block_bound);
        const int m0 = tc.m_block * BM, n0 = tc.n_block * BN;
        if (ACCUMULATE && kr.begin == kr.end) continue;  // dW[e] += 0
        const float *const sa_rows = a_scale + m0 + r_base;
        const float *const sb_cols = b_scale + n0 + 2 * (lane & 3);
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
        for (int kb = kr.begin; kb < kr.end; ++kb, ++pos.it) {
            const int s = pos.stage();
            mbar_wait(m.full(s), pos.phase());
            const unsigned stage = m.stage(s);
            const unsigned long long da = desc_kmajor_sw128(stage + cw * Cfg::CHUNK_BYTES);
            const unsigned long long db = desc_kmajor_sw128(stage + Cfg::A_BYTES);
            fence_operands(part);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 32; ++kk) wgmma_e4m3_n128(part, da + 2 * kk, db + 2 * kk, kk > 0);
            wgmma_commit();
            fence_operands(part);
            // The block's scales load while its wgmmas run.
            WgradScales sc;
            load_wgrad_scales(sc, sa_rows + static_cast<long long>(kb) * M, sb_cols + static_cast<long long>(kb) * N);
            wgmma_wait<0>();
            fence_operands(part);
            mbar_arrive(m.empty(s));  // the stage is read: the producer may refill it
            promote_outer(acc, part, sc);
        }
        if constexpr (Cfg::EPI_TMA) {
            store_tile_tma<Cfg>(acc, m, cw, warp & 3, lane, [&](int j, unsigned src) {
                tma_store_3d(&tma_c, src, n0 + 64 * j, m0 + cw * 64, tc.expert);
            });
        } else {
            typename Cfg::CT *const c_tile = c + (static_cast<long long>(tc.expert) * M + m0) * N + n0;
            store_tile<Cfg, ACCUMULATE>(acc, c_tile, N, r_base, BM, BN, lane);
        }
    }
    if (Cfg::EPI_TMA && (warp & 3) == 0 && lane == 0) bulk_wait_all();
}

template <int THREADS, class Cfg, int M, int N, bool ACCUMULATE>
__global__ void __launch_bounds__(THREADS, 1)
    group_gemm_wgrad_kernel(const __grid_constant__ kargs::Sm90Fp8WgradArgs args) {
    group_gemm_wgrad<Cfg, M, N, ACCUMULATE>(args.tma_a, args.tma_b, args.tma_c, static_cast<typename Cfg::CT *>(args.c),
                                            args.a_scale, args.b_scale, args.offsets, args.rows, args.num_experts,
                                            args.block_bound);
}

}  // namespace fp8
}  // namespace sm90
}  // namespace moejit
