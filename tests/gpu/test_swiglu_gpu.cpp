// SwiGLU forward and backward on a real device against the float64 reference
// (tests/support/reference_swiglu.hpp), through the C ABI, plus the C++ launcher's extras
// (in-place backward, aw recomputed in the backward).
//
// Error bounds, and why:
//  - a, aw, d_gate, d_up are computed in fp32 and rounded once to the dtype, so each element is
//    within u·|ref| (u = unit roundoff: 2^-8 bf16, 2^-11 fp16) plus the fp32 math error, which is
//    ~1e-6 of the largest element (__expf is a few ulp; the cancellation in 1 + z(1−σ) near
//    z ≈ −1.28 is absolute, not relative). Checked per element as
//    |out − ref| <= u·|ref| + 1e-5·max|ref|, and as a norm: ‖out − ref‖/‖ref‖ <= u + 1e-5.
//  - d_w_s is an fp32 sum of I products: per row |out − ref| <= (I/32 + 128)·2^-24·Σ|a·daw|
//    (a per-lane chain of I/32 additions, a 5-level butterfly, a few ulp in each recomputed a,
//    more for very negative g where __expf is less accurate but a is tiny), and as a norm
//    ‖out − ref‖/‖ref‖ <= 1e-5.
// Every output is poisoned with NaN first, so an unwritten element fails the finiteness check.
#include "gpu_main.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capi_convert.hpp"  // the cases' C dtypes, as the library's
#include "runtime/context.hpp"
#include "ops/swiglu.hpp"
#include "reference_swiglu.hpp"

MOEJIT_GPU_TEST_MAIN("swiglu_gpu")

using namespace moejit;
using namespace moejit::test;

