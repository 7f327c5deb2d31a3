// C entry points of the grouped GEMMs (src/ops/group_gemm.hpp).
#include "capi_guard.hpp"
#include "core/context.hpp"
#include "ops/group_gemm.hpp"

extern "C" {

MOEJIT_API moejit_status_t moejit_group_gemm_nk_args_init(moejit_group_gemm_nk_args_t *args) {
    return moejit::capi_guard([&] {
        MOEJIT_REQUIRE(args != nullptr, "args is NULL");
        *args = moejit_group_gemm_nk_args_t{};
        args->struct_size = sizeof(*args);
        args->dtype = MOEJIT_DTYPE_BF16;
        args->c_dtype = MOEJIT_DTYPE_BF16;
        args->num_experts = 1;
        args->b_transposed = 1;
    });
}

MOEJIT_API moejit_status_t moejit_group_gemm_mn_args_init(moejit_group_gemm_mn_args_t *args) {
    return moejit::capi_guard([&] {
        MOEJIT_REQUIRE(args != nullptr, "args is NULL");
        *args = moejit_group_gemm_mn_args_t{};
        args->struct_size = sizeof(*args);
        args->dtype = MOEJIT_DTYPE_BF16;
        args->c_dtype = MOEJIT_DTYPE_FP32;
        args->num_experts = 1;
    });
}

MOEJIT_API moejit_status_t moejit_group_gemm_same_nk(moejit_context_t context,
                                                     const moejit_group_gemm_nk_args_t *args) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context");
        MOEJIT_REQUIRE(args != nullptr, "args is NULL");
        moejit::check_struct_size(args->struct_size, sizeof(*args), "args");
        moejit::group_gemm_same_nk(ctx.impl, *args);
    });
}

MOEJIT_API moejit_status_t moejit_group_gemm_same_mn(moejit_context_t context,
                                                     const moejit_group_gemm_mn_args_t *args) {
    return moejit::capi_guard([&] {
        auto &ctx = moejit::require_handle(context, "context");
        MOEJIT_REQUIRE(args != nullptr, "args is NULL");
        moejit::check_struct_size(args->struct_size, sizeof(*args), "args");
        moejit::group_gemm_same_mn(ctx.impl, *args);
    });
}

}  // extern "C"
