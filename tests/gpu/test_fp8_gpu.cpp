// The FP8 family on a real Hopper device (skips elsewhere, with a message):
// - the quantizers' bytes and scales equal the host mirror (src/fp8/e4m3.hpp) bit for bit, with
//   ragged tiles, NaN and inf; twice the same (deterministic);
// - the block-scaled grouped GEMM on routings with duplicate routes, empty experts, one expert
//   owning every row, T = 1 and a long ring: C NaN-poisoned first with poisoned guard rows past S
//   (never stored), every row written; against a float64 reference of the dequantized operands
//   (~1e-3: the bf16 rounding of C) and of the bf16 inputs (~3e-2: the quantization); bitwise
//   the same on a second run; NaN / inf rows stay in their rows; block_n 128 and 256, and the
//   overlapped promotion;
// - K = 7168 with and without promotion (fp32 C, scales constant along K so both variants
//   compute the same sum): promotion must be measurably better; both errors are printed.
// - the weight gradient (cases wgrad_*, issue 31): fp8_weight_grad's column quantizer bit for
//   bit against its host mirror, its GEMM against float64 references on every routing shape,
//   epilogue and the overlapped promotion, R = 0.
// A disabled case, `benchmark` (run it with --run_test=benchmark), prints the GEMM's TFLOP/s on
// qwen3-30b-a3b's and deepseek-v3's fc1 with balanced routing, for each tile variant;
// `wgrad_benchmark` the weight gradient's beside the bf16 same_mn.
#include "gpu_main.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "fp8/e4m3.hpp"
#include "fp8/fp8.hpp"
#include "runtime/context.hpp"
#include "runtime/driver.hpp"
#include "expert_counts.hpp"
#include "gemm/group_gemm.hpp"
#include "gemm/tile_schedule.hpp"

MOEJIT_GPU_TEST_MAIN("fp8_gpu")

using namespace moejit;
using namespace moejit::test;

namespace {

bool hopper() { return hopper_or_skip("the FP8 kernels need"); }

constexpr std::int64_t kGuardRows = 130;  // > BLOCK_M: a whole stray tile past S would show

// Fails the test for each byte (NaN matches any NaN) and scale the GPU's quantization `what` wrote
// differently from the host mirror's; returns the GPU's bytes.
std::vector<std::uint8_t> expect_host_mirror(const DeviceBuffer &q, const DeviceBuffer &scales,
                                             const fp8::Quantized &host, const std::string &what) {
    const auto gq = q.download<std::uint8_t>();
    const auto gs = scales.download<float>();
    std::int64_t bad_q = 0, bad_s = 0;
    for (std::size_t i = 0; i < gq.size(); ++i)
        bad_q += !(gq[i] == host.q[i] || (fp8::e4m3_is_nan(gq[i]) && fp8::e4m3_is_nan(host.q[i])));
    for (std::size_t i = 0; i < gs.size(); ++i) bad_s += std::memcmp(&gs[i], &host.scales[i], sizeof(float)) != 0;
    BOOST_TEST(bad_q == 0, what << ": " << bad_q << " bytes differ from the host mirror");
    BOOST_TEST(bad_s == 0, what << ": " << bad_s << " scales differ from the host mirror");
    return gq;
}

// The GPU's quantization of bf16 bits, checked against the host mirror; returns the host's.
fp8::Quantized quantize_rows_checked(const std::vector<std::uint16_t> &x, std::int64_t rows, std::int64_t k,
                                     DeviceBuffer &q, DeviceBuffer &scales) {
    const std::int64_t kb = (k + 127) / 128;
    DeviceBuffer dx = DeviceBuffer::from(x);
    q = DeviceBuffer(static_cast<std::size_t>(rows * k));
    scales = DeviceBuffer(static_cast<std::size_t>(rows * kb) * sizeof(float));
    q.poison();
    scales.poison();
    fp8_quantize_rows(internal_ctx(), {k}, {dx.get(), q.get(), scales.as<float>(), rows, nullptr});
    const fp8::Quantized host = fp8::quantize_rows(x, rows, k);
    const auto gq = expect_host_mirror(q, scales, host, "quantize_rows k=" + std::to_string(k));
    // Deterministic: a second run gives the same bytes.
    fp8_quantize_rows(internal_ctx(), {k}, {dx.get(), q.get(), scales.as<float>(), rows, nullptr});
    BOOST_TEST((q.download<std::uint8_t>() == gq), "quantize_rows is not deterministic");
    return host;
}

fp8::Quantized quantize_blocks_checked(const std::vector<std::uint16_t> &w, std::int32_t experts, std::int64_t n,
                                       std::int64_t k, DeviceBuffer &q, DeviceBuffer &scales) {
    const std::int64_t blocks = experts * ((n + 127) / 128) * ((k + 127) / 128);
    DeviceBuffer dw = DeviceBuffer::from(w);
    q = DeviceBuffer(static_cast<std::size_t>(experts * n * k));
    scales = DeviceBuffer(static_cast<std::size_t>(blocks) * sizeof(float));
    q.poison();
    scales.poison();
    fp8_quantize_blocks(internal_ctx(), {n, k}, {dw.get(), q.get(), scales.as<float>(), experts, nullptr});
    const fp8::Quantized host = fp8::quantize_blocks(w, experts, n, k);
    expect_host_mirror(q, scales, host, "quantize_blocks n=" + std::to_string(n) + " k=" + std::to_string(k));
    return host;
}

// Dequantized values, exact in double (e4m3 x fp32).
std::vector<double> dequant_rows(const fp8::Quantized &q, std::int64_t rows, std::int64_t k) {
    const std::int64_t kb = (k + 127) / 128;
    std::vector<double> out(static_cast<std::size_t>(rows * k));
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < k; ++c)
            out[r * k + c] = double(fp8::e4m3_to_float(q.q[r * k + c])) * q.scales[r * kb + c / 128];
    return out;
}
std::vector<double> dequant_blocks(const fp8::Quantized &q, std::int64_t experts, std::int64_t n, std::int64_t k) {
    const std::int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    std::vector<double> out(static_cast<std::size_t>(experts * n * k));
    for (std::int64_t e = 0; e < experts; ++e)
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t c = 0; c < k; ++c)
                out[(e * n + r) * k + c] =
                    double(fp8::e4m3_to_float(q.q[(e * n + r) * k + c])) * q.scales[(e * nb + r / 128) * kb + c / 128];
    return out;
}

// C[rows of e] = A[rows of e] · B_eᵀ in float64.
std::vector<double> reference(const std::vector<double> &a, const std::vector<double> &b,
                              const std::vector<std::int32_t> &offsets, std::int64_t n, std::int64_t k) {
    const std::int64_t rows = offsets.back();
    std::vector<double> c(static_cast<std::size_t>(rows * n), 0.0);
    for (std::size_t e = 0; e + 1 < offsets.size(); ++e)
        for (std::int64_t r = offsets[e]; r < offsets[e + 1]; ++r)
            for (std::int64_t j = 0; j < n; ++j) {
                const double *ar = &a[r * k], *bj = &b[(e * n + j) * k];
                double s = 0;
                for (std::int64_t i = 0; i < k; ++i) s += ar[i] * bj[i];
                c[r * n + j] = s;
            }
    return c;
}

