// C entry points of the grouped GEMMs (src/gemm/group_gemm.hpp).
#include "capi_convert.hpp"
#include "capi_guard.hpp"
#include "capi_handles.hpp"
#include "capi_struct.hpp"
#include "runtime/context.hpp"
#include "gemm/group_gemm.hpp"

void moejit::StructAbi<moejit_group_gemm_nk_args_t>::defaults(moejit_group_gemm_nk_args_t &args) {
    args.dtype = MOEJIT_DTYPE_BF16;
    args.c_dtype = MOEJIT_DTYPE_BF16;
    args.num_experts = 1;
    args.b_transposed = 1;
}

void moejit::StructAbi<moejit_group_gemm_mn_args_t>::defaults(moejit_group_gemm_mn_args_t &args) {
    args.dtype = MOEJIT_DTYPE_BF16;
    args.c_dtype = MOEJIT_DTYPE_FP32;
    args.num_experts = 1;
}

namespace {

// The *_init_sized and *_init entry points of one args struct (legacy: the size 0.1 callers knew).
template <class Args> moejit_status_t init_args(Args *args, size_t struct_size) {
    return moejit::capi_guard([&] { moejit::init_struct(args, struct_size, "args"); });
}
template <class Args> moejit_status_t init_legacy_args(Args *args) {
    return init_args(args, moejit::kLegacyInitSize<Args>);
}

}  // namespace

extern "C" {

MOEJIT_API moejit_status_t moejit_group_gemm_nk_args_init_sized(moejit_group_gemm_nk_args_t *args,
                                                                size_t struct_size) {
    return init_args(args, struct_size);
}

MOEJIT_API moejit_status_t(moejit_group_gemm_nk_args_init)(moejit_group_gemm_nk_args_t *args) {
    return init_legacy_args(args);
}

MOEJIT_API moejit_status_t moejit_group_gemm_mn_args_init_sized(moejit_group_gemm_mn_args_t *args,
                                                                size_t struct_size) {
    return init_args(args, struct_size);
}

MOEJIT_API moejit_status_t(moejit_group_gemm_mn_args_init)(moejit_group_gemm_mn_args_t *args) {
    return init_legacy_args(args);
}

MOEJIT_API moejit_status_t moejit_group_gemm_same_nk(moejit_context_t context,
                                                     const moejit_group_gemm_nk_args_t *args) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context");
        moejit::group_gemm_same_nk(ctx.impl, moejit::to_internal(moejit::read_struct(args, "args")));
    });
}

MOEJIT_API moejit_status_t moejit_group_gemm_same_mn(moejit_context_t context,
                                                     const moejit_group_gemm_mn_args_t *args) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context");
        moejit::group_gemm_same_mn(ctx.impl, moejit::to_internal(moejit::read_struct(args, "args")));
    });
}

}  // extern "C"
