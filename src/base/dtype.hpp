// Element types and the helpers every op shares: sizes, names, and the CUDA type spelled in
// templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moejit {

// The values are moejit_dtype_t's (capi/capi_convert.cpp asserts each one). A caller may pass
// any value through the C ABI; validation rejects the ones not listed (the fixed underlying
// type makes holding them defined).
enum class DType : std::int32_t {
    bf16 = 1,
    fp16 = 2,
    fp32 = 3,
    int32 = 4,
    int64 = 5,
};

std::size_t dtype_size(DType dtype);
// "bf16", "fp16", "fp32", "int32", "int64", or "unknown": kernel names are made of these, and
// moejit::api::dtype_name (include/moejit/moejit.hpp) must agree (capi/capi_convert.cpp checks).
constexpr std::string_view dtype_name(DType dtype) {
    switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    }
    return "unknown";
}
// The device type a template is instantiated with: "__nv_bfloat16", "__half", "float", ...
std::string_view dtype_cuda_type(DType dtype);
// bf16 or fp16: the operand dtypes of every kernel.
bool is_half_precision(DType dtype);

}  // namespace moejit
