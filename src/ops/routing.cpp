#include "ops/routing.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moejit {
namespace {

// Enough chunks to fill the GPU (each block is small), few enough that the row scan and the
// per-block expert scans stay cheap: S = 262144, E = 256 gives 256 chunks of 1024 routes.
// Also the row scan's compile-time bound on num_chunks (routing_chunking never exceeds it).
constexpr std::int64_t kTargetChunks = 256;
constexpr std::int32_t kMinRowsPerWarp = 128;
constexpr std::uint32_t kRowScanWarps = 8;  // one warp per expert
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();  // int32 indices


// One translation unit of the histogram or rank kernel.
template <class Args> KernelSource render_chunk_kernel(const RoutingSpec &spec, const char *kind) {
    const std::int32_t warps = routing_warps(spec.num_experts);
    const std::string name = fmt::format("routing_{}_{}_e{}", kind, dtype_name(spec.index_dtype), spec.num_experts);
    return instantiate_kernel<Args>(
        {name, "routing.cuh", fmt::format("routing index, {}: {}", kind, name),
         fmt::format("using Id = {};\nconstexpr int kExperts = {};\nconstexpr int kWarps = {};\n",
                     dtype_cuda_type(spec.index_dtype), spec.num_experts, warps),
         fmt::format("moejit::routing::{}_kernel", kind), fmt::format("{}, Id, kExperts, kWarps", warps * 32)});
}

KernelSource render_row_scan() {
    const std::string name = "routing_row_scan";
    return instantiate_kernel<kargs::RoutingRowScanArgs>(
        {name, "routing.cuh", "routing index, per-expert scan over chunks: " + name,
         fmt::format("constexpr int kMaxChunks = {};\n", kTargetChunks), "moejit::routing::row_scan_kernel",
         fmt::format("{}, kMaxChunks", kRowScanWarps * 32)});
}

void validate_counts(std::int64_t num_tokens, std::int32_t top_k) {
    MOEJIT_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got {}", num_tokens);
    MOEJIT_REQUIRE(top_k >= 1, "top_k must be >= 1, got {}", top_k);
    if (num_tokens > kMaxRows / top_k)
        fail(Status::unsupported,
             "num_tokens * top_k = {} * {} exceeds {} (scatter_index and offsets are int32)",
             num_tokens, top_k, kMaxRows);
}

void require_tensor(const void *ptr, const char *name, std::int64_t elements, const char *shape) {
    MOEJIT_REQUIRE(ptr != nullptr || elements == 0,
                   "{} is NULL (expected a device pointer to {} = {} elements)", name, shape,
                   elements);
}

}  // namespace

void validate_routing_spec(const RoutingSpec &spec) {
    MOEJIT_REQUIRE(spec.index_dtype == DType::int32 || spec.index_dtype == DType::int64,
                   "index_dtype must be MOEJIT_DTYPE_INT32 or MOEJIT_DTYPE_INT64, got {} ({})",
                   static_cast<int>(spec.index_dtype), dtype_name(spec.index_dtype));
    MOEJIT_REQUIRE(spec.num_experts >= 1, "num_experts must be >= 1, got {}", spec.num_experts);
    if (spec.num_experts > kRoutingMaxExperts)
        fail(Status::unsupported, "num_experts = {} exceeds the supported maximum of {}",
             spec.num_experts, kRoutingMaxExperts);
}

std::int32_t routing_warps(std::int32_t num_experts) {
    // base_s[warps][E] ints plus 32 ints of scan scratch within 48 KiB of static shared memory.
    constexpr std::int32_t kSharedInts = 12000;
    return std::clamp<std::int32_t>(kSharedInts / std::max<std::int32_t>(num_experts, 1), 1, 8);
}

RoutingChunking routing_chunking(std::int64_t rows, std::int32_t num_experts) {
    RoutingChunking c;
    c.rows = rows;
    c.warps = routing_warps(num_experts);
    const std::int64_t per_warp =
        (rows + c.warps * kTargetChunks - 1) / (c.warps * kTargetChunks);
    c.rows_per_warp = static_cast<std::int32_t>(
        std::max<std::int64_t>(kMinRowsPerWarp, (per_warp + 31) / 32 * 32));
    const std::int64_t chunk_rows = std::int64_t{c.warps} * c.rows_per_warp;
    c.num_chunks = static_cast<std::int32_t>((rows + chunk_rows - 1) / chunk_rows);
    c.workspace_bytes = static_cast<std::size_t>(num_experts) * c.num_chunks * sizeof(std::int32_t);
    return c;
}

std::size_t routing_index_workspace_size(std::int64_t num_tokens, std::int32_t top_k,
                                         std::int32_t num_experts) {
    validate_counts(num_tokens, top_k);
    validate_routing_spec(RoutingSpec{DType::int32, num_experts});
    return routing_chunking(num_tokens * top_k, num_experts).workspace_bytes;
}

RoutingKernels render_routing_index(const RoutingSpec &spec) {
    validate_routing_spec(spec);
    RoutingKernels k;
    k.histogram = render_chunk_kernel<kargs::RoutingHistogramArgs>(spec, "histogram");
    k.row_scan = render_row_scan();
    k.rank = render_chunk_kernel<kargs::RoutingRankArgs>(spec, "rank");
    return k;
}