namespace {

// The test context, made current on this thread before any allocation: gpu_skip_code()
// released the primary context once, so an allocation made before gpu_context() would land
// in a destroyed context.
moejit_context_t current_context() {
    const moejit_context_t context = gpu_context();
    context->impl.make_current();
    return context;
}

double unit_roundoff(moejit_dtype_t dtype) {
    return dtype == MOEJIT_DTYPE_BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

struct Inputs {
    moejit_dtype_t dtype = MOEJIT_DTYPE_BF16;
    std::int64_t rows = 0, intermediate = 0;
    float limit = 0.0f;
    bool weights = false;
    HalfTensor g, u, daw;          // split layout [S,I]
    std::vector<float> w_s;        // [S], empty without weights
    std::vector<double> w_s_values;
};

void set_half(HalfTensor &t, std::size_t k, float value, moejit_dtype_t dtype) {
    t.bits[k] = to_half_bits(value, dtype);
    t.values[k] = from_half_bits(t.bits[k], dtype);
}

// With a limit, g and u are drawn with σ = 0.9·L so that ~13 % of g exceed L and ~27 % of u
// fall outside [−L, L]; some elements are set to exactly L (g, u) and −L (u) to pin down the
// inclusive masks at equality.
Inputs make_inputs(moejit_dtype_t dtype, std::int64_t rows, std::int64_t intermediate,
                   float limit, bool weights, std::uint64_t salt) {
    std::mt19937_64 rng(test_seed() * 1000003u + salt);
    Inputs in;
    in.dtype = dtype, in.rows = rows, in.intermediate = intermediate;
    in.limit = limit, in.weights = weights;
    const auto n = static_cast<std::size_t>(rows * intermediate);
    const float scale = limit > 0 ? 0.9f * limit : 3.0f;
    in.g = random_half(n, dtype, rng, scale);
    in.u = random_half(n, dtype, rng, scale);
    in.daw = random_half(n, dtype, rng, 1.0f);
    if (limit > 0) {
        for (std::size_t k = 0; k < n; k += 37) set_half(in.g, k, limit, dtype);
        for (std::size_t k = 5; k < n; k += 41) set_half(in.u, k, limit, dtype);
        for (std::size_t k = 11; k < n; k += 43) set_half(in.u, k, -limit, dtype);
    }
    if (weights) {
        std::uniform_real_distribution<float> dist(0.05f, 1.0f);
        in.w_s.resize(static_cast<std::size_t>(rows));
        for (auto &w : in.w_s) w = dist(rng);
        in.w_s_values.assign(in.w_s.begin(), in.w_s.end());
    }
    return in;
}

std::string describe(const Inputs &in) {
    return fmt::format("{} S={} I={} limit={} weights={}", in.dtype == MOEJIT_DTYPE_BF16 ? "bf16" : "fp16",
                       in.rows, in.intermediate, in.limit, in.weights ? 1 : 0);
}

// Every output, in the split layout, as bits.
struct Outputs {
    std::vector<std::uint16_t> a, aw, d_gate, d_up;
    std::vector<float> d_w_s;
};

// Forward then backward through the C ABI, in the given layout, on NaN-poisoned outputs.
Outputs run_capi(const Inputs &in, bool merged) {
    const moejit_context_t context = current_context();
    const std::int64_t rows = in.rows, inter = in.intermediate;
    const std::size_t n = static_cast<std::size_t>(rows * inter);
    DeviceBuffer gate, up, gate_up, d_gate, d_up, d_gate_up;
    if (merged) {
        gate_up = DeviceBuffer::from(merge_gate_up(in.g.bits, in.u.bits, rows, inter));
        d_gate_up = DeviceBuffer(2 * n * sizeof(std::uint16_t));
        d_gate_up.poison();
    } else {
        gate = DeviceBuffer::from(in.g.bits);
        up = DeviceBuffer::from(in.u.bits);
        d_gate = DeviceBuffer(n * sizeof(std::uint16_t));
        d_up = DeviceBuffer(n * sizeof(std::uint16_t));
        d_gate.poison();
        d_up.poison();
    }
    DeviceBuffer w_s = in.weights ? DeviceBuffer::from(in.w_s) : DeviceBuffer();
    DeviceBuffer daw = DeviceBuffer::from(in.daw.bits);
    DeviceBuffer a(n * sizeof(std::uint16_t)), aw(n * sizeof(std::uint16_t));
    DeviceBuffer d_w_s(static_cast<std::size_t>(rows) * sizeof(float));
    a.poison();
    aw.poison();
    d_w_s.poison();

    moejit_swiglu_args_t args;
    MOEJIT_TEST_OK(moejit_swiglu_args_init(&args));
    args.dtype = in.dtype;
    args.rows = rows;
    args.intermediate = inter;
    args.merged = merged ? 1 : 0;
    args.limit = in.limit;
    args.gate = gate.get();
    args.up = up.get();
    args.gate_up = gate_up.get();
    args.w_s = w_s.as<const float>();
    args.a = a.get();
    args.aw = aw.get();
    args.daw = daw.get();
    args.d_gate = d_gate.get();
    args.d_up = d_up.get();
    args.d_gate_up = d_gate_up.get();
    args.d_w_s = d_w_s.as<float>();
    MOEJIT_TEST_OK(moejit_swiglu_forward(context, &args));
    MOEJIT_TEST_OK(moejit_swiglu_backward(context, &args));

    Outputs out;
    out.a = a.download<std::uint16_t>();
    out.aw = aw.download<std::uint16_t>();
    if (merged)
        split_gate_up(d_gate_up.download<std::uint16_t>(), rows, inter, out.d_gate, out.d_up);
    else {
        out.d_gate = d_gate.download<std::uint16_t>();
        out.d_up = d_up.download<std::uint16_t>();
    }
    out.d_w_s = d_w_s.download<float>();
    return out;
}

template <class T> long first_mismatch(const std::vector<T> &x, const std::vector<T> &y) {
    if (x.size() != y.size()) return -2;
    for (std::size_t i = 0; i < x.size(); ++i)
        if (std::memcmp(&x[i], &y[i], sizeof(T)) != 0) return static_cast<long>(i);
    return -1;
}

void expect_bitwise_equal(const Outputs &x, const Outputs &y, const std::string &what) {
    BOOST_TEST_CONTEXT(what) {
        BOOST_TEST(first_mismatch(x.a, y.a) == -1);
        BOOST_TEST(first_mismatch(x.aw, y.aw) == -1);
        BOOST_TEST(first_mismatch(x.d_gate, y.d_gate) == -1);
        BOOST_TEST(first_mismatch(x.d_up, y.d_up) == -1);
        BOOST_TEST(first_mismatch(x.d_w_s, y.d_w_s) == -1);
    }
}

// Per-element and norm-wise check of a half-precision output; returns the relative error.
double check_half(const char *what, const std::vector<std::uint16_t> &bits, moejit_dtype_t dtype,
                  const std::vector<double> &ref) {
    const std::vector<double> out = half_to_double(bits, dtype);
    std::size_t non_finite = 0;
    for (double v : out) non_finite += std::isfinite(v) ? 0 : 1;
    BOOST_TEST_CONTEXT(what) {
        BOOST_TEST(out.size() == ref.size());
        BOOST_TEST(non_finite == 0u, non_finite << " elements unwritten or non-finite");
        if (non_finite || out.size() != ref.size()) return 1.0;
        const double u = unit_roundoff(dtype);
        double max_ref = 0;
        for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
        std::size_t bad = 0;
        long first_bad = -1;
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (std::abs(out[i] - ref[i]) > u * std::abs(ref[i]) + 1e-5 * max_ref) {
                if (first_bad < 0) first_bad = static_cast<long>(i);
                ++bad;
            }
        }
        BOOST_TEST(bad == 0u, bad << " elements out of bound; first at " << first_bad << ": "
                                  << (first_bad >= 0 ? out[first_bad] : 0.0) << " vs "
                                  << (first_bad >= 0 ? ref[first_bad] : 0.0));
        const double rel = relative_error(out, ref);
        BOOST_TEST(rel <= u + 1e-5);
        return rel;
    }
    return 1.0;
}

double check_d_w_s(const std::vector<float> &out, const SwigluRefBackward &ref,
                   std::int64_t intermediate) {
    std::vector<double> values(out.begin(), out.end());
    BOOST_TEST_CONTEXT("d_w_s") {
        BOOST_TEST(values.size() == ref.d_w_s.size());
        BOOST_TEST(all_finite(values), "d_w_s has unwritten or non-finite rows");
        if (values.size() != ref.d_w_s.size() || !all_finite(values)) return 1.0;
        const double factor = (static_cast<double>(intermediate) / 32 + 128) * std::ldexp(1.0, -24);
        std::size_t bad = 0;
        for (std::size_t s = 0; s < values.size(); ++s)
            if (std::abs(values[s] - ref.d_w_s[s]) > factor * ref.d_w_s_magnitude[s]) ++bad;
        BOOST_TEST(bad == 0u, bad << " rows out of the fp32 summation bound");
        // Norm-wise, against the terms' magnitudes too: a row's sum may cancel to far below its
        // terms (one row at S = 1 drew rel 1.4e-4 against a 1e-5 bound on the result alone),
        // where the fp32 sum is only as exact as the terms it adds.
        double err2 = 0, mag2 = 0;
        for (std::size_t s = 0; s < values.size(); ++s) {
            err2 += (values[s] - ref.d_w_s[s]) * (values[s] - ref.d_w_s[s]);
            mag2 += ref.d_w_s_magnitude[s] * ref.d_w_s_magnitude[s];
        }
        BOOST_TEST(std::sqrt(err2) <= factor * std::sqrt(mag2));
        return relative_error(values, ref.d_w_s);
    }
    return 1.0;
}

// The whole contract for one input set: reference accuracy, split == merged bitwise, and
// bitwise identical across two runs.
void check_case(const Inputs &in) {
    BOOST_TEST_CONTEXT(describe(in)) {
        const Outputs split = run_capi(in, false);
        const Outputs merged = run_capi(in, true);
        const Outputs again = run_capi(in, false);
        expect_bitwise_equal(split, merged, "split vs merged");
        expect_bitwise_equal(split, again, "two runs");

        const auto fwd = swiglu_forward_ref(in.g.values, in.u.values, in.w_s_values, in.rows,
                                            in.intermediate, in.limit);
        const auto bwd = swiglu_backward_ref(in.g.values, in.u.values, in.w_s_values,
                                             in.daw.values, in.rows, in.intermediate, in.limit);
        const double ra = check_half("a", split.a, in.dtype, fwd.a);
        const double raw = check_half("aw", split.aw, in.dtype, fwd.aw);
        const double rdg = check_half("d_gate", split.d_gate, in.dtype, bwd.d_gate);
        const double rdu = check_half("d_up", split.d_up, in.dtype, bwd.d_up);
        const double rdw = check_d_w_s(split.d_w_s, bwd, in.intermediate);

        // The limit cases must really exercise the clamps (and the masks' equality cases).
        double over_g = 0, outside_u = 0;
        if (in.limit > 0) {
            for (double g : in.g.values) over_g += g > in.limit;
            for (double u : in.u.values) outside_u += std::abs(u) > in.limit;
            over_g /= static_cast<double>(in.g.values.size());
            outside_u /= static_cast<double>(in.u.values.size());
            if (in.g.values.size() >= 1000) {
                BOOST_TEST(over_g >= 0.08);
                BOOST_TEST(outside_u >= 0.15);
            }
        }
        std::printf("swiglu %-40s rel a %.2e aw %.2e dg %.2e du %.2e dws %.2e"
                    " (g>L %.0f%%, |u|>L %.0f%%)\n",
                    describe(in).c_str(), ra, raw, rdg, rdu, rdw, 100 * over_g, 100 * outside_u);
    }
}

// A launcher backward's inputs: w_s, d(a·w) and g, u (split) or gate_up (merged: up null);
// each case below adds its outputs.
SwigluBackwardArgs launcher_backward_args(const Inputs &in, const DeviceBuffer &w_s, const DeviceBuffer &daw,
                                          const DeviceBuffer &gate_or_gate_up, const DeviceBuffer *up) {
    SwigluBackwardArgs b;
    b.dtype = to_internal(in.dtype);
    b.rows = in.rows;
    b.intermediate = in.intermediate;
    b.merged = up == nullptr;
    b.limit = in.limit;
    b.w_s = w_s.as<const float>();
    b.daw = daw.get();
    if (b.merged) {
        b.gate_up = gate_or_gate_up.get();
    } else {
        b.gate = gate_or_gate_up.get();
        b.up = up->get();
    }
    return b;
}

}  // namespace

