#include "ops/scatter_gather.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moejit {
namespace {

constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();  // int32 indices
constexpr std::uint32_t kWeightThreads = 256;
constexpr std::int32_t kElementsPerVector = 8;  // 16 bytes of bf16 / fp16

bool known_dtype(DType dtype) { return dtype_name(dtype) != "unknown"; }

void validate_row_dtype(DType dtype) {
    MOEJIT_REQUIRE(known_dtype(dtype), "dtype = {} is not a moejit_dtype_t value",
                   static_cast<int>(dtype));
    if (dtype == DType::fp32)  // a valid row dtype, not implemented
        fail(Status::unsupported, "dtype = fp32 is not supported (bf16 or fp16)");
    MOEJIT_REQUIRE(is_half_precision(dtype),
                   "dtype must be MOEJIT_DTYPE_BF16 or MOEJIT_DTYPE_FP16, got {}",
                   dtype_name(dtype));
}

void validate_hidden_and_k(std::int64_t hidden_size, std::int32_t top_k) {
    MOEJIT_REQUIRE(hidden_size >= 1, "hidden_size must be >= 1, got {}", hidden_size);
    if (hidden_size % kElementsPerVector != 0)
        fail(Status::unsupported,
             "hidden_size = {} must be a multiple of 8 (rows move as 16-byte vectors)",
             hidden_size);
    if (hidden_size > kScatterMaxHidden)
        fail(Status::unsupported, "hidden_size = {} exceeds the supported maximum of {}",
             hidden_size, kScatterMaxHidden);
    MOEJIT_REQUIRE(top_k >= 1, "top_k must be >= 1, got {}", top_k);
    if (top_k > kScatterMaxTopK)
        fail(Status::unsupported, "top_k = {} exceeds the supported maximum of {}", top_k,
             kScatterMaxTopK);
}

void validate_tokens(std::int64_t num_tokens, std::int32_t top_k) {
    MOEJIT_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got {}", num_tokens);
    if (num_tokens > kMaxRows / top_k)
        fail(Status::unsupported,
             "num_tokens * top_k = {} * {} exceeds {} (scatter_index is int32)", num_tokens,
             top_k, kMaxRows);
}

void require_tensor(const void *ptr, const char *name, std::int64_t elements, const char *shape,
                    std::size_t alignment) {
    if (elements == 0) return;  // empty tensors may be null (e.g. PyTorch's data_ptr() of T = 0)
    MOEJIT_REQUIRE(ptr != nullptr, "{} is NULL (expected a device pointer to {} = {} elements)",
                   name, shape, elements);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0,
                   "{} = {} is not {}-byte aligned", name, ptr, alignment);
}

std::uint32_t next_pow2(std::int64_t v) {
    std::uint32_t p = 1;
    while (p < v) p <<= 1;
    return p;
}

// Renders a row kernel (scatter or gather): constants, the template, the instantiation of
// moejit::sg::<kind>_kernel<threads, <type_args>, <the row geometry>>.
template <class Args>
KernelSource render_rows(const char *kind, const std::string &name, const std::string &constants,
                         std::int64_t hidden_size, const char *type_args) {
    const RowGeometry g = row_geometry(hidden_size);
    return instantiate_kernel<Args>(
        {name, "scatter_gather.cuh", name,
         constants + fmt::format("constexpr int kHidden = {};\nconstexpr int kThreadsPerRow = {};\n"
                                 "constexpr int kVecsPerThread = {};\nconstexpr int kRowsPerBlock = {};\n",
                                 hidden_size, g.threads_per_row, g.vectors_per_thread, g.rows_per_block),
         fmt::format("moejit::sg::{}_kernel", kind),
         fmt::format("{}, {}, kThreadsPerRow, kVecsPerThread, kRowsPerBlock", g.block_threads, type_args)});
}

template <class Args> KernelSource render_weights(const char *kind, DType weight_dtype) {
    validate_weight_dtype(weight_dtype);
    const std::string name = fmt::format("{}_{}", kind, dtype_name(weight_dtype));
    return instantiate_kernel<Args>({name, "scatter_gather.cuh", name,
                                     fmt::format("using W = {};\n", dtype_cuda_type(weight_dtype)),
                                     fmt::format("moejit::sg::{}_kernel", kind), fmt::format("{}, W", kWeightThreads)});
}

LaunchShape row_launch(std::int64_t num_tokens, const RowGeometry &g) {
    LaunchShape s;
    s.grid_x = static_cast<std::uint32_t>((num_tokens + g.rows_per_block - 1) / g.rows_per_block);
    s.block_x = static_cast<std::uint32_t>(g.block_threads);
    return s;
}

LaunchShape flat_launch(std::int64_t rows) {
    LaunchShape s;
    s.grid_x = static_cast<std::uint32_t>((rows + kWeightThreads - 1) / kWeightThreads);
    s.block_x = kWeightThreads;
    return s;
}

}  // namespace

