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
// Rows past an expert's end are loaded (they belong to the next expert or are TMA zero-fill
// past S) but never stored; columns past N and k past K are TMA zero-fill.
// PTX is written as small inline wrappers: no <cuda/barrier> or CuTe (NVRTC compile time).
#pragma once

#include "moejit_common.cuh"
#include "group_gemm_schedule.cuh"
#include "expert_scan.cuh"
#include "swiglu.cuh"

namespace moejit {
namespace sm90 {

// A CUtensorMap (128 bytes, 64-byte aligned) as the device sees it: opaque, passed by value
// as a __grid_constant__ kernel parameter so TMA can read it from parameter space.
struct alignas(64) TmaDesc {
    unsigned long long opaque[16];
};

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the async (TMA) proxy and the other threads.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Producer: arrive once and announce `bytes` that TMA will complete on this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
    unsigned ok;
    asm volatile(
        "{ .reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p; }\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok != 0;
}
// Waits until the barrier's phase with this parity has completed. A fresh barrier counts as
// having completed the phase of parity 1, so producers wait on parity ^ 1 and pass at once.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

__device__ __forceinline__ void tma_prefetch(const TmaDesc *desc) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(desc))
                 : "memory");
}
// Box at coordinates (innermost first) -> shared memory, completing bytes on `bar`.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc *desc, unsigned bar,
                                            int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(desc)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaDesc *desc, unsigned bar,
                                            int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// Shared memory box -> global (clipped at the tensor's bounds), tracked by the bulk group.
__device__ __forceinline__ void tma_store_2d(const TmaDesc *desc, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(desc)),
                 "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void tma_store_3d(const TmaDesc *desc, unsigned src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(desc)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
// 16 bytes global -> shared with the generic cp.async; src_bytes = 0 writes 16 zero bytes.
__device__ __forceinline__ void cp_async16_zfill(unsigned dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
// Arrives on `bar` once this thread's earlier cp.async copies have landed; the arrival is one
// of the barrier's expected arrivals (.noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// The committed stores have finished reading shared memory (the buffer may be rewritten).
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// The committed stores are complete (before the CTA exits).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across the async wgmma window.
template <int R> __device__ __forceinline__ void fence_operands(float (&acc)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
// Makes this thread's generic-proxy shared-memory writes visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Barrier 1 over the two consumer warpgroups (barrier 0 is __syncthreads).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
}
// Barrier 2 + c over consumer warpgroup c's 128 threads.
__device__ __forceinline__ void warpgroup_sync(int consumer) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");
}

// wgmma shared-memory matrix descriptors of tiles written by TMA with 128-byte swizzle (rows of
// 64 16-bit elements, 128 B; 8-row swizzle atoms 1024 B apart = the stride byte offset). Tiles
// start 1024-byte aligned (base offset 0).
// K-major (rows = M or N, 64 k per row): the leading byte offset is unused (1, as CUTLASS
// sets it); a k16 step inside the row adds 32 B (+2 encoded).
__device__ __forceinline__ unsigned long long desc_kmajor_sw128(unsigned addr) {
    unsigned long long d = static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4);
    d |= 1ull << 16;
    d |= static_cast<unsigned long long>(1024 >> 4) << 32;
    d |= 1ull << 62;
    return d;
}
// MN-major (rows = k, 64 M or N elements per row, chunks of 64 k-rows x 64 elements 8 KiB
// apart for wider tiles): the leading byte offset is the chunk stride; a k16 step is 16 rows,
// 2048 B (+128 encoded).
__device__ __forceinline__ unsigned long long desc_mnmajor_sw128(unsigned addr) {
    unsigned long long d = static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4);
    d |= static_cast<unsigned long long>(8192 >> 4) << 16;
    d |= static_cast<unsigned long long>(1024 >> 4) << 32;
    d |= 1ull << 62;
    return d;
}

