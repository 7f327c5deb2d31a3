// Hopper (sm_90a) grouped GEMM, same_nk with B transposed (forward fc1/fc2): C[S,N] (+)=
// A[S,K] · B_eᵀ per expert, B [E,N,K]. TMA loads into an mbarrier-guarded shared-memory ring, a
// producer warpgroup and two wgmma consumer warpgroups, persistent grid over the same device
// tile scheduler as the mma.sync kernels (templates/group_gemm_sm90.cuh).
//
// DRAFT (issue 7): opt-in only; nothing in the default path calls it, and it has not run on a
// GPU yet (tests/gpu/test_gemm_sm90_gpu.cpp is the first thing to run).
//
// Same operand contract as ops/group_gemm.hpp: offsets int32 [E+1] on the device, offsets[E] =
// S = rows; N and K multiples of 8; A and B 16-byte aligned (TMA), C aligned to two elements;
// launch bound from S (no device->host sync), deterministic (no split-K, no atomics).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/context.hpp"
#include "jit/kernel_source.hpp"
#include "moejit.h"
#include "ops/group_gemm.hpp"

namespace moejit {

// The compile-time part of one sm_90a same_nk kernel. BLOCK_M = 128 and BLOCK_K = 64 are fixed
// by the kernel (two 64-row consumer warpgroups, one 128-byte swizzle row per k-slice).
struct GemmNkSm90Spec {
    moejit_dtype_t dtype = MOEJIT_DTYPE_BF16;    // A, B
    moejit_dtype_t c_dtype = MOEJIT_DTYPE_BF16;  // dtype or FP32
    std::int64_t n = 0;
    std::int64_t k = 0;
    bool accumulate = false;
    int block_n = 128;  // 64, 128 or 256
    int stages = 4;     // shared-memory ring depth, >= 2
    int group_m = 8;    // row blocks walked together (L2 reuse)
};

inline constexpr int kSm90BlockM = 128;
inline constexpr int kSm90BlockK = 64;
inline constexpr int kSm90Threads = 384;

// Dynamic shared memory of a specialization (layout mirrored from the template: alignment
// slack, stages, barriers, scan scratch, cum[E+1]).
std::size_t sm90_smem_bytes(const GemmNkSm90Spec &spec, std::int32_t num_experts);

// A spec for the problem: BLOCK_N 128 (64 when N <= 64), as many stages (<= 6) as fit.
GemmNkSm90Spec make_nk_sm90_spec(moejit_dtype_t dtype, moejit_dtype_t c_dtype, std::int64_t n,
                                 std::int64_t k, bool accumulate, std::int32_t num_experts);

// Throws MOEJIT_ERROR_INVALID_ARGUMENT (dtype, sizes) or MOEJIT_ERROR_UNSUPPORTED (block_n,
// stages, shared memory for num_experts), naming the field.
void validate_nk_sm90_spec(const GemmNkSm90Spec &spec, std::int32_t num_experts);

// Pure: the full translation unit (entry "moejit_group_gemm_nk_sm90"); compiles for sm_90a only.
KernelSource render_group_gemm_nk_sm90(const GemmNkSm90Spec &spec);

// Validates every argument, requires an sm_90a context with a device, builds the two tensor
// maps (cuTensorMapEncodeTiled), compiles/loads and launches one CTA per SM at most.
// rows == 0 launches nothing (null tensors accepted).
void launch_group_gemm_nk_sm90(Context &ctx, const GemmNkSm90Spec &spec, const GemmOperands &ops);

}  // namespace moejit