RowGeometry row_geometry(std::int64_t hidden_size) {
    RowGeometry g;
    g.vectors = static_cast<std::int32_t>(hidden_size / kElementsPerVector);
    // Up to 4 vectors per thread (loads in flight), more only once a row has 1024 threads.
    g.threads_per_row =
        static_cast<std::int32_t>(std::min<std::uint32_t>(1024, next_pow2((g.vectors + 3) / 4)));
    g.vectors_per_thread = (g.vectors + g.threads_per_row - 1) / g.threads_per_row;
    g.block_threads = std::max<std::int32_t>(g.threads_per_row, 128);
    g.rows_per_block = g.block_threads / g.threads_per_row;
    return g;
}

void validate_scatter_spec(const ScatterSpec &spec) {
    validate_row_dtype(spec.dtype);
    validate_hidden_and_k(spec.hidden_size, spec.top_k);
}

void validate_gather_spec(const GatherSpec &spec) {
    validate_row_dtype(spec.dtype);
    validate_hidden_and_k(spec.hidden_size, spec.top_k);
    const auto w = spec.weight_dtype;
    if (w == static_cast<DType>(0)) return;  // unweighted
    MOEJIT_REQUIRE(known_dtype(w), "weight_dtype = {} is not a moejit_dtype_t value",
                   static_cast<int>(w));
    if (w != DType::fp32 && w != spec.dtype)
        fail(is_half_precision(w) ? Status::unsupported : Status::invalid_argument,
             "weight_dtype must be MOEJIT_DTYPE_FP32 or dtype ({}), got {}",
             dtype_name(spec.dtype), dtype_name(w));
}

void validate_weight_dtype(DType weight_dtype) {
    MOEJIT_REQUIRE(weight_dtype == DType::bf16 || weight_dtype == DType::fp16 ||
                       weight_dtype == DType::fp32,
                   "weight_dtype must be MOEJIT_DTYPE_BF16, MOEJIT_DTYPE_FP16 or "
                   "MOEJIT_DTYPE_FP32, got {} ({})",
                   static_cast<int>(weight_dtype), dtype_name(weight_dtype));
}

KernelSource render_scatter(const ScatterSpec &spec) {
    validate_scatter_spec(spec);
    return render_rows<kargs::ScatterArgs>(
        "scatter", fmt::format("scatter_{}_h{}_k{}", dtype_name(spec.dtype), spec.hidden_size, spec.top_k),
        fmt::format("using T = {};\nconstexpr int kTopK = {};\n", dtype_cuda_type(spec.dtype),
                    spec.top_k),
        spec.hidden_size, "T, kHidden, kTopK");
}

KernelSource render_gather(const GatherSpec &spec) {
    validate_gather_spec(spec);
    const bool weighted = spec.weight_dtype != static_cast<DType>(0);
    return render_rows<kargs::GatherArgs>(
        "gather",
        fmt::format("gather_{}_h{}_k{}_w{}{}", dtype_name(spec.dtype), spec.hidden_size,
                    spec.top_k, weighted ? dtype_name(spec.weight_dtype) : "none", spec.bias ? "_bias" : ""),
        fmt::format("using T = {};\nusing W = {};\nconstexpr bool kWeighted = {};\n"
                    "constexpr bool kBias = {};\nconstexpr int kTopK = {};\n",
                    dtype_cuda_type(spec.dtype),
                    weighted ? dtype_cuda_type(spec.weight_dtype) : "float", weighted, spec.bias,
                    spec.top_k),
        spec.hidden_size, "T, W, kWeighted, kBias, kHidden, kTopK");
}

KernelSource render_scatter_weights(DType weight_dtype) {
    return render_weights<kargs::ScatterWeightsArgs>("scatter_weights", weight_dtype);
}

KernelSource render_gather_weights(DType weight_dtype) {
    return render_weights<kargs::GatherWeightsArgs>("gather_weights", weight_dtype);
}

