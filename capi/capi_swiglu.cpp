// C entry points of the SwiGLU activation: translate moejit_swiglu_args_t to the C++ launchers.
#include "capi_guard.hpp"
#include "capi_struct.hpp"
#include "core/context.hpp"
#include "moejit.h"
#include "ops/swiglu.hpp"

void moejit::StructAbi<moejit_swiglu_args_t>::defaults(moejit_swiglu_args_t &args) { args.dtype = MOEJIT_DTYPE_BF16; }

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
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        const moejit_swiglu_args_t c = moejit::read_struct(args, "args");
        moejit::SwigluForwardArgs f;
        f.dtype = c.dtype;
        f.rows = c.rows;
        f.intermediate = c.intermediate;
        f.merged = c.merged != 0;
        f.limit = c.limit;
        f.gate = c.gate;
        f.up = c.up;
        f.gate_up = c.gate_up;
        f.w_s = c.w_s;
        f.a = c.a;
        f.aw = c.aw;
        f.stream = c.stream;
        moejit::swiglu_forward(ctx, f);
    });
}

MOEJIT_API moejit_status_t moejit_swiglu_backward(moejit_context_t context,
                                                  const moejit_swiglu_args_t *args) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context").impl;
        const moejit_swiglu_args_t c = moejit::read_struct(args, "args");
        moejit::SwigluBackwardArgs b;
        b.dtype = c.dtype;
        b.rows = c.rows;
        b.intermediate = c.intermediate;
        b.merged = c.merged != 0;
        b.limit = c.limit;
        b.gate = c.gate;
        b.up = c.up;
        b.gate_up = c.gate_up;
        b.w_s = c.w_s;
        b.daw = c.daw;
        b.d_gate = c.d_gate;
        b.d_up = c.d_up;
        b.d_gate_up = c.d_gate_up;
        b.d_w_s = c.d_w_s;
        // args->a / args->aw are forward outputs: the backward neither reads nor writes them,
        // so one struct can serve both calls.
        b.stream = c.stream;
        moejit::swiglu_backward(ctx, b);
    });
}

}  // extern "C"
