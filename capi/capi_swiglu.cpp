// C entry points of the SwiGLU activation: translate moejit_swiglu_args_t to the C++ launchers.
#include "capi_convert.hpp"
#include "capi_guard.hpp"
#include "capi_handles.hpp"
#include "capi_struct.hpp"
#include "runtime/context.hpp"
#include "moejit.h"
#include "ops/swiglu.hpp"

void moejit::StructAbi<moejit_swiglu_args_t>::defaults(moejit_swiglu_args_t &args) { args.dtype = MOEJIT_DTYPE_BF16; }

namespace {

template <class Args, class Launch>
moejit_status_t launch(moejit_context_t context, const moejit_swiglu_args_t *args, Launch launch_op) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        launch_op(ctx, moejit::to_internal_swiglu<Args>(moejit::read_struct(args, "args")));
    });
}

}  // namespace

extern "C" {

MOEJIT_API moejit_status_t moejit_swiglu_args_init_sized(moejit_swiglu_args_t *args, size_t struct_size) {
    return moejit::capi_guard([&] { moejit::init_struct(args, struct_size, "args"); });
}

MOEJIT_API moejit_status_t(moejit_swiglu_args_init)(moejit_swiglu_args_t *args) {
    return moejit::capi_guard(
        [&] { moejit::init_struct(args, moejit::kLegacyInitSize<moejit_swiglu_args_t>, "args"); });
}

MOEJIT_API moejit_status_t moejit_swiglu_forward(moejit_context_t context,
                                                 const moejit_swiglu_args_t *args) {
    return launch<moejit::SwigluForwardArgs>(
        context, args, [](moejit::Context &ctx, const auto &f) { moejit::swiglu_forward(ctx, f); });
}

MOEJIT_API moejit_status_t moejit_swiglu_backward(moejit_context_t context,
                                                  const moejit_swiglu_args_t *args) {
    return launch<moejit::SwigluBackwardArgs>(
        context, args, [](moejit::Context &ctx, const auto &b) { moejit::swiglu_backward(ctx, b); });
}

}  // extern "C"
