// The gated activations fc1's gate and up outputs go through (docs/DESIGN.md §2.2).
#pragma once

#include <cstdint>

namespace moejit {

// The values are moejit_activation_t's (capi/capi_convert.cpp asserts each one). With L the
// limit: g' = min(g, L), u' = clamp(u, -L, L) when L > 0.
enum class Activation : std::int32_t {
    swiglu = 0,   // h = silu(g')·u'
    gpt_oss = 1,  // h = (u' + 1)·g'·sigmoid(alpha·g')
};

}  // namespace moejit