// C as doubles: count fp32 or bf16 values from raw bytes.
std::vector<double> to_doubles(const std::vector<std::uint8_t> &raw, std::size_t count, DType dtype) {
    std::vector<double> out(count);
    for (std::size_t i = 0; i < count; ++i) {
        if (dtype == DType::fp32) {
            float f;
            std::memcpy(&f, &raw[i * 4], 4);
            out[i] = f;
        } else {
            std::uint16_t h;
            std::memcpy(&h, &raw[i * 2], 2);
            out[i] = fp8::bf16_to_float(h);
        }
    }
    return out;
}

// Runs the GEMM into a NaN-poisoned C with poisoned guard rows past S; checks the guard rows
// stayed untouched and, run twice, the results are bitwise the same. Returns C [S, N] as doubles.
std::vector<double> run_gemm(const Fp8GemmSpec &spec, const DeviceBuffer &a, const DeviceBuffer &as,
                             const DeviceBuffer &b, const DeviceBuffer &bs, const std::vector<std::int32_t> &offsets,
                             bool twice = true) {
    const std::int64_t rows = offsets.back(), n = spec.n;
    const auto experts = static_cast<std::int32_t>(offsets.size() - 1);
    const std::size_t elem = spec.c_dtype == DType::fp32 ? 4 : 2;
    DeviceBuffer c(static_cast<std::size_t>((rows + kGuardRows) * n) * elem);
    DeviceBuffer doff = DeviceBuffer::from(offsets);
    c.poison();
    Fp8GemmOperands ops{a.get(), as.as<float>(), b.get(), bs.as<float>(), c.get(), doff.as<std::int32_t>(),
                        rows, experts, nullptr};
    fp8_group_gemm_nk(internal_ctx(), spec, ops);
    const auto raw = c.download<std::uint8_t>();
    // Rows past S: never stored.
    std::int64_t touched = 0;
    for (std::size_t i = static_cast<std::size_t>(rows * n) * elem; i < raw.size(); ++i) touched += raw[i] != 0xFF;
    BOOST_TEST(touched == 0, touched << " bytes past S were written");
    if (twice) {
        fp8_group_gemm_nk(internal_ctx(), spec, ops);
        BOOST_TEST((c.download<std::uint8_t>() == raw), "a second run differs (not deterministic)");
    }
    return to_doubles(raw, static_cast<std::size_t>(rows * n), spec.c_dtype);
}

std::int64_t non_finite(const std::vector<double> &v) {
    return std::count_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
}

struct RoutingCase {
    std::string name;
    std::vector<int> counts;
    std::int64_t n = 256, k = 512;
    int block_n = 128;
    bool overlap = false;
};

// Quantize random bf16 x [S, K] and W [E, N, K] on the GPU, run the GEMM, compare.
void run_case(const RoutingCase &tc) {
    BOOST_TEST_CONTEXT(tc.name) {
        std::mt19937_64 rng = case_rng(tc.name);
        const std::vector<std::int32_t> offsets = offsets_from_counts(tc.counts);
        const std::int64_t rows = offsets.back(), n = tc.n, k = tc.k;
        const auto experts = static_cast<std::int32_t>(tc.counts.size());
        const HalfTensor x = random_half(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * k), MOEJIT_DTYPE_BF16, rng);
        const HalfTensor w = random_half(static_cast<std::size_t>(experts * n * k), MOEJIT_DTYPE_BF16, rng, 0.05f);
        DeviceBuffer qa, sa, qb, sb;
        const fp8::Quantized hx = quantize_rows_checked(x.bits, std::max<std::int64_t>(rows, 1), k, qa, sa);
        const fp8::Quantized hw = quantize_blocks_checked(w.bits, experts, n, k, qb, sb);
        Fp8GemmSpec spec = make_fp8_gemm_spec(n, k, DType::bf16, experts, tc.block_n);
        spec.overlap = tc.overlap;
        const std::vector<double> c = run_gemm(spec, qa, sa, qb, sb, offsets);
        BOOST_TEST(non_finite(c) == 0, "unwritten (NaN) or non-finite outputs among " << c.size());
        const std::vector<double> ref_q = reference(dequant_rows(hx, rows, k), dequant_blocks(hw, experts, n, k), offsets, n, k);
        const std::vector<double> ref_x = reference(x.values, w.values, offsets, n, k);
        const double err_q = relative_error(c, ref_q), err_x = relative_error(c, ref_x);
        std::printf("fp8 %s (block_n %d%s): S=%lld N=%lld K=%lld E=%d: rel. error vs dequantized %.2e, vs bf16 inputs %.2e\n",
                    tc.name.c_str(), tc.block_n, tc.overlap ? ", overlapped promotion" : "", (long long)rows, (long long)n, (long long)k, experts, err_q, err_x);
        BOOST_TEST(err_q < 4e-3, "vs the dequantized operands: " << err_q);
        BOOST_TEST(err_x < 6e-2, "vs the bf16 inputs: " << err_x);
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(quantizers_match_the_host_mirror) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("quantizers");
    for (std::int64_t k : {2048, 1040, 16}) {  // 1040 and 16: ragged last tiles
        const std::int64_t rows = 37;
        HalfTensor x = random_half(static_cast<std::size_t>(rows * k), MOEJIT_DTYPE_BF16, rng, 3.0f);
        // Non-finite values and a tile of zeros, each in its own tile.
        x.bits[5] = 0x7FC0;                      // NaN
        x.bits[3 * k + k - 1] = 0x7F80;          // +inf in row 3's last tile
        x.bits[7 * k] = 0xFF80;                  // -inf in row 7's first tile
        for (std::int64_t c = 0; c < std::min<std::int64_t>(k, 128); ++c) x.bits[11 * k + c] = 0;
        DeviceBuffer q, s;
        quantize_rows_checked(x.bits, rows, k, q, s);
    }
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{256, 512}, {200, 1040}}) {
        HalfTensor w = random_half(static_cast<std::size_t>(3 * n * k), MOEJIT_DTYPE_BF16, rng, 0.02f);
        w.bits[n * k + 7] = 0x7FC0;  // NaN in expert 1
        DeviceBuffer q, s;
        quantize_blocks_checked(w.bits, 3, n, k, q, s);
    }
}

BOOST_AUTO_TEST_CASE(random_routing_with_duplicate_routes) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("counts");
    run_case({"random_top4", random_counts(300, 4, 8, rng)});
}

BOOST_AUTO_TEST_CASE(empty_experts) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("empty");
    run_case({"empty_experts", random_counts(200, 2, 16, rng, {1, 5, 6, 13})});
    run_case({"empty_first_and_last", {0, 0, 300, 0, 129, 0}});
}

