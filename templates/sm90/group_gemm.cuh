// The wgmma engine (sm_90a) of the grouped GEMMs: same_nk (C[rows of e] (+)= A · B_e or B_eᵀ,
// forward and input gradients) and same_mn (C[e] (+)= A_eᵀ · B_e, weight gradients, with an
// optional deterministic split of long reductions), picked by the tile heuristic on cc 9.0.
//
// Structure (one CTA per SM, persistent):
//   warpgroup 0   producer: one thread walks the tile schedule and issues TMA loads
//                 (cp.async.bulk.tensor) of the A and B k-slices into a STAGES-deep ring of
//                 shared-memory stages; each stage has a `full` mbarrier (TMA completes bytes
//                 on it) and an `empty` mbarrier (consumers release it). A same_nk whose A rows
//                 are gathered (GATHER_A, fc1 reading x by row_token) has all 128 producer
//                 threads copy A with cp.async instead, each arriving on `full`.
//   warpgroups 1-2 consumers: 64 rows of the 128-row tile each, wgmma.mma_async m64nBNk16
//                 from shared memory (K- or MN-major operands, 128-byte swizzle), fp32
//                 accumulators in registers, then a TMA-store epilogue through shared memory
//                 (16-bit C) or a predicated register epilogue (fc1 with SwiGLU: g, u and aw).
// Tile schedule: the same device scheduler as the mma.sync kernels (group_gemm_schedule.cuh)
// over `offsets`, capped by the host bound from S, so the launch-bound invariant holds.
// Every kernel of the engine includes this header. The parts: sm90/ptx.cuh (inline-PTX
// wrappers), sm90/pipeline.cuh (configuration, shared memory and the stage ring),
// sm90/epilogue.cuh (accumulators -> C), sm90/split_reduce.cuh (the split same_mn's second
// launch).
#pragma once

// Include order sets the order of the namespace-scope constants, which -default-device emits
// as device variables into every cubin: reordering changes the cubins' bytes (not the code).
#include "moejit_common.cuh"
#include "group_gemm_schedule.cuh"
#include "expert_scan.cuh"
#include "swiglu.cuh"
#include "sm90/ptx.cuh"
#include "sm90/pipeline.cuh"
#include "sm90/epilogue.cuh"
#include "sm90/split_reduce.cuh"

namespace moejit {
namespace sm90 {

// ---------------------------------------------------------------- same_nk

// C[rows of e] (+)= A[rows of e] · B_e(ᵀ), A [S,K], C [S,N].
// tma_a: 2D map over A, dims {K, S}, box {BK, BM} (rows >= S zero-filled).
// tma_c (EPI_TMA): 2D map over C, dims {N, S}, box {64, 64}.
// tma_b: B_TRANSPOSED: B [E,N,K], 3D dims {K, N, E}, box {BK, BN, 1} (K-major);
//        else B [E,K,N], 3D dims {N, K, E}, box {64, BK, 1}, BN/64 boxes per stage (MN-major).
// m_tile_bound: the host's bound ceil(rows/BM) + min(E, rows) on the M-tile count.
// Rows past an expert's end are loaded (they belong to the next expert or are TMA zero-fill
// past S) but never stored; columns past N and k past K are TMA zero-fill.
// GATHER_A: A's rows are gathered from gather_src [T, K] by row_token (tma_a unused); rows past
// the expert's end are zero-filled instead.
// K_SPLIT > 0: the reduction runs over two operand pairs, k < K_SPLIT from (tma_a, tma_b) and
// k >= K_SPLIT from (tma_a2, tma_b2) at k - K_SPLIT (maps like tma_a/tma_b over K - K_SPLIT):
// C = [A | A2] · [B ; B2] in one fp32 accumulation, e.g. dxs = dg·W_gate + du·W_up of split fc1.
// K_SPLIT is a multiple of BK, so no k-slice straddles the pairs.
// Glu: NoGlu, or SwigluGlu (fc1 with the SwiGLU epilogue, see GluArgs; B_TRANSPOSED, tma_b's
// box BN/2 rows, g and u through TMA stores (EPI_TMA) or from registers, aw from registers, or
// with the store ring at BN 256 (aw_through_ring) through it by tma_a2: a 2D map over aw,
// dims {I, S}, box {64, 64}).
template <class Cfg, int N, int K, int K_SPLIT, bool B_TRANSPOSED, bool ACCUMULATE, bool GATHER_A, class Glu>
__device__ __forceinline__ void group_gemm_nk_sm90(const TmaDesc &tma_a, const TmaDesc &tma_b,
                                                   const TmaDesc &tma_c, const TmaDesc &tma_a2,
                                                   const TmaDesc &tma_b2, const TmaDesc &tma_c2,
                                                   typename Cfg::CT *__restrict__ c,
                                                   const typename Cfg::T *__restrict__ gather_src,
                                                   const int *__restrict__ row_token,
                                                   const int *__restrict__ offsets, int rows,
                                                   int num_experts, int m_tile_bound, const GluArgs &glu) {
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, THREADS = Cfg::THREADS;
    constexpr int N_TILES = (N + BN - 1) / BN;
    constexpr int K_TILES = (K + BK - 1) / BK;
    static_assert(N % 8 == 0 && K % 8 == 0, "N and K must be multiples of 8");
    static_assert(K_SPLIT == 0 || (K_SPLIT % BK == 0 && K_SPLIT < K && !GATHER_A),
                  "two operand pairs split K at a k-slice boundary, without gathered rows");
    static_assert(!Glu::ON || (B_TRANSPOSED && !ACCUMULATE && K_SPLIT == 0 && N % 16 == 0 &&
                               (!Cfg::EPI_TMA || BN >= 128)),
                  "the SwiGLU epilogue: forward B layout, N = 2I, TMA stores of whole 64-column chunks");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<Cfg> m = carve_smem<Cfg>(smem_raw);
    int *const warp_sums = m.scratch;
    int *const cum = m.scratch + 16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) {
        init_ring<Cfg, GATHER_A>(m, tma_a, tma_b);
        if constexpr (K_SPLIT > 0 || (Glu::ON && aw_through_ring<Cfg>())) tma_prefetch(&tma_a2);
        if constexpr (K_SPLIT > 0 || Glu::ON) tma_prefetch(&tma_b2);
    }

