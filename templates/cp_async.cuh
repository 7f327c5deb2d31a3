// Ampere's asynchronous 16-byte copies, global -> shared (sm_80 and later, sm_90a included):
// the sm80 grouped GEMM's multi-stage pipeline and the FP8 column quantizer's double buffer.
#pragma once

namespace moejit {

// 16-byte async copy global -> shared; with pred false it writes 16 zero bytes and reads
// nothing (src-size 0): ragged edges are zero-filled without branches, and the address of a
// predicated-off chunk is never dereferenced.
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, bool pred) {
    int bytes = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace moejit
