// The FP8 grouped GEMM (sm_90a), same_nk forward form: C[rows of e] = A[rows of e] · B_eᵀ with
// A e4m3 [S, K] scaled per 1 x 128 tile (a_scale [S, K/128]), B e4m3 [E, N, K] K-major scaled per
// 128 x 128 block (b_scale [E, N/128, K/128]), C [S, N] bf16 (or fp32), fp32 accumulation with
// promotion (the recipe of DeepSeek-V3).
//
// Promotion: Hopper's e4m3 wgmma adds its products into the accumulator with about 14 bits of
// mantissa, so summing all of K there loses accuracy as K grows. Each stage holds one 128-wide k
// block (128 e4m3 = one 128-byte swizzle row); the consumer runs its four m64nBNk32 wgmmas into a
// temporary accumulator (the first with scale-d 0), waits for them, releases the stage, and adds
// the temporary into its fp32 registers multiplied by a_scale[row, kb] * b_scale[e, nb, kb].
// PROMOTE = false (a test mode) keeps all of K in the wgmma accumulator and applies the scales of
// k block 0 at the end: exact only when every row's and block's scales are the same across k
// blocks, which is how the test builds its operands to show the error growth on long K.
//
// Everything else is the bf16 wgmma engine's, included, not copied: the tile schedule over
// `offsets` bounded by the host's M-tile bound from S (group_gemm_schedule.cuh, expert_scan.cuh),
// the shared-memory layout and the stage ring (sm90/pipeline.cuh, through a config with its
// member names), the PTX wrappers (sm90/ptx.cuh) and the epilogues (sm90/epilogue.cuh: TMA
// stores of full 64-row halves, predicated register stores otherwise). Rows past an expert's
// end are loaded (the next expert's, or TMA zero-fill past S) but never stored; an empty expert
// has no tiles and writes nothing.
#pragma once

#include "moejit_common.cuh"
#include "group_gemm_schedule.cuh"
#include "expert_scan.cuh"
#include "sm90/ptx.cuh"
#include "sm90/pipeline.cuh"
#include "sm90/epilogue.cuh"

namespace moejit {
namespace sm90 {
namespace fp8 {

// The tile configuration, with the member names sm90/pipeline.cuh and sm90/epilogue.cuh read
// (Smem, carve_smem, init_ring, RingPos, producer_wait, store_tile, store_tile_tma). BM = 128
// (two cooperative consumer warpgroups of 64 rows), BK = 128 e4m3 (one 128-byte swizzle row,
// one scale block), BN = 128 or 256: HALVES = BN / 128 scale blocks of B's rows, each one
// m64n128k32 wgmma chain into the 64-register temporary accumulator, promoted in turn (BN = 256
// holds 128 promoted + 64 temporary registers per thread; it halves A's reloads per column, at
// the price of a second wait per k block). Host mirror: fp8_gemm_smem_bytes
// (src/fp8/fp8_render.cpp).
// OVERLAP (PROMOTE, BN = 128): two temporary accumulators, so a consumer issues k block kb+1's
// wgmmas before it promotes kb's and the tensor cores need not wait for the promotion (both
// consumers read the same stage and would otherwise promote at the same time).
template <class CT_, int BN_, int STAGES_, int GROUP_M_, bool EPI_TMA_, bool PROMOTE_, bool OVERLAP_ = false>
struct Config {
    using T = unsigned char;  // e4m3
    using CT = CT_;
    static constexpr int BM = 128, BK = 128, BN = BN_, STAGES = STAGES_, GROUP_M = GROUP_M_;
    static constexpr bool EPI_TMA = EPI_TMA_, PROMOTE = PROMOTE_, OVERLAP = OVERLAP_, PINGPONG = false,
                          BLOCKED_ISSUE = false;
    static constexpr int C_STAGE_BYTES = EPI_TMA ? BM * BN * 2 : 0;
    static constexpr int RING_SLOTS = 0;  // the whole row block staged (sm90/pipeline.cuh's EPI_RING)
    static constexpr int CONSUMERS = 2, ROW_BLOCKS = 1, RELEASERS = 128 * CONSUMERS, TURN_BYTES = 0;
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    static constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK, STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int CHUNK_BYTES = 64 * 128;  // one consumer's 64 rows of A
    static constexpr int ACC = BN / 2, HALVES = BN / 128;
    static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(BN == 128 || BN == 256, "BN must be 128 or 256 (whole scale blocks of B)");
    static_assert(!OVERLAP || (PROMOTE && BN == 128), "the overlapped promotion holds 3 x 64 accumulators: BN = 128");
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(!EPI_TMA || sizeof(CT) == 2, "the TMA-store epilogue stages 16-bit C");
};

// D[64 x 128] (+)= A[64 x 32] · B[32 x 128], e4m3 operands K-major in shared memory (e4m3 wgmma
// has no transposed forms). scale_d = 0 ignores the old D. Accumulator layout as in sm90/ptx.cuh.
#define MJF_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                  "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define MJF_D32(i) MJF_D8(i), MJF_D8(i + 8), MJF_D8(i + 16), MJF_D8(i + 24)
__device__ __forceinline__ void wgmma_e4m3_n128(float (&d)[64], unsigned long long da, unsigned long long db,
                                                int scale_d) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, %64, %65, p, 1, 1; }\n"
        : MJF_D32(0), MJF_D32(32)
        : "l"(da), "l"(db), "r"(scale_d));
}
#undef MJF_D8
#undef MJF_D32

