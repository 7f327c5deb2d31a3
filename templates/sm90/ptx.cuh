// Inline-PTX wrappers of the sm_90a features the wgmma GEMMs use: mbarriers, TMA loads and
// stores, cp.async, bulk groups, wgmma and its shared-memory descriptors, fences, named
// barriers and register reallocation. Small wrappers rather than <cuda/barrier> or CuTe, which
// cost NVRTC compile time on every specialization.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"

namespace moejit {
namespace sm90 {

// A CUtensorMap as the device sees it (kernel_args.h): inside the __grid_constant__ kernel
// parameter, so TMA reads it from parameter space.
using TmaDesc = kargs::TmaDesc;

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
// All but the newest N committed store groups have finished reading shared memory.
template <int N> __device__ __forceinline__ void bulk_wait_read_all_but() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// The committed stores have finished reading shared memory (the buffer may be rewritten).
__device__ __forceinline__ void bulk_wait_read() { bulk_wait_read_all_but<0>(); }
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
#undef MJ_D8
#undef MJ_D32
#undef MJ_REGS_N64
#undef MJ_OUTS_N64
#undef MJ_OPS_N64
#undef MJ_REGS_N128
#undef MJ_OUTS_N128
#undef MJ_OPS_N128
#undef MJ_REGS_N256
#undef MJ_OUTS_N256
#undef MJ_OPS_N256
#undef MJ_SCALE_N64
#undef MJ_SCALE_N128
#undef MJ_SCALE_N256

}  // namespace sm90
}  // namespace moejit
