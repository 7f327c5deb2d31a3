// The routing index (docs/DESIGN.md §2): counts, offsets and scatter_index from selected_experts, as
// a deterministic stable counting sort with no host synchronisation (CUDA-graph capturable).
// Pure render functions (usable on a compile-only context for warmup) and a launcher.
//
// Outputs: counts [E] int32, offsets [E+1] int32 (exclusive prefix sum), scatter_index [T,k]
// int32 = offsets[e] + rank of (t,j) among the routes to e in row-major order.
// An expert id outside [0,E) (e.g. -1 for a dropped route) is not counted: its scatter_index is
// -1 (which scatter/gather skip) and offsets[E] is the number of valid routes (S when all are
// valid, the documented case). Nothing is written out of bounds. T = 0 writes zero counts and
// offsets. The algorithm (three launches) is described in templates/routing.cuh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

// Largest supported expert count (the rank kernel keeps a per-warp base for every expert in
// 48 KiB of static shared memory).
inline constexpr std::int32_t kRoutingMaxExperts = 8192;

// The compile-time part of the routing kernels (S and the chunking are kernel arguments).
struct RoutingSpec {
    DType index_dtype = DType::int32;  // int32 or int64
    std::int32_t num_experts = 0;                     // E in [1, kRoutingMaxExperts]
};

// Throws Status::invalid_argument / Status::unsupported naming the bad field.
void validate_routing_spec(const RoutingSpec &spec);

// The three kernels, in launch order. Pure (validates the spec first).
struct RoutingKernels {
    KernelSource histogram;  // specialized on index dtype and E
    KernelSource row_scan;   // generic
    KernelSource rank;       // specialized on index dtype and E
};
RoutingKernels render_routing_index(const RoutingSpec &spec);
std::vector<KernelSource> routing_index_sources(const RoutingSpec &spec);

// How the S routes are cut into per-block chunks; a pure function of (S, E) so the workspace
// size can be queried without a context. Chunks: num_chunks blocks of warps · rows_per_warp
// routes (the last one partial).
struct RoutingChunking {
    std::int64_t rows = 0;           // S
    std::int32_t warps = 0;          // warps per block (compile-time, from E)
    std::int32_t rows_per_warp = 0;  // a multiple of 32
    std::int32_t num_chunks = 0;     // 0 when S = 0
    std::size_t workspace_bytes = 0; // E · num_chunks int32 histogram
};
// Warps per block of the histogram and rank kernels for E experts.
std::int32_t routing_warps(std::int32_t num_experts);
RoutingChunking routing_chunking(std::int64_t rows, std::int32_t num_experts);

// Validates T >= 0, 1 <= k, E in range and T·k <= INT32_MAX, then returns the scratch bytes.
std::size_t routing_index_workspace_size(std::int64_t num_tokens, std::int32_t top_k,
                                         std::int32_t num_experts);

struct RoutingIndexArgs {
    DType index_dtype = DType::int32;
    const void *selected_experts = nullptr;  // [T,k] index_dtype
    std::int64_t num_tokens = 0;             // T >= 0
    std::int32_t top_k = 0;                  // k >= 1
    std::int32_t num_experts = 0;            // E
    std::int32_t *counts = nullptr;          // [E]
    std::int32_t *offsets = nullptr;         // [E+1]
    std::int32_t *scatter_index = nullptr;   // [T,k]
    void *workspace = nullptr;               // >= routing_index_workspace_size bytes, 4-aligned
    std::size_t workspace_size = 0;
    void *stream = nullptr;                  // CUstream
};

// Validates every argument (before touching the device, so that works on a compile-only
// context), then compiles/loads and launches. Tensors with zero elements may be null.
void routing_index(Context &ctx, const RoutingIndexArgs &args);

// For callers that launch repeatedly (the layer plan): fetch the kernels once, then launch
// without re-rendering or a cache lookup. `kernels` must come from load_routing_index with the
// spec of `args` (index_dtype, num_experts); arguments are still validated.
struct LoadedRoutingKernels {
    RoutingSpec spec;
    Kernel *histogram = nullptr;
    Kernel *row_scan = nullptr;
    Kernel *rank = nullptr;
};
LoadedRoutingKernels load_routing_index(Context &ctx, const RoutingSpec &spec);
void routing_index(Context &ctx, const RoutingIndexArgs &args,
                   const LoadedRoutingKernels &kernels);

}  // namespace moejit