BOOST_AUTO_TEST_CASE(one_expert_owns_every_row) {
    if (!hopper()) return;
    run_case({"all_to_one", all_to_expert(1000, 8, 3), 384, 1024});
}

BOOST_AUTO_TEST_CASE(tiny_batches) {
    if (!hopper()) return;
    run_case({"T1_k1", {0, 1, 0, 0}});
    run_case({"T1_k4_duplicates", {0, 4, 0, 0}});
    run_case({"E1", {77}, 128, 128});
    // T = 0: S = 0 launches nothing, null tensors accepted.
    Fp8GemmOperands empty;
    empty.num_experts = 4;
    BOOST_CHECK_NO_THROW(fp8_group_gemm_nk(internal_ctx(), make_fp8_gemm_spec(256, 512, DType::bf16, 4), empty));
    BOOST_CHECK_NO_THROW(fp8_quantize_rows(internal_ctx(), {512}, Fp8QuantRowsOperands{}));
}

BOOST_AUTO_TEST_CASE(many_tiles_per_cta_ring_wraps) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("ring");
    run_case({"ring_wraps", random_counts(1024, 4, 8, rng), 1024, 512});  // ~2.4 tiles per CTA
}

// block_n 256: two B scale blocks per tile, each half promoted in turn; TMA stores (3 stages)
// and, for an fp32 C, the register epilogue.
BOOST_AUTO_TEST_CASE(block_n_256) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("bn256");
    run_case({"bn256_random_top4", random_counts(300, 4, 8, rng), 512, 512, 256});
    run_case({"bn256_all_to_one", all_to_expert(700, 4, 2), 256, 1024, 256});
    run_case({"bn256_empty_experts", {0, 0, 129, 0, 1, 0}, 512, 256, 256});
}

// The overlapped promotion (two temporaries; chunks of 4 k blocks and a tail: K = 768 has 6).
BOOST_AUTO_TEST_CASE(overlapped_promotion) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("overlap");
    run_case({"overlap_random_top4", random_counts(300, 4, 8, rng), 256, 768, 128, true});
    run_case({"overlap_all_to_one_k2048", all_to_expert(500, 4, 1), 256, 2048, 128, true});
    run_case({"overlap_k384_empty", {0, 200, 0, 3}, 384, 384, 128, true});
    run_case({"overlap_k128", {70, 0, 130}, 128, 128, 128, true});
}

BOOST_AUTO_TEST_CASE(non_finite_rows_stay_in_their_rows) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("non_finite");
    const std::vector<std::int32_t> offsets = offsets_from_counts({100, 60, 96});
    const std::int64_t rows = offsets.back(), n = 256, k = 512;
    const std::int32_t experts = 3;
    HalfTensor x = random_half(static_cast<std::size_t>(rows * k), MOEJIT_DTYPE_BF16, rng);
    const HalfTensor w = random_half(static_cast<std::size_t>(experts * n * k), MOEJIT_DTYPE_BF16, rng, 0.05f);
    const std::int64_t nan_row = 17, inf_row = 130;
    x.bits[nan_row * k + 300] = 0x7FC0;
    x.bits[inf_row * k + 3] = 0x7F80;
    DeviceBuffer qa, sa, qb, sb;
    const fp8::Quantized hx = quantize_rows_checked(x.bits, rows, k, qa, sa);
    const fp8::Quantized hw = quantize_blocks_checked(w.bits, experts, n, k, qb, sb);
    const std::vector<double> c = run_gemm(make_fp8_gemm_spec(n, k, DType::bf16, experts), qa, sa, qb, sb, offsets);
    const std::vector<double> ref = reference(dequant_rows(hx, rows, k), dequant_blocks(hw, experts, n, k), offsets, n, k);
    std::vector<double> c_rest, ref_rest;
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < n; ++j) {
            const double v = c[r * n + j];
            if (r == nan_row || r == inf_row) {
                BOOST_TEST(std::isnan(v), "row " << r << " column " << j << " should be NaN, is " << v);
            } else {
                c_rest.push_back(v);
                ref_rest.push_back(ref[r * n + j]);
            }
        }
    BOOST_TEST(non_finite(c_rest) == 0);
    BOOST_TEST(relative_error(c_rest, ref_rest) < 4e-3);
}

BOOST_AUTO_TEST_CASE(promotion_on_long_k) {
    if (!hopper()) return;
    // Scales constant along K (per row of A, per 128-row block of B), so the promoted and the
    // unpromoted kernels compute the same sum; positive operands, so the accumulator's lost
    // low bits add up instead of cancelling (the worst case of real training data).
    std::mt19937_64 rng = case_rng("promotion");
    const std::vector<std::int32_t> offsets = offsets_from_counts({192, 0, 320});
    const std::int64_t rows = offsets.back(), n = 256, k = 7168, kb = k / 128, nb = n / 128;
    const std::int32_t experts = 3;
    std::uniform_real_distribution<float> val(0.25f, 448.0f), scale(0.5f, 2.0f);
    std::vector<std::uint8_t> a(static_cast<std::size_t>(rows * k)), b(static_cast<std::size_t>(experts * n * k));
    for (auto &v : a) v = fp8::float_to_e4m3(val(rng));
    for (auto &v : b) v = fp8::float_to_e4m3(val(rng));
    std::vector<float> a_scale(static_cast<std::size_t>(rows * kb)), b_scale(static_cast<std::size_t>(experts * nb * kb));
    for (std::int64_t r = 0; r < rows; ++r) std::fill_n(&a_scale[r * kb], kb, scale(rng) / 448.0f);
    for (std::int64_t i = 0; i < experts * nb; ++i) std::fill_n(&b_scale[i * kb], kb, scale(rng) / 448.0f);
    const fp8::Quantized ha{a, a_scale}, hb{b, b_scale};
    const std::vector<double> ref = reference(dequant_rows(ha, rows, k), dequant_blocks(hb, experts, n, k), offsets, n, k);
    DeviceBuffer da = DeviceBuffer::from(a), db = DeviceBuffer::from(b);
    DeviceBuffer das = DeviceBuffer::from(a_scale), dbs = DeviceBuffer::from(b_scale);
    for (auto [block_n, overlap] : {std::pair{128, false}, {256, false}, {128, true}}) {
        Fp8GemmSpec spec = make_fp8_gemm_spec(n, k, DType::fp32, experts, block_n);
        spec.promote = true;
        spec.overlap = overlap;
        const double err_on = relative_error(run_gemm(spec, da, das, db, dbs, offsets), ref);
        spec.promote = false;
        spec.overlap = false;
        const double err_off = relative_error(run_gemm(spec, da, das, db, dbs, offsets), ref);
        std::printf("fp8 promotion, K=%lld, fp32 C, block_n %d%s: rel. error with promotion %.3e, without %.3e "
                    "(%.1fx)\n",
                    (long long)k, block_n, overlap ? " (overlapped)" : "", err_on, err_off, err_off / err_on);
        BOOST_TEST(err_on < 1e-3, "with promotion: " << err_on);
        BOOST_TEST(err_on * 2 < err_off, "promotion must be measurably better: " << err_on << " vs " << err_off);
    }
}

