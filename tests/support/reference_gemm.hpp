// Float64 CPU reference of the grouped GEMMs (docs/DESIGN.md §2), straight from the definition,
// split over host threads by rows so layer-sized shapes stay quick. Header-only; shared by the
// GEMM op tests and the layer tests.
//
// Expert e owns rows [offsets[e], offsets[e+1]); offsets has E+1 entries.
//   gemm_nk: A [S,K]; b_transposed: B [E,N,K], C_e = A_e · B_eᵀ; else B [E,K,N], C_e = A_e · B_e.
//            Returns C [S,N] (rows owned by no expert are 0).
//   gemm_mn: A [S,M], B [S,N]; returns C [E,M,N], C_e = A_eᵀ · B_e (0 for an empty expert).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace moejit::reference {

// Runs body(begin, end) over [0, count) in contiguous chunks on all hardware threads.
template <class F> void parallel_for(std::size_t count, F &&body) {
    const std::size_t workers =
        std::max<std::size_t>(1, std::min<std::size_t>(std::thread::hardware_concurrency(), count / 8 + 1));
    if (workers == 1) {
        body(std::size_t{0}, count);
        return;
    }
    std::vector<std::thread> threads;
    const std::size_t chunk = (count + workers - 1) / workers;
    for (std::size_t w = 0; w < workers; ++w) {
        const std::size_t begin = w * chunk, end = std::min(count, begin + chunk);
        if (begin >= end) break;
        threads.emplace_back([&body, begin, end] { body(begin, end); });
    }
    for (auto &t : threads) t.join();
}

// The expert owning row s (offsets non-decreasing); -1 if none.
inline int expert_of_row(const std::vector<std::int32_t> &offsets, std::int64_t s) {
    auto it = std::upper_bound(offsets.begin(), offsets.end(), static_cast<std::int32_t>(s));
    const std::int64_t e = (it - offsets.begin()) - 1;
    if (e < 0 || e >= static_cast<std::int64_t>(offsets.size()) - 1) return -1;
    return static_cast<int>(e);
}

inline std::vector<double> gemm_nk(const std::vector<double> &a, const std::vector<double> &b,
                                   const std::vector<std::int32_t> &offsets, std::int64_t rows,
                                   std::int64_t n, std::int64_t k, bool b_transposed) {
    const std::size_t S = static_cast<std::size_t>(rows), N = static_cast<std::size_t>(n),
                      K = static_cast<std::size_t>(k);
    const std::size_t E = offsets.size() - 1;
    if (a.size() != S * K || b.size() != E * N * K)
        throw std::invalid_argument("reference::gemm_nk: operand sizes do not match");
    std::vector<double> c(S * N, 0.0);
    parallel_for(S, [&](std::size_t begin, std::size_t end) {
        for (std::size_t s = begin; s < end; ++s) {
            const int e = expert_of_row(offsets, static_cast<std::int64_t>(s));
            if (e < 0) continue;
            const double *as = &a[s * K];
            const double *be = &b[static_cast<std::size_t>(e) * N * K];
            double *cs = &c[s * N];
            if (b_transposed) {  // B_e [N,K]: dot products along contiguous k
                for (std::size_t j = 0; j < N; ++j) {
                    double acc = 0;
                    for (std::size_t q = 0; q < K; ++q) acc += as[q] * be[j * K + q];
                    cs[j] = acc;
                }
            } else {  // B_e [K,N]: axpy along contiguous n
                for (std::size_t q = 0; q < K; ++q) {
                    const double v = as[q];
                    for (std::size_t j = 0; j < N; ++j) cs[j] += v * be[q * N + j];
                }
            }
        }
    });
    return c;
}

inline std::vector<double> gemm_mn(const std::vector<double> &a, const std::vector<double> &b,
                                   const std::vector<std::int32_t> &offsets, std::int64_t rows,
                                   std::int64_t m, std::int64_t n) {
    const std::size_t S = static_cast<std::size_t>(rows), M = static_cast<std::size_t>(m),
                      N = static_cast<std::size_t>(n);
    const std::size_t E = offsets.size() - 1;
    if (a.size() != S * M || b.size() != S * N)
        throw std::invalid_argument("reference::gemm_mn: operand sizes do not match");
    std::vector<double> c(E * M * N, 0.0);
    // Parallel over (expert, output row i): C_e[i,:] = sum_s A[s,i] * B[s,:].
    parallel_for(E * M, [&](std::size_t begin, std::size_t end) {
        for (std::size_t p = begin; p < end; ++p) {
            const std::size_t e = p / M, i = p % M;
            double *ci = &c[(e * M + i) * N];
            for (std::int64_t s = offsets[e]; s < offsets[e + 1]; ++s) {
                const double v = a[static_cast<std::size_t>(s) * M + i];
                const double *bs = &b[static_cast<std::size_t>(s) * N];
                for (std::size_t j = 0; j < N; ++j) ci[j] += v * bs[j];
            }
        }
    });
    return c;
}

}  // namespace moejit::reference
