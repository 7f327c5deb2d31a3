// The operand pipeline of the wgmma GEMMs: the tile configuration and its shared-memory
// layout, and the STAGES-deep ring of stages between the producer warpgroup and the two
// consumer warpgroups. Each stage has a `full` mbarrier (TMA completes the stage's bytes on it,
// or the gathering threads arrive) and an `empty` mbarrier (every consumer thread releases it).
#pragma once

#include "sm90/ptx.cuh"

namespace moejit {
namespace sm90 {

// ---------------------------------------------------------------- configuration

constexpr int kGatherThreads = 128;  // the producer warpgroup copies gathered rows

// BM = 128 (two consumer warpgroups of 64 rows), BK = 64 (one 128-byte swizzle row of 16-bit
// elements), BN in {64, 128, 256}. Host mirror: gemm_smem_bytes in src/dispatch/tile_config.cpp.
// EPI_TMA: the epilogue stages each consumer's 64 x BN tile in shared memory (16-bit C) and
// TMA stores it asynchronously, so the next tile's wgmmas overlap the store.
template <class T_, class CT_, int BN_, int STAGES_, int GROUP_M_, bool EPI_TMA_ = false> struct Config {
    using T = T_;
    using CT = CT_;
    static constexpr int BM = 128, BK = 64, BN = BN_, STAGES = STAGES_, GROUP_M = GROUP_M_;
    static constexpr bool EPI_TMA = EPI_TMA_;
    static constexpr int C_STAGE_BYTES = EPI_TMA ? BM * BN * 2 : 0;  // both consumers' tiles
    static constexpr int CONSUMERS = 2;
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int CHUNK_BYTES = 64 * 128;  // one 64 x 64 MN-major TMA box
    static constexpr int ACC = BN / 2;             // fp32 accumulators per consumer thread
    // Register split (64K per SM, one CTA): producer 40, consumers 232: 128*40 + 256*232 <= 64K.
    // The sum is the CTA's launch allocation (168 x 384): setmaxnreg.inc waits for registers
    // the producer released, so asking for more than that deadlocks.
    static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(sizeof(T) == 2, "operands are 16-bit");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN must be 64, 128 or 256");
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages stay 1024-byte aligned");
    static_assert(!EPI_TMA || sizeof(CT) == 2, "the TMA-store epilogue stages 16-bit C");
};

// Shared memory: 1 KiB alignment slack, STAGES x (A, B), (EPI_TMA) the C staging tiles, a
// full and an empty mbarrier per stage, 16 ints of scan scratch, then (same_nk) cum[E+1].
template <class Cfg> struct Smem {
    unsigned base;   // shared address of stage 0 (1024-byte aligned)
    unsigned cstage; // C staging: consumer c's 64 x BN tile at cstage + c * BN * 128
    unsigned full0;  // full[s] = full0 + 8 s: TMA completed the stage's bytes
    unsigned empty0; // empty[s]: every consumer thread released the stage
    int *scratch;    // 16 ints
    __device__ __forceinline__ unsigned stage(int s) const { return base + s * Cfg::STAGE_BYTES; }
    __device__ __forceinline__ unsigned full(int s) const { return full0 + 8 * s; }
    __device__ __forceinline__ unsigned empty(int s) const { return empty0 + 8 * s; }
};

template <class Cfg> __device__ __forceinline__ Smem<Cfg> carve_smem(unsigned char *smem_raw) {
    Smem<Cfg> m;
    const unsigned raw = smem_u32(smem_raw);
    m.base = (raw + 1023u) & ~1023u;
    unsigned char *const gbase = smem_raw + (m.base - raw);
    m.cstage = m.base + Cfg::STAGES * Cfg::STAGE_BYTES;
    m.full0 = m.cstage + Cfg::C_STAGE_BYTES;
    m.empty0 = m.full0 + 8 * Cfg::STAGES;
    m.scratch = reinterpret_cast<int *>(gbase + Cfg::STAGES * Cfg::STAGE_BYTES + Cfg::C_STAGE_BYTES +
                                        16 * Cfg::STAGES);
    return m;
}

// Thread 0: every barrier, made visible to TMA and the other threads (publish with a
// __syncthreads before use); the tensor maps prefetched. A stage is full after the TMA
// thread's expect_tx and, when an operand is gathered, every gathering thread's arrival.
template <class Cfg, bool GATHER>
__device__ __forceinline__ void init_ring(const Smem<Cfg> &m, const TmaDesc &a, const TmaDesc &b) {
#pragma unroll
    for (int s = 0; s < Cfg::STAGES; ++s) {
        mbar_init(m.full(s), 1 + (GATHER ? kGatherThreads : 0));
        mbar_init(m.empty(s), 128 * Cfg::CONSUMERS);    // every consumer thread
    }
    mbar_init_fence();
    tma_prefetch(&a);
    tma_prefetch(&b);
}

// Position in the ring, advanced once per k-slice by the producer and by each consumer.
template <int STAGES> struct RingPos {
    int it = 0;
    __device__ __forceinline__ int stage() const { return it % STAGES; }
    __device__ __forceinline__ unsigned phase() const { return static_cast<unsigned>(it / STAGES) & 1u; }
};

// ---------------------------------------------------------------- producer

// Producer: waits for stage `pos` to be free (a fresh barrier passes parity 1 at once).
template <class Cfg>
__device__ __forceinline__ unsigned producer_wait(const Smem<Cfg> &m, const RingPos<Cfg::STAGES> &pos) {
    mbar_wait(m.empty(pos.stage()), pos.phase() ^ 1u);
    return m.stage(pos.stage());
}

// ---------------------------------------------------------------- producer: gathered rows

// A gathered operand (same_nk's A): scattered row s is row row_token[s] of the source [T, ld]
// (x, in fc1), so forward never materializes x's [S, H] scatter. TMA cannot gather rows on sm_90, so the
// producer warpgroup's 128 threads copy the box with 16-byte cp.async into the layout TMA would
// write (128-byte swizzle), then arrive on the stage's full barrier when their copies landed.
// Thread p copies 16-byte unit p % 8 of rows p / 8 + 16 i.
template <int ROWS> struct GatherRows {
    static constexpr int PER_THREAD = ROWS / 16;
    int token[PER_THREAD];  // the source row, or -1: zero-fill
    // Rows [first, first + valid) of the scattered operand; rows from `valid` on read as zeros.
    __device__ __forceinline__ void load(const int *__restrict__ row_token, int first, int valid, int p) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int r = (p >> 3) + 16 * i;
            token[i] = r < valid ? __ldg(row_token + first + r) : -1;
        }
    }
};

