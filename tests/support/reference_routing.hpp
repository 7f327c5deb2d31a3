// CPU reference of the routing index, scatter and gather (docs/DESIGN.md §2), in float64, written
// for clarity rather than speed. Header-only; shared by the op tests and the layer tests.
//
// Conventions match the library: selected [T,k] row-major (any integer type); an expert id
// outside [0,E) is a dropped route (not counted, scatter_index = -1, offsets[E] = valid routes);
// a scatter_index outside [0,S) is skipped by scatter and adds nothing to gather.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace moejit::reference {

struct RoutingIndex {
    std::vector<std::int32_t> counts;         // [E]
    std::vector<std::int32_t> offsets;        // [E+1]
    std::vector<std::int32_t> scatter_index;  // [T,k]
};

// The stable counting sort, straight from the definition.
template <class Id>
RoutingIndex routing_index(const std::vector<Id> &selected, std::int64_t num_tokens,
                           std::int32_t top_k, std::int32_t num_experts) {
    const std::size_t rows = static_cast<std::size_t>(num_tokens) * top_k;
    if (selected.size() != rows) throw std::invalid_argument("reference: selected is not [T,k]");
    RoutingIndex r;
    r.counts.assign(num_experts, 0);
    r.offsets.assign(num_experts + 1, 0);
    r.scatter_index.assign(rows, -1);
    auto valid = [&](Id e) { return e >= 0 && static_cast<std::int64_t>(e) < num_experts; };
    for (Id e : selected)
        if (valid(e)) ++r.counts[static_cast<std::size_t>(e)];
    for (std::int32_t e = 0; e < num_experts; ++e) r.offsets[e + 1] = r.offsets[e] + r.counts[e];
    std::vector<std::int32_t> next(r.offsets.begin(), r.offsets.end() - 1);
    for (std::size_t p = 0; p < rows; ++p)  // row-major (t,j) order: the rank is stable
        if (valid(selected[p])) r.scatter_index[p] = next[static_cast<std::size_t>(selected[p])]++;
    return r;
}

inline bool valid_row(std::int32_t index, std::size_t rows) {
    return index >= 0 && static_cast<std::size_t>(index) < rows;
}

// xs[scatter_index[t,j], :] = x[t, :]. Rows no route writes (only with dropped routes) are NaN.
inline std::vector<double> scatter(const std::vector<double> &x,
                                   const std::vector<std::int32_t> &scatter_index,
                                   std::int64_t num_tokens, std::int32_t top_k,
                                   std::int64_t hidden_size) {
    const std::size_t rows = static_cast<std::size_t>(num_tokens) * top_k;
    const auto h = static_cast<std::size_t>(hidden_size);
    std::vector<double> xs(rows * h, std::numeric_limits<double>::quiet_NaN());
    for (std::size_t p = 0; p < rows; ++p) {
        const std::int32_t dst = scatter_index[p];
        if (!valid_row(dst, rows)) continue;
        const std::size_t t = p / static_cast<std::size_t>(top_k);
        for (std::size_t c = 0; c < h; ++c) xs[dst * h + c] = x[t * h + c];
    }
    return xs;
}

// out[t, :] = sum_j w[t,j] · ys[scatter_index[t,j], :]; empty weights mean all 1.
inline std::vector<double> gather(const std::vector<double> &ys,
                                  const std::vector<std::int32_t> &scatter_index,
                                  const std::vector<double> &weights, std::int64_t num_tokens,
                                  std::int32_t top_k, std::int64_t hidden_size) {
    const std::size_t rows = static_cast<std::size_t>(num_tokens) * top_k;
    const auto h = static_cast<std::size_t>(hidden_size);
    std::vector<double> out(static_cast<std::size_t>(num_tokens) * h, 0.0);
    for (std::size_t p = 0; p < rows; ++p) {
        const std::int32_t src = scatter_index[p];
        if (!valid_row(src, rows)) continue;
        const double w = weights.empty() ? 1.0 : weights[p];
        const std::size_t t = p / static_cast<std::size_t>(top_k);
        for (std::size_t c = 0; c < h; ++c) out[t * h + c] += w * ys[src * h + c];
    }
    return out;
}

// w_s[scatter_index[p]] = weights[p]; rows no route writes are NaN.
inline std::vector<double> scatter_weights(const std::vector<double> &weights,
                                           const std::vector<std::int32_t> &scatter_index) {
    const std::size_t rows = scatter_index.size();
    std::vector<double> w_s(rows, std::numeric_limits<double>::quiet_NaN());
    for (std::size_t p = 0; p < rows; ++p)
        if (valid_row(scatter_index[p], rows)) w_s[scatter_index[p]] = weights[p];
    return w_s;
}

// d_weights[p] = d_w_s[scatter_index[p]] (0 for a dropped route).
inline std::vector<double> gather_weights(const std::vector<double> &d_w_s,
                                          const std::vector<std::int32_t> &scatter_index) {
    const std::size_t rows = scatter_index.size();
    std::vector<double> d(rows, 0.0);
    for (std::size_t p = 0; p < rows; ++p)
        if (valid_row(scatter_index[p], rows)) d[p] = d_w_s[scatter_index[p]];
    return d;
}

}  // namespace moejit::reference