// TFLOP/s of the FP8 GEMM on the fc1 of two reference models, balanced routing (S / E rows per
// expert), operands filled with constant e4m3 patterns and unit scales (the values do not change
// the work). Not a timed test: run it with --run_test=benchmark.
BOOST_AUTO_TEST_CASE(benchmark, *boost::unit_test::disabled()) {
    if (!hopper()) return;
    struct Shape {
        const char *name;
        std::int64_t rows;
        std::int32_t experts;
        std::int64_t n, k;
    };
    for (const Shape &s : {Shape{"qwen3-30b-a3b fc1", 131072, 128, 1536, 2048},
                           Shape{"deepseek-v3 fc1", 65536, 256, 4096, 7168}}) {
        std::vector<int> counts(static_cast<std::size_t>(s.experts), static_cast<int>(s.rows / s.experts));
        const std::vector<std::int32_t> offsets = offsets_from_counts(counts);
        const std::int64_t kb = s.k / 128, nb = s.n / 128;
        DeviceBuffer a(static_cast<std::size_t>(s.rows * s.k)), b(static_cast<std::size_t>(s.experts * s.n * s.k));
        DeviceBuffer as(static_cast<std::size_t>(s.rows * kb) * 4), bs(static_cast<std::size_t>(s.experts * nb * kb) * 4);
        DeviceBuffer c(static_cast<std::size_t>(s.rows * s.n) * 2), doff = DeviceBuffer::from(offsets);
        MOEJIT_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(a.get()), 0x3C3A3834u, a.bytes() / 4, nullptr));
        MOEJIT_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(b.get()), 0xB43A3C38u, b.bytes() / 4, nullptr));
        MOEJIT_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(as.get()), 0x3F800000u, as.bytes() / 4, nullptr));
        MOEJIT_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(bs.get()), 0x3F800000u, bs.bytes() / 4, nullptr));
        struct Variant {
            int block_n;
            bool tma_store, promote, overlap;
        };
        for (const Variant &v : {Variant{128, true, true, false}, Variant{128, true, true, true},
                                 Variant{256, true, true, false}, Variant{256, false, true, false},
                                 Variant{128, true, false, false}}) {
            Fp8GemmSpec spec = make_fp8_gemm_spec(s.n, s.k, DType::bf16, s.experts, v.block_n);
            spec.tma_store = v.tma_store;
            spec.stages = fp8_gemm_max_stages(spec, s.experts);
            spec.promote = v.promote;
            spec.overlap = v.overlap;
            const Fp8GemmOperands ops{a.get(), as.as<float>(), b.get(), bs.as<float>(), c.get(),
                                      doff.as<std::int32_t>(), s.rows, s.experts, nullptr};
            for (int i = 0; i < 3; ++i) fp8_group_gemm_nk(internal_ctx(), spec, ops);  // compile, warm up
            const double ms = mean_event_ms(20, [&] { fp8_group_gemm_nk(internal_ctx(), spec, ops); });
            const double sec = ms / 1e3;
            const double tflops = 2.0 * s.rows * s.n * s.k / sec / 1e12;
            std::printf("fp8 benchmark %s: S=%lld E=%d N=%lld K=%lld block_n=%d stages=%d %s%s: %.3f ms, %.0f TFLOP/s "
                        "(%.0f%% of the 1240 TFLOP/s FP8 dense ceiling)\n",
                        s.name, (long long)s.rows, s.experts, (long long)s.n, (long long)s.k, spec.block_n,
                        spec.stages, spec.tma_store ? (spec.overlap ? "tma-store overlapped" : "tma-store")
                                                    : "register-store",
                        spec.promote ? "" : " NO PROMOTION (test mode)", sec * 1e3, tflops, 100.0 * tflops / 1240.0);
        }
    }
}

// ------------------------------------------------------------------ weight gradients (issue 31)
//
// dW[e] = A_eᵀ · B_e through fp8_weight_grad (column quantizer + wgrad GEMM): the quantizer's
// bytes and scales equal the host mirror (fp8::quantize_cols) bit for bit, padding rows zero,
// into a poisoned buffer; dW NaN-poisoned with poisoned guard bytes past it, every element
// written (empty experts exact zeros), bitwise the same on a second run (into a poisoned
// workspace again), against float64 references of the dequantized operands (~1e-3, the bf16
// rounding of dW) and of the bf16 inputs (a few 1e-2, the quantization); fp32 and accumulating
// epilogues; R = 0.

namespace {

constexpr std::size_t kGuardBytes = 4096;

// Row-major [rows, c] doubles of the mirror's transposed padded operand.
std::vector<double> dequant_cols(const fp8::QuantizedCols &q, const std::vector<std::int32_t> &offsets,
                                 std::int64_t c, std::int64_t padded) {
    const std::int64_t rows = offsets.back();
    std::vector<double> out(static_cast<std::size_t>(rows * c), 0.0);
    for (std::size_t e = 0; e + 1 < offsets.size(); ++e)
        for (std::int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
            const std::int64_t pb = q.cum[e] + (r - offsets[e]) / 128, in = (r - offsets[e]) % 128;
            for (std::int64_t j = 0; j < c; ++j)
                out[r * c + j] = double(fp8::e4m3_to_float(q.q[j * padded + pb * 128 + in])) * q.scales[pb * c + j];
        }
    return out;
}

// dW [E, m, n] = A_eᵀ · B_e in float64 (+ `base` when given).
std::vector<double> wgrad_reference(const std::vector<double> &a, const std::vector<double> &b,
                                    const std::vector<std::int32_t> &offsets, std::int64_t m, std::int64_t n,
                                    const std::vector<double> *base = nullptr) {
    const std::int64_t experts = static_cast<std::int64_t>(offsets.size()) - 1;
    std::vector<double> dw = base ? *base : std::vector<double>(static_cast<std::size_t>(experts * m * n), 0.0);
    for (std::int64_t e = 0; e < experts; ++e)
        for (std::int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
            const double *ar = &a[r * m], *br = &b[r * n];
            double *out = &dw[e * m * n];
            for (std::int64_t i = 0; i < m; ++i) {
                const double ai = ar[i];
                if (ai == 0) continue;
                double *row = out + i * n;
                for (std::int64_t j = 0; j < n; ++j) row[j] += ai * br[j];
            }
        }
    return dw;
}

// The column quantizer into poisoned buffers, against the host mirror.
fp8::QuantizedCols quantize_cols_checked(const std::vector<std::uint16_t> &x, const std::vector<std::int32_t> &offsets,
                                         std::int64_t c, const std::string &what) {
    const std::int64_t rows = offsets.back();
    const auto experts = static_cast<std::int32_t>(offsets.size() - 1);
    const std::int64_t padded = fp8_wgrad_padded_rows(rows, experts);
    DeviceBuffer dx = DeviceBuffer::from(x), doff = DeviceBuffer::from(offsets);
    DeviceBuffer q(static_cast<std::size_t>(c * padded)), sc(static_cast<std::size_t>(padded / 128 * c) * 4);
    q.poison();
    sc.poison();
    fp8_quantize_cols(internal_ctx(), {c},
                      {dx.get(), doff.as<std::int32_t>(), q.get(), sc.as<float>(), rows, experts, padded, nullptr});
    const fp8::QuantizedCols host = fp8::quantize_cols(x, rows, c, offsets, padded, 0xFF);
    const auto gq = q.download<std::uint8_t>();
    const auto gs = sc.download<float>();
    const std::int64_t written = host.cum.back();  // blocks the routing owns
    std::int64_t bad_q = 0, bad_s = 0;
    for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t i = 0; i < written * 128; ++i) {
            const std::uint8_t g = gq[j * padded + i], h = host.q[j * padded + i];
            bad_q += !(g == h || (fp8::e4m3_is_nan(g) && fp8::e4m3_is_nan(h)));
        }
    for (std::int64_t i = 0; i < written * c; ++i) bad_s += std::memcmp(&gs[i], &host.scales[i], 4) != 0;
    BOOST_TEST(bad_q == 0, what << ": quantize_cols c=" << c << ": " << bad_q << " bytes differ from the host mirror");
    BOOST_TEST(bad_s == 0, what << ": quantize_cols c=" << c << ": " << bad_s << " scales differ from the host mirror");
    return host;
}