// The ROWS x 64 box at column col0 (columns from `cols` on read as zeros) -> the swizzled tile
// at dst (rows 128 B apart; 16-byte unit u of row r at u ^ (r % 8)).
template <class T, int ROWS>
__device__ __forceinline__ void gather_box(unsigned dst, const T *__restrict__ src, long long ld,
                                           const GatherRows<ROWS> &g, int col0, int cols, int p) {
    const int unit = p & 7, col = col0 + unit * 8;
    const unsigned swizzled = static_cast<unsigned>((unit ^ ((p >> 3) & 7)) << 4);
#pragma unroll
    for (int i = 0; i < GatherRows<ROWS>::PER_THREAD; ++i) {
        const int r = (p >> 3) + 16 * i;
        const bool ok = g.token[i] >= 0 && col < cols;
        const T *from = ok ? src + static_cast<long long>(g.token[i]) * ld + col : src;
        cp_async16_zfill(dst + r * 128 + swizzled, from, ok ? 16 : 0);
    }
}

// ---------------------------------------------------------------- consumers

// Consumer: the k-slice's wgmmas on stage `pos` (after its bytes landed, and after `prepare`
// ran on it), keeping one wgmma group in flight: the previous slice's stage is released once
// its group retired. A_MN / B_MN: the operand is MN-major (chunks of 64 k-rows x 64 elements).
template <class Cfg, bool A_MN, bool B_MN, class Prepare>
__device__ __forceinline__ void consume_kslice(const Smem<Cfg> &m, const RingPos<Cfg::STAGES> &pos,
                                               int consumer, bool first, int &prev_stage,
                                               float (&acc)[Cfg::ACC], Prepare prepare) {
    const int s = pos.stage();
    mbar_wait(m.full(s), pos.phase());
    const unsigned stage = m.stage(s);
    prepare(stage);
    // Both A layouts put consumer c's 64 rows (K-major) or 64 M (MN-major) 8 KiB into the stage.
    const unsigned a = stage + consumer * Cfg::CHUNK_BYTES, b = stage + Cfg::A_BYTES;
    const unsigned long long da = A_MN ? desc_mnmajor_sw128(a) : desc_kmajor_sw128(a);
    const unsigned long long db = B_MN ? desc_mnmajor_sw128(b) : desc_kmajor_sw128(b);
    constexpr unsigned long long a_step = A_MN ? 128 : 2, b_step = B_MN ? 128 : 2;
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 16; ++kk)
        Wgmma<typename Cfg::T, Cfg::BN, A_MN, B_MN>::run(acc, da + a_step * kk, db + b_step * kk, 1);
    wgmma_commit();
    fence_operands(acc);
    wgmma_wait<1>();
    fence_operands(acc);
    if (!first) mbar_arrive(m.empty(prev_stage));
    prev_stage = s;
}

// Consumer, after a tile's last k-slice: retire the last group and release its stage.
template <class Cfg>
__device__ __forceinline__ void consume_finish(const Smem<Cfg> &m, int prev_stage, float (&acc)[Cfg::ACC]) {
    wgmma_wait<0>();
    fence_operands(acc);
    mbar_arrive(m.empty(prev_stage));
}

// Gathered stages need no consumer-side proxy fence: the full barrier's completion by
// cp.async.mbarrier.arrive orders the copies before the wgmmas (as in CUTLASS's cp.async GMMA
// mainloops); the gathered-row GPU tests check it.
struct NoPrepare {
    __device__ __forceinline__ void operator()(unsigned) const {}
};

}  // namespace sm90
}  // namespace moejit