    // The experts' M-tiles (as the mma.sync kernel scans them); the scan's __syncthreads also
    // publish the barrier initialization.
    const int m_tiles = scan_nk_m_tiles<THREADS>(offsets, rows, num_experts, BM, m_tile_bound, warp_sums, cum);
    const int total_tiles = m_tiles * N_TILES;
    const int wg = warp >> 2;

    if (wg == 0) {
        // ------------------------------------------------ producer
        setmaxnreg_dec<Cfg::PRODUCER_REGS>();
        if (!GATHER_A && tid != 0) return;  // TMA only: one thread issues everything
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::NkTilePlace tp = sched::nk_tile_place(cum, offsets, num_experts, rows, N_TILES, Cfg::GROUP_M, BM, BN, t);
            const int row0 = tp.row0, n0 = tp.n0;
            GatherRows<BM> a_rows;
            if constexpr (GATHER_A) a_rows.load(row_token, row0, tp.row_end - row0, tid);
            for (int kb = 0; kb < K_TILES; ++kb, ++pos.it) {
                const unsigned stage = producer_wait(m, pos);
                const unsigned bar = m.full(pos.stage());
                if (tid == 0) {
                    // The k-slice's operand pair and its k inside that pair.
                    const bool second = K_SPLIT > 0 && kb * BK >= K_SPLIT;
                    const TmaDesc *const ta = second ? &tma_a2 : &tma_a, *const tb = second ? &tma_b2 : &tma_b;
                    const int k0 = kb * BK - (second ? K_SPLIT : 0);
                    // Full boxes count even where TMA zero-fills out-of-bounds elements.
                    mbar_arrive_expect_tx(bar, GATHER_A ? Cfg::B_BYTES : Cfg::STAGE_BYTES);
                    if constexpr (!GATHER_A) tma_load_2d(stage, ta, bar, k0, row0);
                    if constexpr (Glu::ON) {
                        // [gate rows | up rows] of intermediate columns n0/2.. (K-major, BN/2 each)
                        tma_load_3d(stage + Cfg::A_BYTES, &tma_b, bar, k0, n0 / 2, tp.expert);
                        tma_load_3d(stage + Cfg::A_BYTES + Cfg::B_BYTES / 2, &tma_b2, bar, k0, Glu::UP_ROW + n0 / 2,
                                    tp.expert);
                    } else if constexpr (B_TRANSPOSED) {
                        tma_load_3d(stage + Cfg::A_BYTES, tb, bar, k0, n0, tp.expert);
                    } else {
#pragma unroll
                        for (int j = 0; j < BN / 64; ++j)
                            tma_load_3d(stage + Cfg::A_BYTES + j * Cfg::CHUNK_BYTES, tb, bar, n0 + 64 * j, k0,
                                        tp.expert);
                    }
                }
                if constexpr (GATHER_A) {
                    gather_box<typename Cfg::T, BM>(stage, gather_src, K, a_rows, kb * BK, K, tid);
                    cp_async_arrive_noinc(bar);
                }
            }
        }
        if constexpr (GATHER_A) cp_async_wait_all();
    } else if constexpr (Cfg::PINGPONG) {
        // ------------------------------------------------ ping-pong consumers
        static_assert(!Glu::ON, "the SwiGLU epilogue runs on cooperative consumers");
        setmaxnreg_inc<Cfg::CONSUMER_REGS>();
        const PingpongThread me(wg, warp, lane);
        const int cw = me.consumer, wig = me.warp_in_group, r_base = me.r_base;
        const bool leader = me.leader;
        RingPos<Cfg::STAGES> pos;
        Turns turns;
        int j = 0;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x, ++j) {
            if ((j & 1) != cw) {  // the other consumer's tile: skip its k-slices in the ring
                pos.it += K_TILES;
                continue;
            }
            const sched::NkTilePlace tp = sched::nk_tile_place(cum, offsets, num_experts, rows, N_TILES, Cfg::GROUP_M, BM, BN, t);
            const int row0 = tp.row0, n0 = tp.n0;
            float acc[2][Cfg::ACC];
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[0][i] = acc[1][i] = 0.0f;
            turns.wait(m, cw);
            int prev = 0;
            for (int kb = 0; kb < K_TILES; ++kb, ++pos.it)
                consume_kslice_rows2<Cfg, false, !B_TRANSPOSED>(m, pos, kb == 0, prev, acc, NoPrepare{});
            turns.pass(m, cw, leader);
            consume_finish_rows2(m, prev, acc);  // K_TILES >= 1 (K >= 8)
            const int rows_valid = tp.row_end - row0;
            // A box may not reach into the next expert's rows: TMA only for whole 64-row blocks.
            int tma_blocks = 0;
            if constexpr (Cfg::EPI_TMA && !ACCUMULATE) {
                tma_blocks = rows_valid >= 128 ? 2 : rows_valid >= 64 ? 1 : 0;
                if (tma_blocks > 0)
                    store_tile_tma_rows2<Cfg>(acc, m, cw, wig, lane, tma_blocks, [&](int b, int jj, unsigned src) {
                        tma_store_2d(&tma_c, src, n0 + 64 * jj, row0 + 64 * b);
                    });
            }
            typename Cfg::CT *const c_tile = c + static_cast<long long>(row0) * N + n0;
            if (tma_blocks < 1) store_tile<Cfg, ACCUMULATE>(acc[0], c_tile, N, r_base, rows_valid, N - n0, lane);
            if (tma_blocks < 2)
                store_tile<Cfg, ACCUMULATE>(acc[1], c_tile + 64LL * N, N, r_base, rows_valid - 64, N - n0, lane);
        }
        if (Cfg::EPI_TMA && leader) bulk_wait_all();
    } else {
        // ------------------------------------------------ consumers
        setmaxnreg_inc<Cfg::CONSUMER_REGS>();
        const int cw = wg - 1;  // rows [cw*64, cw*64 + 64) of the tile
        const int r_base = cw * 64 + (warp & 3) * 16 + (lane >> 2);
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::NkTilePlace tp = sched::nk_tile_place(cum, offsets, num_experts, rows, N_TILES, Cfg::GROUP_M, BM, BN, t);
            const int row0 = tp.row0, n0 = tp.n0;
            float acc[Cfg::ACC];
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.0f;
            int prev = 0;
            for (int kb = 0; kb < K_TILES; ++kb, ++pos.it)
                consume_kslice<Cfg, false, !B_TRANSPOSED>(m, pos, cw, kb == 0, prev, acc, NoPrepare{});
            consume_finish(m, prev, acc);  // K_TILES >= 1 (K >= 8)
            const int rows_valid = tp.row_end - row0;
            if constexpr (Glu::ON) {
                if (Cfg::EPI_TMA && rows_valid >= (cw + 1) * 64) {
                    store_tile_tma<Cfg>(acc, m, cw, warp & 3, lane, [&](int j, unsigned src) {
                        constexpr int GATE_CHUNKS = BN / 128;  // [g chunks | u chunks] of 64 columns
                        if (j < GATE_CHUNKS)
                            tma_store_2d(&tma_c, src, n0 / 2 + 64 * j, row0 + cw * 64);
                        else
                            tma_store_2d(&tma_c2, src, n0 / 2 + 64 * (j - GATE_CHUNKS), row0 + cw * 64);
                    });
                    if constexpr (aw_through_ring<Cfg>())
                        // aw through the ring too, by its map in tma_a2's place (no second operand
                        // pair beside the SwiGLU epilogue).
                        store_swiglu_aw_ring<Cfg, Glu>(acc, m, cw, warp & 3, lane, glu, row0, [&](int j, unsigned src) {
                            tma_store_2d(&tma_a2, src, n0 / 2 + 64 * j, row0 + cw * 64);
                        });
                    else
                        store_swiglu_tile<Cfg, Glu, N / 2, false>(acc, c, glu, row0, r_base, rows_valid, n0 / 2, lane);
                } else {
                    store_swiglu_tile<Cfg, Glu, N / 2, true>(acc, c, glu, row0, r_base, rows_valid, n0 / 2, lane);
                }
                continue;
            }
            if constexpr (Cfg::EPI_TMA && !ACCUMULATE) {
                // A box may not reach into the next expert's rows: TMA only for full halves.
                if (rows_valid >= (cw + 1) * 64) {
                    store_tile_tma<Cfg>(acc, m, cw, warp & 3, lane, [&](int j, unsigned src) {
                        tma_store_2d(&tma_c, src, n0 + 64 * j, row0 + cw * 64);
                    });
                    continue;
                }
            }
            store_tile<Cfg, ACCUMULATE>(acc, c + static_cast<long long>(row0) * N + n0, N, r_base,
                                        rows_valid, N - n0, lane);
        }
        if (Cfg::EPI_TMA && (warp & 3) == 0 && lane == 0) bulk_wait_all();
    }
}

