// Hopper (sm_90a) grouped GEMM, same_nk forward case: C[rows of e] (+)= A[rows of e] · B_eᵀ
// with A [S,K], B [E,N,K], C [S,N]. DRAFT (issue 7): opt-in only, not yet validated on a GPU.
//
// Structure (one CTA per SM, persistent):
//   warpgroup 0   producer: one thread walks the tile schedule and issues TMA loads
//                 (cp.async.bulk.tensor) of the A and B k-slices into a STAGES-deep ring of
//                 shared-memory stages; each stage has a `full` mbarrier (TMA completes bytes
//                 on it) and an `empty` mbarrier (consumers release it).
//   warpgroups 1-2 consumers: 64 rows of the 128-row tile each, wgmma.mma_async m64nBNk16
//                 from shared memory (both operands K-major, 128-byte swizzle), fp32
//                 accumulators in registers, then a predicated register epilogue.
// Tile schedule: the same device scheduler as the mma.sync kernels (group_gemm_schedule.cuh)
// over `offsets`, capped by the host bound from S, so the launch-bound invariant holds.
// Rows past an expert's end are loaded (they belong to the next expert or are TMA zero-fill
// past S) but never stored; columns past N and k past K are TMA zero-fill.
// PTX is written as small inline wrappers: no <cuda/barrier> or CuTe (NVRTC compile time).
#pragma once

#include "moejit_common.cuh"
#include "group_gemm_schedule.cuh"

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

// wgmma shared-memory matrix descriptor of a K-major tile written by TMA with 128-byte
// swizzle: rows of 64 16-bit elements (128 B), 8-row swizzle atoms 1024 B apart (stride byte
// offset). The leading byte offset is unused for swizzled K-major layouts (set to 1 as
// CUTLASS does). The tile must start 1024-byte aligned (base offset 0). Stepping k by 16
// elements inside the atom adds 32 B, i.e. +2 to the encoded start address.
__device__ __forceinline__ unsigned long long desc_kmajor_sw128(unsigned addr) {
    unsigned long long d = static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4);
    d |= 1ull << 16;
    d |= static_cast<unsigned long long>(1024 >> 4) << 32;
    d |= 1ull << 62;
    return d;
}

