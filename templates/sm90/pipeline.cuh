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
// elements), BN in {64, 128, 256}. Host mirror: gemm_smem_bytes in src/gemm/tile_config.cpp.
// EPI_TMA: the epilogue stages each consumer's 64 x BN tile in shared memory (16-bit C) and
// TMA stores it asynchronously, so the next tile's wgmmas overlap the store.
// PINGPONG: each consumer warpgroup owns whole 128 x BN tiles (two m64 row blocks, BN <= 128),
// the two taking turns at the tensor cores: one warpgroup's epilogue runs under the other's
// mainloop (docs/DESIGN.md §3.5). Otherwise (cooperative) both share every tile, 64 rows each.
// PINGPONG_ 2 issues one row block's k-slice, then the other's (1 interleaves them per k16).
// EPI_RING (cooperative EPI_TMA): a consumer's 64 x BN rows leave in 64 x 64 chunks through
// RING_SLOTS staging slots of its own, one TMA store group per chunk, the chunk before last still
// storing while the next is staged: the staging holds RING_SLOTS chunks instead of the row block.
template <class T_, class CT_, int BN_, int STAGES_, int GROUP_M_, bool EPI_TMA_ = false, int PINGPONG_ = 0,
          bool EPI_RING_ = false>
struct Config {
    using T = T_;
    using CT = CT_;
    static constexpr int BM = 128, BK = 64, BN = BN_, STAGES = STAGES_, GROUP_M = GROUP_M_;
    static constexpr bool EPI_TMA = EPI_TMA_, PINGPONG = PINGPONG_ != 0, BLOCKED_ISSUE = PINGPONG_ == 2;
    static constexpr int RING_SLOTS = EPI_RING_ ? (BN / 64 < 2 ? BN / 64 : 2) : 0;
    // Staging for every consumer's share of its tile: 64 x BN each (cooperative), RING_SLOTS
    // 64 x 64 chunks each (the store ring), 128 x BN each (ping-pong).
    static constexpr int C_STAGE_BYTES =
        !EPI_TMA ? 0 : RING_SLOTS > 0 ? 2 * RING_SLOTS * 64 * 128 : BM * BN * 2 * (PINGPONG ? 2 : 1);
    static constexpr int CONSUMERS = 2;
    // m64 row blocks one consumer computes per tile, and the threads that release a stage.
    static constexpr int ROW_BLOCKS = PINGPONG ? 2 : 1;
    static constexpr int RELEASERS = PINGPONG ? 128 : 128 * CONSUMERS;
    static constexpr int TURN_BYTES = PINGPONG ? 16 : 0;  // the two turn mbarriers
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
    static_assert(!PINGPONG || BN <= 128, "a ping-pong consumer holds 128 x BN accumulators: BN <= 128");
    static_assert(!EPI_RING_ || (EPI_TMA && !PINGPONG), "the store ring is the cooperative TMA-store epilogue's");
};

// Shared memory: 1 KiB alignment slack, STAGES x (A, B), (EPI_TMA) the C staging tiles, a
// full and an empty mbarrier per stage, (PINGPONG) two turn mbarriers, 16 ints of scan
// scratch, then (same_nk) cum[E+1].
template <class Cfg> struct Smem {
    unsigned base;   // shared address of stage 0 (1024-byte aligned)
    unsigned cstage; // C staging: 64 x BN row block b at cstage + b * BN * 128 (cooperative: b =
                     // consumer; ping-pong: b = 2 consumer + row block); the store ring: consumer
                     // c's slot i at cstage + (c * RING_SLOTS + i) * 64 * 128
    unsigned full0;  // full[s] = full0 + 8 s: TMA completed the stage's bytes
    unsigned empty0; // empty[s]: every releasing consumer thread released the stage
    unsigned done0;  // PINGPONG: done[c] = done0 + 8 c: consumer c issued a tile's last k-slice
    int *scratch;    // 16 ints
    __device__ __forceinline__ unsigned stage(int s) const { return base + s * Cfg::STAGE_BYTES; }
    __device__ __forceinline__ unsigned full(int s) const { return full0 + 8 * s; }
    __device__ __forceinline__ unsigned empty(int s) const { return empty0 + 8 * s; }
    __device__ __forceinline__ unsigned done(int c) const { return done0 + 8 * c; }
};


