// Test support: the models the FP8 layer's saved-buffer size (CPU) and speed (GPU benchmark) are
// checked on, at 8192 tokens (shapes from tools/reference_shapes.hpp).
#pragma once

#include <cstdint>

namespace moejit::test {

struct Fp8Model {
    const char *name;
    std::int64_t T, H, I;
    std::int32_t E, k;
};

inline constexpr Fp8Model kFp8Models[] = {
    {"qwen3-30b-a3b", 8192, 2048, 768, 128, 8},
    {"deepseek-v3", 8192, 7168, 2048, 256, 8},
    {"mixtral-8x7b", 8192, 4096, 14336, 8, 2},
};

}  // namespace moejit::test
