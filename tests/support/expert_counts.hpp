// Rows per expert for the grouped-GEMM GPU tests: random routings, skews, the offsets they
// give, and a per-case random stream (the run's seed mixed with the case name).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu.hpp"

namespace moejit::test {

inline std::vector<std::int32_t> offsets_from_counts(const std::vector<int> &counts) {
    std::vector<std::int32_t> offsets(counts.size() + 1, 0);
    for (std::size_t e = 0; e < counts.size(); ++e) offsets[e + 1] = offsets[e] + counts[e];
    return offsets;
}

// Counts of T*k routes drawn uniformly (duplicate routes of one token allowed), restricted to
// the experts in `allowed` (empty: all E).
inline std::vector<int> random_counts(std::int64_t tokens, int top_k, int num_experts, std::mt19937_64 &rng,
                                      std::vector<int> allowed = {}) {
    if (allowed.empty())
        for (int e = 0; e < num_experts; ++e) allowed.push_back(e);
    std::uniform_int_distribution<std::size_t> pick(0, allowed.size() - 1);
    std::vector<int> counts(num_experts, 0);
    for (std::int64_t i = 0; i < tokens * top_k; ++i) ++counts[allowed[pick(rng)]];
    return counts;
}

// Every one of `rows` rows on `expert` (the duplicate-route shape).
inline std::vector<int> all_to_expert(int rows, int num_experts, int expert) {
    std::vector<int> counts(num_experts, 0);
    counts[expert] = rows;
    return counts;
}

inline std::mt19937_64 case_rng(const std::string &name) {
    return std::mt19937_64(test_seed() ^ std::hash<std::string>{}(name));
}

}  // namespace moejit::test