template <class Cfg> __device__ __forceinline__ Smem<Cfg> carve_smem(unsigned char *smem_raw) {
    Smem<Cfg> m;
    const unsigned raw = smem_u32(smem_raw);
    m.base = (raw + 1023u) & ~1023u;
    unsigned char *const gbase = smem_raw + (m.base - raw);
    m.cstage = m.base + Cfg::STAGES * Cfg::STAGE_BYTES;
    m.full0 = m.cstage + Cfg::C_STAGE_BYTES;
    m.empty0 = m.full0 + 8 * Cfg::STAGES;
    m.done0 = m.empty0 + 8 * Cfg::STAGES;
    m.scratch = reinterpret_cast<int *>(gbase + Cfg::STAGES * Cfg::STAGE_BYTES + Cfg::C_STAGE_BYTES +
                                        16 * Cfg::STAGES + Cfg::TURN_BYTES);
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
        mbar_init(m.empty(s), Cfg::RELEASERS);  // every thread of the consumer(s) reading it
    }
    if constexpr (Cfg::PINGPONG) {
        mbar_init(m.done(0), 1);
        mbar_init(m.done(1), 1);
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

// ---------------------------------------------------------------- ping-pong consumers

// Consumer of a ping-pong kernel: the k-slice's wgmmas for both m64 row blocks of the tile (A's
// rows 64.. are 8 KiB into the stage in both A layouts), otherwise as consume_kslice.
template <class Cfg, bool A_MN, bool B_MN, class Prepare>
__device__ __forceinline__ void consume_kslice_rows2(const Smem<Cfg> &m, const RingPos<Cfg::STAGES> &pos,
                                                     bool first, int &prev_stage, float (&acc)[2][Cfg::ACC],
                                                     Prepare prepare) {
    const int s = pos.stage();
    mbar_wait(m.full(s), pos.phase());
    const unsigned stage = m.stage(s);
    prepare(stage);
    const unsigned b = stage + Cfg::A_BYTES;
    const unsigned long long da0 = A_MN ? desc_mnmajor_sw128(stage) : desc_kmajor_sw128(stage);
    const unsigned long long da1 =
        A_MN ? desc_mnmajor_sw128(stage + Cfg::CHUNK_BYTES) : desc_kmajor_sw128(stage + Cfg::CHUNK_BYTES);
    const unsigned long long db = B_MN ? desc_mnmajor_sw128(b) : desc_kmajor_sw128(b);
    constexpr unsigned long long a_step = A_MN ? 128 : 2, b_step = B_MN ? 128 : 2;
    fence_operands(acc[0]);
    fence_operands(acc[1]);
    wgmma_fence();
    using Mma = Wgmma<typename Cfg::T, Cfg::BN, A_MN, B_MN>;
    if constexpr (Cfg::BLOCKED_ISSUE) {
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 16; ++kk) Mma::run(acc[0], da0 + a_step * kk, db + b_step * kk, 1);
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 16; ++kk) Mma::run(acc[1], da1 + a_step * kk, db + b_step * kk, 1);
    } else {
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / 16; ++kk) {
            Mma::run(acc[0], da0 + a_step * kk, db + b_step * kk, 1);
            Mma::run(acc[1], da1 + a_step * kk, db + b_step * kk, 1);
        }
    }
    wgmma_commit();
    fence_operands(acc[0]);
    fence_operands(acc[1]);
    wgmma_wait<1>();
    fence_operands(acc[0]);
    fence_operands(acc[1]);
    if (!first) mbar_arrive(m.empty(prev_stage));
    prev_stage = s;
}

template <class Cfg>
__device__ __forceinline__ void consume_finish_rows2(const Smem<Cfg> &m, int prev_stage, float (&acc)[2][Cfg::ACC]) {
    wgmma_wait<0>();
    fence_operands(acc[0]);
    fence_operands(acc[1]);
    mbar_arrive(m.empty(prev_stage));
}

// A ping-pong consumer thread's place: consumer c = wg - 1 owns the CTA's tiles j with
// j % 2 == c, all 128 rows; r_base is its first row inside each 64-row block.
struct PingpongThread {
    int consumer, warp_in_group, r_base;
    bool leader;  // thread 0 of the consumer: issues its TMA stores, hands over its turn
    __device__ __forceinline__ PingpongThread(int wg, int warp, int lane)
        : consumer(wg - 1), warp_in_group(warp & 3), r_base((warp & 3) * 16 + (lane >> 2)),
          leader((warp & 3) == 0 && lane == 0) {}
};

// The turns of the two ping-pong consumers: tile j of a CTA belongs to consumer j % 2, and a
// consumer starts a tile's mainloop only after the other consumer issued its previous tile's
// last k-slice. Besides taking turns at the tensor cores, this keeps every consumer at most one
// ring phase ahead of the stages it waits on, which the parity waits need (a consumer that
// skipped the other's tiles could otherwise see a stage's parity of two phases back as ready).
struct Turns {
    int own = 0;  // tiles this consumer started
    // Before the mainloop of this consumer's next tile (tile j = 2 own + c).
    template <class Cfg> __device__ __forceinline__ void wait(const Smem<Cfg> &m, int c) const {
        const int other_tiles = own + c;  // the other consumer's tiles before tile j
        if (other_tiles > 0) mbar_wait(m.done(1 - c), static_cast<unsigned>(other_tiles - 1) & 1u);
    }
    // After its last k-slice was issued: the leader, whose own wait saw that slice's stage
    // filled, hands the turn over (the stage cannot refill before all 128 threads release it).
    template <class Cfg> __device__ __forceinline__ void pass(const Smem<Cfg> &m, int c, bool leader) {
        ++own;
        if (leader) mbar_arrive(m.done(c));
    }
};

// Gathered stages need no consumer-side proxy fence: the full barrier's completion by
// cp.async.mbarrier.arrive orders the copies before the wgmmas (as in CUTLASS's cp.async GMMA
// mainloops); the gathered-row GPU tests check it.
struct NoPrepare {
    __device__ __forceinline__ void operator()(unsigned) const {}
};

}  // namespace sm90
}  // namespace moejit
