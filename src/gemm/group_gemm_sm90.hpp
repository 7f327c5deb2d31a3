// The wgmma engine of the grouped GEMMs (sm_90a): TMA loads into an mbarrier-guarded
// shared-memory ring, a producer warpgroup and two wgmma consumer warpgroups, a persistent grid
// over the same device tile scheduler as the mma.sync kernels (templates/sm90/).
// gemm/group_gemm.cpp validates the spec and operands (same contract as the mma.sync engine) and
// forwards a spec whose tile.engine is GemmEngine::wgmma here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "runtime/context.hpp"
#include "runtime/kernel_source.hpp"
#include "gemm/group_gemm.hpp"

namespace moejit {

// Pure: the translation unit of a specialization (instantiations of
// moejit::sm90::group_gemm_nk_kernel and group_gemm_mn_kernel, templates/sm90/kernels.cuh).
KernelSource render_group_gemm_nk_sm90(const GemmNkSpec &spec);
KernelSource render_group_gemm_mn_sm90(const GemmMnSpec &spec);
// The reduction of a split same_mn launch (moejit::sm90::split_reduce_kernel); every wgmma
// same_mn spec has one (warmup compiles it: whether a call splits depends on S).
KernelSource render_split_reduce_sm90(const GemmMnSpec &spec);

// Build the tensor maps (cuTensorMapEncodeTiled) and launch one CTA per SM at most over `tiles`
// tiles (from S, or E x M x N blocks, on the host). same_nk: rows > 0, m_tile_bound the M-tile
// bound from S. same_mn: rows may be 0 (C = 0 is still written unless accumulating); with
// ops.workspace large enough for mn_split(S, M, N), long reductions are split and reduced in a
// second, deterministic launch.
// `bound` (GemmKernels of `spec`, or null): used when the launch runs exactly the spec's variant.
// A TMA descriptor over a row-major tensor of `elem_bytes`-byte elements (dims innermost first,
// at most 3), 128-byte swizzled boxes, out-of-bounds elements zero; row_elems > 0: dims[1]'s
// stride in elements. Shared with the FP8 family (src/fp8/), whose operands are bytes.
kargs::TmaDesc encode_tma_map(CUtensorMapDataType type, std::size_t elem_bytes, const void *ptr,
                              std::initializer_list<std::int64_t> dims, std::initializer_list<cuuint32_t> box,
                              std::int64_t row_elems = 0);

void launch_group_gemm_nk_sm90(Context &ctx, const GemmNkSpec &spec, const GemmOperands &ops,
                               std::int64_t tiles, std::int64_t m_tile_bound, const GemmKernels *bound);
void launch_group_gemm_mn_sm90(Context &ctx, const GemmMnSpec &spec, const GemmOperands &ops,
                               std::int64_t tiles, const GemmKernels *bound);

}  // namespace moejit