BOOST_AUTO_TEST_CASE(matches_reference_all_specializations) {
    std::uint64_t salt = 0;
    for (moejit_dtype_t dtype : {MOEJIT_DTYPE_BF16, MOEJIT_DTYPE_FP16})
        for (std::int64_t intermediate : {768, 2880})
            for (float limit : {0.0f, 7.0f, 10.0f})
                for (bool weights : {false, true})
                    check_case(make_inputs(dtype, 999, intermediate, limit, weights, ++salt));
}

// Row widths that leave lanes idle or give a lane one more vector than the others
// (I/8 = 1, 33, 176 vectors per row), and row counts that are not a multiple of a block's rows.
BOOST_AUTO_TEST_CASE(ragged_widths_and_row_counts) {
    std::uint64_t salt = 100;
    for (std::int64_t intermediate : {8, 264, 1408})
        for (std::int64_t rows : {1, 6, 333})
            check_case(make_inputs(MOEJIT_DTYPE_BF16, rows, intermediate, 7.0f, true, ++salt));
    check_case(make_inputs(MOEJIT_DTYPE_FP16, 1, 2880, 10.0f, true, ++salt));
    check_case(make_inputs(MOEJIT_DTYPE_FP16, 1, 768, 0.0f, false, ++salt));
}

// rows == 0 succeeds without touching memory, with real buffers or NULL pointers.
BOOST_AUTO_TEST_CASE(zero_rows_is_a_no_op) {
    const moejit_context_t context = current_context();
    const std::int64_t inter = 768;
    std::vector<std::uint16_t> pattern(inter * 2, 0x3C01);
    DeviceBuffer gate = DeviceBuffer::from(pattern), up = DeviceBuffer::from(pattern);
    DeviceBuffer out = DeviceBuffer::from(pattern), out2 = DeviceBuffer::from(pattern);
    DeviceBuffer dws = DeviceBuffer::from(std::vector<float>(4, 1.5f));
    for (bool merged : {false, true}) {
        moejit_swiglu_args_t args;
        MOEJIT_TEST_OK(moejit_swiglu_args_init(&args));
        args.dtype = MOEJIT_DTYPE_FP16;
        args.rows = 0;
        args.intermediate = inter;
        args.merged = merged;
        args.limit = 7.0f;
        MOEJIT_TEST_OK(moejit_swiglu_forward(context, &args));  // all NULL
        MOEJIT_TEST_OK(moejit_swiglu_backward(context, &args));
        if (merged) {
            args.gate_up = gate.get();
            args.d_gate_up = out.get();
        } else {
            args.gate = gate.get();
            args.up = up.get();
            args.d_gate = out.get();
            args.d_up = out2.get();
        }
        args.daw = up.get();
        args.a = out.get();
        args.aw = out2.get();
        args.d_w_s = dws.as<float>();
        MOEJIT_TEST_OK(moejit_swiglu_forward(context, &args));
        MOEJIT_TEST_OK(moejit_swiglu_backward(context, &args));
    }
    BOOST_TEST(first_mismatch(out.download<std::uint16_t>(), pattern) == -1);
    BOOST_TEST(first_mismatch(out2.download<std::uint16_t>(), pattern) == -1);
    BOOST_TEST(first_mismatch(dws.download<float>(), std::vector<float>(4, 1.5f)) == -1);
}

