// C entry points of the SwiGLU activation: translate moejit_swiglu_args_t to the C++ launchers.
#include <type_traits>

#include "capi_guard.hpp"
#include "capi_struct.hpp"
#include "core/context.hpp"
#include "moejit.h"
#include "ops/swiglu.hpp"

void moejit::StructAbi<moejit_swiglu_args_t>::defaults(moejit_swiglu_args_t &args) { args.dtype = MOEJIT_DTYPE_BF16; }

namespace {

// moejit_swiglu_args_t serves the forward and the backward: the fields both launchers take
// (designated, so each name is checked against both structs), then each one's own.
template <class Args> Args launcher_args(const moejit_swiglu_args_t &c) {
    Args a{.dtype = c.dtype, .rows = c.rows, .intermediate = c.intermediate, .merged = c.merged != 0,
           .limit = c.limit, .gate = c.gate, .up = c.up, .gate_up = c.gate_up, .w_s = c.w_s};
    if constexpr (std::is_same_v<Args, moejit::SwigluForwardArgs>) {
        a.a = c.a;
        a.aw = c.aw;
    } else {
        // args->a / args->aw are forward outputs: the backward neither reads nor writes them,
        // so one struct can serve both calls.
        a.daw = c.daw;
        a.d_gate = c.d_gate;
        a.d_up = c.d_up;
        a.d_gate_up = c.d_gate_up;
        a.d_w_s = c.d_w_s;
    }
    a.stream = c.stream;
    return a;
}

template <class Args, class Launch>
moejit_status_t launch(moejit_context_t context, const moejit_swiglu_args_t *args, Launch launch_op) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        launch_op(ctx, launcher_args<Args>(moejit::read_struct(args, "args")));
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
