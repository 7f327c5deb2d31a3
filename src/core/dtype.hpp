// dtype helpers shared by every op: sizes, names, and the CUDA type spelled in templates.
#pragma once

#include <cstddef>
#include <string_view>

#include "moejit.h"

namespace moejit {

std::size_t dtype_size(moejit_dtype_t dtype);
// "bf16", "fp16", "fp32", "int32", "int64", or "unknown".
std::string_view dtype_name(moejit_dtype_t dtype);
// The device type a template is instantiated with: "__nv_bfloat16", "__half", "float", ...
std::string_view dtype_cuda_type(moejit_dtype_t dtype);
// bf16 or fp16: the operand dtypes of every kernel.
bool is_half_precision(moejit_dtype_t dtype);

}  // namespace moejit
