// The float64 MoE layer reference (tests/support/reference_moe.hpp) checked against an
// independent, token-major float64 implementation of docs/DESIGN.md §2 and against central finite
// differences of it, so the GPU layer tests compare against the right math: routing index,
// duplicate routes, empty experts, SwiGLU with and without a limit, every gradient.
#define BOOST_TEST_MODULE reference_moe_cpu
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "reference_moe.hpp"

using namespace moejit::test;

namespace {

struct Problem {
    std::int64_t T, H, I;
    std::int32_t E, k;
    double limit;
    std::vector<double> x, rw, wg, wu, wd, dout;
    std::vector<std::int64_t> sel;
};

// Inputs already representable in bf16 (so the float spans hold them exactly).
Problem make_problem(std::int64_t T, std::int64_t H, std::int64_t I, std::int32_t E, std::int32_t k,
                     double limit, double fc1_scale, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Problem p{T, H, I, E, k, limit, {}, {}, {}, {}, {}, {}, {}};
    auto fill = [&](std::vector<double> &v, std::size_t n, double scale) {
        v.resize(n);
        for (double &x : v) x = round_to_bf16(static_cast<float>(normal(rng) * scale));
    };
    fill(p.x, T * H, 1.0);
    fill(p.wg, std::size_t(E) * I * H, fc1_scale / std::sqrt(double(H)));
    fill(p.wu, std::size_t(E) * I * H, fc1_scale / std::sqrt(double(H)));
    fill(p.wd, std::size_t(E) * H * I, 1.0 / std::sqrt(double(I)));
    fill(p.dout, T * H, 1.0);
    p.rw.resize(T * k);
    p.sel.resize(T * k);
    // Routes to experts 1..E-1 only (expert 0 stays empty); every third token routes twice to
    // the same expert (duplicates).
    std::uniform_int_distribution<std::int32_t> pick(1, E - 1);
    std::uniform_real_distribution<float> weight(0.1f, 1.0f);
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int32_t j = 0; j < k; ++j) {
            p.sel[t * k + j] = (t % 3 == 0 && j == 1) ? p.sel[t * k] : pick(rng);
            p.rw[t * k + j] = round_to_bf16(weight(rng));
        }
    return p;
}

std::vector<float> as_float(const std::vector<double> &v) { return {v.begin(), v.end()}; }

// Token-major float64 forward with no rounding anywhere: out[t] = Σ_j w·(silu(g')·u')·W_downᵀ.
std::vector<double> naive_forward(const Problem &p, const std::vector<double> &x, const std::vector<double> &rw,
                                  const std::vector<double> &wg, const std::vector<double> &wu,
                                  const std::vector<double> &wd) {
    std::vector<double> out(p.T * p.H, 0.0), a(p.I);
    for (std::int64_t t = 0; t < p.T; ++t)
        for (std::int32_t j = 0; j < p.k; ++j) {
            const std::int64_t e = p.sel[t * p.k + j];
            for (std::int64_t i = 0; i < p.I; ++i) {
                double g = 0, u = 0;
                for (std::int64_t h = 0; h < p.H; ++h) {
                    g += x[t * p.H + h] * wg[(e * p.I + i) * p.H + h];
                    u += x[t * p.H + h] * wu[(e * p.I + i) * p.H + h];
                }
                if (p.limit > 0) {
                    g = std::min(g, p.limit);
                    u = std::max(-p.limit, std::min(u, p.limit));
                }
                a[i] = g / (1.0 + std::exp(-g)) * u * rw[t * p.k + j];
            }
            for (std::int64_t h = 0; h < p.H; ++h) {
                double y = 0;
                for (std::int64_t i = 0; i < p.I; ++i) y += a[i] * wd[(e * p.H + h) * p.I + i];
                out[t * p.H + h] += y;
            }
        }
    return out;
}

double loss(const Problem &p, const std::vector<double> &out) {
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * p.dout[i];
    return l;
}

template <class V> double rel_error(const V &got, const std::vector<double> &want) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

MoeRefResult run_reference(const Problem &p, Storage storage) {
    const MoeRefConfig cfg{.tokens = p.T, .hidden = p.H, .intermediate = p.I, .experts = p.E, .top_k = p.k,
                           .limit = p.limit, .dtype = storage, .routing = Storage::fp32};
    const auto x = as_float(p.x), rw = as_float(p.rw), wg = as_float(p.wg), wu = as_float(p.wu),
               wd = as_float(p.wd), dout = as_float(p.dout);
    MoeRefInputs in{x, p.sel, rw, wg, wu, wd, dout};
    return moe_reference(cfg, in);
}

