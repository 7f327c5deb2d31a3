// Float64 reference of the SwiGLU activation and its backward (docs/DESIGN.md §2), header-only, for
// the op tests and the layer tests. Tensors are split-layout [S,I] row-major vectors of doubles
// (merge_gate_up / split_gate_up convert to and from the merged [S,2I] layout).
//
// limit > 0: g' = min(g,L), u' = clamp(u,-L,L); the masks are inclusive, [g <= L] and
// [-L <= u <= L]: at g == L exactly the gate gradient passes (as in moejit's kernels).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moejit::test {

inline double ref_sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
inline double ref_silu(double z) { return z * ref_sigmoid(z); }
// silu'(z) = σ(z)·(1 + z·(1 − σ(z)))
inline double ref_silu_grad(double z) {
    const double s = ref_sigmoid(z);
    return s * (1.0 + z * (1.0 - s));
}

struct SwigluRefForward {
    std::vector<double> a;   // [S,I] silu(g')·u'
    std::vector<double> aw;  // [S,I] a·w_s
};

struct SwigluRefBackward {
    std::vector<double> d_gate;  // [S,I]
    std::vector<double> d_up;    // [S,I]
    std::vector<double> d_w_s;   // [S] Σ_i a·daw
    // [S] Σ_i |a·daw|: the scale of d_w_s's rounding error (for a per-row error bound).
    std::vector<double> d_w_s_magnitude;
};

// One element's activation and its clamped inputs.
struct SwigluRefPoint {
    double gc, uc, a;
};
inline SwigluRefPoint swiglu_ref_point(double g, double u, double limit) {
    double gc = g, uc = u;
    if (limit > 0) {
        gc = std::min(g, limit);
        uc = std::max(-limit, std::min(u, limit));
    }
    return {gc, uc, ref_silu(gc) * uc};
}

// w_s empty: weights of 1.
inline SwigluRefForward swiglu_forward_ref(std::span<const double> g, std::span<const double> u,
                                           std::span<const double> w_s, std::int64_t rows,
                                           std::int64_t intermediate, double limit) {
    const auto n = static_cast<std::size_t>(rows * intermediate);
    SwigluRefForward out{std::vector<double>(n), std::vector<double>(n)};
    for (std::int64_t s = 0; s < rows; ++s) {
        const double w = w_s.empty() ? 1.0 : w_s[static_cast<std::size_t>(s)];
        for (std::int64_t i = 0; i < intermediate; ++i) {
            const auto k = static_cast<std::size_t>(s * intermediate + i);
            out.a[k] = swiglu_ref_point(g[k], u[k], limit).a;
            out.aw[k] = out.a[k] * w;
        }
    }
    return out;
}

inline SwigluRefBackward swiglu_backward_ref(std::span<const double> g, std::span<const double> u,
                                             std::span<const double> w_s,
                                             std::span<const double> daw, std::int64_t rows,
                                             std::int64_t intermediate, double limit) {
    const auto n = static_cast<std::size_t>(rows * intermediate);
    const auto r = static_cast<std::size_t>(rows);
    SwigluRefBackward out{std::vector<double>(n), std::vector<double>(n), std::vector<double>(r),
                          std::vector<double>(r)};
    for (std::int64_t s = 0; s < rows; ++s) {
        const double w = w_s.empty() ? 1.0 : w_s[static_cast<std::size_t>(s)];
        double sum = 0, magnitude = 0;
        for (std::int64_t i = 0; i < intermediate; ++i) {
            const auto k = static_cast<std::size_t>(s * intermediate + i);
            const SwigluRefPoint p = swiglu_ref_point(g[k], u[k], limit);
            const double da = daw[k] * w;
            const bool pass_g = !(limit > 0) || g[k] <= limit;
            const bool pass_u = !(limit > 0) || (-limit <= u[k] && u[k] <= limit);
            out.d_up[k] = pass_u ? da * ref_silu(p.gc) : 0.0;
            out.d_gate[k] = pass_g ? da * p.uc * ref_silu_grad(p.gc) : 0.0;
            sum += p.a * daw[k];
            magnitude += std::abs(p.a * daw[k]);
        }
        out.d_w_s[static_cast<std::size_t>(s)] = sum;
        out.d_w_s_magnitude[static_cast<std::size_t>(s)] = magnitude;
    }
    return out;
}

// Split [S,I] gate and up -> merged [S,2I] (gate columns first).
template <class T>
std::vector<T> merge_gate_up(const std::vector<T> &gate, const std::vector<T> &up,
                             std::int64_t rows, std::int64_t intermediate) {
    std::vector<T> merged(static_cast<std::size_t>(rows * 2 * intermediate));
    for (std::int64_t s = 0; s < rows; ++s)
        for (std::int64_t i = 0; i < intermediate; ++i) {
            const auto k = static_cast<std::size_t>(s * intermediate + i);
            merged[static_cast<std::size_t>(s * 2 * intermediate + i)] = gate[k];
            merged[static_cast<std::size_t>(s * 2 * intermediate + intermediate + i)] = up[k];
        }
    return merged;
}

// Merged [S,2I] -> split gate, up [S,I].
template <class T>
void split_gate_up(const std::vector<T> &merged, std::int64_t rows, std::int64_t intermediate,
                   std::vector<T> &gate, std::vector<T> &up) {
    gate.resize(static_cast<std::size_t>(rows * intermediate));
    up.resize(gate.size());
    for (std::int64_t s = 0; s < rows; ++s)
        for (std::int64_t i = 0; i < intermediate; ++i) {
            const auto k = static_cast<std::size_t>(s * intermediate + i);
            gate[k] = merged[static_cast<std::size_t>(s * 2 * intermediate + i)];
            up[k] = merged[static_cast<std::size_t>(s * 2 * intermediate + intermediate + i)];
        }
}

}  // namespace moejit::test
