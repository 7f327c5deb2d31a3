// C entry points of the MoE layer plan.
#include <cstddef>
#include <cstring>

#include <memory>
#include <utility>

#include "capi_convert.hpp"
#include "capi_guard.hpp"
#include "capi_handles.hpp"
#include "capi_struct.hpp"
#include "runtime/context.hpp"
#include "moe/plan.hpp"
#include "moe/plan_describe.hpp"
#include "moe/plan_layout.hpp"
#include "moejit.h"

using namespace moejit;

moejit_plan_s::moejit_plan_s(std::unique_ptr<Plan> plan) : impl(std::move(plan)) {}
moejit_plan_s::~moejit_plan_s() = default;

void moejit::StructAbi<moejit_plan_desc_t>::defaults(moejit_plan_desc_t &desc) {
    desc.dtype = MOEJIT_DTYPE_BF16;
    desc.fc1_layout = MOEJIT_FC1_SPLIT;
    desc.activation = MOEJIT_ACTIVATION_SWIGLU;
    desc.weight_grad_dtype = MOEJIT_DTYPE_BF16;
    desc.index_dtype = MOEJIT_DTYPE_INT64;  // what torch.topk returns
    desc.routing_dtype = MOEJIT_DTYPE_BF16;
}
void moejit::StructAbi<moejit_forward_args_t>::defaults(moejit_forward_args_t &) {}
void moejit::StructAbi<moejit_backward_args_t>::defaults(moejit_backward_args_t &) {}
void moejit::StructAbi<moejit_experts_forward_args_t>::defaults(moejit_experts_forward_args_t &) {}
void moejit::StructAbi<moejit_experts_backward_args_t>::defaults(moejit_experts_backward_args_t &) {}

extern "C" {

MOEJIT_API moejit_status_t moejit_plan_desc_init_sized(moejit_plan_desc_t *desc, size_t struct_size) {
    return capi_guard([&] { init_struct(desc, struct_size, "desc"); });
}

MOEJIT_API moejit_status_t(moejit_plan_desc_init)(moejit_plan_desc_t *desc) {
    return capi_guard([&] { init_struct(desc, kLegacyInitSize<moejit_plan_desc_t>, "desc"); });
}

MOEJIT_API moejit_status_t moejit_forward_args_init_sized(moejit_forward_args_t *args, size_t struct_size) {
    return capi_guard([&] { init_struct(args, struct_size, "args"); });
}

MOEJIT_API moejit_status_t(moejit_forward_args_init)(moejit_forward_args_t *args) {
    return capi_guard([&] { init_struct(args, kLegacyInitSize<moejit_forward_args_t>, "args"); });
}

MOEJIT_API moejit_status_t moejit_backward_args_init_sized(moejit_backward_args_t *args, size_t struct_size) {
    return capi_guard([&] { init_struct(args, struct_size, "args"); });
}

// Writes 0.1's 152 bytes, never more, and marks struct_size (capi_struct.hpp,
// kBackwardLegacyInitMarker): its callers' structs are 152 or 160 bytes, and it cannot tell which.
MOEJIT_API moejit_status_t(moejit_backward_args_init)(moejit_backward_args_t *args) {
    return capi_guard([&] {
        init_struct(args, kLegacyInitSize<moejit_backward_args_t>, "args");
        args->struct_size = kBackwardLegacyInitMarker;
    });
}

MOEJIT_API moejit_status_t moejit_plan_create(moejit_context_t context, const moejit_plan_desc_t *desc,
                                              moejit_plan_t *plan) {
    return capi_guard([&] {
        MOEJIT_REQUIRE(plan, "plan (the out-pointer) is NULL");
        *plan = nullptr;
        Context &ctx = require_handle(context, "context").impl;
        const PlanDesc d = to_internal(read_struct(desc, "desc"));
        ctx.require_device("moejit_plan_create (use moejit_plan_warmup on a compile-only context)");
        *plan = new moejit_plan_s(std::make_unique<Plan>(ctx, d));
    });
}

MOEJIT_API void moejit_plan_destroy(moejit_plan_t plan) { delete plan; }

MOEJIT_API moejit_status_t moejit_plan_warmup(moejit_context_t context, const moejit_plan_desc_t *desc,
                                              int *kernels) {
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        const PlanDesc d = to_internal(read_struct(desc, "desc"));
        std::vector<KernelSource> sources = plan_kernel_sources(d, ctx.config(), ctx.compute_capability());
        ctx.kernels(sources);  // the missing ones in parallel, as moejit_plan_create does
        if (kernels) *kernels = static_cast<int>(sources.size());
    });
}

}  // extern "C"