// A consumer thread's scales for one k block: its two rows' a_scale (0 for rows past the
// expert's end, never stored) and the tile's b_scale of each 128-row half of B.
template <int HALVES> struct KScales {
    float a0, a1, b[HALVES];
};

// b_blk: the tile's first B scale block; its next one (HALVES = 2) is k_blocks floats on.
template <int HALVES>
__device__ __forceinline__ KScales<HALVES> load_scales(const float *__restrict__ a_row0,
                                                       const float *__restrict__ a_row1, bool valid0, bool valid1,
                                                       const float *__restrict__ b_blk, int k_blocks, int kb) {
    KScales<HALVES> s;
    s.a0 = valid0 ? __ldg(a_row0 + kb) : 0.0f;
    s.a1 = valid1 ? __ldg(a_row1 + kb) : 0.0f;
#pragma unroll
    for (int h = 0; h < HALVES; ++h) s.b[h] = __ldg(b_blk + h * k_blocks + kb);
    return s;
}

// The 64 accumulators of 128-column half h (the n128 wgmma's layout, 64 registers on).
template <int ACC> __device__ __forceinline__ float (&half_of(float (&acc)[ACC], int h))[64] {
    return *reinterpret_cast<float(*)[64]>(acc + 64 * h);
}

// Waits for the stage of k block `pos` and issues its four wgmmas into `p` (B's first 128 rows;
// scale-d 0 first) as one committed group; returns the stage index.
template <class Cfg>
__device__ __forceinline__ int issue_kblock(const Smem<Cfg> &m, const RingPos<Cfg::STAGES> &pos, int consumer,
                                            float (&p)[64]) {
    const int s = pos.stage();
    mbar_wait(m.full(s), pos.phase());
    const unsigned stage = m.stage(s);
    const unsigned long long da = desc_kmajor_sw128(stage + consumer * Cfg::CHUNK_BYTES);
    const unsigned long long db = desc_kmajor_sw128(stage + Cfg::A_BYTES);
    fence_operands(p);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 32; ++kk) wgmma_e4m3_n128(p, da + 2 * kk, db + 2 * kk, kk > 0);
    wgmma_commit();
    fence_operands(p);
    return s;
}