// The C++ launcher: optional outputs left NULL, aw recomputed by the backward, and the
// backward in place (d_gate == gate, d_up == up, d_gate_up == gate_up) all give bitwise the
// results of the plain C ABI run.
BOOST_AUTO_TEST_CASE(optional_outputs_recompute_and_in_place) {
    Context &ctx = current_context()->impl;
    const Inputs in = make_inputs(MOEJIT_DTYPE_BF16, 517, 1408, 10.0f, true, 7777);
    const Outputs expected = run_capi(in, false);
    const std::size_t n = static_cast<std::size_t>(in.rows * in.intermediate);
    const std::size_t bytes = n * sizeof(std::uint16_t);
    DeviceBuffer w_s = DeviceBuffer::from(in.w_s);
    DeviceBuffer daw = DeviceBuffer::from(in.daw.bits);

    // Forward writing aw only.
    {
        DeviceBuffer gate = DeviceBuffer::from(in.g.bits), up = DeviceBuffer::from(in.u.bits);
        DeviceBuffer aw(bytes);
        aw.poison();
        SwigluForwardArgs f;
        f.dtype = to_internal(in.dtype);
        f.rows = in.rows;
        f.intermediate = in.intermediate;
        f.limit = in.limit;
        f.gate = gate.get();
        f.up = up.get();
        f.w_s = w_s.as<const float>();
        f.aw = aw.get();
        swiglu_forward(ctx, f);
        BOOST_TEST(first_mismatch(aw.download<std::uint16_t>(), expected.aw) == -1);
    }
    // Split backward in place, d_w_s NULL, aw recomputed.
    {
        DeviceBuffer gate = DeviceBuffer::from(in.g.bits), up = DeviceBuffer::from(in.u.bits);
        DeviceBuffer aw(bytes);
        aw.poison();
        SwigluBackwardArgs b = launcher_backward_args(in, w_s, daw, gate, &up);
        b.d_gate = gate.get();
        b.d_up = up.get();
        b.aw = aw.get();
        swiglu_backward(ctx, b);
        BOOST_TEST(first_mismatch(gate.download<std::uint16_t>(), expected.d_gate) == -1);
        BOOST_TEST(first_mismatch(up.download<std::uint16_t>(), expected.d_up) == -1);
        BOOST_TEST(first_mismatch(aw.download<std::uint16_t>(), expected.aw) == -1);
    }
    // aw recomputed over daw (the plan's backward since 0.10: each element read, then written,
    // by one thread), split, with d_w_s.
    {
        DeviceBuffer gate = DeviceBuffer::from(in.g.bits), up = DeviceBuffer::from(in.u.bits);
        DeviceBuffer daw_then_aw = DeviceBuffer::from(in.daw.bits);
        DeviceBuffer dg(bytes), du(bytes), d_w_s(static_cast<std::size_t>(in.rows) * sizeof(float));
        for (DeviceBuffer *b : {&dg, &du, &d_w_s}) b->poison();
        SwigluBackwardArgs b = launcher_backward_args(in, w_s, daw_then_aw, gate, &up);
        b.aw = daw_then_aw.get();
        b.d_gate = dg.get();
        b.d_up = du.get();
        b.d_w_s = d_w_s.as<float>();
        swiglu_backward(ctx, b);
        BOOST_TEST(first_mismatch(dg.download<std::uint16_t>(), expected.d_gate) == -1);
        BOOST_TEST(first_mismatch(du.download<std::uint16_t>(), expected.d_up) == -1);
        BOOST_TEST(first_mismatch(d_w_s.download<float>(), expected.d_w_s) == -1);
        BOOST_TEST(first_mismatch(daw_then_aw.download<std::uint16_t>(), expected.aw) == -1);
    }
    // Merged backward in place, with d_w_s.
    {
        DeviceBuffer gate_up =
            DeviceBuffer::from(merge_gate_up(in.g.bits, in.u.bits, in.rows, in.intermediate));
        DeviceBuffer d_w_s(static_cast<std::size_t>(in.rows) * sizeof(float));
        d_w_s.poison();
        SwigluBackwardArgs b = launcher_backward_args(in, w_s, daw, gate_up, nullptr);
        b.d_gate_up = gate_up.get();
        b.d_w_s = d_w_s.as<float>();
        swiglu_backward(ctx, b);
        std::vector<std::uint16_t> dg, du;
        split_gate_up(gate_up.download<std::uint16_t>(), in.rows, in.intermediate, dg, du);
        BOOST_TEST(first_mismatch(dg, expected.d_gate) == -1);
        BOOST_TEST(first_mismatch(du, expected.d_up) == -1);
        BOOST_TEST(first_mismatch(d_w_s.download<float>(), expected.d_w_s) == -1);
    }
}