namespace {

// A size query: `size(plan, n)` of a valid plan into *bytes. The layouts validate n as the calls
// taking it do (T >= 0 and T·k <= 2^31-1, or 0 <= R <= 2^31-1; every size a checked product):
// INVALID_ARGUMENT naming num_tokens / num_rows.
template <class Size> moejit_status_t size_query(moejit_plan_t plan, size_t *bytes, Size size) {
    return capi_guard([&] {
        Plan &p = *require_handle(plan, "plan").impl;
        MOEJIT_REQUIRE(bytes, "bytes (the out-pointer) is NULL");
        *bytes = size(p);
    });
}

// An affine size bound of a validated descriptor into *per_unit and *constant.
moejit_status_t size_terms_query(const moejit_plan_desc_t *desc, int64_t *per_unit, const char *per_unit_name,
                                 int64_t *constant, SizeTerms (*terms)(const PlanDesc &)) {
    return capi_guard([&] {
        MOEJIT_REQUIRE(per_unit, "{} (the out-pointer) is NULL", per_unit_name);
        MOEJIT_REQUIRE(constant, "constant_bytes (the out-pointer) is NULL");
        const PlanDesc d = to_internal(read_struct(desc, "desc"));
        validate_plan_desc(d);
        const SizeTerms t = terms(d);
        *per_unit = t.per_unit;
        *constant = t.constant;
    });
}

// moejit_backward_args_t as moejit_plan_backward reads it. A struct the unsized legacy init
// marked (kBackwardLegacyInitMarker) came from a 0.1 header's binary (152 bytes) or a 0.2/0.3
// one's (160, with x): its first 152 bytes are read, and x from offset 152 only when T > 0,
// where only a 0.2/0.3 caller can succeed (a 0.1 struct has no x, and its backward over rows has
// needed x since 0.2). With T = 0 nothing past 152 bytes is touched.
moejit_backward_args_t read_backward_args(const moejit_backward_args_t *args) {
    MOEJIT_REQUIRE(args != nullptr, "args is NULL");
    if (args->struct_size != kBackwardLegacyInitMarker) return read_struct(args, "args");
    constexpr std::size_t head = offsetof(moejit_backward_args_t, x);
    moejit_backward_args_t copy;
    std::memset(static_cast<void *>(&copy), 0, sizeof copy);
    std::memcpy(static_cast<void *>(&copy), args, head);
    copy.struct_size = head;
    moejit_backward_args_t a = read_struct(&copy, "args");
    if (a.num_tokens > 0) std::memcpy(static_cast<void *>(&a.x), reinterpret_cast<const char *>(args) + head, sizeof a.x);
    return a;
}

}  // namespace

extern "C" {

MOEJIT_API moejit_status_t moejit_plan_saved_size(moejit_plan_t plan, int64_t num_tokens, size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.saved_bytes(num_tokens); });
}

MOEJIT_API moejit_status_t moejit_plan_workspace_size(moejit_plan_t plan, int64_t num_tokens, size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.workspace_bytes(num_tokens); });
}

MOEJIT_API moejit_status_t moejit_plan_consuming_workspace_size(moejit_plan_t plan, int64_t num_tokens,
                                                                size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.workspace_bytes(num_tokens, true); });
}

MOEJIT_API moejit_status_t moejit_plan_weight_cache_size(moejit_plan_t plan, size_t *bytes) {
    return size_query(plan, bytes, [](Plan &p) { return p.weight_cache_bytes(); });
}

MOEJIT_API moejit_status_t moejit_plan_cached_workspace_size(moejit_plan_t plan, int64_t num_tokens, size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.cached_workspace_bytes(num_tokens); });
}

MOEJIT_API moejit_status_t moejit_saved_size_terms(const moejit_plan_desc_t *desc, int64_t *bytes_per_token,
                                                   int64_t *constant_bytes) {
    return size_terms_query(desc, bytes_per_token, "bytes_per_token", constant_bytes, saved_size_terms);
}

MOEJIT_API moejit_status_t moejit_experts_saved_size_terms(const moejit_plan_desc_t *desc, int64_t *bytes_per_row,
                                                           int64_t *constant_bytes) {
    return size_terms_query(desc, bytes_per_row, "bytes_per_row", constant_bytes, experts_saved_size_terms);
}

// The argument struct is read before the plan handle is checked, so its struct_size rules are
// the same with or without a device.
MOEJIT_API moejit_status_t moejit_plan_forward(moejit_plan_t plan, const moejit_forward_args_t *args) {
    return capi_guard([&] {
        const ForwardArgs a = to_internal(read_struct(args, "args"));
        Plan &p = *require_handle(plan, "plan").impl;
        p.forward(a);
    });
}

MOEJIT_API moejit_status_t moejit_plan_backward(moejit_plan_t plan, const moejit_backward_args_t *args) {
    return capi_guard([&] {
        const moejit_backward_args_t a = read_backward_args(args);
        // A 0.1 header's struct ends before x, which backward re-reads since 0.2 (its saved
        // buffer no longer holds x's scatter): with rows to process there is no way to honour it.
        MOEJIT_REQUIRE(args->struct_size != offsetof(moejit_backward_args_t, x) || a.num_tokens <= 0,
                       "args->x is missing: args->struct_size {} is a moejit 0.1 header's moejit_backward_args_t, "
                       "which has no x, and since 0.2 the backward needs the forward's input x for T > 0 "
                       "(rebuild against a newer moejit.h and set args->x)",
                       args->struct_size);
        MOEJIT_REQUIRE(args->struct_size != kBackwardLegacyInitMarker || a.num_tokens <= 0 || a.x != nullptr,
                       "args->x is NULL: args was initialised by the unsized moejit_backward_args_init (a binary "
                       "built against a moejit 0.1-0.3 header), and the backward needs the forward's input x for "
                       "T > 0 (a 0.2/0.3 struct: set args->x; a 0.1 struct has no x: rebuild against a newer "
                       "moejit.h)");
        Plan &p = *require_handle(plan, "plan").impl;
        p.backward(to_internal(a));
    });
}