struct WgradCase {
    std::string name;
    std::vector<int> counts;
    std::int64_t m = 256, n = 256;
    DType dtype = DType::bf16;
    bool accumulate = false;
    std::size_t dw_offset = 0;  // bytes: 4 makes a bf16 dW that TMA cannot store (register epilogue)
    float scale = 1.0f;         // of the random inputs (extreme magnitudes)
    bool overlap = false;       // the overlapped promotion
};

void run_wgrad_case(const WgradCase &tc) {
    BOOST_TEST_CONTEXT(tc.name) {
        std::mt19937_64 rng = case_rng("wgrad_" + tc.name);
        const std::vector<std::int32_t> offsets = offsets_from_counts(tc.counts);
        const std::int64_t rows = offsets.back(), m = tc.m, n = tc.n;
        const auto experts = static_cast<std::int32_t>(tc.counts.size());
        const std::size_t count = static_cast<std::size_t>(experts * m * n), elem = tc.dtype == DType::fp32 ? 4 : 2;
        const HalfTensor a = random_half(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * m), MOEJIT_DTYPE_BF16, rng, tc.scale);
        const HalfTensor b = random_half(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * n), MOEJIT_DTYPE_BF16, rng, tc.scale);
        fp8::QuantizedCols qa, qb;
        if (rows > 0) {
            qa = quantize_cols_checked(a.bits, offsets, m, tc.name + " A");
            qb = quantize_cols_checked(b.bits, offsets, n, tc.name + " B");
        }
        // dW: NaN-poisoned (or the old gradient when accumulating), guard bytes after it.
        DeviceBuffer dw(tc.dw_offset + count * elem + kGuardBytes);
        dw.poison();
        std::vector<double> old;
        if (tc.accumulate) {
            const HalfTensor g = random_half(count, MOEJIT_DTYPE_BF16, rng);
            std::vector<std::uint8_t> raw(dw.bytes(), 0xFF);
            old.resize(count);
            for (std::size_t i = 0; i < count; ++i) {
                old[i] = g.values[i];
                if (elem == 4) {
                    const float f = static_cast<float>(g.values[i]);
                    std::memcpy(&raw[tc.dw_offset + i * 4], &f, 4);
                } else {
                    std::memcpy(&raw[tc.dw_offset + i * 2], &g.bits[i], 2);
                }
            }
            dw.upload(raw);
        }
        DeviceBuffer da = DeviceBuffer::from(a.bits), db = DeviceBuffer::from(b.bits), doff = DeviceBuffer::from(offsets);
        DeviceBuffer ws(std::max<std::size_t>(fp8_weight_grad_workspace_bytes(rows, experts, m, n), 256));
        Fp8WgradArgs args;
        args.a = da.get();
        args.b = db.get();
        args.dw = static_cast<unsigned char *>(dw.get()) + tc.dw_offset;
        args.offsets = doff.as<std::int32_t>();
        args.rows = rows;
        args.num_experts = experts;
        args.m = m;
        args.n = n;
        args.dw_dtype = tc.dtype;
        args.accumulate = tc.accumulate;
        args.overlap = tc.overlap;
        args.workspace = ws.get();
        args.workspace_bytes = ws.bytes();
        ws.poison();  // stale workspace bytes must not leak into the padding
        fp8_weight_grad(internal_ctx(), args);
        const auto raw = dw.download<std::uint8_t>();
        std::int64_t touched = 0;
        for (std::size_t i = 0; i < tc.dw_offset; ++i) touched += raw[i] != 0xFF;
        for (std::size_t i = tc.dw_offset + count * elem; i < raw.size(); ++i) touched += raw[i] != 0xFF;
        BOOST_TEST(touched == 0, touched << " bytes outside dW were written");
        if (!tc.accumulate) {  // the same bytes again, from a freshly poisoned workspace and dW
            ws.poison();
            dw.poison();
            fp8_weight_grad(internal_ctx(), args);
            BOOST_TEST((dw.download<std::uint8_t>() == raw), "a second run differs (not deterministic)");
        }
        std::vector<std::uint8_t> body(raw.begin() + static_cast<std::ptrdiff_t>(tc.dw_offset), raw.end());
        const std::vector<double> out = to_doubles(body, count, tc.dtype);
        BOOST_TEST(non_finite(out) == 0, "unwritten (NaN) or non-finite dW elements among " << out.size());
        // Empty experts: exact zeros (or the old gradient, exactly).
        std::int64_t bad_empty = 0;
        for (std::int32_t e = 0; e < experts; ++e)
            if (tc.counts[e] == 0)
                for (std::int64_t i = e * m * n; i < (e + 1) * m * n; ++i)
                    bad_empty += out[i] != (tc.accumulate ? old[i] : 0.0);  // old is bf16, exact in both dtypes
        BOOST_TEST(bad_empty == 0, bad_empty << " elements of empty experts are not exactly as expected");
        const std::vector<double> *base = tc.accumulate ? &old : nullptr;
        const std::vector<double> ref_x = wgrad_reference(a.values, b.values, offsets, m, n, base);
        const std::vector<double> ref_q = rows == 0 ? ref_x
                                                    : wgrad_reference(dequant_cols(qa, offsets, m, fp8_wgrad_padded_rows(rows, experts)),
                                                                      dequant_cols(qb, offsets, n, fp8_wgrad_padded_rows(rows, experts)),
                                                                      offsets, m, n, base);
        const double err_q = relative_error(out, ref_q), err_x = relative_error(out, ref_x);
        std::printf("fp8 wgrad %s: S=%lld E=%d M=%lld N=%lld dW %s%s%s: rel. error vs dequantized %.2e, vs bf16 inputs %.2e\n",
                    tc.name.c_str(), (long long)rows, experts, (long long)m, (long long)n, dtype_name(tc.dtype).data(),
                    tc.accumulate ? " (+=)" : "", tc.overlap ? ", overlapped promotion" : "", err_q, err_x);
        const double tol_q = tc.dtype == DType::fp32 ? 1e-3 : 4e-3;
        BOOST_TEST(err_q < tol_q, "vs the dequantized operands: " << err_q);
        BOOST_TEST(err_x < 6e-2, "vs the bf16 inputs: " << err_x);
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(wgrad_random_routing_with_duplicate_routes) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_counts");
    run_wgrad_case({"random_top4", random_counts(300, 4, 8, rng)});
    run_wgrad_case({"random_top8_e16_wide", random_counts(200, 8, 16, rng), 384, 512});
}

