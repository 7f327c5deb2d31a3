// What a plan is made for: the layer's shape, layouts, dtypes and activation
// (moejit_plan_desc_t's fields, as the library uses them; capi/capi_convert.cpp makes one).
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "ops/activation.hpp"

namespace moejit {

// fc1's weights and the saved gate/up activations. The values are moejit_fc1_layout_t's
// (capi/capi_convert.cpp asserts each one).
enum class Fc1Layout : std::int32_t {
    split = 0,        // W_gate [E,I,H], W_up [E,I,H]
    merged = 1,       // W_gate_up [E,2I,H], gate rows first
    interleaved = 2,  // W_gate_up [E,2I,H], row 2i gate i, 2i+1 up i
};

// The GEMMs' number format. The values are moejit_recipe_t's (capi/capi_convert.cpp asserts
// each one).
enum class Recipe : std::int32_t {
    bf16 = 0,        // every GEMM in the layer dtype
    fp8_block = 1,   // e4m3 forward and input-gradient GEMMs with block scales (moe/plan_fp8.hpp)
};

// The defaults are moejit_plan_desc_init's. Every value, enums included, is as the caller gave
// it: validate_plan_desc (moe/plan.hpp) checks them, naming the C fields (desc->...).
struct PlanDesc {
    DType dtype = DType::bf16;  // x, weights, out
    std::int64_t hidden_size = 0;
    std::int64_t intermediate_size = 0;
    std::int32_t num_experts = 0;
    std::int32_t top_k = 0;
    Fc1Layout fc1_layout = Fc1Layout::split;
    Activation activation = Activation::swiglu;
    float swiglu_limit = 0.0f;  // <= 0: none
    DType weight_grad_dtype = DType::bf16;
    std::int32_t weight_grad_accumulate = 0;
    DType index_dtype = DType::int64;
    DType routing_dtype = DType::bf16;
    std::int64_t tokens_hint = 0;
    float activation_alpha = 0.0f;  // gpt_oss's alpha; 0: 1.702
    std::int32_t weights_transposed = 0;
    std::int32_t has_bias = 0;
    Recipe recipe = Recipe::bf16;  // since 0.11
    // Since 0.14, 0 or 1: the caller passes routing_weights to every backward call, so a bf16
    // plan's saved keeps no w_s (PlanLayout::w_s_saved).
    std::int32_t routing_weights_in_backward = 0;
};

// fc1 in one [.,2I] tensor (merged or interleaved) rather than W_gate and W_up apart.
inline bool fc1_merged(const PlanDesc &d) { return d.fc1_layout != Fc1Layout::split; }

}  // namespace moejit
