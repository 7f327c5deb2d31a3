// The epilogues of the wgmma GEMMs, from a consumer's fp32 accumulators: predicated register
// stores (any C type, optionally accumulating; also the fp32 partial tiles of split same_mn),
// the TMA-store epilogue through a swizzled staging tile (16-bit C), and fc1's SwiGLU epilogue.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"
#include "swiglu.cuh"
#include "sm90/pipeline.cuh"

namespace moejit {
namespace sm90 {

// Two values rounded to 16 bits and packed (the pointer only picks the type).
__device__ __forceinline__ unsigned pack2(__nv_bfloat16 *, float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<unsigned *>(&v);
}
__device__ __forceinline__ unsigned pack2(__half *, float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<unsigned *>(&v);
}
__device__ __forceinline__ unsigned pack2(float *, float, float) { return 0; }  // never staged

// ---------------------------------------------------------------- register and TMA stores

// Registers -> C (row-major, leading dimension ld), rows clipped to rows_valid, columns to
// cols_valid; ACCUMULATE adds the old C. r_base: this thread's first row in the tile.
template <class Cfg, bool ACCUMULATE, class CT>
__device__ __forceinline__ void store_tile(const float (&acc)[Cfg::ACC], CT *c_tile, long long ld, int r_base,
                                           int rows_valid, int cols_valid, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r_base + 8 * h;
        if (r >= rows_valid) continue;
        CT *const row = c_tile + static_cast<long long>(r) * ld;
#pragma unroll
        for (int j = 0; j < Cfg::BN / 8; ++j) {
            const int col = j * 8 + (lane & 3) * 2;
            if (col >= cols_valid) continue;
            float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if constexpr (ACCUMULATE) {
                const float2 old = load2(row + col);
                v0 = old.x + v0;
                v1 = old.y + v1;
            }
            store2(row + col, v0, v1);
        }
    }
}

// Two values rounded to CT -> row r of a swizzled 64 x 64 chunk at `chunk` (rows 128 B apart;
// 16-byte unit q of row r at q ^ (r % 8)), this thread's 4 bytes of the unit.
template <class CT>
__device__ __forceinline__ void stage_pair(unsigned chunk, int r, int q, int lane, float a, float b) {
    const unsigned addr = chunk + r * 128 + ((q ^ (r % 8)) << 4) + (lane & 3) * 4;
    const unsigned bits = pack2(static_cast<CT *>(nullptr), a, b);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(bits) : "memory");
}

// Chunk j (columns 64 j ..) of one m64 row block's accumulators -> a swizzled 64 x 64 chunk.
template <class Cfg>
__device__ __forceinline__ void stage_chunk(const float (&acc)[Cfg::ACC], unsigned chunk, int j, int warp_in_group,
                                            int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = warp_in_group * 16 + (lane >> 2) + 8 * h;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const int g = 8 * j + q;  // accumulator group: columns 8 g ..
            stage_pair<typename Cfg::CT>(chunk, r, q, lane, acc[4 * g + 2 * h], acc[4 * g + 2 * h + 1]);
        }
    }
}

// One m64 row block's accumulators -> its swizzled 64 x BN staging tile at `tile` (BN / 64
// chunks, 64 x 128 B apart).
template <class Cfg>
__device__ __forceinline__ void stage_row_block(const float (&acc)[Cfg::ACC], unsigned tile, int warp_in_group,
                                                int lane) {
#pragma unroll
    for (int j = 0; j < Cfg::BN / 64; ++j) stage_chunk<Cfg>(acc, tile + j * (64 * 128), j, warp_in_group, lane);
}

// The store ring's step for the ring's chunk n of a tile (Cfg::RING_SLOTS > 0): its slot is
// n % RING_SLOTS; before it is rewritten every store group but the newest RING_SLOTS - 1 has
// read its slot (the leader waits, the consumer's barrier holds the others); `stage(slot)`
// fills it, then the leader stores it with `store(slot)` as one commit group.
template <class Cfg, class Stage, class Store>
__device__ __forceinline__ void ring_step(const Smem<Cfg> &m, int consumer, int n, bool leader, Stage stage,
                                          Store store) {
    const unsigned slot = m.cstage + (consumer * Cfg::RING_SLOTS + n % Cfg::RING_SLOTS) * (64 * 128);
    if (leader) bulk_wait_read_all_but<Cfg::RING_SLOTS - 1>();
    warpgroup_sync(consumer);
    stage(slot);
    fence_proxy_async_smem();
    warpgroup_sync(consumer);
    if (leader) {
        store(slot);
        bulk_commit();
    }
}

