// The per-row steps of the pre-dispatched experts entry (templates/expert_rows.cuh): the rows'
// weights (and the gathering fc1's identity row order) before the experts, fc2's bias after.
// Rows of expert e are [offsets[e], offsets[e+1]); the launch bound is `rows` (R).
#pragma once

#include <cstdint>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

// w_s[r] = weights ? weights[r] : 1; row_token[r] = r when with_row_token.
KernelSource render_prepare_rows(bool with_weights, bool with_row_token);
struct PrepareRowsArgs {
    const float *weights = nullptr;  // [R] or null (1)
    std::int64_t rows = 0;
    float *w_s = nullptr;            // [R]
    std::int32_t *row_token = nullptr;  // [R] when the kernel writes it
    void *stream = nullptr;
};
void prepare_rows(Context &ctx, const PrepareRowsArgs &args, const Kernel &kernel);

// ys[r, :] += w_s[r]·bias[e(r), :] in the layer dtype.
KernelSource render_add_row_bias(DType dtype);
struct AddRowBiasArgs {
    void *ys = nullptr;                     // [R, cols]
    const void *bias = nullptr;             // [E, cols]
    const float *w_s = nullptr;             // [R]
    const std::int32_t *offsets = nullptr;  // [E+1]
    std::int32_t num_experts = 0;
    std::int64_t rows = 0;
    std::int64_t cols = 0;                  // a positive multiple of 8
    void *stream = nullptr;
};
void add_row_bias(Context &ctx, const AddRowBiasArgs &args, const Kernel &kernel);

// The caller's expert offsets bounded on the device into `checked` (workspace, [E+1]): monotone
// in [0, R], checked[0] = 0, checked[e] = clamp(offsets[e], checked[e-1], R); an entry it had
// to change sets kargs::kDeviceErrorExpertOffsets in `errors` (the context's device error
// word). Every kernel of the experts entry reads `checked`, never the caller's offsets.
KernelSource render_check_offsets();
struct CheckOffsetsArgs {
    const std::int32_t *offsets = nullptr;  // [E+1] the caller's
    std::int32_t *checked = nullptr;        // [E+1]
    std::uint32_t *errors = nullptr;
    std::int32_t num_experts = 0;
    std::int64_t rows = 0;                  // R <= 2^31-1
    void *stream = nullptr;
};
void check_offsets(Context &ctx, const CheckOffsetsArgs &args, const Kernel &kernel);

// Zeroes the rows no expert owns, [checked[E], R), of data ([R, row_bytes], 16-byte aligned,
// row_bytes a multiple of 16) and of values (fp32 [R]); either may be null.
KernelSource render_zero_unassigned_rows();
struct ZeroUnassignedRowsArgs {
    void *data = nullptr;
    float *values = nullptr;
    const std::int32_t *offsets = nullptr;  // checked
    std::int32_t num_experts = 0;
    std::int64_t rows = 0;
    std::int64_t row_bytes = 0;
    void *stream = nullptr;
};
void zero_unassigned_rows(Context &ctx, const ZeroUnassignedRowsArgs &args, const Kernel &kernel);

}  // namespace moejit