MOEJIT_API moejit_status_t moejit_plan_backward_part_workspace_size(moejit_plan_t plan, int64_t num_tokens,
                                                                    moejit_backward_part_t part, size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.backward_part_workspace_bytes(num_tokens, to_internal(part)); });
}

// As moejit_plan_backward: the struct is read before the handle, its size rules the same.
MOEJIT_API moejit_status_t moejit_plan_backward_part(moejit_plan_t plan, moejit_backward_part_t part,
                                                     const moejit_backward_args_t *args) {
    return capi_guard([&] {
        const moejit_backward_args_t a = read_backward_args(args);
        MOEJIT_REQUIRE(args->struct_size >= offsetof(moejit_backward_args_t, consume_saved) + sizeof a.consume_saved,
                       "args->struct_size is {}: a struct from before 0.12 has no consume_saved, which the backward's "
                       "parts need (rebuild against a newer moejit.h)",
                       args->struct_size);
        Plan &p = *require_handle(plan, "plan").impl;
        p.backward_part(to_internal(part), to_internal(a));
    });
}

MOEJIT_API moejit_status_t moejit_experts_forward_args_init_sized(moejit_experts_forward_args_t *args,
                                                                   size_t struct_size) {
    return capi_guard([&] { init_struct(args, struct_size, "args"); });
}

MOEJIT_API moejit_status_t moejit_experts_backward_args_init_sized(moejit_experts_backward_args_t *args,
                                                                    size_t struct_size) {
    return capi_guard([&] { init_struct(args, struct_size, "args"); });
}

MOEJIT_API moejit_status_t moejit_plan_experts_saved_size(moejit_plan_t plan, int64_t num_rows, size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.experts_layout(num_rows).saved_bytes; });
}

MOEJIT_API moejit_status_t moejit_plan_experts_workspace_size(moejit_plan_t plan, int64_t num_rows, size_t *bytes) {
    return size_query(plan, bytes, [&](Plan &p) { return p.experts_layout(num_rows).workspace_bytes; });
}

MOEJIT_API moejit_status_t moejit_plan_experts_forward(moejit_plan_t plan, const moejit_experts_forward_args_t *args) {
    return capi_guard([&] {
        const ExpertsForwardArgs a = to_internal(read_struct(args, "args"));
        require_handle(plan, "plan").impl->experts_forward(a);
    });
}

MOEJIT_API moejit_status_t moejit_plan_experts_backward(moejit_plan_t plan,
                                                        const moejit_experts_backward_args_t *args) {
    return capi_guard([&] {
        const ExpertsBackwardArgs a = to_internal(read_struct(args, "args"));
        require_handle(plan, "plan").impl->experts_backward(a);
    });
}

}  // extern "C"

// ---------------------------------------------------------------- configuration (since 0.6)

namespace {

// moejit_plan_describe's buffer contract: *required = the text's size with its NUL; buf gets
// as much as fits, NUL-terminated; a size too small is INVALID_ARGUMENT naming `size`.
void copy_text(const std::string &text, char *buf, size_t size, size_t *required) {
    MOEJIT_REQUIRE(buf || size == 0, "buf is NULL but size is {}; pass size 0 to ask for the size only", size);
    if (required) *required = text.size() + 1;
    if (size > 0) {
        const size_t n = text.size() < size ? text.size() : size - 1;
        std::memcpy(buf, text.data(), n);
        buf[n] = '\0';
    }
    MOEJIT_REQUIRE(size == 0 || size > text.size(), "size is {}, but the description needs {} bytes (its NUL "
                   "included; *required says so)", size, text.size() + 1);
}

}  // namespace

extern "C" {

MOEJIT_API moejit_status_t moejit_plan_describe(moejit_plan_t plan, char *buf, size_t size, size_t *required) {
    return capi_guard([&] {
        Plan &p = *require_handle(plan, "plan").impl;
        const Context &ctx = p.context();
        copy_text(describe_plan(ctx.config(), ctx.arch(), p.desc(), p.gemm_specs()), buf, size, required);
    });
}

MOEJIT_API moejit_status_t moejit_plan_describe_desc(moejit_context_t context, const struct moejit_plan_desc *desc,
                                                     char *buf, size_t size, size_t *required) {
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        const PlanDesc d = to_internal(read_struct(desc, "desc"));
        validate_plan_desc(d);
        const LayerSpecs specs = plan_layer_specs(d, ctx.config(), ctx.compute_capability());
        copy_text(describe_plan(ctx.config(), ctx.arch(), d, specs), buf, size, required);
    });
}

}  // extern "C"
