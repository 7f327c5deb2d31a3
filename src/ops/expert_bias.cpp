#include "ops/expert_bias.hpp"

#include <fmt/format.h>

#include "base/checked_math.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moejit {
namespace {

constexpr int kChunkRows = 128;         // rows per stage-1 partial: S/128 + E slots per column
constexpr std::uint32_t kColThreads = 256;
constexpr int kDotWarps = 4;

template <class Args>
KernelSource render(const std::string &name, const std::string &constants, const char *kernel,
                    const std::string &template_args) {
    return instantiate_kernel<Args>(
        {name, "expert_bias.cuh", name, constants, std::string("moejit::bias::") + kernel, template_args});
}

void require_ptr(const void *p, const char *name, std::size_t alignment) {
    MOEJIT_REQUIRE(p != nullptr, "{} is NULL", name);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % alignment == 0, "{} ({}) is not {}-byte aligned", name, p,
                   alignment);
}

std::uint32_t col_blocks(std::int64_t cols) {
    return static_cast<std::uint32_t>((cols + kColThreads - 1) / kColThreads);
}

}  // namespace

void validate_bias_grad_spec(const BiasGradSpec &s) {
    MOEJIT_REQUIRE(is_half_precision(s.dtype), "bias gradient: dtype is {}, expected bf16 or fp16", dtype_name(s.dtype));
    MOEJIT_REQUIRE(s.out_dtype == s.dtype || s.out_dtype == DType::fp32,
                   "bias gradient: out dtype is {}, expected {} or fp32", dtype_name(s.out_dtype), dtype_name(s.dtype));
    MOEJIT_REQUIRE(!s.accumulate || s.out_dtype == DType::fp32, "bias gradient: accumulating needs fp32");
}

namespace {

// One stage of the column sum (colsum_<stage>_kernel<threads, type, flag, kChunkRows>): its
// element type `type` = dtype and its one switch `flag`, which `flag_suffix` marks in the name.
template <class Args>
KernelSource render_colsum_stage(const BiasGradSpec &s, const char *stage, DType dtype, const char *type,
                                 const char *flag, bool on, const char *flag_suffix) {
    validate_bias_grad_spec(s);
    const std::string kernel = fmt::format("colsum_{}_kernel", stage);
    return render<Args>(
        fmt::format("bias_grad_{}_{}{}", stage, dtype_name(dtype), on ? flag_suffix : ""),
        fmt::format("using {} = {};\nconstexpr bool {} = {};\nconstexpr int kChunkRows = {};\n", type,
                    dtype_cuda_type(dtype), flag, on, kChunkRows),
        kernel.c_str(), fmt::format("{}, {}, {}, kChunkRows", kColThreads, type, flag));
}

}  // namespace

KernelSource render_bias_grad_partial(const BiasGradSpec &s) {
    return render_colsum_stage<kargs::BiasPartialArgs>(s, "partial", s.dtype, "T", "kScale", s.scaled, "_scaled");
}

KernelSource render_bias_grad_reduce(const BiasGradSpec &s) {
    return render_colsum_stage<kargs::BiasReduceArgs>(s, "reduce", s.out_dtype, "O", "kAccumulate", s.accumulate,
                                                      "_acc");
}

std::size_t bias_grad_workspace_bytes(std::int64_t rows, std::int32_t num_experts, std::int64_t cols) {
    const std::int64_t slots = (rows + kChunkRows - 1) / kChunkRows + num_experts;
    return checked_bytes({slots, cols, 4}, "num_tokens");
}

void bias_grad(Context &ctx, const BiasGradSpec &spec, const BiasGradArgs &a, const BiasGradKernels &kernels) {
    validate_bias_grad_spec(spec);
    MOEJIT_REQUIRE(a.rows >= 0 && a.cols > 0 && a.cols % 8 == 0 && a.num_experts >= 1,
                   "bias gradient: rows {}, cols {}, experts {}", a.rows, a.cols, a.num_experts);
    require_ptr(a.offsets, "offsets", 4);
    require_ptr(a.out, "bias gradient", 4);
    if (a.rows > 0) {
        require_ptr(a.m, "bias gradient input", 16);
        if (spec.scaled) require_ptr(a.scale, "bias gradient scale", 4);
        require_ptr(a.workspace, "bias gradient workspace", 4);
        MOEJIT_REQUIRE(a.workspace_bytes >= bias_grad_workspace_bytes(a.rows, a.num_experts, a.cols),
                       "bias gradient workspace is {} bytes, expected >= {}", a.workspace_bytes,
                       bias_grad_workspace_bytes(a.rows, a.num_experts, a.cols));
        LaunchShape s1;
        s1.grid_x = static_cast<std::uint32_t>((a.rows + kChunkRows - 1) / kChunkRows);
        s1.grid_y = col_blocks(a.cols);
        s1.block_x = kColThreads;
        ctx.launch(*kernels.partial, s1, a.stream,
                   kargs::BiasPartialArgs{a.m, a.scale, a.offsets, a.num_experts, a.cols,
                                        static_cast<float *>(a.workspace)});
    }
    // rows == 0: offsets are all zero, so every expert is empty and stage 2 reads no partial.
    LaunchShape s2;
    s2.grid_x = static_cast<std::uint32_t>(a.num_experts);
    s2.grid_y = col_blocks(a.cols);
    s2.block_x = kColThreads;
    ctx.launch(*kernels.reduce, s2, a.stream,
               kargs::BiasReduceArgs{static_cast<const float *>(a.workspace), a.offsets, a.cols, a.out});
}

KernelSource render_bias_row_dot(DType dtype) {
    MOEJIT_REQUIRE(is_half_precision(dtype), "bias row dot: dtype is {}, expected bf16 or fp16", dtype_name(dtype));
    return render<kargs::BiasRowDotArgs>(
        fmt::format("bias_row_dot_{}", dtype_name(dtype)),
        fmt::format("using T = {};\nconstexpr int kWarps = {};\n", dtype_cuda_type(dtype), kDotWarps),
        "row_dot_kernel", fmt::format("{}, T, kWarps", 32u * kDotWarps));
}

void bias_row_dot(Context &ctx, const BiasRowDotArgs &a, const Kernel &kernel) {
    MOEJIT_REQUIRE(a.rows >= 0 && a.cols > 0 && a.cols % 8 == 0 && a.num_experts >= 1,
                   "bias row dot: rows {}, cols {}, experts {}", a.rows, a.cols, a.num_experts);
    if (a.rows == 0) return;
    require_ptr(a.dy, "dy", 16);
    require_ptr(a.bias, "b_down", 16);
    require_ptr(a.offsets, "offsets", 4);
    require_ptr(a.d_w_s, "d_w_s", 4);
    LaunchShape s;
    s.grid_x = static_cast<std::uint32_t>((a.rows + kDotWarps - 1) / kDotWarps);
    s.block_x = 32u * kDotWarps;
    ctx.launch(kernel, s, a.stream,
               kargs::BiasRowDotArgs{a.dy, a.bias, a.offsets, a.num_experts, a.rows, a.cols, a.d_w_s});
}

}  // namespace moejit
