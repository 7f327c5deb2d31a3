// C entry points of the routing index, scatter and gather: translate to the C++ launchers.
// Designated initializers: the compiler checks each name against the launcher's fields, and
// fields a call leaves out keep their defaults.
#include "capi_convert.hpp"
#include "capi_guard.hpp"
#include "capi_handles.hpp"
#include "runtime/context.hpp"
#include "moejit.h"
#include "ops/routing.hpp"
#include "ops/scatter_gather.hpp"

extern "C" {

MOEJIT_API moejit_status_t moejit_routing_index_workspace_size(int64_t num_tokens, int32_t top_k,
                                                               int32_t num_experts,
                                                               size_t *bytes) {
    return moejit::capi_guard([&] {
        MOEJIT_REQUIRE(bytes != nullptr, "bytes is NULL");
        *bytes = moejit::routing_index_workspace_size(num_tokens, top_k, num_experts);
    });
}

MOEJIT_API moejit_status_t moejit_routing_index(moejit_context_t context,
                                                moejit_dtype_t index_dtype,
                                                const void *selected_experts, int64_t num_tokens,
                                                int32_t top_k, int32_t num_experts,
                                                int32_t *counts, int32_t *offsets,
                                                int32_t *scatter_index, void *workspace,
                                                size_t workspace_size, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::routing_index(ctx, {.index_dtype = moejit::to_internal(index_dtype), .selected_experts = selected_experts,
                                    .num_tokens = num_tokens, .top_k = top_k, .num_experts = num_experts,
                                    .counts = counts, .offsets = offsets, .scatter_index = scatter_index,
                                    .workspace = workspace, .workspace_size = workspace_size,
                                    .stream = stream});
    });
}

MOEJIT_API moejit_status_t moejit_scatter(moejit_context_t context, moejit_dtype_t dtype,
                                          const void *x, const int32_t *scatter_index,
                                          int64_t num_tokens, int32_t top_k,
                                          int64_t hidden_size, void *xs, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::scatter(ctx, {.spec = {moejit::to_internal(dtype), hidden_size, top_k}, .x = x, .scatter_index = scatter_index,
                              .num_tokens = num_tokens, .xs = xs, .stream = stream});
    });
}

MOEJIT_API moejit_status_t moejit_gather(moejit_context_t context, moejit_dtype_t dtype,
                                         const void *ys, const int32_t *scatter_index,
                                         const void *weights, moejit_dtype_t weight_dtype,
                                         int64_t num_tokens, int32_t top_k, int64_t hidden_size,
                                         void *out, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::gather(ctx, {.spec = {moejit::to_internal(dtype), hidden_size, top_k, moejit::to_internal(weight_dtype)}, .ys = ys,
                             .scatter_index = scatter_index, .weights = weights, .num_tokens = num_tokens,
                             .out = out, .stream = stream});
    });
}

MOEJIT_API moejit_status_t moejit_scatter_weights(moejit_context_t context,
                                                  moejit_dtype_t weight_dtype, const void *weights,
                                                  const int32_t *scatter_index, int64_t num_tokens,
                                                  int32_t top_k, float *w_s, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        // row_token (the token of each scattered row) is for the layer, not the C ABI: none.
        moejit::scatter_weights(ctx, {.weight_dtype = moejit::to_internal(weight_dtype), .weights = weights,
                                      .scatter_index = scatter_index, .num_tokens = num_tokens,
                                      .top_k = top_k, .w_s = w_s, .stream = stream});
    });
}

MOEJIT_API moejit_status_t moejit_gather_weights(moejit_context_t context,
                                                 moejit_dtype_t weight_dtype, const float *d_w_s,
                                                 const int32_t *scatter_index, int64_t num_tokens,
                                                 int32_t top_k, void *d_weights, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::gather_weights(ctx, {.weight_dtype = moejit::to_internal(weight_dtype), .d_w_s = d_w_s,
                                     .scatter_index = scatter_index, .num_tokens = num_tokens,
                                     .top_k = top_k, .d_weights = d_weights, .stream = stream});
    });
}

}  // extern "C"
