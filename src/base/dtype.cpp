#include "base/dtype.hpp"

namespace moejit {

std::size_t dtype_size(DType dtype) {
    switch (dtype) {
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::fp32:
    case DType::int32: return 4;
    case DType::int64: return 8;
    }
    return 0;
}

std::string_view dtype_cuda_type(DType dtype) {
    switch (dtype) {
    case DType::bf16: return "__nv_bfloat16";
    case DType::fp16: return "__half";
    case DType::fp32: return "float";
    case DType::int32: return "int";
    case DType::int64: return "long long";
    }
    return "void";
}

bool is_half_precision(DType dtype) { return dtype == DType::bf16 || dtype == DType::fp16; }

}  // namespace moejit