// D[64 x N] (+)= A[64 x 16] · B[16 x N] from shared memory; TA / TB = 1 when A / B are
// MN-major (M or N contiguous) rather than K-major. scale_d = 0 ignores the old D.
// Accumulator layout per thread (warp w of the warpgroup, lane l): register i holds row
// w*16 + l/4 + 8*((i/2)%2), column (i/4)*8 + (l%4)*2 + i%2.
template <class T, int N, int TA, int TB> struct Wgmma;
#define MJ_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                 "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define MJ_D32(i) MJ_D8(i), MJ_D8(i + 8), MJ_D8(i + 16), MJ_D8(i + 24)
#define MJ_REGS_N64 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define MJ_OUTS_N64 MJ_D32(0)
#define MJ_OPS_N64 "}, %32, %33, p, 1, 1, %35, %36; }\n"
#define MJ_REGS_N128 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define MJ_OUTS_N128 MJ_D32(0), MJ_D32(32)
#define MJ_OPS_N128 "}, %64, %65, p, 1, 1, %67, %68; }\n"
#define MJ_REGS_N256 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define MJ_OUTS_N256 MJ_D32(0), MJ_D32(32), MJ_D32(64), MJ_D32(96)
#define MJ_OPS_N256 "}, %128, %129, p, 1, 1, %131, %132; }\n"
#define MJ_WGMMA(CPP_T, PTX_T, NN)                                                               \
    template <int TA, int TB> struct Wgmma<CPP_T, NN, TA, TB> {                                   \
        static __device__ __forceinline__ void run(float (&d)[NN / 2], unsigned long long da,     \
                                                   unsigned long long db, int scale_d) {          \
            asm volatile("{ .reg .pred p; setp.ne.b32 p, %" MJ_SCALE_N##NN ", 0;\n"            \
                         "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." PTX_T "." PTX_T " {" \
                         MJ_REGS_N##NN MJ_OPS_N##NN                                               \
                         : MJ_OUTS_N##NN                                                          \
                         : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                     \
        }                                                                                         \
    };
#define MJ_SCALE_N64 "34"
#define MJ_SCALE_N128 "66"
#define MJ_SCALE_N256 "130"
MJ_WGMMA(__nv_bfloat16, "bf16", 64)
MJ_WGMMA(__nv_bfloat16, "bf16", 128)
MJ_WGMMA(__nv_bfloat16, "bf16", 256)
MJ_WGMMA(__half, "f16", 64)
MJ_WGMMA(__half, "f16", 128)
MJ_WGMMA(__half, "f16", 256)
#undef MJ_WGMMA

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

// Producer: waits for stage `pos` to be free (a fresh barrier passes parity 1 at once).
template <class Cfg>
__device__ __forceinline__ unsigned producer_wait(const Smem<Cfg> &m, const RingPos<Cfg::STAGES> &pos) {
    mbar_wait(m.empty(pos.stage()), pos.phase() ^ 1u);
    return m.stage(pos.stage());
}

// ---------------------------------------------------------------- row gathers

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

// The TMA-store epilogue of consumer `consumer`'s 64 x BN rows: registers -> its 128-byte
// swizzled staging tile (64-column chunks, as the C map's 64 x 64 box expects), then one thread
// stores the chunks with `store_chunk(j, src)` and commits; the previous tile's stores must
// have finished reading the buffer first. Conflict-free: the swizzle spreads a warp's 8 rows
// over all banks.
template <class Cfg, class StoreChunk>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[Cfg::ACC], const Smem<Cfg> &m, int consumer,
                                               int warp_in_group, int lane, StoreChunk store_chunk) {
    using CT = typename Cfg::CT;
    const bool leader = warp_in_group == 0 && lane == 0;
    const unsigned tile = m.cstage + consumer * Cfg::BN * 128;
    if (leader) bulk_wait_read();
    warpgroup_sync(consumer);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = warp_in_group * 16 + (lane >> 2) + 8 * h;
#pragma unroll
        for (int j = 0; j < Cfg::BN / 8; ++j) {
            const unsigned addr = tile + (j / 8) * (64 * 128) + r * 128 + (((j % 8) ^ (r % 8)) << 4) + (lane & 3) * 4;
            const unsigned bits = pack2(static_cast<CT *>(nullptr), acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(bits) : "memory");
        }
    }
    fence_proxy_async_smem();
    warpgroup_sync(consumer);
    if (leader) {
#pragma unroll
        for (int j = 0; j < Cfg::BN / 64; ++j) store_chunk(j, tile + j * (64 * 128));
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
struct GluArgs {
    void *up;          // u's element 0 (split: its own [S, I]; merged: gate_up + I)
    void *aw;          // [S, I]
    const float *w_s;  // [S]
    float limit;       // used when LIMIT
};

struct NoGlu {
    static constexpr bool ON = false;
    static constexpr int UP_ROW = 0;
};

template <bool LIMIT_, int LD_, int UP_ROW_> struct SwigluGlu {
    static constexpr bool ON = true, LIMIT = LIMIT_;
    static constexpr int LD = LD_, UP_ROW = UP_ROW_;
};

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

// Gathered stages need no consumer-side proxy fence: the full barrier's completion by
// cp.async.mbarrier.arrive orders the copies before the wgmmas (as in CUTLASS's cp.async GMMA
// mainloops); the gathered-row GPU tests check it.
struct NoPrepare {
    __device__ __forceinline__ void operator()(unsigned) const {}
};

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
// box BN/2 rows, g and u through TMA stores (EPI_TMA) or from registers, aw from registers).
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
        if constexpr (K_SPLIT > 0) tma_prefetch(&tma_a2);
        if constexpr (K_SPLIT > 0 || Glu::ON) tma_prefetch(&tma_b2);
    }

    // Exclusive scan of ceil(count_e / BM) over experts (as the mma.sync kernel does); its
    // __syncthreads also publish the barrier initialization.
    const int carry = scan_experts<THREADS>(num_experts, warp_sums, cum, [&](int e) {
        return sched::expert_m_tiles(offsets, e, rows, BM);
    });

    const int m_tiles = sched::min_int(carry, m_tile_bound);
    const int total_tiles = m_tiles * N_TILES;
    const int wg = warp >> 2;

    if (wg == 0) {
        // ------------------------------------------------ producer
        setmaxnreg_dec<Cfg::PRODUCER_REGS>();
        if (!GATHER_A && tid != 0) return;  // TMA only: one thread issues everything
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::TileCoord tc = sched::nk_tile(cum, num_experts, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::expert_rows(offsets, tc.expert, rows);
            const int row0 = rr.begin + tc.m_block * BM;
            const int n0 = tc.n_block * BN;
            GatherRows<BM> a_rows;
            if constexpr (GATHER_A) a_rows.load(row_token, row0, rr.end - row0, tid);
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
                        tma_load_3d(stage + Cfg::A_BYTES, &tma_b, bar, k0, n0 / 2, tc.expert);
                        tma_load_3d(stage + Cfg::A_BYTES + Cfg::B_BYTES / 2, &tma_b2, bar, k0, Glu::UP_ROW + n0 / 2,
                                    tc.expert);
                    } else if constexpr (B_TRANSPOSED) {
                        tma_load_3d(stage + Cfg::A_BYTES, tb, bar, k0, n0, tc.expert);
                    } else {
#pragma unroll
                        for (int j = 0; j < BN / 64; ++j)
                            tma_load_3d(stage + Cfg::A_BYTES + j * Cfg::CHUNK_BYTES, tb, bar, n0 + 64 * j, k0,
                                        tc.expert);
                    }
                }
                if constexpr (GATHER_A) {
                    gather_box<typename Cfg::T, BM>(stage, gather_src, K, a_rows, kb * BK, K, tid);
                    cp_async_arrive_noinc(bar);
                }
            }
        }
        if constexpr (GATHER_A) cp_async_wait_all();
    } else {
        // ------------------------------------------------ consumers
        setmaxnreg_inc<Cfg::CONSUMER_REGS>();
        const int cw = wg - 1;  // rows [cw*64, cw*64 + 64) of the tile
        const int r_base = cw * 64 + (warp & 3) * 16 + (lane >> 2);
        RingPos<Cfg::STAGES> pos;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::TileCoord tc = sched::nk_tile(cum, num_experts, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::expert_rows(offsets, tc.expert, rows);
            const int row0 = rr.begin + tc.m_block * BM;
            const int n0 = tc.n_block * BN;
            float acc[Cfg::ACC];
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.0f;
            int prev = 0;
            for (int kb = 0; kb < K_TILES; ++kb, ++pos.it)
                consume_kslice<Cfg, false, !B_TRANSPOSED>(m, pos, cw, kb == 0, prev, acc, NoPrepare{});
            consume_finish(m, prev, acc);  // K_TILES >= 1 (K >= 8)
            const int rows_valid = rr.end - row0;
            if constexpr (Glu::ON) {
                if (Cfg::EPI_TMA && rows_valid >= (cw + 1) * 64) {
                    store_tile_tma<Cfg>(acc, m, cw, warp & 3, lane, [&](int j, unsigned src) {
                        constexpr int GATE_CHUNKS = BN / 128;  // [g chunks | u chunks] of 64 columns
                        if (j < GATE_CHUNKS)
                            tma_store_2d(&tma_c, src, n0 / 2 + 64 * j, row0 + cw * 64);
                        else
                            tma_store_2d(&tma_c2, src, n0 / 2 + 64 * (j - GATE_CHUNKS), row0 + cw * 64);
                    });
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
// each, plain stores); split_reduce_sm90 then sums them into C[e] in segment order. CTA 0
// publishes cum_slots[E+1] at partials_index for it. max_slots: the partial tiles the host's
// workspace holds (floor(2S / split_rows)); offsets that are not monotone can ask for more, and
// those partials are dropped (wrong results, never a write past the workspace).
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
                    // Rows [valid, 64) of every 64-row chunk (A: 2, B: BN/64) = 16-byte units
                    // [valid*8, 512) of each chunk; the swizzle permutes inside a row only.
                    constexpr int CHUNKS = (Cfg::A_BYTES + Cfg::B_BYTES) / Cfg::CHUNK_BYTES;
                    const int per_chunk = (BK - valid) * 8;
                    for (int i = ctid; i < CHUNKS * per_chunk; i += 256) {
                        const int chunk = i / per_chunk, unit = valid * 8 + i % per_chunk;
                        const unsigned addr = stage + chunk * Cfg::CHUNK_BYTES + unit * 16;
                        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0)
                                     : "memory");
                    }
                    fence_proxy_async_smem();
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

// After a split same_mn launch: C[e] (+)= sum over s of partials[index[e] + s] in s order, for
// every expert with more than split_rows rows (the others were written by the GEMM), reading
// only slots below max_slots. A grid-stride loop of a few blocks per SM over each split expert's
// M*N elements: most experts are not split, and a block per (expert, element range) cost more
// in empty blocks than the sums (docs/PERF_LOG.md). float4 reads, deterministic.
template <class CT, int M, int N, bool ACCUMULATE, int THREADS>
__device__ __forceinline__ void split_reduce_sm90(CT *__restrict__ c, const int *__restrict__ offsets, int rows,
                                                  int num_experts, int split_rows, int max_slots,
                                                  const int *__restrict__ index,
                                                  const float *__restrict__ partials) {
    constexpr long long MN = static_cast<long long>(M) * N;
    const long long stride = static_cast<long long>(gridDim.x) * THREADS * 4;
    for (int e = 0; e < num_experts; ++e) {
        const sched::RowRange rr = sched::expert_rows(offsets, e, rows);
        if (!sched::mn_is_split(rr.end - rr.begin, split_rows)) continue;
        const int first = sched::min_int(index[e], max_slots), count = sched::min_int(index[e + 1], max_slots) - first;
        for (long long i = (static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x) * 4; i < MN; i += stride) {
            float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int s = 0; s < count; ++s) {
                const float4 p = *reinterpret_cast<const float4 *>(partials + (first + s) * MN + i);
                sum.x += p.x;
                sum.y += p.y;
                sum.z += p.z;
                sum.w += p.w;
            }
            CT *const out = c + e * MN + i;
            if constexpr (ACCUMULATE) {
                const float2 a = load2(out), b = load2(out + 2);
                sum.x += a.x;
                sum.y += a.y;
                sum.z += b.x;
                sum.w += b.y;
            }
            store2(out, sum.x, sum.y);
            store2(out + 2, sum.z, sum.w);
        }
    }
}

}  // namespace sm90
}  // namespace moejit
