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

}  // namespace moejit