namespace {

// Shared by the plain and the preloaded entry points: validate everything, then (unless there is
// nothing to do) launch `preloaded` or the kernel rendered from the spec.
void scatter_impl(Context &ctx, const ScatterArgs &args, Kernel *preloaded) {
    validate_scatter_spec(args.spec);
    validate_tokens(args.num_tokens, args.spec.top_k);
    const std::int64_t rows = args.num_tokens * args.spec.top_k;
    const std::int64_t h = args.spec.hidden_size;
    require_tensor(args.x, "x", args.num_tokens * h, "[T,H]", 16);
    require_tensor(args.scatter_index, "scatter_index", rows, "[T,k]", 4);
    require_tensor(args.xs, "xs", rows * h, "[S,H]", 16);
    ctx.require_device("moejit_scatter");
    if (args.num_tokens == 0) return;

    Kernel &kernel = preloaded ? *preloaded : ctx.kernel(render_scatter(args.spec));
    ctx.launch(kernel, row_launch(args.num_tokens, row_geometry(h)), args.stream,
               kargs::ScatterArgs{args.x, args.scatter_index, args.num_tokens, args.xs});
}

void gather_impl(Context &ctx, const GatherArgs &args, Kernel *preloaded) {
    const GatherSpec spec = effective_gather_spec(args);
    validate_gather_spec(spec);
    validate_tokens(args.num_tokens, spec.top_k);
    const std::int64_t rows = args.num_tokens * spec.top_k;
    const std::int64_t h = spec.hidden_size;
    require_tensor(args.ys, "ys", rows * h, "[S,H]", 16);
    require_tensor(args.scatter_index, "scatter_index", rows, "[T,k]", 4);
    if (args.weights != nullptr)
        require_tensor(args.weights, "weights", rows, "[T,k]", dtype_size(spec.weight_dtype));
    require_tensor(args.out, "out", args.num_tokens * h, "[T,H]", 16);
    if (spec.bias && args.num_tokens > 0) {
        require_tensor(args.bias, "bias", h, "[E,H]", 16);
        require_tensor(args.bias_scale, "bias_scale", rows, "[S]", 4);
        require_tensor(args.offsets, "offsets", 1, "[E+1]", 4);
        MOEJIT_REQUIRE(args.num_experts >= 1, "num_experts must be >= 1 with a bias, got {}", args.num_experts);
    }
    ctx.require_device("moejit_gather");
    if (args.num_tokens == 0) return;

    Kernel &kernel = preloaded ? *preloaded : ctx.kernel(render_gather(spec));
    ctx.launch(kernel, row_launch(args.num_tokens, row_geometry(h)), args.stream,
               kargs::GatherArgs{args.ys, args.scatter_index, args.weights, args.num_tokens, args.out, args.bias,
                               args.bias_scale, args.offsets, args.num_experts});
}

void scatter_weights_impl(Context &ctx, const WeightsScatterArgs &args, Kernel *preloaded) {
    validate_weight_dtype(args.weight_dtype);
    MOEJIT_REQUIRE(args.top_k >= 1, "top_k must be >= 1, got {}", args.top_k);
    validate_tokens(args.num_tokens, args.top_k);
    const std::int64_t rows = args.num_tokens * args.top_k;
    require_tensor(args.weights, "weights", rows, "[T,k]", dtype_size(args.weight_dtype));
    require_tensor(args.scatter_index, "scatter_index", rows, "[T,k]", 4);
    require_tensor(args.w_s, "w_s", rows, "[S]", 4);
    if (args.row_token != nullptr) require_tensor(args.row_token, "row_token", rows, "[S]", 4);
    ctx.require_device("moejit_scatter_weights");
    if (rows == 0) return;

    Kernel &kernel = preloaded ? *preloaded : ctx.kernel(render_scatter_weights(args.weight_dtype));
    ctx.launch(kernel, flat_launch(rows), args.stream,
               kargs::ScatterWeightsArgs{args.weights, args.scatter_index, rows, args.w_s, args.row_token, args.top_k});
}

void gather_weights_impl(Context &ctx, const WeightsGatherArgs &args, Kernel *preloaded) {
    validate_weight_dtype(args.weight_dtype);
    MOEJIT_REQUIRE(args.top_k >= 1, "top_k must be >= 1, got {}", args.top_k);
    validate_tokens(args.num_tokens, args.top_k);
    const std::int64_t rows = args.num_tokens * args.top_k;
    require_tensor(args.d_w_s, "d_w_s", rows, "[S]", 4);
    require_tensor(args.scatter_index, "scatter_index", rows, "[T,k]", 4);
    require_tensor(args.d_weights, "d_weights", rows, "[T,k]", dtype_size(args.weight_dtype));
    ctx.require_device("moejit_gather_weights");
    if (rows == 0) return;

    Kernel &kernel = preloaded ? *preloaded : ctx.kernel(render_gather_weights(args.weight_dtype));
    ctx.launch(kernel, flat_launch(rows), args.stream,
               kargs::GatherWeightsArgs{args.d_w_s, args.scatter_index, rows, args.d_weights});
}

}  // namespace

GatherSpec effective_gather_spec(const GatherArgs &args) {
    GatherSpec spec = args.spec;
    if (args.weights == nullptr) spec.weight_dtype = static_cast<DType>(0);
    return spec;
}

void scatter(Context &ctx, const ScatterArgs &args) { scatter_impl(ctx, args, nullptr); }
void scatter(Context &ctx, const ScatterArgs &args, Kernel &kernel) {
    scatter_impl(ctx, args, &kernel);
}
void gather(Context &ctx, const GatherArgs &args) { gather_impl(ctx, args, nullptr); }
void gather(Context &ctx, const GatherArgs &args, Kernel &kernel) {
    gather_impl(ctx, args, &kernel);
}
void scatter_weights(Context &ctx, const WeightsScatterArgs &args) {
    scatter_weights_impl(ctx, args, nullptr);
}
void scatter_weights(Context &ctx, const WeightsScatterArgs &args, Kernel &kernel) {
    scatter_weights_impl(ctx, args, &kernel);
}
void gather_weights(Context &ctx, const WeightsGatherArgs &args) {
    gather_weights_impl(ctx, args, nullptr);
}
void gather_weights(Context &ctx, const WeightsGatherArgs &args, Kernel &kernel) {
    gather_weights_impl(ctx, args, &kernel);
}

}  // namespace moejit