// Central differences of the loss Σ out·dout with respect to every element of `param`.
std::vector<double> finite_difference(const Problem &p, std::vector<double> Problem::*param, double step) {
    Problem q = p;
    std::vector<double> grad((p.*param).size());
    for (std::size_t i = 0; i < grad.size(); ++i) {
        const double v = (q.*param)[i];
        (q.*param)[i] = v + step;
        const double lp = loss(p, naive_forward(p, q.x, q.rw, q.wg, q.wu, q.wd));
        (q.*param)[i] = v - step;
        const double lm = loss(p, naive_forward(p, q.x, q.rw, q.wg, q.wu, q.wd));
        (q.*param)[i] = v;
        grad[i] = (lp - lm) / (2 * step);
    }
    return grad;
}

}  // namespace

BOOST_AUTO_TEST_CASE(routing_index_is_a_stable_counting_sort) {
    Problem p = make_problem(3, 8, 8, 3, 2, 0.0, 1.0, 1);
    p.sel = {2, 0, 2, 2, 1, 2};
    const MoeRefResult r = run_reference(p, Storage::fp32);
    BOOST_TEST(r.counts == (std::vector<std::int32_t>{1, 1, 4}), boost::test_tools::per_element());
    BOOST_TEST(r.offsets == (std::vector<std::int32_t>{0, 1, 2, 6}), boost::test_tools::per_element());
    BOOST_TEST(r.scatter_index == (std::vector<std::int32_t>{2, 0, 3, 4, 1, 5}), boost::test_tools::per_element());
    BOOST_TEST(r.route_of_row == (std::vector<std::int64_t>{1, 4, 0, 2, 3, 5}), boost::test_tools::per_element());
    BOOST_TEST(r.w_s[2] == float(p.rw[0]));
}

// Forward against the token-major implementation; every gradient against finite differences.
// Storage fp32: the reference rounds its stored tensors to float, 1e-7 relative, so 1e-5 holds
// unless the math (or the routing) is wrong.
BOOST_AUTO_TEST_CASE(reference_matches_finite_differences) {
    for (double limit : {0.0, 1.0}) {
        BOOST_TEST_CONTEXT("limit " << limit) {
            // fc1 scale 2 with limit 1: about a third of g and of u are clamped.
            const Problem p = make_problem(6, 16, 8, 4, 2, limit, limit > 0 ? 2.0 : 1.0, limit > 0 ? 8 : 7);
            const MoeRefResult r = run_reference(p, Storage::fp32);
            if (limit > 0) {
                BOOST_TEST(r.gate_clamped > 0.1);
                BOOST_TEST(r.up_clamped > 0.1);
            }
            const std::vector<double> out = naive_forward(p, p.x, p.rw, p.wg, p.wu, p.wd);
            BOOST_TEST(rel_error(r.out, out) < 1e-5);
            const double step = 1e-5;
            BOOST_TEST(rel_error(r.dx_merged, finite_difference(p, &Problem::x, step)) < 1e-5);
            BOOST_TEST(rel_error(r.dx_split, finite_difference(p, &Problem::x, step)) < 1e-5);
            BOOST_TEST(rel_error(r.d_routing_weights, finite_difference(p, &Problem::rw, step)) < 1e-5);
            BOOST_TEST(rel_error(r.dw_gate, finite_difference(p, &Problem::wg, step)) < 1e-5);
            BOOST_TEST(rel_error(r.dw_up, finite_difference(p, &Problem::wu, step)) < 1e-5);
            BOOST_TEST(rel_error(r.dw_down, finite_difference(p, &Problem::wd, step)) < 1e-5);
            // Expert 0 has no rows: its weight gradients are exactly 0.
            BOOST_TEST(r.counts[0] == 0);
            for (std::int64_t i = 0; i < p.I * p.H; ++i) {
                BOOST_REQUIRE(r.dw_gate[i] == 0.0f);
                BOOST_REQUIRE(r.dw_up[i] == 0.0f);
                BOOST_REQUIRE(r.dw_down[i] == 0.0f);
            }
        }
    }
}