// acc += p * (row scale s0 or s1), the promotion of one k block (BN = 128 layout).
__device__ __forceinline__ void promote(float (&acc)[64], const float (&p)[64], float s0, float s1) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = fmaf(p[i], (i & 2) ? s1 : s0, acc[i]);
}

// OVERLAP (here and in sm90/fp8_wgrad.cuh): C k blocks from ring position `it`, no group in
// flight at entry or exit; block j goes to temporary j % 2 (p0, p1) and is handed to
// finish(j, temporary, stage index) once block j + 1 was issued (wait<1>), so the tensor cores
// run j + 1 while finish promotes j and releases its stage.
template <class Cfg, int C, class Finish>
__device__ __forceinline__ void overlap_kblocks(const Smem<Cfg> &m, int it, int consumer, float (&p0)[64],
                                                float (&p1)[64], Finish finish) {
    int stage[C];
    RingPos<Cfg::STAGES> at;
    at.it = it;
    stage[0] = issue_kblock<Cfg>(m, at, consumer, p0);
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (j + 1 < C) {
            at.it = it + j + 1;
            stage[j + 1] = issue_kblock<Cfg>(m, at, consumer, (j & 1) ? p0 : p1);
            wgmma_wait<1>();
        } else {
            wgmma_wait<0>();
        }
        finish(j, (j & 1) ? p1 : p0, stage[j]);
    }
}

// OVERLAP: k blocks kb0 .. kb0 + C - 1 of a tile, their scales loaded up front.
template <class Cfg, int C, int K_TILES>
__device__ __forceinline__ void overlap_chunk(const Smem<Cfg> &m, int base, int kb0, int consumer, float (&acc)[64],
                                              float (&p0)[64], float (&p1)[64], const float *a_row0,
                                              const float *a_row1, bool valid0, bool valid1, const float *b_blk) {
    KScales<1> sc[C];
#pragma unroll
    for (int j = 0; j < C; ++j) sc[j] = load_scales<1>(a_row0, a_row1, valid0, valid1, b_blk, K_TILES, kb0 + j);
    overlap_kblocks<Cfg, C>(m, base + kb0, consumer, p0, p1, [&](int j, const float (&p)[64], int stage) {
        mbar_arrive(m.empty(stage));
        promote(acc, p, sc[j].a0 * sc[j].b[0], sc[j].a1 * sc[j].b[0]);
    });
}

// tma_a: A [S, K] e4m3, 2D dims {K, S}, box {128, 128} (rows >= S zero-filled).
// tma_b: B [E, N, K] e4m3, 3D dims {K, N, E}, box {128, BN, 1} (N a multiple of BN).
// tma_c (EPI_TMA): C [S, N], 2D dims {N, S}, box {64, 64}.
// m_tile_bound: the host's ceil(S / BM) + min(E, S) bound on the M-tile count.
template <class Cfg, int N, int K>
__device__ __forceinline__ void group_gemm_nk(const TmaDesc &tma_a, const TmaDesc &tma_b, const TmaDesc &tma_c,
                                              typename Cfg::CT *__restrict__ c, const float *__restrict__ a_scale,
                                              const float *__restrict__ b_scale, const int *__restrict__ offsets,
                                              int rows, int num_experts, int m_tile_bound) {
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, THREADS = Cfg::THREADS;
    constexpr int N_TILES = N / BN, K_TILES = K / BK;  // K_TILES: also the scales' k blocks
    constexpr int NB = N / 128, HALVES = Cfg::HALVES;  // b_scale's row blocks per expert, per tile
    static_assert(N % BN == 0 && K % 128 == 0, "N a multiple of BN, K of 128 (whole scale blocks)");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<Cfg> m = carve_smem<Cfg>(smem_raw);
    int *const warp_sums = m.scratch;
    int *const cum = m.scratch + 16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) init_ring<Cfg, false>(m, tma_a, tma_b);

    // The experts' M-tiles; the scan's __syncthreads also publish the barrier initialization.
    const int m_tiles = scan_nk_m_tiles<THREADS>(offsets, rows, num_experts, BM, m_tile_bound, warp_sums, cum);
    const int total_tiles = m_tiles * N_TILES;
    const int wg = warp >> 2;

    if (wg == 0) {
        // ------------------------------------------------ producer: one thread issues every TMA
        setmaxnreg_dec<Cfg::PRODUCER_REGS>();
        if (tid != 0) return;
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::NkTilePlace tp = sched::nk_tile_place(cum, offsets, num_experts, rows, N_TILES, Cfg::GROUP_M, BM, BN, t);
            const int row0 = tp.row0, n0 = tp.n0;
            for (int kb = 0; kb < K_TILES; ++kb, ++pos.it) {
                const unsigned stage = producer_wait(m, pos);
                const unsigned bar = m.full(pos.stage());
                mbar_arrive_expect_tx(bar, Cfg::STAGE_BYTES);  // full boxes, even where zero-filled
                tma_load_2d(stage, &tma_a, bar, kb * BK, row0);
                tma_load_3d(stage + Cfg::A_BYTES, &tma_b, bar, kb * BK, n0, tp.expert);
            }
        }
        return;
    }

    // ---------------------------------------------------- consumers: 64 rows of the tile each
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    const int cw = wg - 1;
    const int r_base = cw * 64 + (warp & 3) * 16 + (lane >> 2);  // this thread's rows: r_base, r_base + 8
    RingPos<Cfg::STAGES> pos;
    float part[64];  // the temporary accumulator of one k block and half (PROMOTE)
    float part2[Cfg::OVERLAP ? 64 : 1];  // the other k block's (OVERLAP)
