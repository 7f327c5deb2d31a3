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
// OVERLAP: the tensor cores otherwise idle while both consumers promote (they read the same
// stage, so they promote at the same time), and the promotion costs half the MMA time here. With
// OVERLAP the producer also copies the block's two 128-float scale vectors into the stage (bulk
// copies on the stage's full barrier), freeing the 34 scale registers, so a consumer holds two
// temporaries: block kb+1's wgmmas are issued before kb is waited for (wait<1>) and promoted, in
// unrolled chunks of up to 4 blocks with no group in flight across a loop's back edge (ptxas
// serializes the wgmmas otherwise; sm90/fp8_gemm.cuh's OVERLAP does the same over a fixed K).
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

// The FP8 GEMM's Config; with OVERLAP each stage also holds the block's scale vectors (sa of the
// tile's 128 M rows, then sb of its 128 N columns: 1 KiB, so stages stay 1024-byte aligned).
template <class CT_, int STAGES_, int GROUP_M_, bool EPI_TMA_, bool OVERLAP_>
struct WgradConfig : Config<CT_, 128, STAGES_, GROUP_M_, EPI_TMA_, true, false> {
    using Base = Config<CT_, 128, STAGES_, GROUP_M_, EPI_TMA_, true, false>;
    static constexpr bool OVERLAP = OVERLAP_;
    static constexpr int SCALE_BYTES = OVERLAP ? 2 * 128 * 4 : 0;
    static constexpr int STAGE_BYTES = Base::A_BYTES + Base::B_BYTES + SCALE_BYTES;
    static_assert(STAGE_BYTES % 1024 == 0, "stages stay 1024-byte aligned (128-byte swizzle)");
};

// Global -> shared bulk copy (16-byte aligned, a multiple of 16 bytes) completing on `bar`.
__device__ __forceinline__ void bulk_load(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ float lds_f32(unsigned addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float2 lds_f32x2(unsigned addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
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

// promote_outer with the scales read from the stage (OVERLAP): sa at `scales` + 4 row, sb 512
// bytes on + 4 column (a warp reads 8 and 4 distinct words: no conflicts).
__device__ __forceinline__ void promote_outer_smem(float (&acc)[64], const float (&part)[64], unsigned scales,
                                                   int r_base, int lane) {
    const float a0 = lds_f32(scales + 4 * r_base), a1 = lds_f32(scales + 4 * (r_base + 8));
    const unsigned sb = scales + 512 + 8 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float2 b = lds_f32x2(sb + 32 * j);
        acc[4 * j] = fmaf(part[4 * j], a0 * b.x, acc[4 * j]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], a0 * b.y, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], a1 * b.x, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], a1 * b.y, acc[4 * j + 3]);
    }
}

// OVERLAP: C blocks from ring position `it` (overlap_kblocks of sm90/fp8_gemm.cuh), each
// promoted with the scales its stage holds, then its stage released.
template <class Cfg, int C>
__device__ __forceinline__ void overlap_blocks(const Smem<Cfg> &m, int it, int consumer, float (&acc)[64],
                                               float (&p0)[64], float (&p1)[64], int r_base, int lane) {
    overlap_kblocks<Cfg, C>(m, it, consumer, p0, p1, [&](int, float (&p)[64], int stage) {
        fence_operands(p);
        promote_outer_smem(acc, p, m.stage(stage) + Cfg::A_BYTES + Cfg::B_BYTES, r_base, lane);
        mbar_arrive(m.empty(stage));  // its scales are read too: the producer may refill it
    });
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
                if constexpr (Cfg::OVERLAP) {
                    const unsigned sc = stage + Cfg::A_BYTES + Cfg::B_BYTES;
                    bulk_load(sc, a_scale + static_cast<long long>(kb) * M + m0, 512, bar);
                    bulk_load(sc + 512, b_scale + static_cast<long long>(kb) * N + n0, 512, bar);
                }
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
    float part2[Cfg::OVERLAP ? 64 : 1];  // the other block's temporary (OVERLAP)
#pragma unroll
    for (int i = 0; i < 64; ++i) part[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (Cfg::OVERLAP ? 64 : 1); ++i) part2[i] = 0.0f;
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
        if constexpr (Cfg::OVERLAP) {
            int left = kr.end - kr.begin;
            for (; left >= 4; left -= 4, pos.it += 4)
                overlap_blocks<Cfg, 4>(m, pos.it, cw, acc, part, part2, r_base, lane);
            if (left == 3) overlap_blocks<Cfg, 3>(m, pos.it, cw, acc, part, part2, r_base, lane);
            if (left == 2) overlap_blocks<Cfg, 2>(m, pos.it, cw, acc, part, part2, r_base, lane);
            if (left == 1) overlap_blocks<Cfg, 1>(m, pos.it, cw, acc, part, part2, r_base, lane);
            pos.it += left;
        } else
        for (int kb = kr.begin; kb < kr.end; ++kb, ++pos.it) {
            const int s = issue_kblock<Cfg>(m, pos, cw, part);
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
