#include "core/dtype.hpp"

#include "moejit/moejit.hpp"

namespace moejit {

std::size_t dtype_size(moejit_dtype_t dtype) {
    switch (dtype) {
    case MOEJIT_DTYPE_BF16:
    case MOEJIT_DTYPE_FP16: return 2;
    case MOEJIT_DTYPE_FP32:
    case MOEJIT_DTYPE_INT32: return 4;
    case MOEJIT_DTYPE_INT64: return 8;
    }
    return 0;
}

// One table for the library and the tools (which see only the public headers).
std::string_view dtype_name(moejit_dtype_t dtype) { return api::dtype_name(dtype); }

std::string_view dtype_cuda_type(moejit_dtype_t dtype) {
    switch (dtype) {
    case MOEJIT_DTYPE_BF16: return "__nv_bfloat16";
    case MOEJIT_DTYPE_FP16: return "__half";
    case MOEJIT_DTYPE_FP32: return "float";
    case MOEJIT_DTYPE_INT32: return "int";
    case MOEJIT_DTYPE_INT64: return "long long";
    }
    return "void";
}

bool is_half_precision(moejit_dtype_t dtype) {
    return dtype == MOEJIT_DTYPE_BF16 || dtype == MOEJIT_DTYPE_FP16;
}

}  // namespace moejit
