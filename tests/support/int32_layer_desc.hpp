// Test support: the plan the GPU layer tests build most: the layer's dtype (moejit_plan_desc_init's
// default), FP32 weight gradients and routing weights, int32 expert indices.
#pragma once

#include <cstdint>

#include "layer_args.h"
#include "moejit.h"

namespace moejit::test {

inline moejit_plan_desc_t int32_layer_desc(std::int64_t H, std::int64_t I, std::int32_t E, std::int32_t k,
                                           bool merged) {
    moejit_plan_desc_t d;
    layer_desc_init(&d, H, I, E, k);
    d.fc1_layout = merged ? MOEJIT_FC1_MERGED : MOEJIT_FC1_SPLIT;
    d.weight_grad_dtype = MOEJIT_DTYPE_FP32;
    d.index_dtype = MOEJIT_DTYPE_INT32;
    d.routing_dtype = MOEJIT_DTYPE_FP32;
    return d;
}

}  // namespace moejit::test