BOOST_AUTO_TEST_CASE(wgrad_empty_experts_and_one_row) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_empty");
    run_wgrad_case({"empty_experts", random_counts(200, 2, 16, rng, {1, 5, 6, 13})});
    run_wgrad_case({"block_edges", {0, 1, 127, 128, 129, 0, 256, 1}});
    run_wgrad_case({"T1_k1", {0, 1, 0, 0}, 128, 128});
}

BOOST_AUTO_TEST_CASE(wgrad_one_expert_owns_every_row) {
    if (!hopper()) return;
    run_wgrad_case({"all_to_one", all_to_expert(1000, 8, 3), 384, 256});
    // A long reduction: 47 promoted 128-row blocks into one tile.
    run_wgrad_case({"all_to_one_long", all_to_expert(6000, 4, 0), 128, 128, DType::fp32});
}

BOOST_AUTO_TEST_CASE(wgrad_epilogues) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_epi");
    const std::vector<int> counts = random_counts(150, 4, 8, rng, {0, 2, 3, 5, 7});
    run_wgrad_case({"fp32", counts, 256, 256, DType::fp32});
    run_wgrad_case({"fp32_accumulate", counts, 256, 256, DType::fp32, true});
    run_wgrad_case({"bf16_accumulate", counts, 256, 256, DType::bf16, true});
    run_wgrad_case({"bf16_register_epilogue", counts, 256, 256, DType::bf16, false, 4});
    run_wgrad_case({"tiny_magnitudes", counts, 256, 256, DType::bf16, false, 0, 1e-12f});
    run_wgrad_case({"huge_magnitudes", counts, 256, 256, DType::fp32, false, 0, 1e8f});
}

// The overlapped promotion: chunks of 4 blocks and tails of 1, 2 and 3 (experts of 1, 5, 6, 7,
// 8 and 47 blocks), every epilogue, empty experts, the ring wrapping.
BOOST_AUTO_TEST_CASE(wgrad_overlapped_promotion) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_overlap");
    const std::vector<int> chunks{640, 0, 700, 900, 1, 1000, 129};
    WgradCase c{"overlap_chunk_tails", chunks};
    c.overlap = true;
    run_wgrad_case(c);
    c = {"overlap_random_top4", random_counts(300, 4, 8, rng)};
    c.overlap = true;
    run_wgrad_case(c);
    c = {"overlap_fp32_accumulate", chunks, 256, 256, DType::fp32, true};
    c.overlap = true;
    run_wgrad_case(c);
    c = {"overlap_bf16_register_epilogue", chunks, 256, 128, DType::bf16, false, 4};
    c.overlap = true;
    run_wgrad_case(c);
    c = {"overlap_all_to_one_long", all_to_expert(6000, 4, 0), 128, 128, DType::fp32};
    c.overlap = true;
    run_wgrad_case(c);
    c = {"overlap_ring_wraps", random_counts(256, 4, 8, rng), 512, 1024};
    c.overlap = true;
    run_wgrad_case(c);
}

BOOST_AUTO_TEST_CASE(wgrad_many_tiles_per_cta_ring_wraps) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_ring");
    run_wgrad_case({"ring_wraps", random_counts(256, 4, 8, rng), 512, 1024});  // 256 tiles, ~2 per CTA
}

// Offsets that are not monotone (a caller's bug): the quantizer and the GEMM bound them as the
// host mirror does (never a block past the workspace's bound), write nothing outside dW, and the
// quantized operand still equals the mirror's.
BOOST_AUTO_TEST_CASE(wgrad_offsets_not_monotone) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_wild");
    const std::int64_t rows = 700, m = 256, n = 128;
    const std::vector<std::int32_t> wild{0, 500, 100, 700, 3, 650};
    const auto experts = static_cast<std::int32_t>(wild.size() - 1);
    const HalfTensor a = random_half(static_cast<std::size_t>(rows * m), MOEJIT_DTYPE_BF16, rng);
    const HalfTensor b = random_half(static_cast<std::size_t>(rows * n), MOEJIT_DTYPE_BF16, rng);
    const std::int64_t padded = fp8_wgrad_padded_rows(rows, experts);
    DeviceBuffer da = DeviceBuffer::from(a.bits), db = DeviceBuffer::from(b.bits), doff = DeviceBuffer::from(wild);
    DeviceBuffer q(static_cast<std::size_t>(m * padded)), sc(static_cast<std::size_t>(padded / 128 * m) * 4);
    q.poison();
    sc.poison();
    fp8_quantize_cols(internal_ctx(), {m}, {da.get(), doff.as<std::int32_t>(), q.get(), sc.as<float>(), rows, experts, padded, nullptr});
    float poison_scale;  // blocks never written keep the poison's bits
    const std::uint32_t ones = 0xFFFFFFFFu;
    std::memcpy(&poison_scale, &ones, 4);
    const fp8::QuantizedCols host = fp8::quantize_cols(a.bits, rows, m, wild, padded, 0xFF, poison_scale);
    BOOST_TEST(host.cum.back() > padded / 128, "the case must ask for blocks past the bound");
    const std::vector<float> &host_scales = host.scales;
    const auto gq = q.download<std::uint8_t>();
    std::int64_t bad_q = 0;
    for (std::size_t i = 0; i < gq.size(); ++i)
        bad_q += !(gq[i] == host.q[i] || (fp8::e4m3_is_nan(gq[i]) && fp8::e4m3_is_nan(host.q[i])));
    BOOST_TEST(bad_q == 0, bad_q << " bytes differ from the host mirror (blocks past the bound must stay untouched)");
    const auto gs = sc.download<std::uint32_t>();
    std::int64_t bad_s = 0;
    for (std::size_t i = 0; i < gs.size(); ++i) {
        std::uint32_t hb;
        std::memcpy(&hb, &host_scales[i], 4);
        bad_s += gs[i] != hb;
    }
    BOOST_TEST(bad_s == 0, bad_s << " scales differ from the host mirror");
    // The whole call: nothing outside dW is written, the context stays usable.
    DeviceBuffer dw(static_cast<std::size_t>(experts * m * n) * 2 + kGuardBytes);
    dw.poison();
    DeviceBuffer ws(fp8_weight_grad_workspace_bytes(rows, experts, m, n));
    Fp8WgradArgs args;
    args.a = da.get();
    args.b = db.get();
    args.dw = dw.get();
    args.offsets = doff.as<std::int32_t>();
    args.rows = rows;
    args.num_experts = experts;
    args.m = m;
    args.n = n;
    args.workspace = ws.get();
    args.workspace_bytes = ws.bytes();
    for (bool overlap : {false, true}) {
        args.overlap = overlap;
        fp8_weight_grad(internal_ctx(), args);
        const auto raw = dw.download<std::uint8_t>();
        std::int64_t touched = 0;
        for (std::size_t i = static_cast<std::size_t>(experts * m * n) * 2; i < raw.size(); ++i) touched += raw[i] != 0xFF;
        BOOST_TEST(touched == 0, touched << " bytes past dW were written (overlap " << overlap << ")");
    }
    run_wgrad_case({"after_wild_offsets", {3, 0, 200}, 128, 128});
}

