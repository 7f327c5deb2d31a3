// The reference MoE shapes (docs/DESIGN.md §6) for the C++ tools and tests: moejit-bench times
// them, the CPU GEMM tests check every kernel specialization they need. The Python side is
// SHAPES in bench/moejit_bench/layer.py; tests/python/test_reference_shapes.py reads this
// file and fails when the two disagree.
#pragma once

#include <cstdint>

namespace moejit::reference {

struct Shape {
    const char *name;
    std::int64_t T;  // tokens
    std::int32_t E;  // experts
    std::int64_t H;  // hidden size
    std::int64_t I;  // intermediate size
    std::int32_t k;  // top-k
};

// name, T, E, H, I, k: one shape per line (the Python test parses these lines).
inline constexpr Shape kShapes[] = {
    {"qwen3-30b-a3b", 16384, 128, 2048, 768, 8},
    {"deepseek-v3", 8192, 256, 7168, 2048, 8},
    {"mixtral-8x7b", 8192, 8, 4096, 14336, 2},
    {"gpt-oss-120b", 8192, 128, 2880, 2880, 4},
    {"small-expert-7b", 24576, 128, 1536, 256, 8},
    {"mid-expert-30b", 32768, 64, 4096, 1024, 4},
    {"qwen3-30b-a3b-4k", 4096, 128, 2048, 768, 8},
    {"deepseek-v3-4k", 4096, 256, 7168, 2048, 8},
};

}  // namespace moejit::reference
