// C entry points of the MoE layer plan.
#include <cstring>

#include "capi_guard.hpp"
#include "core/context.hpp"
#include "moe/plan.hpp"
#include "moejit.h"

using namespace moejit;

namespace {

template <class T> void init_struct(T *s, const char *name) {
    MOEJIT_REQUIRE(s, "{} is NULL", name);
    std::memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
}

const moejit_plan_desc_t &checked_desc(const moejit_plan_desc_t *desc) {
    MOEJIT_REQUIRE(desc, "desc is NULL");
    check_struct_size(desc->struct_size, sizeof *desc, "desc");
    return *desc;
}

}  // namespace

extern "C" {

MOEJIT_API moejit_status_t moejit_plan_desc_init(moejit_plan_desc_t *desc) {
    return capi_guard([&] {
        init_struct(desc, "desc");
        desc->dtype = MOEJIT_DTYPE_BF16;
        desc->fc1_layout = MOEJIT_FC1_SPLIT;
        desc->activation = MOEJIT_ACTIVATION_SWIGLU;
        desc->weight_grad_dtype = MOEJIT_DTYPE_BF16;
        desc->index_dtype = MOEJIT_DTYPE_INT64;  // what torch.topk returns
        desc->routing_dtype = MOEJIT_DTYPE_BF16;
    });
}

MOEJIT_API moejit_status_t moejit_forward_args_init(moejit_forward_args_t *args) {
    return capi_guard([&] { init_struct(args, "args"); });
}

MOEJIT_API moejit_status_t moejit_backward_args_init(moejit_backward_args_t *args) {
    return capi_guard([&] { init_struct(args, "args"); });
}

MOEJIT_API moejit_status_t moejit_plan_create(moejit_context_t context, const moejit_plan_desc_t *desc,
                                              moejit_plan_t *plan) {
    return capi_guard([&] {
        MOEJIT_REQUIRE(plan, "plan (the out-pointer) is NULL");
        *plan = nullptr;
        Context &ctx = require_handle(context, "context").impl;
        const moejit_plan_desc_t &d = checked_desc(desc);
        ctx.require_device("moejit_plan_create (use moejit_plan_warmup on a compile-only context)");
        *plan = new moejit_plan_s(ctx, d);
    });
}

MOEJIT_API void moejit_plan_destroy(moejit_plan_t plan) { delete plan; }

MOEJIT_API moejit_status_t moejit_plan_warmup(moejit_context_t context, const moejit_plan_desc_t *desc,
                                              int *kernels) {
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        const moejit_plan_desc_t &d = checked_desc(desc);
        std::vector<KernelSource> sources = plan_kernel_sources(d, ctx.compute_capability());
        for (const KernelSource &s : sources) ctx.kernel(s);
        if (kernels) *kernels = static_cast<int>(sources.size());
    });
}

MOEJIT_API moejit_status_t moejit_plan_saved_size(moejit_plan_t plan, int64_t num_tokens, size_t *bytes) {
    return capi_guard([&] {
        Plan &p = require_handle(plan, "plan").impl;
        MOEJIT_REQUIRE(bytes, "bytes (the out-pointer) is NULL");
        MOEJIT_REQUIRE(num_tokens >= 0, "num_tokens is {}, expected >= 0", num_tokens);
        *bytes = p.layout(num_tokens).saved_bytes;
    });
}

MOEJIT_API moejit_status_t moejit_plan_workspace_size(moejit_plan_t plan, int64_t num_tokens, size_t *bytes) {
    return capi_guard([&] {
        Plan &p = require_handle(plan, "plan").impl;
        MOEJIT_REQUIRE(bytes, "bytes (the out-pointer) is NULL");
        MOEJIT_REQUIRE(num_tokens >= 0, "num_tokens is {}, expected >= 0", num_tokens);
        *bytes = p.layout(num_tokens).workspace_bytes;
    });
}

MOEJIT_API moejit_status_t moejit_plan_forward(moejit_plan_t plan, const moejit_forward_args_t *args) {
    return capi_guard([&] {
        Plan &p = require_handle(plan, "plan").impl;
        MOEJIT_REQUIRE(args, "args is NULL");
        check_struct_size(args->struct_size, sizeof *args, "args");
        p.forward(*args);
    });
}

MOEJIT_API moejit_status_t moejit_plan_backward(moejit_plan_t plan, const moejit_backward_args_t *args) {
    return capi_guard([&] {
        Plan &p = require_handle(plan, "plan").impl;
        MOEJIT_REQUIRE(args, "args is NULL");
        check_struct_size(args->struct_size, sizeof *args, "args");
        p.backward(*args);
    });
}

}  // extern "C"
