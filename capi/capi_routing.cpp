// C entry points of the routing index, scatter and gather: translate to the C++ launchers.
#include "capi_guard.hpp"
#include "core/context.hpp"
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
        moejit::RoutingIndexArgs a;
        a.index_dtype = index_dtype;
        a.selected_experts = selected_experts;
        a.num_tokens = num_tokens;
        a.top_k = top_k;
        a.num_experts = num_experts;
        a.counts = counts;
        a.offsets = offsets;
        a.scatter_index = scatter_index;
        a.workspace = workspace;
        a.workspace_size = workspace_size;
        a.stream = stream;
        moejit::routing_index(ctx, a);
    });
}

MOEJIT_API moejit_status_t moejit_scatter(moejit_context_t context, moejit_dtype_t dtype,
                                          const void *x, const int32_t *scatter_index,
                                          int64_t num_tokens, int32_t top_k,
                                          int64_t hidden_size, void *xs, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::ScatterArgs a;
        a.spec = moejit::ScatterSpec{dtype, hidden_size, top_k};
        a.x = x;
        a.scatter_index = scatter_index;
        a.num_tokens = num_tokens;
        a.xs = xs;
        a.stream = stream;
        moejit::scatter(ctx, a);
    });
}

MOEJIT_API moejit_status_t moejit_gather(moejit_context_t context, moejit_dtype_t dtype,
                                         const void *ys, const int32_t *scatter_index,
                                         const void *weights, moejit_dtype_t weight_dtype,
                                         int64_t num_tokens, int32_t top_k, int64_t hidden_size,
                                         void *out, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::GatherArgs a;
        a.spec = moejit::GatherSpec{dtype, hidden_size, top_k, weight_dtype};
        a.ys = ys;
        a.scatter_index = scatter_index;
        a.weights = weights;
        a.num_tokens = num_tokens;
        a.out = out;
        a.stream = stream;
        moejit::gather(ctx, a);
    });
}

MOEJIT_API moejit_status_t moejit_scatter_weights(moejit_context_t context,
                                                  moejit_dtype_t weight_dtype, const void *weights,
                                                  const int32_t *scatter_index, int64_t num_tokens,
                                                  int32_t top_k, float *w_s, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::WeightsScatterArgs a;
        a.weight_dtype = weight_dtype;
        a.weights = weights;
        a.scatter_index = scatter_index;
        a.num_tokens = num_tokens;
        a.top_k = top_k;
        a.w_s = w_s;
        a.stream = stream;
        moejit::scatter_weights(ctx, a);
    });
}

MOEJIT_API moejit_status_t moejit_gather_weights(moejit_context_t context,
                                                 moejit_dtype_t weight_dtype, const float *d_w_s,
                                                 const int32_t *scatter_index, int64_t num_tokens,
                                                 int32_t top_k, void *d_weights, void *stream) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        moejit::WeightsGatherArgs a;
        a.weight_dtype = weight_dtype;
        a.d_w_s = d_w_s;
        a.scatter_index = scatter_index;
        a.num_tokens = num_tokens;
        a.top_k = top_k;
        a.d_weights = d_weights;
        a.stream = stream;
        moejit::gather_weights(ctx, a);
    });
}

}  // extern "C"