std::vector<KernelSource> routing_index_sources(const RoutingSpec &spec) {
    RoutingKernels k = render_routing_index(spec);
    return {std::move(k.histogram), std::move(k.row_scan), std::move(k.rank)};
}

LoadedRoutingKernels load_routing_index(Context &ctx, const RoutingSpec &spec) {
    const RoutingKernels sources = render_routing_index(spec);
    return LoadedRoutingKernels{spec, &ctx.kernel(sources.histogram), &ctx.kernel(sources.row_scan),
                                &ctx.kernel(sources.rank)};
}

namespace {

// Every argument check, in the order a caller fixes them; returns the chunking to launch.
RoutingChunking validate_routing_args(const RoutingIndexArgs &args) {
    validate_routing_spec(RoutingSpec{args.index_dtype, args.num_experts});
    validate_counts(args.num_tokens, args.top_k);
    const std::int64_t rows = args.num_tokens * args.top_k;
    const std::int32_t experts = args.num_experts;

    require_tensor(args.selected_experts, "selected_experts", rows, "[T,k]");
    require_tensor(args.counts, "counts", experts, "[E]");
    require_tensor(args.offsets, "offsets", experts + 1, "[E+1]");
    require_tensor(args.scatter_index, "scatter_index", rows, "[T,k]");
    const std::size_t id_size = dtype_size(args.index_dtype);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(args.selected_experts) % id_size == 0,
                   "selected_experts = {} is not {}-byte aligned", args.selected_experts, id_size);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(args.counts) % 4 == 0 &&
                       reinterpret_cast<std::uintptr_t>(args.offsets) % 4 == 0 &&
                       reinterpret_cast<std::uintptr_t>(args.scatter_index) % 4 == 0,
                   "counts, offsets and scatter_index must be 4-byte aligned");

    const RoutingChunking chunking = routing_chunking(rows, experts);
    if (chunking.num_chunks > kTargetChunks)
        fail(Status::internal, "routing_index: {} chunks exceed the row scan's bound of {}",
             chunking.num_chunks, kTargetChunks);
    MOEJIT_REQUIRE(args.workspace_size >= chunking.workspace_bytes,
                   "workspace_size = {} is too small: moejit_routing_index_workspace_size gives "
                   "{} bytes for num_tokens = {}, top_k = {}, num_experts = {}",
                   args.workspace_size, chunking.workspace_bytes, args.num_tokens, args.top_k,
                   experts);
    MOEJIT_REQUIRE(args.workspace != nullptr || chunking.workspace_bytes == 0,
                   "workspace is NULL (expected {} bytes of device memory)",
                   chunking.workspace_bytes);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(args.workspace) % 4 == 0,
                   "workspace = {} is not 4-byte aligned", args.workspace);
    return chunking;
}

void launch_routing_index(Context &ctx, const RoutingIndexArgs &args,
                          const RoutingChunking &chunking, const LoadedRoutingKernels &kernels) {
    auto *hist = static_cast<int *>(args.workspace);
    const auto threads = static_cast<std::uint32_t>(chunking.warps * 32);

    LaunchShape hist_shape;
    hist_shape.grid_x = static_cast<std::uint32_t>(chunking.num_chunks);  // 0 for T = 0: a no-op
    hist_shape.block_x = threads;
    ctx.launch(*kernels.histogram, hist_shape, args.stream,
               kargs::RoutingHistogramArgs{args.selected_experts, chunking.rows, chunking.rows_per_warp,
                                         chunking.num_chunks, hist});

    LaunchShape scan_shape;
    scan_shape.grid_x =
        (static_cast<std::uint32_t>(args.num_experts) + kRowScanWarps - 1) / kRowScanWarps;
    scan_shape.block_x = kRowScanWarps * 32;
    ctx.launch(*kernels.row_scan, scan_shape, args.stream,
               kargs::RoutingRowScanArgs{hist, chunking.num_chunks, args.num_experts, args.counts});

    // At least one block: block 0 writes offsets even when there are no routes.
    LaunchShape rank_shape;
    rank_shape.grid_x = static_cast<std::uint32_t>(std::max(chunking.num_chunks, 1));
    rank_shape.block_x = threads;
    ctx.launch(*kernels.rank, rank_shape, args.stream,
               kargs::RoutingRankArgs{args.selected_experts, chunking.rows, chunking.rows_per_warp, chunking.num_chunks,
                                    hist, args.counts, args.offsets, args.scatter_index});
}

}  // namespace

void routing_index(Context &ctx, const RoutingIndexArgs &args) {
    const RoutingChunking chunking = validate_routing_args(args);
    ctx.require_device("moejit_routing_index");  // before compiling anything
    launch_routing_index(ctx, args, chunking,
                         load_routing_index(ctx, RoutingSpec{args.index_dtype, args.num_experts}));
}

void routing_index(Context &ctx, const RoutingIndexArgs &args,
                   const LoadedRoutingKernels &kernels) {
    const RoutingChunking chunking = validate_routing_args(args);
    ctx.require_device("moejit_routing_index");
    if (kernels.spec.index_dtype != args.index_dtype ||
        kernels.spec.num_experts != args.num_experts || !kernels.histogram ||
        !kernels.row_scan || !kernels.rank)
        fail(Status::internal, "routing_index: kernels were loaded for another spec");
    launch_routing_index(ctx, args, chunking, kernels);
}

}  // namespace moejit
