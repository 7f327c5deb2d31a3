#include "ops/expert_rows.hpp"

#include <algorithm>

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

KernelSource render_check_offsets() {
    return instantiate_kernel<kargs::CheckOffsetsArgs>(
        {"check_expert_offsets", "expert_rows.cuh", "check_expert_offsets", "", "moejit::rows::check_offsets_kernel",
         fmt::format("{}", kThreads)});
}

void check_offsets(Context &ctx, const CheckOffsetsArgs &a, const Kernel &kernel) {
    MOEJIT_REQUIRE(a.rows >= 0 && a.rows <= 0x7fffffff && a.num_experts > 0 && a.errors != nullptr,
                   "expert offsets check: rows {} experts {} (an internal call)", a.rows, a.num_experts);
    LaunchShape s;
    s.grid_x = 1;  // one block scans all E+1 entries: E is small next to any row count
    s.block_x = kThreads;
    ctx.launch(kernel, s, a.stream,
               kargs::CheckOffsetsArgs{a.offsets, a.checked, a.errors, a.num_experts, static_cast<int>(a.rows)});
}

KernelSource render_zero_unassigned_rows() {
    return instantiate_kernel<kargs::ZeroUnassignedRowsArgs>({"zero_unassigned_rows", "expert_rows.cuh",
                                                             "zero_unassigned_rows", "",
                                                             "moejit::rows::zero_unassigned_kernel",
                                                             fmt::format("{}", kThreads)});
}

void zero_unassigned_rows(Context &ctx, const ZeroUnassignedRowsArgs &a, const Kernel &kernel) {
    if (a.rows == 0 || (!a.data && !a.values)) return;
    MOEJIT_REQUIRE(a.row_bytes % 16 == 0, "zero rows: row of {} bytes is not whole 16-byte vectors", a.row_bytes);
    const std::int64_t row_vecs = a.data ? a.row_bytes / 16 : 1;
    LaunchShape s;
    // Grid-stride over at most a few waves: how many rows are unassigned is known on the device
    // only, and it is usually none.
    const std::uint32_t wave = static_cast<std::uint32_t>(std::max(1, ctx.sm_count()) * 4);
    s.grid_x = std::min(blocks(a.rows * row_vecs), wave);
    s.block_x = kThreads;
    ctx.launch(kernel, s, a.stream,
               kargs::ZeroUnassignedRowsArgs{a.data, a.values, a.offsets, a.num_experts, a.rows, a.data ? row_vecs : 0});
}

}  // namespace moejit
