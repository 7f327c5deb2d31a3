#include "ops/expert_rows.hpp"

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moejit {
namespace {

constexpr std::uint32_t kThreads = 256;

std::uint32_t blocks(std::int64_t items) {
    const std::int64_t b = (items + kThreads - 1) / kThreads;
    MOEJIT_REQUIRE(b <= 0x7fffffff, "expert rows: {} items exceed one launch", items);
    return static_cast<std::uint32_t>(b);
}

}  // namespace

KernelSource render_prepare_rows(bool with_weights, bool with_row_token) {
    const std::string name =
        fmt::format("prepare_rows{}{}", with_weights ? "_weights" : "", with_row_token ? "_row_token" : "");
    return instantiate_kernel<kargs::PrepareRowsArgs>(
        {name, "expert_rows.cuh", name,
         fmt::format("constexpr bool kWeights = {};\nconstexpr bool kRowToken = {};\n", with_weights, with_row_token),
         "moejit::rows::prepare_kernel", fmt::format("{}, kWeights, kRowToken", kThreads)});
}

void prepare_rows(Context &ctx, const PrepareRowsArgs &a, const Kernel &kernel) {
    if (a.rows == 0) return;
    LaunchShape s;
    s.grid_x = blocks(a.rows);
    s.block_x = kThreads;
    ctx.launch(kernel, s, a.stream, kargs::PrepareRowsArgs{a.weights, a.rows, a.w_s, a.row_token});
}

KernelSource render_add_row_bias(DType dtype) {
    MOEJIT_REQUIRE(is_half_precision(dtype), "row bias: dtype is {}, expected bf16 or fp16", dtype_name(dtype));
    const std::string name = fmt::format("add_row_bias_{}", dtype_name(dtype));
    return instantiate_kernel<kargs::AddRowBiasArgs>({name, "expert_rows.cuh", name,
                                                    fmt::format("using T = {};\n", dtype_cuda_type(dtype)),
                                                    "moejit::rows::add_bias_kernel", fmt::format("{}, T", kThreads)});
}

void add_row_bias(Context &ctx, const AddRowBiasArgs &a, const Kernel &kernel) {
    if (a.rows == 0) return;
    LaunchShape s;
    s.grid_x = blocks(a.rows * (a.cols / 8));
    s.block_x = kThreads;
    ctx.launch(kernel, s, a.stream,
               kargs::AddRowBiasArgs{a.ys, a.bias, a.w_s, a.offsets, a.num_experts, a.rows, a.cols});
}

}  // namespace moejit