// ---------------------------------------------------------------- same_mn

// A weight-gradient k-slice's rows [valid, 64) that belong to the next segment or expert, zeroed
// by THREADS threads (`thread` = 0..THREADS-1) and made visible to wgmma; the caller's barrier
// then publishes them. Rows [valid, 64) of every 64-row chunk (A: 2, B: BN/64) are 16-byte units
// [valid*8, 512) of each chunk; the swizzle permutes inside a row only.
template <class Cfg, int THREADS>
__device__ __forceinline__ void zero_rows_past(unsigned stage, int valid, int thread) {
    constexpr int CHUNKS = (Cfg::A_BYTES + Cfg::B_BYTES) / Cfg::CHUNK_BYTES;
    const int per_chunk = (Cfg::BK - valid) * 8;
    for (int i = thread; i < CHUNKS * per_chunk; i += THREADS) {
        const int chunk = i / per_chunk, unit = valid * 8 + i % per_chunk;
        const unsigned addr = stage + chunk * Cfg::CHUNK_BYTES + unit * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
    }
    fence_proxy_async_smem();
}

// C[e] (+)= A_eᵀ · B_e over expert e's rows: A [S,M], B [S,N], C [E,M,N]; the reduction runs
// over the expert's rows in k-slices of 64 (both operands MN-major in shared memory).
// tma_a: 2D dims {M, S}, box {64, BK}, two boxes per stage (BM = 128);
// tma_b: 2D dims {N, S}, box {64, BK}, BN/64 boxes per stage.
// tma_c (EPI_TMA): 3D dims {N, M, E}, box {64, 64, 1}.
// A k-slice's rows past the segment's end (the next segment's or expert's) are zeroed in
// shared memory by the consumers before the wgmmas. An expert with no rows writes C[e] = 0
// (left untouched when accumulating).
// Split (split_rows > 0, sched::mn_item_tile): an expert with more than split_rows rows is
// reduced in segments whose fp32 partial tiles go to partials[cum_slots[e] + segment] (M x N
// each, plain stores); split_reduce_sm90 (sm90/split_reduce.cuh) then sums them into C[e] in
// segment order. CTA 0 publishes cum_slots[E+1] at partials_index for it. max_slots: the partial
// tiles the host's workspace holds (floor(2S / split_rows)); offsets that are not monotone can
// ask for more, and those partials are dropped (wrong results, never a write past the workspace).
template <class Cfg, int M, int N, bool ACCUMULATE>
__device__ __forceinline__ void group_gemm_mn_sm90(const TmaDesc &tma_a, const TmaDesc &tma_b,
                                                   const TmaDesc &tma_c, typename Cfg::CT *__restrict__ c,
                                                   const int *__restrict__ offsets, int rows,
                                                   int num_experts, int split_rows, int max_slots,
                                                   int *__restrict__ partials_index,
                                                   float *__restrict__ partials) {
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, THREADS = Cfg::THREADS;
    constexpr int M_TILES = (M + BM - 1) / BM;
    constexpr int N_TILES = (N + BN - 1) / BN;
    static_assert(M % 8 == 0 && N % 8 == 0, "M and N must be multiples of 8");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<Cfg> m = carve_smem<Cfg>(smem_raw);
    int *const warp_sums = m.scratch;
    int *const cum_items = m.scratch + 16;
    int *const cum_slots = cum_items + num_experts + 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) init_ring<Cfg, false>(m, tma_a, tma_b);
    auto count_of = [&](int e) {
        const sched::RowRange rr = sched::expert_rows(offsets, e, rows);
        return rr.end - rr.begin;
    };
    // The scans' __syncthreads also publish the barrier initialization.
    const int total_items = scan_experts<THREADS>(num_experts, warp_sums, cum_items, [&](int e) {
        return sched::mn_items(count_of(e), split_rows);
    });
    if (split_rows > 0) {
        scan_experts<THREADS>(num_experts, warp_sums, cum_slots, [&](int e) {
            return sched::mn_slots(count_of(e), split_rows);
        });
        if (blockIdx.x == 0)
            for (int e = tid; e <= num_experts; e += THREADS) partials_index[e] = cum_slots[e];
    }

    const int total_tiles = total_items * M_TILES * N_TILES;
    const int wg = warp >> 2;

    if (wg == 0) {
        // ------------------------------------------------ producer
        setmaxnreg_dec<Cfg::PRODUCER_REGS>();
        if (tid != 0) return;
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::MnItemTile it = sched::mn_item_tile(cum_items, num_experts, M_TILES, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::mn_item_rows(offsets, rows, split_rows, it);
            const int m0 = it.m_block * BM, n0 = it.n_block * BN;
            const int k_tiles = sched::ceil_div(rr.end - rr.begin, BK);
            for (int kb = 0; kb < k_tiles; ++kb, ++pos.it) {
                const unsigned stage = producer_wait(m, pos);
                const unsigned bar = m.full(pos.stage());
                mbar_arrive_expect_tx(bar, Cfg::STAGE_BYTES);  // full boxes, even where zero-filled
                const int k0 = rr.begin + kb * BK;
#pragma unroll
                for (int j = 0; j < BM / 64; ++j)
                    tma_load_2d(stage + j * Cfg::CHUNK_BYTES, &tma_a, bar, m0 + 64 * j, k0);
#pragma unroll
                for (int j = 0; j < BN / 64; ++j)
                    tma_load_2d(stage + Cfg::A_BYTES + j * Cfg::CHUNK_BYTES, &tma_b, bar, n0 + 64 * j, k0);
            }
        }
    } else if constexpr (Cfg::PINGPONG) {
        // ------------------------------------------------ ping-pong consumers
        setmaxnreg_inc<Cfg::CONSUMER_REGS>();
        const PingpongThread me(wg, warp, lane);
        const int cw = me.consumer, wig = me.warp_in_group, r_base = me.r_base;
        const bool leader = me.leader;
        const int wtid = tid - 128 * wg;
        RingPos<Cfg::STAGES> pos;
        Turns turns;
        int j = 0;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x, ++j) {
            const sched::MnItemTile it = sched::mn_item_tile(cum_items, num_experts, M_TILES, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::mn_item_rows(offsets, rows, split_rows, it);
            const int count = rr.end - rr.begin;
            const int k_tiles = sched::ceil_div(count, BK);
            if ((j & 1) != cw) {  // the other consumer's tile: skip its k-slices in the ring
                pos.it += k_tiles;
                continue;
            }
            const bool partial = sched::mn_is_split(count_of(it.expert), split_rows);
            const int m0 = it.m_block * BM, n0 = it.n_block * BN;
            turns.wait(m, cw);
            if (ACCUMULATE && k_tiles == 0) {  // C[e] += 0
                turns.pass(m, cw, leader);
                continue;
            }
            float acc[2][Cfg::ACC];
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[0][i] = acc[1][i] = 0.0f;
            int prev = 0;
            for (int kb = 0; kb < k_tiles; ++kb, ++pos.it) {
                const int valid = count - kb * BK;  // k-rows of this item in the slice
                auto zero_foreign_rows = [&](unsigned stage) {
                    if (valid >= BK) return;
                    zero_rows_past<Cfg, 128>(stage, valid, wtid);  // this consumer's threads alone
                    warpgroup_sync(cw);
                };
                consume_kslice_rows2<Cfg, true, true>(m, pos, kb == 0, prev, acc, zero_foreign_rows);
            }
            turns.pass(m, cw, leader);
            if (k_tiles > 0) consume_finish_rows2(m, prev, acc);
            if (partial) {
                const int slot_index = cum_slots[it.expert] + it.segment;
                if (slot_index >= max_slots) continue;
                float *const slot = partials + static_cast<long long>(slot_index) * M * N + static_cast<long long>(m0) * N + n0;
                store_tile<Cfg, false>(acc[0], slot, N, r_base, M - m0, N - n0, lane);
                store_tile<Cfg, false>(acc[1], slot + 64LL * N, N, r_base, M - m0 - 64, N - n0, lane);
                continue;
            }
            if constexpr (Cfg::EPI_TMA && !ACCUMULATE) {
                store_tile_tma_rows2<Cfg>(acc, m, cw, wig, lane, 2, [&](int b, int jj, unsigned src) {
                    tma_store_3d(&tma_c, src, n0 + 64 * jj, m0 + 64 * b, it.expert);
                });
            } else {
                typename Cfg::CT *const c_tile = c + (static_cast<long long>(it.expert) * M + m0) * N + n0;
                store_tile<Cfg, ACCUMULATE>(acc[0], c_tile, N, r_base, M - m0, N - n0, lane);
                store_tile<Cfg, ACCUMULATE>(acc[1], c_tile + 64LL * N, N, r_base, M - m0 - 64, N - n0, lane);
            }
        }
        if (Cfg::EPI_TMA && leader) bulk_wait_all();
    } else {
        // ------------------------------------------------ consumers
        setmaxnreg_inc<Cfg::CONSUMER_REGS>();
        const int cw = wg - 1;  // M rows [cw*64, cw*64 + 64) of the tile
        const int ctid = tid - 128;
        const int r_base = cw * 64 + (warp & 3) * 16 + (lane >> 2);
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::MnItemTile it = sched::mn_item_tile(cum_items, num_experts, M_TILES, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::mn_item_rows(offsets, rows, split_rows, it);
            const bool partial = sched::mn_is_split(count_of(it.expert), split_rows);
            const int m0 = it.m_block * BM, n0 = it.n_block * BN;
            const int count = rr.end - rr.begin;
            const int k_tiles = sched::ceil_div(count, BK);
            if (ACCUMULATE && k_tiles == 0) continue;  // C[e] += 0
            float acc[Cfg::ACC];
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.0f;
            int prev = 0;
            for (int kb = 0; kb < k_tiles; ++kb, ++pos.it) {
                const int valid = count - kb * BK;  // k-rows of this item in the slice
                auto zero_foreign_rows = [&](unsigned stage) {
                    if (valid >= BK) return;
                    zero_rows_past<Cfg, 256>(stage, valid, ctid);
                    consumers_sync();
                };
                consume_kslice<Cfg, true, true>(m, pos, cw, kb == 0, prev, acc, zero_foreign_rows);
            }
            if (k_tiles > 0) consume_finish(m, prev, acc);
            if (partial) {
                const int slot_index = cum_slots[it.expert] + it.segment;
                if (slot_index >= max_slots) continue;
                float *const slot = partials + static_cast<long long>(slot_index) * M * N;
                store_tile<Cfg, false>(acc, slot + static_cast<long long>(m0) * N + n0, N, r_base, M - m0, N - n0,
                                       lane);
                continue;
            }
            if constexpr (Cfg::EPI_TMA && !ACCUMULATE) {
                store_tile_tma<Cfg>(acc, m, cw, warp & 3, lane, [&](int j, unsigned src) {
                    tma_store_3d(&tma_c, src, n0 + 64 * j, m0 + cw * 64, it.expert);
                });
            } else {
                store_tile<Cfg, ACCUMULATE>(acc, c + (static_cast<long long>(it.expert) * M + m0) * N + n0, N,
                                            r_base, M - m0, N - n0, lane);
            }
        }
        if (Cfg::EPI_TMA && (warp & 3) == 0 && lane == 0) bulk_wait_all();
    }
}

}  // namespace sm90
}  // namespace moejit