#pragma unroll
    for (int i = 0; i < 64; ++i) part[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (Cfg::OVERLAP ? 64 : 1); ++i) part2[i] = 0.0f;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
        const sched::NkTilePlace tp = sched::nk_tile_place(cum, offsets, num_experts, rows, N_TILES, Cfg::GROUP_M, BM, BN, t);
        const int row0 = tp.row0, n0 = tp.n0;
        const int rows_valid = tp.row_end - row0;
        const bool valid0 = r_base < rows_valid, valid1 = r_base + 8 < rows_valid;
        const float *const a_row0 = a_scale + static_cast<long long>(row0 + r_base) * K_TILES;
        const float *const a_row1 = a_row0 + 8LL * K_TILES;
        const float *const b_blk = b_scale + (static_cast<long long>(tp.expert) * NB + n0 / 128) * K_TILES;

        float acc[Cfg::ACC];
#pragma unroll
        for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.0f;
        KScales<HALVES> sc = load_scales<HALVES>(a_row0, a_row1, valid0, valid1, b_blk, K_TILES, 0);
        if constexpr (Cfg::OVERLAP) {
            // Chunks of CHUNK k blocks, unrolled: inside a chunk, k block kb+1's group is issued
            // into one temporary before kb's (in the other) is waited for (wait<1>), released and
            // promoted; a chunk starts and ends with no group in flight (ptxas serializes the
            // wgmmas when a group stays in flight across a loop's back edge).
            float(&acc64)[64] = half_of(acc, 0);
            const int base = pos.it;
            constexpr int CHUNK = K_TILES >= 4 ? 4 : K_TILES;
            constexpr int FULL = K_TILES / CHUNK * CHUNK;
            for (int kb0 = 0; kb0 < FULL; kb0 += CHUNK)
                overlap_chunk<Cfg, CHUNK, K_TILES>(m, base, kb0, cw, acc64, part, part2, a_row0, a_row1, valid0,
                                                   valid1, b_blk);
            if constexpr (FULL < K_TILES)
                overlap_chunk<Cfg, K_TILES - FULL, K_TILES>(m, base, FULL, cw, acc64, part, part2, a_row0, a_row1,
                                                            valid0, valid1, b_blk);
            pos.it = base + K_TILES;
        } else
        for (int kb = 0; kb < K_TILES; ++kb, ++pos.it) {
            // The next k block's scales load while this block's wgmmas run.
            const KScales<HALVES> next = Cfg::PROMOTE && kb + 1 < K_TILES
                                             ? load_scales<HALVES>(a_row0, a_row1, valid0, valid1, b_blk, K_TILES, kb + 1)
                                             : sc;
            const int s = pos.stage();
            mbar_wait(m.full(s), pos.phase());
            const unsigned stage = m.stage(s);
            const unsigned long long da = desc_kmajor_sw128(stage + cw * Cfg::CHUNK_BYTES);
            if constexpr (Cfg::PROMOTE) {
#pragma unroll
                for (int h = 0; h < HALVES; ++h) {
                    // B's rows 128 h.. (K-major, 128 bytes each) are 16 KiB h into the B tile.
                    const unsigned long long db = desc_kmajor_sw128(stage + Cfg::A_BYTES + h * 128 * 128);
                    fence_operands(part);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / 32; ++kk) wgmma_e4m3_n128(part, da + 2 * kk, db + 2 * kk, kk > 0);
                    wgmma_commit();
                    fence_operands(part);
                    wgmma_wait<0>();
                    fence_operands(part);
                    if (h == HALVES - 1) mbar_arrive(m.empty(s));  // the stage is read: the producer may refill it
                    const float s0 = sc.a0 * sc.b[h], s1 = sc.a1 * sc.b[h];
                    float(&acc_h)[64] = half_of(acc, h);
#pragma unroll
                    for (int i = 0; i < 64; ++i) acc_h[i] = fmaf(part[i], (i & 2) ? s1 : s0, acc_h[i]);
                }
            } else {
                fence_operands(acc);
                wgmma_fence();
#pragma unroll
                for (int h = 0; h < HALVES; ++h) {
                    const unsigned long long db = desc_kmajor_sw128(stage + Cfg::A_BYTES + h * 128 * 128);
#pragma unroll
                    for (int kk = 0; kk < BK / 32; ++kk)
                        wgmma_e4m3_n128(half_of(acc, h), da + 2 * kk, db + 2 * kk, (kb > 0 || kk > 0) ? 1 : 0);
                }
                wgmma_commit();
                fence_operands(acc);
                wgmma_wait<0>();
                fence_operands(acc);
                mbar_arrive(m.empty(s));
            }
            sc = next;  // !PROMOTE keeps k block 0's
        }
        if constexpr (!Cfg::PROMOTE) {
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[i] *= ((i & 2) ? sc.a1 : sc.a0) * sc.b[i / 64];
        }
        // A TMA box may not reach into the next expert's rows: TMA only for a full 64-row half.
        if constexpr (Cfg::EPI_TMA) {
            if (rows_valid >= (cw + 1) * 64) {
                store_tile_tma<Cfg>(acc, m, cw, warp & 3, lane, [&](int j, unsigned src) {
                    tma_store_2d(&tma_c, src, n0 + 64 * j, row0 + cw * 64);
                });
                continue;
            }
        }
        store_tile<Cfg, false>(acc, c + static_cast<long long>(row0) * N + n0, N, r_base, rows_valid, N - n0, lane);
    }
    if (Cfg::EPI_TMA && (warp & 3) == 0 && lane == 0) bulk_wait_all();
}

template <int THREADS, class Cfg, int N, int K>
__global__ void __launch_bounds__(THREADS, 1) group_gemm_nk_kernel(const __grid_constant__ kargs::Sm90Fp8NkArgs args) {
    group_gemm_nk<Cfg, N, K>(args.tma_a, args.tma_b, args.tma_c, static_cast<typename Cfg::CT *>(args.c), args.a_scale,
                             args.b_scale, args.offsets, args.rows, args.num_experts, args.m_tile_bound);
}

}  // namespace fp8
}  // namespace sm90
}  // namespace moejit
