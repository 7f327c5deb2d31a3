// SwiGLU without a GPU: every specialization renders and compiles with NVRTC (sm_90a, sm_80) on
// a compile-only context; argument validation through the C ABI; the float64 reference agrees
// with finite differences of its own forward (so the GPU tests compare against the right math).
#define BOOST_TEST_MODULE swiglu_cpu
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compile_only.hpp"
#include "runtime/context.hpp"
#include "base/error.hpp"
#include "moejit.h"
#include "ops/swiglu.hpp"
#include "print_enums.hpp"
#include "reference_swiglu.hpp"

namespace {

using moejit::test::CompileOnlyContext;

std::vector<moejit::SwigluSpec> all_specs() {
    std::vector<moejit::SwigluSpec> specs;
    for (moejit::DType dtype : {moejit::DType::bf16, moejit::DType::fp16})
        for (std::int64_t intermediate : {768, 1408, 2880})
            for (bool merged : {false, true})
                for (bool limit : {false, true})
                    for (bool weights : {false, true})
                        specs.push_back({dtype, intermediate, merged, limit, weights});
    return specs;
}

void compile_all(const char *arch) {
    CompileOnlyContext context(arch);
    const auto specs = all_specs();
    const auto start = std::chrono::steady_clock::now();
    int kernels = 0;
    for (const auto &spec : specs) {
        for (const auto &source :
             {moejit::render_swiglu_forward(spec), moejit::render_swiglu_backward(spec)}) {
            BOOST_TEST_CONTEXT(arch << " " << source.name) {
                try {
                    context.impl().kernel(source);
                    ++kernels;
                } catch (const moejit::Error &e) {
                    BOOST_ERROR("compile failed: " << e.what());
                }
            }
        }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("swiglu: %d kernels compiled for %s in %.2f s (%.3f s each)\n", kernels, arch,
                seconds, seconds / std::max(kernels, 1));
    moejit_cache_stats_t stats;
    BOOST_REQUIRE(moejit_cache_stats_init(&stats) == MOEJIT_SUCCESS);
    BOOST_REQUIRE(moejit_context_cache_stats(context.get(), &stats) == MOEJIT_SUCCESS);
    // A fresh cache: every distinct specialization is one NVRTC compile.
    BOOST_TEST(stats.compiles == 2 * specs.size());
    BOOST_TEST(stats.compile_failures == 0u);
}

// Checks a status and that moejit_last_error() names `needle`.
void expect_error(moejit_status_t got, moejit_status_t want, const std::string &needle) {
    const std::string message = moejit_last_error();
    BOOST_TEST_CONTEXT("expected \"" << needle << "\" in \"" << message << "\"") {
        BOOST_TEST(static_cast<int>(got) == static_cast<int>(want));
        BOOST_TEST(message.find(needle) != std::string::npos);
    }
}

// Plausible (never dereferenced) 256-byte-aligned device addresses: validation fails first.
void *fake(std::uintptr_t slot) { return reinterpret_cast<void *>(0x7f0000000000ull + slot * 0x100000ull); }

moejit_swiglu_args_t valid_args(bool merged) {
    moejit_swiglu_args_t args;
    BOOST_REQUIRE(moejit_swiglu_args_init(&args) == MOEJIT_SUCCESS);
    args.dtype = MOEJIT_DTYPE_BF16;
    args.rows = 37;
    args.intermediate = 768;
    args.merged = merged ? 1 : 0;
    args.limit = 7.0f;
    if (merged) {
        args.gate_up = fake(1);
        args.d_gate_up = fake(2);
    } else {
        args.gate = fake(1);
        args.up = fake(3);
        args.d_gate = fake(2);
        args.d_up = fake(4);
    }
    args.w_s = static_cast<const float *>(fake(5));
    args.a = fake(6);
    args.aw = fake(7);
    args.daw = fake(8);
    args.d_w_s = static_cast<float *>(fake(9));
    return args;
}

using Entry = moejit_status_t (*)(moejit_context_t, const moejit_swiglu_args_t *);
const Entry kForward = moejit_swiglu_forward;
const Entry kBackward = moejit_swiglu_backward;

}  // namespace

BOOST_AUTO_TEST_CASE(every_specialization_compiles_for_sm_90a) { compile_all("sm_90a"); }

BOOST_AUTO_TEST_CASE(every_specialization_compiles_for_sm_80) { compile_all("sm_80"); }

BOOST_AUTO_TEST_CASE(rendered_sources_are_well_formed_and_distinct) {
    std::set<std::string> names;
    for (const auto &spec : all_specs()) {
        for (const auto &source :
             {moejit::render_swiglu_forward(spec), moejit::render_swiglu_backward(spec)}) {
            BOOST_TEST_CONTEXT(source.name) {
                BOOST_TEST(source.template_name == "swiglu.cuh");
                BOOST_TEST(source.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                           std::string::npos);
                BOOST_TEST(source.source.find("template __global__ void " + source.entry + "(") != std::string::npos);
                BOOST_TEST(names.insert(source.name).second);
            }
        }
    }
    BOOST_TEST(names.size() == 2 * all_specs().size());
    // Rendering is pure: the same spec gives the same text.
    const moejit::SwigluSpec spec{moejit::DType::fp16, 1408, true, true, false};
    BOOST_TEST(moejit::render_swiglu_backward(spec).source ==
               moejit::render_swiglu_backward(spec).source);
}

BOOST_AUTO_TEST_CASE(render_rejects_bad_specs) {
    auto status_of = [](const moejit::SwigluSpec &spec) {
        try {
            moejit::render_swiglu_forward(spec);
        } catch (const moejit::Error &e) {
            return e.status();
        }
        return moejit::Status::success;
    };
    BOOST_TEST(status_of({moejit::DType::bf16, 100, false, false, false}) ==
               moejit::Status::invalid_argument);
    BOOST_TEST(status_of({moejit::DType::bf16, 0, false, false, false}) ==
               moejit::Status::invalid_argument);
    BOOST_TEST(status_of({moejit::DType::int32, 768, false, false, false}) ==
               moejit::Status::invalid_argument);
    BOOST_TEST(status_of({moejit::DType::fp32, 768, false, false, false}) ==
               moejit::Status::unsupported);
    BOOST_TEST(status_of({moejit::DType::fp16, 8, true, true, true}) == moejit::Status::success);
}

BOOST_AUTO_TEST_CASE(args_init_and_handles) {
    BOOST_TEST(moejit_swiglu_args_init(nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    moejit_swiglu_args_t args;
    BOOST_TEST(moejit_swiglu_args_init(&args) == MOEJIT_SUCCESS);
    BOOST_TEST(args.struct_size == sizeof(moejit_swiglu_args_t));
    BOOST_TEST(args.limit == 0.0f);
    BOOST_TEST(args.gate == nullptr);

    CompileOnlyContext context("sm_90a");
    for (Entry entry : {kForward, kBackward}) {
        auto ok = valid_args(false);
        expect_error(entry(nullptr, &ok), MOEJIT_ERROR_INVALID_ARGUMENT, "context");
        expect_error(entry(context.get(), nullptr), MOEJIT_ERROR_INVALID_ARGUMENT, "args");
        // A newer header's larger struct with a field this library does not know set: the
        // library reads those 8 bytes, so they must exist (on the stack they did not: ASan).
        struct {
            moejit_swiglu_args_t args;
            unsigned char newer[8];
        } bad{ok, {0, 0, 0, 1, 0, 0, 0, 0}};
        static_assert(sizeof bad == sizeof(moejit_swiglu_args_t) + 8, "no padding before the newer bytes");
        bad.args.struct_size = sizeof(moejit_swiglu_args_t) + sizeof bad.newer;
        expect_error(entry(context.get(), &bad.args), MOEJIT_ERROR_INVALID_ARGUMENT, "struct_size");
        // Valid arguments reach the device check: a compile-only context cannot launch.
        expect_error(entry(context.get(), &ok), MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    }
}

BOOST_AUTO_TEST_CASE(scalar_arguments_are_validated) {
    CompileOnlyContext context("sm_90a");
    for (Entry entry : {kForward, kBackward}) {
        for (bool merged : {false, true}) {
            auto args = valid_args(merged);
            args.dtype = static_cast<moejit_dtype_t>(42);
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT, "dtype");
            args.dtype = MOEJIT_DTYPE_INT64;
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT, "dtype");
            args.dtype = MOEJIT_DTYPE_FP32;
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_UNSUPPORTED, "dtype");

            args = valid_args(merged);
            for (std::int64_t intermediate : {764, 4, 0, -8}) {
                args.intermediate = intermediate;
                expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT,
                             "intermediate");
            }
            args.intermediate = std::int64_t{1} << 40;
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_UNSUPPORTED, "intermediate");

            args = valid_args(merged);
            args.rows = -1;
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT, "rows");