// D[64 x N] (+)= A[64 x 16] · B[N x 16]ᵀ, both K-major in shared memory; scale_d = 0 ignores
// the old D. Accumulator layout per thread (warp w of the warpgroup, lane l): register i holds
// row w*16 + l/4 + 8*((i/2)%2), column (i/4)*8 + (l%4)*2 + i%2.
template <class T, int N> struct Wgmma;
template <> struct Wgmma<__nv_bfloat16, 64> {
    static __device__ __forceinline__ void run(float (&d)[32], unsigned long long da,
                                               unsigned long long db, int scale_d) {
        asm volatile(
            "{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
            "}, %32, %33, p, 1, 1, 0, 0; }\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(scale_d));
    }
};
template <> struct Wgmma<__half, 64> {
    static __device__ __forceinline__ void run(float (&d)[32], unsigned long long da,
                                               unsigned long long db, int scale_d) {
        asm volatile(
            "{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
            "}, %32, %33, p, 1, 1, 0, 0; }\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(scale_d));
    }
};
template <> struct Wgmma<__nv_bfloat16, 128> {
    static __device__ __forceinline__ void run(float (&d)[64], unsigned long long da,
                                               unsigned long long db, int scale_d) {
        asm volatile(
            "{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, %64, %65, p, 1, 1, 0, 0; }\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(scale_d));
    }
};
template <> struct Wgmma<__half, 128> {
    static __device__ __forceinline__ void run(float (&d)[64], unsigned long long da,
                                               unsigned long long db, int scale_d) {
        asm volatile(
            "{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, %64, %65, p, 1, 1, 0, 0; }\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(scale_d));
    }
};
template <> struct Wgmma<__nv_bfloat16, 256> {
    static __device__ __forceinline__ void run(float (&d)[128], unsigned long long da,
                                               unsigned long long db, int scale_d) {
        asm volatile(
            "{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
            "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
            "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
            "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
            "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
            "}, %128, %129, p, 1, 1, 0, 0; }\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
              "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
              "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
              "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
              "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
              "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
              "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
              "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
              "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(da), "l"(db), "r"(scale_d));
    }
};
template <> struct Wgmma<__half, 256> {
    static __device__ __forceinline__ void run(float (&d)[128], unsigned long long da,
                                               unsigned long long db, int scale_d) {
        asm volatile(
            "{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
            "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
            "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
            "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
            "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
            "}, %128, %129, p, 1, 1, 0, 0; }\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
              "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
              "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
              "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
              "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
              "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
              "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
              "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
              "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(da), "l"(db), "r"(scale_d));
    }
};

__device__ __forceinline__ void store2(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ float2 load2(const float *p) {
    return *reinterpret_cast<const float2 *>(p);
}
__device__ __forceinline__ float2 load2(const __nv_bfloat16 *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}
__device__ __forceinline__ float2 load2(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}

// ---------------------------------------------------------------- configuration

// BM = 128 (two consumer warpgroups of 64 rows), BK = 64 (one 128-byte swizzle row of 16-bit
// elements), BN in {64, 128, 256}. Host mirror: src/ops/group_gemm_sm90.cpp (smem bytes).
template <class T_, class CT_, int BN_, int STAGES_, int GROUP_M_> struct Config {
    using T = T_;
    using CT = CT_;
    static constexpr int BM = 128, BK = 64, BN = BN_, STAGES = STAGES_, GROUP_M = GROUP_M_;
    static constexpr int CONSUMERS = 2;
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int ACC = BN / 2;  // fp32 accumulators per consumer thread
    // Register split (64K per SM, one CTA): producer 40, consumers 232: 128*40 + 256*232 <= 64K.
    static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(sizeof(T) == 2, "operands are 16-bit");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN must be 64, 128 or 256");
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages stay 1024-byte aligned");
};

// ---------------------------------------------------------------- same_nk, B transposed

// tma_a: 2D map over A, dims {K, S}, box {BK, BM}, 128B swizzle (rows >= S zero-filled).
// tma_b: 3D map over B, dims {K, N, E}, box {BK, BN, 1}, 128B swizzle.
// m_tile_bound: the host's bound ceil(rows/BM) + min(E, rows) on the M-tile count.
template <class Cfg, int N, int K, bool ACCUMULATE>
__device__ __forceinline__ void group_gemm_nk_sm90(const TmaDesc &tma_a, const TmaDesc &tma_b,
                                                   typename Cfg::CT *__restrict__ c,
                                                   const int *__restrict__ offsets, int rows,
                                                   int num_experts, int m_tile_bound) {
    using CT = typename Cfg::CT;
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::STAGES;
    constexpr int THREADS = Cfg::THREADS;
    constexpr int N_TILES = (N + BN - 1) / BN;
    constexpr int K_TILES = (K + BK - 1) / BK;
    static_assert(N % 8 == 0 && K % 8 == 0, "N and K must be multiples of 8");

    // Layout (host mirror: sm90_smem_bytes): 1 KiB alignment slack, STAGES x (A, B), full and
    // empty barriers, 16 ints of scan scratch, cum[E+1].
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char *const gbase = smem_raw + (base - raw);
    const unsigned full0 = base + STAGES * Cfg::STAGE_BYTES;
    const unsigned empty0 = full0 + 8 * STAGES;
    int *const warp_sums = reinterpret_cast<int *>(gbase + STAGES * Cfg::STAGE_BYTES + 16 * STAGES);
    int *const cum = warp_sums + 16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);                          // the producer's expect_tx
            mbar_init(empty0 + 8 * s, 128 * Cfg::CONSUMERS);      // every consumer thread
        }
        mbar_init_fence();
        tma_prefetch(&tma_a);
        tma_prefetch(&tma_b);
    }

    // Exclusive scan of ceil(count_e / BM) over experts (as the mma.sync kernel does); its
    // __syncthreads also publish the barrier initialization.
    int carry = 0;
    for (int first = 0; first < num_experts; first += THREADS) {
        const int e = first + tid;
        int v = e < num_experts ? sched::expert_m_tiles(offsets, e, rows, BM) : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, v, d);
            if (lane >= d) v += u;
        }
        if (lane == 31) warp_sums[warp] = v;
        __syncthreads();
        int before = 0, total = 0;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) {
            const int s = warp_sums[w];
            before += w < warp ? s : 0;
            total += s;
        }
        if (e < num_experts) cum[e + 1] = carry + before + v;
        carry += total;
        __syncthreads();
    }
    if (tid == 0) cum[0] = 0;
    __syncthreads();

    const int m_tiles = sched::min_int(carry, m_tile_bound);
    const int total_tiles = m_tiles * N_TILES;
    const int wg = warp >> 2;

    if (wg == 0) {
        // ------------------------------------------------ producer
        setmaxnreg_dec<Cfg::PRODUCER_REGS>();
        if (tid != 0) return;
        int it = 0;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::TileCoord tc = sched::nk_tile(cum, num_experts, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::expert_rows(offsets, tc.expert, rows);
            const int row0 = rr.begin + tc.m_block * BM;
            const int n0 = tc.n_block * BN;
            for (int kb = 0; kb < K_TILES; ++kb, ++it) {
                const int s = it % STAGES;
                const unsigned phase = static_cast<unsigned>(it / STAGES) & 1u;
                mbar_wait(empty0 + 8 * s, phase ^ 1u);
                const unsigned stage = base + s * Cfg::STAGE_BYTES;
                // Full boxes count even where TMA zero-fills out-of-bounds elements.
                mbar_arrive_expect_tx(full0 + 8 * s, Cfg::STAGE_BYTES);
                tma_load_2d(stage, &tma_a, full0 + 8 * s, kb * BK, row0);
                tma_load_3d(stage + Cfg::A_BYTES, &tma_b, full0 + 8 * s, kb * BK, n0, tc.expert);
            }
        }
    } else {
        // ------------------------------------------------ consumers
        setmaxnreg_inc<Cfg::CONSUMER_REGS>();
        const int cw = wg - 1;                 // rows [cw*64, cw*64 + 64) of the tile
        const int wl = warp & 3;               // warp inside the warpgroup
        const unsigned a_off = cw * 64 * 128;  // 64 rows of 128 B: stays 1024-byte aligned
        int it = 0;
        for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
            const sched::TileCoord tc = sched::nk_tile(cum, num_experts, N_TILES, Cfg::GROUP_M, t);
            const sched::RowRange rr = sched::expert_rows(offsets, tc.expert, rows);
            const int row0 = rr.begin + tc.m_block * BM;
            const int n0 = tc.n_block * BN;

            float acc[Cfg::ACC];
#pragma unroll
            for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.0f;
            int prev = 0;
            for (int kb = 0; kb < K_TILES; ++kb, ++it) {
                const int s = it % STAGES;
                const unsigned phase = static_cast<unsigned>(it / STAGES) & 1u;
                mbar_wait(full0 + 8 * s, phase);
                const unsigned stage = base + s * Cfg::STAGE_BYTES;
                const unsigned long long da = desc_kmajor_sw128(stage + a_off);
                const unsigned long long db = desc_kmajor_sw128(stage + Cfg::A_BYTES);
                fence_operands(acc);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    Wgmma<typename Cfg::T, BN>::run(acc, da + 2 * kk, db + 2 * kk, 1);
                wgmma_commit();
                fence_operands(acc);
                // One group in flight: the previous k-slice's group is done, release its stage.
                wgmma_wait<1>();
                fence_operands(acc);
                if (kb > 0) mbar_arrive(empty0 + 8 * prev);
                prev = s;
            }
            wgmma_wait<0>();
            fence_operands(acc);
            mbar_arrive(empty0 + 8 * prev);  // K_TILES >= 1 (K >= 8)

            // Epilogue: registers -> C, rows clipped to the expert, columns to N.
            const int rows_valid = rr.end - row0;
            const int cols_valid = N - n0;
            const int r_base = cw * 64 + wl * 16 + (lane >> 2);
            CT *const c_tile = c + static_cast<long long>(row0) * N + n0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = r_base + 8 * h;
                if (r >= rows_valid) continue;
                CT *const row = c_tile + static_cast<long long>(r) * N;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
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
    }
}

}  // namespace sm90
}  // namespace moejit