// Gathered operands (the layer's dout and x): a and b read from unscattered [T, ·] tensors
// through row_token give the same dW bytes as their scattered copies, duplicate routes and empty
// experts included; a token outside [0, T) reads as a zero row; a second call that reuses b's
// quantized form (b_quantized, the split fc1) equals one that quantizes it again.
BOOST_AUTO_TEST_CASE(wgrad_gathered_rows_equal_scattered_rows) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("wgrad_gather");
    const std::int64_t T = 300, m = 256, n = 384;
    const int top_k = 4;
    const std::vector<int> counts = random_counts(T, top_k, 8, rng, {2, 6});
    const std::vector<std::int32_t> offsets = offsets_from_counts(counts);
    const std::int64_t rows = offsets.back();
    const auto experts = static_cast<std::int32_t>(counts.size());
    // row_token: any token per row (duplicates within an expert allowed, as with duplicate
    // routes); one row points past T.
    std::vector<std::int32_t> row_token(static_cast<std::size_t>(rows));
    for (auto &t : row_token) t = static_cast<std::int32_t>(rng() % T);
    row_token[static_cast<std::size_t>(rows / 2)] = static_cast<std::int32_t>(T + 5);
    const HalfTensor ta = random_half(static_cast<std::size_t>(T * m), MOEJIT_DTYPE_BF16, rng);
    const HalfTensor tb = random_half(static_cast<std::size_t>(T * n), MOEJIT_DTYPE_BF16, rng);
    auto scatter_host = [&](const HalfTensor &t, std::int64_t c) {
        std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * c), 0);  // bf16 +0
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t tok = row_token[static_cast<std::size_t>(r)];
            if (tok < T) std::memcpy(&out[r * c], &t.bits[tok * c], static_cast<std::size_t>(c) * 2);
        }
        return out;
    };
    DeviceBuffer da_t = DeviceBuffer::from(ta.bits), db_t = DeviceBuffer::from(tb.bits);
    DeviceBuffer da_s = DeviceBuffer::from(scatter_host(ta, m)), db_s = DeviceBuffer::from(scatter_host(tb, n));
    DeviceBuffer doff = DeviceBuffer::from(offsets), dtok = DeviceBuffer::from(row_token);
    DeviceBuffer ws(fp8_weight_grad_workspace_bytes(rows, experts, m, n));
    DeviceBuffer dw(static_cast<std::size_t>(experts * m * n) * 2);
    auto run = [&](bool gather_a, bool gather_b, bool b_quantized) {
        const Fp8WgradArgs args{.a = gather_a ? da_t.get() : da_s.get(), .b = gather_b ? db_t.get() : db_s.get(),
                                .dw = dw.get(), .offsets = doff.as<std::int32_t>(), .rows = rows,
                                .num_experts = experts, .m = m, .n = n, .overlap = true, .workspace = ws.get(),
                                .workspace_bytes = ws.bytes(), .row_token = dtok.as<std::int32_t>(), .tokens = T,
                                .gather_a = gather_a, .gather_b = gather_b, .b_quantized = b_quantized};
        dw.poison();
        fp8_weight_grad(internal_ctx(), args);
        return dw.download<std::uint16_t>();
    };
    ws.poison();
    const auto scattered = run(false, false, false);
    const std::int64_t nan_count = std::count_if(scattered.begin(), scattered.end(), [](std::uint16_t v) {
        return (v & 0x7F80) == 0x7F80;
    });
    BOOST_TEST(nan_count == 0, nan_count << " dW elements unwritten or non-finite");
    BOOST_TEST((run(true, false, false) == scattered), "a gathered through row_token differs from a scattered");
    BOOST_TEST((run(false, true, false) == scattered), "b gathered through row_token differs from b scattered");
    BOOST_TEST((run(true, true, false) == scattered), "both gathered differ from both scattered");
    // b's quantized form from the last call (both gathered), a quantized again from its scattered copy.
    BOOST_TEST((run(false, true, true) == scattered), "a call that reuses b's quantized form differs");
    // Refused: a gathered operand without row_token.
    const Fp8WgradArgs bad{.a = da_t.get(), .b = db_t.get(), .dw = dw.get(), .offsets = doff.as<std::int32_t>(),
                           .rows = rows, .num_experts = experts, .m = m, .n = n, .workspace = ws.get(),
                           .workspace_bytes = ws.bytes(), .gather_a = true};
    BOOST_CHECK_THROW(fp8_weight_grad(internal_ctx(), bad), Error);
}

BOOST_AUTO_TEST_CASE(wgrad_no_rows) {
    if (!hopper()) return;
    // R = 0: dW = 0 written (poisoned first), or left as it is when accumulating; no workspace.
    const std::int32_t experts = 4;
    const std::int64_t m = 256, n = 128, count = experts * m * n;
    DeviceBuffer dw(static_cast<std::size_t>(count) * 2);
    dw.poison();
    Fp8WgradArgs args;
    args.dw = dw.get();
    args.rows = 0;
    args.num_experts = experts;
    args.m = m;
    args.n = n;
    fp8_weight_grad(internal_ctx(), args);
    const auto zeros = dw.download<std::uint16_t>();
    BOOST_TEST(std::all_of(zeros.begin(), zeros.end(), [](std::uint16_t v) { return v == 0; }), "R = 0 must write dW = 0");
    dw.poison();
    args.accumulate = true;
    fp8_weight_grad(internal_ctx(), args);
    const auto kept = dw.download<std::uint16_t>();
    BOOST_TEST(std::all_of(kept.begin(), kept.end(), [](std::uint16_t v) { return v == 0xFFFF; }),
               "R = 0 accumulating must leave dW as it is");
    BOOST_CHECK_NO_THROW(fp8_quantize_cols(internal_ctx(), {256}, Fp8QuantColsOperands{nullptr, nullptr, nullptr, nullptr, 0, 4, 0, nullptr}));
}