// The TMA-store epilogue of consumer `consumer`'s 64 x BN rows: registers -> its 128-byte
// swizzled staging tile (64-column chunks, as the C map's 64 x 64 box expects), then one thread
// stores the chunks with `store_chunk(j, src)` and commits; the previous tile's stores must
// have finished reading the buffer first. Conflict-free: the swizzle spreads a warp's 8 rows
// over all banks. With the store ring (Cfg::RING_SLOTS > 0) chunk j goes through slot
// j % RING_SLOTS, one commit group per chunk: before a slot is rewritten, every group but the
// newest RING_SLOTS - 1 has read its slot (a tile's chunks, BN / 64 here plus aw's when
// store_swiglu_aw_ring follows, are a multiple of RING_SLOTS, so chunk 0 of the next tile
// finds slot 0 last used RING_SLOTS chunks before).
template <class Cfg, class StoreChunk>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[Cfg::ACC], const Smem<Cfg> &m, int consumer,
                                               int warp_in_group, int lane, StoreChunk store_chunk) {
    const bool leader = warp_in_group == 0 && lane == 0;
    if constexpr (Cfg::RING_SLOTS > 0) {
        static_assert((Cfg::BN / 64) % Cfg::RING_SLOTS == 0, "whole rounds of the ring per tile");
#pragma unroll
        for (int j = 0; j < Cfg::BN / 64; ++j)
            ring_step<Cfg>(
                m, consumer, j, leader, [&](unsigned slot) { stage_chunk<Cfg>(acc, slot, j, warp_in_group, lane); },
                [&](unsigned slot) { store_chunk(j, slot); });
        return;
    }
    const unsigned tile = m.cstage + consumer * Cfg::BN * 128;
    if (leader) bulk_wait_read();
    warpgroup_sync(consumer);
    stage_row_block<Cfg>(acc, tile, warp_in_group, lane);
    fence_proxy_async_smem();
    warpgroup_sync(consumer);
    if (leader) {
#pragma unroll
        for (int j = 0; j < Cfg::BN / 64; ++j) store_chunk(j, tile + j * (64 * 128));
        bulk_commit();
    }
}

// The TMA-store epilogue of a ping-pong consumer's 128 x BN tile: its first `blocks` (0-2, the
// same in every thread) m64 row blocks through their staging tiles (2 consumer + block), stored
// with `store_chunk(block, j, src)`; the caller stores the others from registers.
template <class Cfg, class StoreChunk>
__device__ __forceinline__ void store_tile_tma_rows2(const float (&acc)[2][Cfg::ACC], const Smem<Cfg> &m,
                                                     int consumer, int warp_in_group, int lane, int blocks,
                                                     StoreChunk store_chunk) {
    const bool leader = warp_in_group == 0 && lane == 0;
    const unsigned tile0 = m.cstage + 2 * consumer * Cfg::BN * 128;
    if (leader) bulk_wait_read();
    warpgroup_sync(consumer);
#pragma unroll
    for (int b = 0; b < 2; ++b)
        if (b < blocks) stage_row_block<Cfg>(acc[b], tile0 + b * Cfg::BN * 128, warp_in_group, lane);
    fence_proxy_async_smem();
    warpgroup_sync(consumer);
    if (leader) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            if (b >= blocks) continue;
#pragma unroll
            for (int j = 0; j < Cfg::BN / 64; ++j) store_chunk(b, j, tile0 + b * Cfg::BN * 128 + j * (64 * 128));
        }
        bulk_commit();
    }
}

// ---------------------------------------------------------------- the SwiGLU epilogue

// fc1 fused with SwiGLU (docs/DESIGN.md §2): a same_nk over N = 2I columns whose every BN-wide tile
// is [gate | up] of the same BN/2 intermediate columns j0 = n0/2..: B's first BN/2 rows are
// W_gate's rows j0.. (tma_b), the other BN/2 W_up's (tma_b2 from row UP_ROW + j0: 0 for a
// separate W_up, I for merged W_gate_up, where tma_b2 is tma_b). So each thread holds g and u of
// the same elements: accumulator group j (gate) and j + BN/16 (up). The epilogue stores g to C,
// u to `up` (row stride LD: I split, 2I merged) and aw = silu(g')·u'·w_s (row stride I), a from
// the rounded g and u as the standalone SwiGLU kernel computes it: bitwise the same results.
// With EPI_TMA (BN >= 128) g and u of full 64-row halves leave through the staging tile and
// TMA (tma_c over g, tma_c2 over u, each [S, I] with row stride LD), aw from registers.
using GluArgs = kargs::GluArgs;  // up, aw, w_s, limit (kernel_args.h)

struct NoGlu {
    static constexpr bool ON = false;
    static constexpr int UP_ROW = 0;
};

template <bool LIMIT_, int LD_, int UP_ROW_> struct SwigluGlu {
    static constexpr bool ON = true, LIMIT = LIMIT_;
    static constexpr int LD = LD_, UP_ROW = UP_ROW_;
};