            args = valid_args(merged);
            args.limit = std::nanf("");
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT, "limit");
            args.limit = INFINITY;
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT, "limit");
            // A limit <= 0 means "no limit": valid, so the call gets as far as the device check.
            args.limit = -1.0f;
            expect_error(entry(context.get(), &args), MOEJIT_ERROR_INVALID_ARGUMENT,
                         "compile-only");
        }
    }
}

BOOST_AUTO_TEST_CASE(tensor_arguments_are_validated) {
    CompileOnlyContext context("sm_90a");
    const auto ctx = context.get();
    struct Case {
        bool merged;
        bool backward;
        void (*mutate)(moejit_swiglu_args_t &);
        const char *needle;
    };
    const Case cases[] = {
        // inputs, both directions
        {false, false, [](moejit_swiglu_args_t &a) { a.gate = nullptr; }, "gate is NULL"},
        {false, true, [](moejit_swiglu_args_t &a) { a.gate = nullptr; }, "gate is NULL"},
        {false, false, [](moejit_swiglu_args_t &a) { a.up = nullptr; }, "up is NULL"},
        {false, true, [](moejit_swiglu_args_t &a) { a.up = nullptr; }, "up is NULL"},
        {true, false, [](moejit_swiglu_args_t &a) { a.gate_up = nullptr; }, "gate_up is NULL"},
        {true, true, [](moejit_swiglu_args_t &a) { a.gate_up = nullptr; }, "gate_up is NULL"},
        // the other layout's pointers must not be set (a likely mix-up)
        {true, false, [](moejit_swiglu_args_t &a) { a.gate = fake(11); }, "gate must be NULL"},
        {false, false, [](moejit_swiglu_args_t &a) { a.gate_up = fake(11); },
         "gate_up must be NULL"},
        {true, true, [](moejit_swiglu_args_t &a) { a.d_up = fake(11); }, "d_up must be NULL"},
        {false, true, [](moejit_swiglu_args_t &a) { a.d_gate_up = fake(11); },
         "d_gate_up must be NULL"},
        // 16-byte vector accesses need 16-byte aligned tensors; fp32 vectors 4-byte aligned
        {false, false,
         [](moejit_swiglu_args_t &a) { a.up = static_cast<const char *>(fake(3)) + 8; },
         "up = 0x7f0000300008 is not 16-byte aligned"},
        {true, true,
         [](moejit_swiglu_args_t &a) { a.d_gate_up = static_cast<char *>(fake(2)) + 2; },
         "d_gate_up"},
        {false, false,
         [](moejit_swiglu_args_t &a) {
             a.w_s = reinterpret_cast<const float *>(static_cast<const char *>(fake(5)) + 2);
         },
         "w_s"},
        {false, true,
         [](moejit_swiglu_args_t &a) {
             a.d_w_s = reinterpret_cast<float *>(static_cast<char *>(fake(9)) + 1);
         },
         "d_w_s"},
        // forward outputs
        {false, false,
         [](moejit_swiglu_args_t &a) {
             a.a = nullptr;
             a.aw = nullptr;
         },
         "a and aw are both NULL"},
        {true, false, [](moejit_swiglu_args_t &a) { a.aw = static_cast<char *>(fake(7)) + 4; },
         "aw"},
        // backward inputs and outputs
        {false, true, [](moejit_swiglu_args_t &a) { a.daw = nullptr; }, "daw is NULL"},
        {true, true, [](moejit_swiglu_args_t &a) { a.daw = nullptr; }, "daw is NULL"},
        {false, true, [](moejit_swiglu_args_t &a) { a.d_gate = nullptr; }, "d_gate is NULL"},
        {false, true, [](moejit_swiglu_args_t &a) { a.d_up = nullptr; }, "d_up is NULL"},
        {true, true, [](moejit_swiglu_args_t &a) { a.d_gate_up = nullptr; },
         "d_gate_up is NULL"},
    };
    for (const Case &c : cases) {
        auto args = valid_args(c.merged);
        c.mutate(args);
        BOOST_TEST_CONTEXT((c.backward ? "backward " : "forward ")
                           << (c.merged ? "merged: " : "split: ") << c.needle) {
            expect_error((c.backward ? kBackward : kForward)(ctx, &args),
                         MOEJIT_ERROR_INVALID_ARGUMENT, c.needle);
        }
    }
    // Optional tensors may be NULL: these calls get as far as the device check.
    auto args = valid_args(false);
    args.w_s = nullptr;
    args.d_w_s = nullptr;
    args.a = nullptr;
    expect_error(kForward(ctx, &args), MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    expect_error(kBackward(ctx, &args), MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    // The backward ignores the forward outputs (one struct can serve both calls).
    args.aw = static_cast<char *>(fake(7)) + 1;
    expect_error(kBackward(ctx, &args), MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    // rows == 0: empty tensors may be NULL.
    moejit_swiglu_args_t empty;
    BOOST_REQUIRE(moejit_swiglu_args_init(&empty) == MOEJIT_SUCCESS);
    empty.intermediate = 768;
    expect_error(kForward(ctx, &empty), MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    expect_error(kBackward(ctx, &empty), MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
}

// The float64 reference's gradients equal central finite differences of
// loss = Σ aw·daw (in float64), at points away from the limit kinks; at g == L exactly the
// reference's gate gradient is the left derivative (the mask is [g <= L]).
BOOST_AUTO_TEST_CASE(reference_gradients_match_finite_differences) {
    using namespace moejit::test;
    std::mt19937_64 rng(20240611);
    std::normal_distribution<double> normal(0.0, 6.0);
    std::uniform_real_distribution<double> uniform(0.1, 1.0);
    const std::int64_t rows = 3, intermediate = 64;
    const std::size_t n = rows * intermediate;
    for (double limit : {0.0, 7.0}) {
        std::vector<double> g(n), u(n), daw(n), w_s(rows);
        for (auto &x : g) x = normal(rng);
        for (auto &x : u) x = normal(rng);
        for (auto &x : daw) x = normal(rng) / 6.0;
        for (auto &x : w_s) x = uniform(rng);
        // Keep finite differences away from the kinks at ±L.
        auto away = [&](double x) {
            return limit == 0 || (std::abs(x - limit) > 1e-3 && std::abs(x + limit) > 1e-3);
        };
        for (auto &x : g)
            if (!away(x)) x += 0.01;
        for (auto &x : u)
            if (!away(x)) x += 0.01;
        auto loss = [&](const std::vector<double> &gg, const std::vector<double> &uu,
                        const std::vector<double> &ww) {
            const auto f = swiglu_forward_ref(gg, uu, ww, rows, intermediate, limit);
            double sum = 0;
            for (std::size_t k = 0; k < n; ++k) sum += f.aw[k] * daw[k];
            return sum;
        };
        const auto b = swiglu_backward_ref(g, u, w_s, daw, rows, intermediate, limit);
        // |x − y| <= 1e-6·max(1, |y|): central differences with h = 1e-6 are good to ~1e-8 here.
        auto close = [](double x, double y) {
            return std::abs(x - y) <= 1e-6 * std::max(1.0, std::abs(y));
        };
        const double h = 1e-6;
        int clipped_g = 0, clipped_u = 0;
        for (std::size_t k = 0; k < n; ++k) {
            // Only term k of the loss depends on g[k] and u[k].
            const double scale = w_s[k / intermediate] * daw[k];
            auto term = [&](double gg, double uu) {
                return swiglu_ref_point(gg, uu, limit).a * scale;
            };
            const double fd_g = (term(g[k] + h, u[k]) - term(g[k] - h, u[k])) / (2 * h);
            const double fd_u = (term(g[k], u[k] + h) - term(g[k], u[k] - h)) / (2 * h);
            BOOST_TEST(close(b.d_gate[k], fd_g), "d_gate[" << k << "] " << b.d_gate[k] << " vs " << fd_g);
            BOOST_TEST(close(b.d_up[k], fd_u), "d_up[" << k << "] " << b.d_up[k] << " vs " << fd_u);
            if (limit > 0 && g[k] > limit) ++clipped_g;
            if (limit > 0 && std::abs(u[k]) > limit) ++clipped_u;
        }
        for (std::int64_t s = 0; s < rows; ++s) {
            auto wp = w_s, wm = w_s;
            wp[s] += h;
            wm[s] -= h;
            const double fd_w = (loss(g, u, wp) - loss(g, u, wm)) / (2 * h);
            BOOST_TEST(close(b.d_w_s[s], fd_w), "d_w_s[" << s << "] " << b.d_w_s[s] << " vs " << fd_w);
        }
        // The limit case really exercised the masks.
        if (limit > 0) BOOST_TEST((clipped_g > 5 && clipped_u > 10));
        // At g == L exactly the gradient passes: the left derivative, da·u'·silu'(L).
        if (limit > 0) {
            std::vector<double> g1{limit}, u1{2.0}, d1{1.0};
            const auto e = swiglu_backward_ref(g1, u1, {}, d1, 1, 1, limit);
            BOOST_TEST(e.d_gate[0] == 2.0 * ref_silu_grad(limit),
                       boost::test_tools::tolerance(1e-15));
            std::vector<double> u2{-limit};
            const auto f = swiglu_backward_ref(g1, u2, {}, d1, 1, 1, limit);
            BOOST_TEST(f.d_up[0] == ref_silu(limit), boost::test_tools::tolerance(1e-15));
            std::vector<double> g3{std::nextafter(limit, 100.0)};
            const auto z = swiglu_backward_ref(g3, u1, {}, d1, 1, 1, limit);
            BOOST_TEST(z.d_gate[0] == 0.0);
        }
    }
}

BOOST_AUTO_TEST_CASE(merged_layout_helpers_round_trip) {
    const std::int64_t rows = 3, intermediate = 4;
    std::vector<int> gate(12), up(12);
    for (int k = 0; k < 12; ++k) {
        gate[k] = k;
        up[k] = 100 + k;
    }
    const auto merged = moejit::test::merge_gate_up(gate, up, rows, intermediate);
    // Row 1: gate 4..7 then up 104..107.
    BOOST_TEST(merged[8] == 4);
    BOOST_TEST(merged[12] == 104);
    std::vector<int> g2, u2;
    moejit::test::split_gate_up(merged, rows, intermediate, g2, u2);
    BOOST_TEST(g2 == gate);
    BOOST_TEST(u2 == up);
}