// TFLOP/s of the FP8 weight gradient on qwen3-30b-a3b's and deepseek-v3's fc1 and fc2 dW (T =
// 8192, k = 8, balanced routing), the whole fp8_weight_grad (both quantizers + GEMM) and the
// GEMM alone, beside the bf16 same_mn weight gradient of the same shape. Not a timed test: run
// it with --run_test=wgrad_benchmark.
BOOST_AUTO_TEST_CASE(wgrad_benchmark, *boost::unit_test::disabled()) {
    if (!hopper()) return;
    struct Shape {
        const char *name;
        std::int32_t experts;
        std::int64_t m, n;
    };
    constexpr std::int64_t kTokens = 8192, kTopK = 8, rows = kTokens * kTopK;
    auto time_ms = [](auto &&fn) {
        for (int i = 0; i < 3; ++i) fn();  // compile, warm up
        return mean_event_ms(10, fn);
    };
    for (const Shape &s : {Shape{"qwen3-30b-a3b fc1 dW (2I x H)", 128, 1536, 2048},
                           Shape{"qwen3-30b-a3b fc2 dW (H x I)", 128, 2048, 768},
                           Shape{"deepseek-v3 fc1 dW (2I x H)", 256, 4096, 7168},
                           Shape{"deepseek-v3 fc2 dW (H x I)", 256, 7168, 2048}}) {
        std::vector<int> counts(static_cast<std::size_t>(s.experts), static_cast<int>(rows / s.experts));
        const std::vector<std::int32_t> offsets = offsets_from_counts(counts);
        DeviceBuffer a(static_cast<std::size_t>(rows * s.m) * 2), b(static_cast<std::size_t>(rows * s.n) * 2);
        DeviceBuffer dw(static_cast<std::size_t>(s.experts * s.m * s.n) * 2), doff = DeviceBuffer::from(offsets);
        MOEJIT_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(a.get()), 0x3C003F80u, a.bytes() / 4, nullptr));
        MOEJIT_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(b.get()), 0xBE803D80u, b.bytes() / 4, nullptr));
        DeviceBuffer ws(fp8_weight_grad_workspace_bytes(rows, s.experts, s.m, s.n));
        Fp8WgradArgs args{.a = a.get(), .b = b.get(), .dw = dw.get(), .offsets = doff.as<std::int32_t>(), .rows = rows,
                          .num_experts = s.experts, .m = s.m, .n = s.n, .workspace = ws.get(),
                          .workspace_bytes = ws.bytes()};
        const double flop = 2.0 * rows * s.m * s.n;
        args.overlap = true;
        const double ms_all_overlap = time_ms([&] { fp8_weight_grad(internal_ctx(), args); });
        args.overlap = false;
        const double ms_all = time_ms([&] { fp8_weight_grad(internal_ctx(), args); });
        // The GEMM alone on the operands the last call left in the workspace (same layout as
        // src/fp8/fp8_wgrad.cpp's WgradWorkspace).
        const std::int64_t padded = fp8_wgrad_padded_rows(rows, s.experts);
        auto up = [](std::size_t v) { return (v + 255) / 256 * 256; };
        auto *base = static_cast<unsigned char *>(ws.get());
        const std::size_t o_qb = up(static_cast<std::size_t>(s.m * padded)), o_sa = up(o_qb + s.n * padded),
                          o_sb = up(o_sa + padded / 128 * s.m * 4);
        const Fp8WgradSpec spec = make_fp8_wgrad_spec(s.m, s.n, DType::bf16, s.experts);
        const Fp8WgradGemmOperands gops{base, reinterpret_cast<float *>(base + o_sa), base + o_qb,
                                        reinterpret_cast<float *>(base + o_sb), dw.get(), doff.as<std::int32_t>(),
                                        rows, s.experts, padded, nullptr};
        const double ms_gemm = time_ms([&] { fp8_wgrad_gemm(internal_ctx(), spec, gops); });
        const Fp8WgradSpec spec_overlap = make_fp8_wgrad_spec(s.m, s.n, DType::bf16, s.experts, false, true);
        const double ms_gemm_overlap = time_ms([&] { fp8_wgrad_gemm(internal_ctx(), spec_overlap, gops); });
        // Both quantizers alone.
        const double ms_quant = time_ms([&] {
            fp8_quantize_cols(internal_ctx(), {s.m}, {a.get(), doff.as<std::int32_t>(), base, reinterpret_cast<float *>(base + o_sa),
                                                      rows, s.experts, padded, nullptr});
            fp8_quantize_cols(internal_ctx(), {s.n}, {b.get(), doff.as<std::int32_t>(), base + o_qb,
                                                      reinterpret_cast<float *>(base + o_sb), rows, s.experts, padded, nullptr});
        });
        const double quant_bytes = static_cast<double>(rows) * (s.m + s.n) * 3;  // bf16 in, e4m3 out
        // The bf16 weight gradient (same_mn) with its split workspace.
        const GemmMnSpec bspec = make_mn_spec(DType::bf16, DType::bf16, s.m, s.n, false, rows, s.experts,
                                              internal_ctx().compute_capability());
        DeviceBuffer split_ws(std::max<std::size_t>(mn_split_workspace_bytes(mn_split(rows, s.m, s.n), s.experts, s.m, s.n), 256));
        const GemmOperands bops{.a = a.get(), .b = b.get(), .c = dw.get(), .offsets = doff.as<std::int32_t>(),
                                .rows = rows, .num_experts = s.experts, .workspace = split_ws.get(),
                                .workspace_bytes = split_ws.bytes()};
        const double ms_bf16 = time_ms([&] { launch_group_gemm_mn(internal_ctx(), bspec, bops); });
        std::printf("fp8 wgrad benchmark %s: S=%lld E=%d M=%lld N=%lld: bf16 same_mn %.3f ms (%.0f TFLOP/s); "
                    "fp8_weight_grad %.3f ms (%.0f TFLOP/s, %.2fx bf16), overlapped %.3f ms (%.0f TFLOP/s, %.2fx); "
                    "GEMM alone (stages %d) %.3f ms (%.0f TFLOP/s), overlapped (stages %d) %.3f ms (%.0f TFLOP/s); "
                    "both quantizers %.3f ms (%.0f GB/s)\n",
                    s.name, (long long)rows, s.experts, (long long)s.m, (long long)s.n, ms_bf16, flop / ms_bf16 / 1e9,
                    ms_all, flop / ms_all / 1e9, ms_bf16 / ms_all, ms_all_overlap, flop / ms_all_overlap / 1e9,
                    ms_bf16 / ms_all_overlap, spec.stages, ms_gemm, flop / ms_gemm / 1e9, spec_overlap.stages,
                    ms_gemm_overlap, flop / ms_gemm_overlap / 1e9, ms_quant, quant_bytes / ms_quant / 1e6);
    }
}