// The store ring carries aw too (a third output after g and u, as SonicMoE's and CUTLASS's
// subtiled epilogues do) where a tile's chunks (BN / 64 of g and u, BN / 128 >= 1 of aw) make
// whole rounds of the ring, so the next tile starts at slot 0: BN 256. Host mirror:
// aw_through_ring in src/gemm/group_gemm_sm90.cpp (it encodes aw's map for these kernels only).
template <class Cfg> constexpr bool aw_through_ring() {
    return Cfg::RING_SLOTS > 0 && Cfg::BN >= 128 && (Cfg::BN / 64 + Cfg::BN / 128) % Cfg::RING_SLOTS == 0;
}

// After store_tile_tma's g and u chunks: aw = silu(g')·u'·w_s of consumer `consumer`'s 64 full
// rows (row0: the tile's first row in S, r_base: this thread's first row), from the rounded g
// and u as store_swiglu_tile computes it, in 64 x 64 chunks through the same ring (chunk j after
// the BN / 64 of g and u), each stored with `store_chunk(j, src)`.
template <class Cfg, class Glu, class StoreChunk>
__device__ __forceinline__ void store_swiglu_aw_ring(const float (&acc)[Cfg::ACC], const Smem<Cfg> &m, int consumer,
                                                     int warp_in_group, int lane, const kargs::GluArgs &glu, int row0,
                                                     StoreChunk store_chunk) {
    static_assert(aw_through_ring<Cfg>(), "aw's chunks complete the ring's rounds");
    using CT = typename Cfg::CT;
    constexpr int UP_J = Cfg::BN / 16, GU_CHUNKS = Cfg::BN / 64;
    const bool leader = warp_in_group == 0 && lane == 0;
    float w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) w[h] = glu.w_s[row0 + consumer * 64 + warp_in_group * 16 + (lane >> 2) + 8 * h];
    auto stage_aw = [&](unsigned slot, int j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = warp_in_group * 16 + (lane >> 2) + 8 * h;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const int gate = 8 * j + q, up = gate + UP_J;  // accumulator groups of the same columns
                const float g0 = to_float(from_float<CT>(acc[4 * gate + 2 * h]));
                const float g1 = to_float(from_float<CT>(acc[4 * gate + 2 * h + 1]));
                const float u0 = to_float(from_float<CT>(acc[4 * up + 2 * h]));
                const float u1 = to_float(from_float<CT>(acc[4 * up + 2 * h + 1]));
                stage_pair<CT>(slot, r, q, lane, swiglu_detail::swiglu_value<Glu::LIMIT>(g0, u0, glu.limit) * w[h],
                               swiglu_detail::swiglu_value<Glu::LIMIT>(g1, u1, glu.limit) * w[h]);
            }
        }
    };
#pragma unroll
    for (int j = 0; j < Cfg::BN / 128; ++j)
        ring_step<Cfg>(
            m, consumer, GU_CHUNKS + j, leader, [&](unsigned slot) { stage_aw(slot, j); },
            [&](unsigned slot) { store_chunk(j, slot); });
}

// Registers -> (STORE_GU) g (C) and u, and aw, for this thread's two rows of the tile, columns
// clipped to the I - j0 left; row0: the tile's first row in S.
template <class Cfg, class Glu, int I, bool STORE_GU>
__device__ __forceinline__ void store_swiglu_tile(const float (&acc)[Cfg::ACC], typename Cfg::CT *__restrict__ g_out,
                                                  const GluArgs &glu, int row0, int r_base, int rows_valid, int j0,
                                                  int lane) {
    using CT = typename Cfg::CT;
    constexpr int UP_J = Cfg::BN / 16;  // the up half's first accumulator group
    CT *const u_out = static_cast<CT *>(glu.up);
    CT *const aw_out = static_cast<CT *>(glu.aw);
    const int cols_valid = I - j0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r_base + 8 * h;
        if (r >= rows_valid) continue;
        const long long row = row0 + r;
        const float w = glu.w_s[row];
#pragma unroll
        for (int j = 0; j < UP_J; ++j) {
            const int col = j * 8 + (lane & 3) * 2;
            if (col >= cols_valid) continue;
            const float g0 = to_float(from_float<CT>(acc[4 * j + 2 * h]));
            const float g1 = to_float(from_float<CT>(acc[4 * j + 2 * h + 1]));
            const float u0 = to_float(from_float<CT>(acc[4 * (j + UP_J) + 2 * h]));
            const float u1 = to_float(from_float<CT>(acc[4 * (j + UP_J) + 2 * h + 1]));
            if constexpr (STORE_GU) {
                const long long at = row * Glu::LD + j0 + col;
                store2(g_out + at, g0, g1);
                store2(u_out + at, u0, u1);
            }
            const float a0 = swiglu_detail::swiglu_value<Glu::LIMIT>(g0, u0, glu.limit);
            const float a1 = swiglu_detail::swiglu_value<Glu::LIMIT>(g1, u1, glu.limit);
            store2(aw_out + row * I + j0 + col, a0 * w, a1 * w);
        }
    }
}

}  // namespace sm90
}  // namespace moejit