// bf16 storage: every stored tensor holds bf16 values; split dxs is the rounded sum of the
// rounded dg·W_gate and du·W_up, so split and merged differ only by rounding.
BOOST_AUTO_TEST_CASE(bf16_storage_rounds_where_the_device_stores) {
    const Problem limited = make_problem(40, 64, 32, 5, 3, 3.0, 3.0, 11);
    const MoeRefResult r = run_reference(limited, Storage::bf16);
    BOOST_TEST(r.gate_clamped > 0.1);
    for (const std::vector<float> *v : {&r.g, &r.u, &r.aw, &r.y, &r.out, &r.daw, &r.dg, &r.du, &r.dxs_split,
                                        &r.dxs_merged, &r.dx_split, &r.dx_merged})
        for (float f : *v) BOOST_REQUIRE(round_to_bf16(f) == f);
    // Without a limit (no masks to flip), bf16 storage stays within rounding of fp32 storage.
    const Problem p = make_problem(40, 64, 32, 5, 3, 0.0, 1.0, 12);
    const MoeRefResult b = run_reference(p, Storage::bf16), exact = run_reference(p, Storage::fp32);
    const std::vector<double> dx(exact.dx_merged.begin(), exact.dx_merged.end());
    const std::vector<double> out(exact.out.begin(), exact.out.end());
    BOOST_TEST(rel_error(b.dx_split, dx) < 2e-2);
    BOOST_TEST(rel_error(b.dx_merged, dx) < 2e-2);
    BOOST_TEST(rel_error(b.out, out) < 2e-2);
    BOOST_TEST(rel_error(b.dx_split, dx) > 1e-4);  // and it does round
    BOOST_TEST(b.dx_split != b.dx_merged);  // the split layout's double rounding is modelled
}

// The threaded blocked kernels against plain loops, with odd M and N tails.
BOOST_AUTO_TEST_CASE(gemm_kernels_match_plain_loops) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal;
    const std::int64_t M = 37, N = 29, K = 46;
    std::vector<float> a(M * K), b(N * K), bkn(K * N);
    for (float &v : a) v = normal(rng);
    for (float &v : b) v = normal(rng);
    for (float &v : bkn) v = normal(rng);
    std::vector<double> c(M * N), want(M * N, 0.0);
    ref_gemm_nt(c.data(), N, a.data(), K, b.data(), K, M, N, K);
    for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t k = 0; k < K; ++k) want[m * N + n] += double(a[m * K + k]) * b[n * K + k];
    BOOST_TEST(rel_error(c, want) < 1e-14);
    // axpy: C += A·B (A [M,K]) and C += Aᵀ·B (A [K,M]).
    std::fill(c.begin(), c.end(), 1.0);
    std::fill(want.begin(), want.end(), 1.0);
    ref_gemm_axpy(c.data(), N, a.data(), K, 1, bkn.data(), N, M, N, K);
    for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t k = 0; k < K; ++k) want[m * N + n] += double(a[m * K + k]) * bkn[k * N + n];
    BOOST_TEST(rel_error(c, want) < 1e-14);
    std::vector<float> at(K * M);
    for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t k = 0; k < K; ++k) at[k * M + m] = a[m * K + k];
    std::fill(c.begin(), c.end(), 0.0);
    ref_gemm_axpy(c.data(), N, at.data(), 1, M, bkn.data(), N, M, N, K);
    for (std::int64_t i = 0; i < M * N; ++i) want[i] -= 1.0;
    BOOST_TEST(rel_error(c, want) < 1e-14);
}

// Speed on a mid-size layer (the GPU suite runs the reference on Qwen3-sized layers).
BOOST_AUTO_TEST_CASE(reference_speed) {
    const Problem p = make_problem(256, 1024, 512, 8, 4, 0.0, 1.0, 5);
    const auto start = std::chrono::steady_clock::now();
    const MoeRefResult r = run_reference(p, Storage::bf16);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double macs = 18.0 * double(p.T * p.k) * double(p.H) * double(p.I) / 2.0;
    std::printf("reference: T=%lld H=%lld I=%lld E=%d k=%d in %.3f s on %u threads (%.2f GMAC/s)\n",
                static_cast<long long>(p.T), static_cast<long long>(p.H), static_cast<long long>(p.I), p.E, p.k,
                seconds, ref_threads(), macs / seconds * 1e-9);
    BOOST_TEST(r.out.size() == std::size_t(p.T * p.H));
}
