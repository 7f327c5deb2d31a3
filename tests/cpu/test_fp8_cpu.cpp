// The FP8 family without a GPU: the quantizers and the block-scaled grouped GEMM render and
// compile for sm_90a with NVRTC (several shapes, promotion on and off, both C dtypes and
// epilogues), their PTX really uses e4m3 wgmma, TMA and cvt.satfinite.e4m3x2; the one validator
// refuses what the family does not run, naming the field and what is supported; the host mirror
// of the quantizers (src/fp8/e4m3.hpp, which the GPU test holds the kernels to) follows the
// documented rounding and non-finite rules. The weight gradient (issue 31): its column quantizer
// and GEMM variants compile with no spills (ptxas -v, when the toolkit has it), its validator's
// refusals, and the column quantizer's host mirror (layout, padding, rules).
#define BOOST_TEST_MODULE fp8_cpu
#include <boost/test/unit_test.hpp>

#include <nvrtc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cold_compile.hpp"
#include "compile_only.hpp"
#include "ptx_sm90a.hpp"
#include "thread_cpu_time.hpp"
#include "fp8/e4m3.hpp"
#include "fp8/fp8.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/templates.hpp"

using namespace moejit;

namespace {

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

using moejit::test::ptx_for_sm90a;

Fp8GemmSpec gemm_spec(std::int64_t n, std::int64_t k, DType c_dtype, bool promote, std::int32_t experts,
                      int block_n = 128) {
    Fp8GemmSpec s = make_fp8_gemm_spec(n, k, c_dtype, experts, block_n);
    s.promote = promote;
    return s;
}

// The refusal of `spec` (with `ops`, when given) on `arch`: its status and message fragments.
template <class Spec, class Ops>
void expect_refusal(const std::string &arch, const Spec &spec, const Ops *ops, Status status,
                    std::initializer_list<const char *> fragments) {
    const auto r = can_implement(arch, spec, ops);
    BOOST_REQUIRE_MESSAGE(r.has_value(), "expected a refusal");
    BOOST_TEST_CONTEXT("message: " << r->message) {
        BOOST_TEST((r->status == status));
        for (const char *f : fragments) BOOST_TEST(contains(r->message, f), "missing '" << f << "'");
    }
}

std::uint16_t bf16_bits(float f) {  // exact for the values the tests use (bf16-representable)
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<std::uint16_t>(u >> 16);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_fp8_kernel_compiles_for_sm90a) {
    std::map<std::string, KernelSource> sources;
    for (std::int64_t k : {2048, 7168, 1040})  // 1040: a ragged last tile of 16 columns
        sources.emplace(render_fp8_quant_rows({k}).name, render_fp8_quant_rows({k}));
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{1536, 2048}, {4096, 7168}, {200, 1040}}) {
        const KernelSource ks = render_fp8_quant_blocks({n, k});
        sources.emplace(ks.name, ks);
    }
    struct G {
        std::int64_t n, k;
        DType c;
        bool promote;
        std::int32_t experts;
        int block_n = 128;
    };
    // qwen3-30b-a3b and deepseek-v3 fc1 and fc2, the long-K test pair, the smallest shape.
    for (const G &g : {G{1536, 2048, DType::bf16, true, 128}, G{2048, 768, DType::bf16, true, 128},
                       G{4096, 7168, DType::bf16, true, 256}, G{7168, 2048, DType::bf16, true, 256},
                       G{256, 7168, DType::fp32, true, 8}, G{256, 7168, DType::fp32, false, 8},
                       G{128, 128, DType::bf16, true, 1},
                       // block_n 256: TMA stores (3 stages) and registers (4), fp32 C without promotion
                       G{1536, 2048, DType::bf16, true, 128, 256}, G{4096, 7168, DType::bf16, true, 256, 256},
                       G{256, 7168, DType::fp32, false, 8, 256}}) {
        Fp8GemmSpec s = gemm_spec(g.n, g.k, g.c, g.promote, g.experts, g.block_n);
        BOOST_TEST(!can_implement("sm_90a", s).has_value());
        sources.emplace(render_fp8_group_gemm_nk(s).name, render_fp8_group_gemm_nk(s));
        if (g.block_n == 128 && g.promote) {  // the overlapped promotion
            Fp8GemmSpec o = s;
            o.overlap = true;
            BOOST_TEST(!can_implement("sm_90a", o).has_value());
            sources.emplace(render_fp8_group_gemm_nk(o).name, render_fp8_group_gemm_nk(o));
        }
        if (g.n == 128 || (g.block_n == 256 && g.c == DType::bf16 && g.n == 1536)) {
            // the register epilogue of a bf16 C (an unaligned C at launch; block_n 256's deeper ring)
            s.tma_store = false;
            s.stages = fp8_gemm_max_stages(s, g.experts);
            sources.emplace(render_fp8_group_gemm_nk(s).name, render_fp8_group_gemm_nk(s));
        }
    }
    moejit::test::CompileOnlyContext context("sm_90a", moejit::test::CompileOnlyContext::Cache::memory_only);
    double worst = 0;
    for (auto &[name, ks] : sources)
        BOOST_TEST_CONTEXT(name) { worst = std::max(worst, moejit::test::cold_compile_seconds(context, ks)); }
    std::printf("fp8: %zu kernels compiled for sm_90a, worst NVRTC %.2f s\n", sources.size(), worst);
}

BOOST_AUTO_TEST_CASE(ptx_uses_e4m3_wgmma_tma_and_satfinite_cvt) {
    for (auto [promote, block_n, overlap] : {std::tuple{true, 128, false}, {false, 128, false}, {true, 256, false},
                                             {true, 128, true}}) {
        Fp8GemmSpec spec = gemm_spec(1536, 2048, DType::bf16, promote, 128, block_n);
        spec.overlap = overlap;
        const std::string ptx = ptx_for_sm90a(render_fp8_group_gemm_nk(spec));
        BOOST_TEST_CONTEXT("promote " << promote << " block_n " << block_n << " overlap " << overlap) {
            moejit::test::check_ptx(ptx,
                                    {"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "cp.async.bulk.tensor.2d",
                                     "cp.async.bulk.tensor.3d", "mbarrier.try_wait.parity", "setmaxnreg.inc"},
                                    {"mma.sync"});  // no mma.sync fallback
        }
    }
    for (const KernelSource &ks : {render_fp8_quant_rows({2048}), render_fp8_quant_blocks({1536, 2048})})
        BOOST_TEST(contains(ptx_for_sm90a(ks), "cvt.rn.satfinite.e4m3x2.f32"), ks.name);
}

BOOST_AUTO_TEST_CASE(validator_refuses_what_the_family_does_not_run) {
    const Fp8GemmSpec good = gemm_spec(1536, 2048, DType::bf16, true, 128);
    BOOST_TEST(!can_implement("sm_90a", good).has_value());
    Fp8GemmSpec s = good;
    s.k = 2000;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"k = 2000", "multiple of 128"});
    s = good;
    s.n = 1000;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"n = 1000", "multiple of 128"});
    s = good;
    s.c_dtype = DType::fp16;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"c_dtype = fp16", "bf16 or fp32"});
    s = good;
    s.block_n = 192;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"block_n = 192", "128 and 256"});
    s = good;
    s.n = 1664;  // 13 x 128
    s.block_n = 256;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"n = 1664", "multiple of 256"});
    s = good;
    s.overlap = true;
    s.promote = false;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"overlap needs promote and block_n = 128"});
    s = gemm_spec(1536, 2048, DType::bf16, true, 128, 256);
    s.overlap = true;
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"overlap needs promote and block_n = 128", "block_n = 256"});
    s = good;
    s.stages = 8;  // 8 x 32 KiB do not fit
    expect_refusal("sm_90a", s, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported, {"shared memory"});
    // No silent bf16 fallback elsewhere: the arch is named.
    expect_refusal("sm_80", good, static_cast<const Fp8GemmOperands *>(nullptr), Status::unsupported,
                   {"sm_90a", "sm_80"});
    expect_refusal("sm_100a", Fp8QuantRowsSpec{2048}, static_cast<const Fp8QuantRowsOperands *>(nullptr),
                   Status::unsupported, {"sm_100a"});

    // Operands (host addresses stand in: the validator only looks at them).
    alignas(16) static unsigned char buf[64];
    Fp8GemmOperands ops;
    ops.a = ops.b = buf;
    ops.a_scale = ops.b_scale = reinterpret_cast<const float *>(buf);
    ops.c = buf;
    ops.offsets = reinterpret_cast<const std::int32_t *>(buf);
    ops.rows = 100;
    ops.num_experts = 8;
    BOOST_TEST(!can_implement("sm_90a", good, &ops).has_value());
    Fp8GemmOperands bad = ops;
    bad.num_experts = 0;
    expect_refusal("sm_90a", good, &bad, Status::invalid_argument, {"num_experts = 0"});
    bad = ops;
    bad.rows = -1;
    expect_refusal("sm_90a", good, &bad, Status::invalid_argument, {"rows = -1"});
    bad = ops;
    bad.a = buf + 8;
    expect_refusal("sm_90a", good, &bad, Status::invalid_argument, {"a must be", "16-byte aligned"});
    bad = ops;
    bad.b_scale = nullptr;
    expect_refusal("sm_90a", good, &bad, Status::invalid_argument, {"b_scale"});
    bad = ops;
    bad.offsets = nullptr;
    expect_refusal("sm_90a", good, &bad, Status::invalid_argument, {"offsets"});
    bad = ops;
    bad.rows = 0;  // nothing to run: null tensors are fine
    bad.a = bad.b = nullptr;
    BOOST_TEST(!can_implement("sm_90a", good, &bad).has_value());
    bad = ops;
    bad.num_experts = 100000;  // cum[E+1] no longer fits next to the ring
    expect_refusal("sm_90a", good, &bad, Status::unsupported, {"100000 experts", "shared memory"});

    expect_refusal("sm_90a", Fp8QuantRowsSpec{1000}, static_cast<const Fp8QuantRowsOperands *>(nullptr),
                   Status::unsupported, {"k = 1000", "multiple of 16"});
    expect_refusal("sm_90a", Fp8QuantBlocksSpec{0, 2048}, static_cast<const Fp8QuantBlocksOperands *>(nullptr),
                   Status::unsupported, {"n = 0"});
    Fp8QuantRowsOperands qops;
    qops.x = buf + 2;
    qops.q = buf;
    qops.scales = reinterpret_cast<float *>(buf);
    qops.rows = 4;
    expect_refusal("sm_90a", Fp8QuantRowsSpec{2048}, &qops, Status::invalid_argument, {"x must be", "8-byte"});

    // The launchers throw the refusal before anything else; a valid call on a compile-only
    // context is refused for want of a device.
    moejit::test::CompileOnlyContext context("sm_90a", moejit::test::CompileOnlyContext::Cache::memory_only);
    s = good;
    s.k = 2000;
    try {
        fp8_group_gemm_nk(context.impl(), s, ops);
        BOOST_TEST(false, "expected an error");
    } catch (const Error &e) {
        BOOST_TEST((e.status() == Status::unsupported));
        BOOST_TEST(contains(e.what(), "multiple of 128"));
    }
    try {
        fp8_group_gemm_nk(context.impl(), good, ops);
        BOOST_TEST(false, "expected an error");
    } catch (const Error &e) {
        BOOST_TEST((e.status() == Status::invalid_argument));
        BOOST_TEST(contains(e.what(), "compile-only"));
    }
}

BOOST_AUTO_TEST_CASE(e4m3_rounding_rules) {
    using fp8::float_to_e4m3;
    const float inf = std::numeric_limits<float>::infinity();
    struct Case {
        float x;
        std::uint8_t code;
    };
    for (const Case &c : {Case{0.0f, 0x00}, Case{-0.0f, 0x80}, Case{1.0f, 0x38}, Case{-1.0f, 0xB8},
                          Case{448.0f, 0x7E}, Case{-448.0f, 0xFE},
                          Case{449.0f, 0x7E}, Case{470.0f, 0x7E}, Case{1e30f, 0x7E}, Case{inf, 0x7E}, Case{-inf, 0xFE},
                          Case{std::ldexp(1.0f, -6), 0x08},        // smallest normal
                          Case{std::ldexp(1.0f, -9), 0x01},        // smallest subnormal
                          Case{std::ldexp(1.0f, -10), 0x00},       // half of it: tie to even (0)
                          Case{std::ldexp(3.0f, -10), 0x02},       // 1.5 steps: tie to even (2)
                          Case{std::ldexp(1.0f, -11), 0x00},       // below half: 0
                          Case{1.0625f, 0x38},                     // between 1 and 1.125: tie to even (1)
                          Case{1.1875f, 0x3A},                     // between 1.125 and 1.25: tie to even (1.25)
                          Case{1.07f, 0x39},                       // above the tie: up
                          Case{240.0f, 0x77}, Case{0.1f, 0x1D}}) {
        BOOST_TEST_CONTEXT("x = " << c.x) { BOOST_TEST(int(float_to_e4m3(c.x)) == int(c.code)); }
    }
    BOOST_TEST(fp8::e4m3_is_nan(float_to_e4m3(std::nanf(""))));
    BOOST_TEST(std::isnan(fp8::e4m3_to_float(0x7F)));
    BOOST_TEST(std::isnan(fp8::e4m3_to_float(0xFF)));
    // Every finite code decodes and encodes back to itself; decoding is monotone.
    float previous = -1.0f;
    for (int code = 0; code < 0x7F; ++code) {
        const float v = fp8::e4m3_to_float(static_cast<std::uint8_t>(code));
        BOOST_TEST_CONTEXT("code " << code) {
            BOOST_TEST(int(float_to_e4m3(v)) == code);
            BOOST_TEST(int(float_to_e4m3(-v)) == (code | 0x80));
            BOOST_TEST(v > previous);
        }
        previous = v;
    }
    BOOST_TEST(fp8::e4m3_to_float(0x7E) == 448.0f);
}

// x / scale is x times the tile's rounded reciprocal (one rounding of 1 / s, one of the
// product), not an IEEE quotient; where 1 / s overflows, the quotient (a zero stays zero).
BOOST_AUTO_TEST_CASE(quantizer_divides_by_the_tiles_reciprocal) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    int differ = 0;
    for (int i = 0; i < 20000; ++i) {
        const float x = std::ldexp(mant(rng), static_cast<int>(rng() % 20) - 10);
        const float s = fp8::tile_scale(std::ldexp(mant(rng), static_cast<int>(rng() % 20) - 10));
        const float inv = 1.0f / s;
        volatile float rounded = x * inv;
        const float product = rounded;
        BOOST_TEST(fp8::scaled_value(x, s) == product);
        differ += product != x / s;
    }
    // The two rules differ in about a sixth of cases (a last-bit difference): the test can tell them apart.
    BOOST_TEST(differ > 100, differ << " of 20000 products differ from the quotient");
    const float tiny = std::ldexp(1.0f, -140);  // 1 / tiny overflows
    BOOST_TEST(std::isinf(1.0f / tiny));
    BOOST_TEST(fp8::scaled_value(0.0f, tiny) == 0.0f);
    BOOST_TEST(fp8::scaled_value(tiny, tiny) == 1.0f);
    // An inf tile (scale inf): finite values to (signed) zero, the inf to NaN.
    const float inf = std::numeric_limits<float>::infinity();
    BOOST_TEST(fp8::scaled_value(3.0f, inf) == 0.0f);
    BOOST_TEST(std::signbit(fp8::scaled_value(-3.0f, inf)));
    BOOST_TEST(std::isnan(fp8::scaled_value(inf, inf)));
}

BOOST_AUTO_TEST_CASE(quantizer_tile_rules_and_non_finite_values) {
    const std::int64_t rows = 4, k = 272;  // tiles of 128, 128 and 16 columns
    std::vector<float> x(rows * k);
    for (std::int64_t i = 0; i < rows * k; ++i) x[i] = std::ldexp(static_cast<float>((i * 37) % 29) - 14.0f, -3);
    // Row 0: tile 1 all zeros. Row 1: a NaN in tile 0. Row 2: an inf in tile 2. Row 3: -inf and a
    // large value in tile 1.
    for (std::int64_t c = 128; c < 256; ++c) x[c] = 0.0f;
    x[1 * k + 5] = std::nanf("");
    x[2 * k + 260] = std::numeric_limits<float>::infinity();
    x[3 * k + 130] = -std::numeric_limits<float>::infinity();
    x[3 * k + 200] = 1e4f;
    std::vector<std::uint16_t> bits(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) bits[i] = bf16_bits(x[i]);
    const fp8::Quantized q = fp8::quantize_rows(bits, rows, k);
    auto scale = [&](std::int64_t r, int kb) { return q.scales[r * 3 + kb]; };
    auto code = [&](std::int64_t r, std::int64_t c) { return q.q[r * k + c]; };
    // A tile of zeros: scale 1 and zeros.
    BOOST_TEST(scale(0, 1) == 1.0f);
    for (std::int64_t c = 128; c < 256; ++c) BOOST_TEST(int(code(0, c)) == 0);
    // Finite tiles: scale = amax / 448, the amax element quantizes to +-448 exactly, and every
    // element dequantizes within half an e4m3 step (2^-4 relative) or the subnormal step.
    for (std::int64_t r = 0; r < rows; ++r)
        for (int kb = 0; kb < 3; ++kb) {
            const std::int64_t c0 = kb * 128, c1 = std::min<std::int64_t>(k, c0 + 128);
            float amax = 0.0f;
            bool finite = true;
            for (std::int64_t c = c0; c < c1; ++c) {
                if (!std::isfinite(x[r * k + c])) finite = std::isnan(x[r * k + c]) ? finite : false;
                else amax = std::max(amax, std::fabs(x[r * k + c]));
            }
            if (!finite || amax == 0.0f) continue;
            BOOST_TEST_CONTEXT("row " << r << " tile " << kb) {
                BOOST_TEST(scale(r, kb) == amax / 448.0f);
                int at_max = 0;
                for (std::int64_t c = c0; c < c1; ++c) {
                    const float v = x[r * k + c];
                    if (std::isnan(v)) continue;
                    const float d = fp8::e4m3_to_float(code(r, c)) * scale(r, kb);
                    BOOST_TEST(std::fabs(d - v) <= std::max(std::fabs(v) / 16.0f, std::ldexp(scale(r, kb), -10)) * 1.0001f);
                    at_max += (code(r, c) & 0x7F) == 0x7E;
                }
                BOOST_TEST(at_max >= 1);
            }
        }
    // NaN: stays NaN in its place, the tile's scale ignores it, the other tiles are untouched.
    BOOST_TEST(fp8::e4m3_is_nan(code(1, 5)));
    BOOST_TEST(std::isfinite(scale(1, 0)));
    // inf: its tile's scale is +inf, its finite elements quantize to zero and the inf to NaN, so
    // every dequantized element of the tile is NaN; the row's other tiles keep finite scales.
    BOOST_TEST(std::isinf(scale(2, 2)));
    BOOST_TEST(fp8::e4m3_is_nan(code(2, 260)));
    for (std::int64_t c = 256; c < k; ++c)
        if (c != 260) BOOST_TEST((code(2, c) & 0x7F) == 0);
    BOOST_TEST(std::isfinite(scale(2, 0)));
    BOOST_TEST(std::isfinite(scale(2, 1)));
    BOOST_TEST(std::isinf(scale(3, 1)));
    BOOST_TEST(std::isfinite(scale(3, 0)));
    BOOST_TEST(std::isfinite(scale(3, 2)));

    // Weight blocks: one outlier changes only its own 128 x 128 block's scale.
    const std::int64_t experts = 2, n = 256, kw = 256;
    std::vector<std::uint16_t> w(experts * n * kw, bf16_bits(0.5f));
    w[(1 * n + 130) * kw + 3] = bf16_bits(1e4f);  // expert 1, row block 1, column block 0
    const fp8::Quantized qw = fp8::quantize_blocks(w, experts, n, kw);
    BOOST_REQUIRE(qw.scales.size() == 8u);
    for (std::size_t b = 0; b < qw.scales.size(); ++b)
        BOOST_TEST(qw.scales[b] == (b == 6 ? fp8::bf16_to_float(bf16_bits(1e4f)) / 448.0f : 0.5f / 448.0f), "block " << b);
}

// ------------------------------------------------------------------ weight gradients (issue 31)

namespace {

// The weight-gradient variants the layer uses: qwen3-30b-a3b's and deepseek-v3's dW of fc1
// ([E, 2I, H]: m = 2I, n = H) and fc2 ([E, H, I]), each epilogue, and the smallest shape.
std::vector<Fp8WgradSpec> wgrad_specs() {
    std::vector<Fp8WgradSpec> specs;
    struct W {
        std::int64_t m, n;
        std::int32_t experts;
    };
    for (const W &w : {W{1536, 2048, 128}, W{2048, 768, 128}, W{4096, 7168, 256}, W{7168, 2048, 256}, W{128, 128, 1}}) {
        specs.push_back(make_fp8_wgrad_spec(w.m, w.n, DType::bf16, w.experts));            // TMA stores
        specs.push_back(make_fp8_wgrad_spec(w.m, w.n, DType::bf16, w.experts, true));      // += in bf16
        specs.push_back(make_fp8_wgrad_spec(w.m, w.n, DType::fp32, w.experts, true));      // += in fp32 grads
        specs.push_back(make_fp8_wgrad_spec(w.m, w.n, DType::bf16, w.experts, false, true));  // overlapped promotion
        specs.push_back(make_fp8_wgrad_spec(w.m, w.n, DType::fp32, w.experts, true, true));
        if (w.m == 128 || w.m == 1536) {
            specs.push_back(make_fp8_wgrad_spec(w.m, w.n, DType::fp32, w.experts));
            Fp8WgradSpec reg = make_fp8_wgrad_spec(w.m, w.n, DType::bf16, w.experts);  // an unaligned dW
            reg.tma_store = false;
            specs.push_back(reg);
        }
    }
    return specs;
}

// ptxas from the CUDA toolkit NVRTC's headers come from, or nothing.
std::string find_ptxas() {
    for (const std::string &p : {cuda_include_dir() + "/../bin/ptxas", std::string("/usr/local/cuda/bin/ptxas")})
        if (std::FILE *f = std::fopen(p.c_str(), "rb")) {
            std::fclose(f);
            return p;
        }
    return {};
}

// ptxas -v's report of `ptx` for sm_90a (stderr and stdout), or "" without ptxas.
std::string ptxas_report(const std::string &ptxas, const std::string &ptx, const std::string &name) {
    const std::string dir = "/tmp/moejit_fp8wgrad_ptxas";
    std::system(("mkdir -p " + dir).c_str());
    const std::string in = dir + "/" + name + ".ptx", out = dir + "/" + name + ".cubin", log = dir + "/" + name + ".log";
    if (std::FILE *f = std::fopen(in.c_str(), "wb")) {
        std::fwrite(ptx.c_str(), 1, std::strlen(ptx.c_str()), f);  // not the terminating NUL
        std::fclose(f);
    }
    const int rc = std::system((ptxas + " -arch=sm_90a -v -o " + out + " " + in + " > " + log + " 2>&1").c_str());
    std::string text;
    if (std::FILE *f = std::fopen(log.c_str(), "rb")) {
        char buf[4096];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
        std::fclose(f);
    }
    BOOST_TEST(rc == 0, "ptxas failed on " << name << ":\n" << text);
    return text;
}

void expect_args_refusal(const Fp8WgradArgs &args, Status status, std::initializer_list<const char *> fragments) {
    const auto r = can_implement("sm_90a", args);
    BOOST_REQUIRE_MESSAGE(r.has_value(), "expected a refusal");
    BOOST_TEST_CONTEXT("message: " << r->message) {
        BOOST_TEST((r->status == status));
        for (const char *f : fragments) BOOST_TEST(contains(r->message, f), "missing '" << f << "'");
    }
}

Fp8WgradGemmOperands wgrad_ops(std::int64_t rows, std::int32_t experts) {
    alignas(256) static unsigned char arena[1024];  // pointers only: nothing runs
    Fp8WgradGemmOperands ops;
    ops.a = arena;
    ops.b = arena + 256;
    ops.a_scale = reinterpret_cast<const float *>(arena + 512);
    ops.b_scale = reinterpret_cast<const float *>(arena + 768);
    ops.c = arena + 512;
    ops.offsets = reinterpret_cast<const std::int32_t *>(arena + 64);
    ops.rows = rows;
    ops.num_experts = experts;
    ops.padded_rows = fp8_wgrad_padded_rows(rows, experts);
    return ops;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_fp8_wgrad_kernel_compiles_for_sm90a_without_spills) {
    std::map<std::string, KernelSource> sources;
    for (std::int64_t c : {64, 768, 1536, 2048, 4096, 7168}) sources.emplace(render_fp8_quant_cols({c}).name, render_fp8_quant_cols({c}));
    for (const Fp8WgradSpec &s : wgrad_specs()) {
        BOOST_TEST(!can_implement("sm_90a", s).has_value(), render_fp8_wgrad_gemm(s).name);
        sources.emplace(render_fp8_wgrad_gemm(s).name, render_fp8_wgrad_gemm(s));
    }
    moejit::test::CompileOnlyContext context("sm_90a", moejit::test::CompileOnlyContext::Cache::memory_only);
    for (auto &[name, ks] : sources) BOOST_TEST_CONTEXT(name) { moejit::test::cold_compile_seconds(context, ks); }
    // The instructions, and ptxas's verdict on registers (when the toolkit's ptxas is here).
    const std::string ptxas = find_ptxas();
    if (ptxas.empty()) BOOST_TEST_MESSAGE("no ptxas here: the spill check is skipped");
    for (auto &[name, ks] : sources) BOOST_TEST_CONTEXT(name) {
            const std::string ptx = ptx_for_sm90a(ks);
            if (contains(name, "wgrad")) {
                BOOST_TEST(contains(ptx, "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"));
                BOOST_TEST(contains(ptx, "cp.async.bulk.tensor.2d"));
                BOOST_TEST(contains(ptx, "setmaxnreg.inc"));
                BOOST_TEST(!contains(ptx, "mma.sync"), "no mma.sync fallback");
                BOOST_TEST((!contains(ptx, "\tatom.") && !contains(ptx, "\tred.")), "no atomics: deterministic");
                if (contains(name, "_tma")) BOOST_TEST(contains(ptx, "cp.async.bulk.tensor.3d"));
                // The overlapped promotion's scale vectors travel by bulk copy into each stage.
                BOOST_TEST(contains(ptx, "cp.async.bulk.shared::cluster.global.mbarrier") == contains(name, "_overlap"));
            } else {
                BOOST_TEST(contains(ptx, "cvt.rn.satfinite.e4m3x2.f32"));
            }
            if (ptxas.empty()) continue;
            const std::string report = ptxas_report(ptxas, ptx, name);
            BOOST_TEST(contains(report, "0 bytes spill stores"), report);
            BOOST_TEST(contains(report, "0 bytes spill loads"), report);
            BOOST_TEST((!contains(report, "C7514") && !contains(report, "serializ")), report);
            const auto at = report.find("Used ");
            if (at != std::string::npos) BOOST_TEST_MESSAGE(name << ": " << report.substr(at, report.find('\n', at) - at));
        }
    std::printf("fp8 wgrad: %zu kernels compiled for sm_90a%s\n", sources.size(), ptxas.empty() ? "" : ", ptxas: no spills");
}

BOOST_AUTO_TEST_CASE(wgrad_validator_refusals) {
    using S = Status;
    // Column quantizer.
    expect_refusal<Fp8QuantColsSpec, Fp8QuantColsOperands>("sm_90a", {100}, nullptr, S::unsupported, {"c = 100", "64"});
    expect_refusal<Fp8QuantColsSpec, Fp8QuantColsOperands>("sm_80", {128}, nullptr, S::unsupported, {"sm_90a", "sm_80"});
    alignas(256) static unsigned char arena[512];
    Fp8QuantColsOperands q{arena, reinterpret_cast<const std::int32_t *>(arena + 16), arena + 256,
                           reinterpret_cast<float *>(arena + 128), 1000, 8, fp8_wgrad_padded_rows(1000, 8), nullptr};
    BOOST_TEST(!can_implement("sm_90a", Fp8QuantColsSpec{256}, &q).has_value());
    BOOST_TEST(fp8_wgrad_padded_rows(1000, 8) == 128 * (8 + 8));
    BOOST_TEST(fp8_wgrad_padded_rows(0, 8) == 0);
    BOOST_TEST(fp8_wgrad_padded_rows(3, 128) == 128 * (1 + 3));
    {
        Fp8QuantColsOperands b = q;
        b.padded_rows -= 128;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &b, S::invalid_argument, {"padded_rows", "fp8_wgrad_padded_rows"});
        b = q;
        b.padded_rows += 1;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &b, S::invalid_argument, {"padded_rows", "multiple of 128"});
        b = q;
        b.x = arena + 8;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &b, S::invalid_argument, {"x must", "16-byte"});
        b = q;
        b.offsets = nullptr;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &b, S::invalid_argument, {"offsets"});
        b = q;
        b.num_experts = 0;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &b, S::invalid_argument, {"num_experts = 0"});
        b = q;
        b.rows = -1;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &b, S::invalid_argument, {"rows = -1"});
        b = q;
        b.rows = 0;
        b.padded_rows = 0;
        b.x = nullptr;  // nothing runs
        BOOST_TEST(!can_implement("sm_90a", Fp8QuantColsSpec{256}, &b).has_value());
    }
    // GEMM.
    const Fp8WgradSpec ok = make_fp8_wgrad_spec(1536, 2048, DType::bf16, 128);
    BOOST_TEST(ok.tma_store);
    BOOST_TEST(ok.stages >= 4);
    const Fp8WgradSpec ok_overlap = make_fp8_wgrad_spec(1536, 2048, DType::bf16, 128, false, true);
    BOOST_TEST(ok_overlap.stages >= 4);
    BOOST_TEST(fp8_wgrad_smem_bytes(ok_overlap, 128) == fp8_wgrad_smem_bytes([&] {
                   Fp8WgradSpec s = ok_overlap;
                   s.overlap = false;
                   return s;
               }(), 128) + static_cast<std::size_t>(ok_overlap.stages) * 1024);
    const Fp8WgradGemmOperands ops = wgrad_ops(65536, 128);
    BOOST_TEST(!can_implement("sm_90a", ok, &ops).has_value());
    {
        Fp8WgradSpec s = ok;
        s.m = 1000;
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_90a", s, nullptr, S::unsupported, {"m = 1000", "multiple of 128"});
        s = ok;
        s.n = 64;
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_90a", s, nullptr, S::unsupported, {"n = 64", "multiple of 128"});
        s = ok;
        s.c_dtype = DType::fp16;
        s.tma_store = false;
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_90a", s, nullptr, S::unsupported, {"c_dtype", "bf16 or fp32"});
        s = ok;
        s.accumulate = true;  // with tma_store
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_90a", s, nullptr, S::unsupported, {"tma_store", "accumulate"});
        s = ok;
        s.stages = 9;
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_90a", s, nullptr, S::unsupported, {"stages = 9"});
        s = ok;
        s.stages = 8;
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_90a", s, nullptr, S::unsupported, {"shared memory"});
        expect_refusal<Fp8WgradSpec, Fp8WgradGemmOperands>("sm_89", ok, nullptr, S::unsupported, {"sm_90a", "sm_89"});
    }
    {
        Fp8WgradGemmOperands b = ops;
        b.rows = 0;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"rows = 0"});
        b = ops;
        b.padded_rows = 128;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"padded_rows = 128"});
        b = ops;
        b.a = static_cast<const unsigned char *>(ops.a) + 4;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"a must", "16-byte"});
        b = ops;
        b.b_scale = nullptr;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"b_scale"});
        b = ops;
        b.a_scale = ops.a_scale + 1;  // the overlapped promotion bulk-copies the scale vectors
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"a_scale", "16-byte"});
        b = ops;
        b.c = static_cast<unsigned char *>(b.c) + 2;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"c must", "4-byte"});
        b = ops;
        b.num_experts = 0;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"num_experts = 0"});
        b = ops;
        b.offsets = nullptr;
        expect_refusal("sm_90a", ok, &b, S::invalid_argument, {"offsets"});
    }
    // The whole call.
    Fp8WgradArgs w;
    w.a = arena;
    w.b = arena + 256;
    w.dw = arena;
    w.offsets = reinterpret_cast<const std::int32_t *>(arena);
    w.rows = 8192 * 8;
    w.num_experts = 128;
    w.m = 1536;
    w.n = 2048;
    w.workspace = arena;
    w.workspace_bytes = fp8_weight_grad_workspace_bytes(w.rows, w.num_experts, w.m, w.n);
    const std::size_t padded = static_cast<std::size_t>(fp8_wgrad_padded_rows(w.rows, w.num_experts));
    BOOST_TEST(w.workspace_bytes >= padded * (1536 + 2048) + padded / 128 * (1536 + 2048) * 4);
    BOOST_TEST(w.workspace_bytes <= padded * (1536 + 2048) + padded / 128 * (1536 + 2048) * 4 + 4 * 256);
    BOOST_TEST(fp8_weight_grad_workspace_bytes(0, 128, 1536, 2048) == 0u);
    BOOST_TEST(!can_implement("sm_90a", w).has_value());
    {
        Fp8WgradArgs b = w;
        b.workspace_bytes -= 1;
        expect_args_refusal(b, S::invalid_argument, {"workspace_bytes", "fp8_weight_grad_workspace_bytes"});
        b = w;
        b.workspace = arena + 16;
        expect_args_refusal(b, S::invalid_argument, {"workspace", "256-byte"});
        b = w;
        b.m = 1000;
        expect_args_refusal(b, S::unsupported, {"m = 1000"});
        b = w;
        b.dw_dtype = DType::fp32;
        b.dw = arena + 4;
        expect_args_refusal(b, S::invalid_argument, {"dw must", "8-byte"});
        b = w;
        b.rows = 0;  // dW = 0 needs only dw
        b.a = b.b = nullptr;
        b.workspace = nullptr;
        b.workspace_bytes = 0;
        BOOST_TEST(!can_implement("sm_90a", b).has_value());
        b.dw = nullptr;
        expect_args_refusal(b, S::invalid_argument, {"dw must"});
        b = w;
        b.a = nullptr;
        expect_args_refusal(b, S::invalid_argument, {"a must"});
        // Gathered operands need row_token and a token count.
        b = w;
        b.gather_b = true;
        expect_args_refusal(b, S::invalid_argument, {"gather_a/gather_b", "row_token"});
        b.row_token = w.offsets;
        b.tokens = -1;
        expect_args_refusal(b, S::invalid_argument, {"tokens = -1"});
        b.tokens = 100;
        BOOST_TEST(!can_implement("sm_90a", b).has_value());
    }
    {  // the column quantizer's row_token
        alignas(256) static unsigned char arena[1024];
        Fp8QuantColsOperands q{arena, reinterpret_cast<const std::int32_t *>(arena + 16), arena + 256,
                               reinterpret_cast<float *>(arena + 512), 300, 4, fp8_wgrad_padded_rows(300, 4), nullptr,
                               reinterpret_cast<const std::int32_t *>(arena + 2), 50};
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &q, S::invalid_argument, {"row_token"});
        q.row_token = reinterpret_cast<const std::int32_t *>(arena + 32);
        BOOST_TEST(!can_implement("sm_90a", Fp8QuantColsSpec{256}, &q).has_value());
        q.tokens = -3;
        expect_refusal("sm_90a", Fp8QuantColsSpec{256}, &q, S::invalid_argument, {"tokens = -3"});
    }
}

BOOST_AUTO_TEST_CASE(column_quantizer_host_mirror_layout_and_rules) {
    std::mt19937 rng(std::random_device{}());
    const std::int64_t c = 192;
    // Experts: 300 rows, 0, 1, 128 (exactly one block), 129, 0 -> blocks 3, 0, 1, 1, 2, 0.
    const std::vector<std::int32_t> counts{300, 0, 1, 128, 129, 0};
    std::vector<std::int32_t> offsets{0};
    for (std::int32_t n : counts) offsets.push_back(offsets.back() + n);
    const std::int64_t rows = offsets.back(), experts = static_cast<std::int64_t>(counts.size());
    const std::int64_t padded = fp8_wgrad_padded_rows(rows, static_cast<std::int32_t>(experts));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(rows * c));
    for (float &v : x) v = std::ldexp(normal(rng), static_cast<int>(rng() % 9) - 4);
    x[5 * c + 7] = std::nanf("");                               // expert 0 block 0, column 7
    x[200 * c + 9] = std::numeric_limits<float>::infinity();    // expert 0 block 1, column 9
    for (std::int64_t r = 256; r < 300; ++r) x[r * c + 11] = 0.0f;  // expert 0 block 2, column 11: zeros
    std::vector<std::uint16_t> bits(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) bits[i] = bf16_bits(fp8::bf16_to_float(bf16_bits(x[i])));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = fp8::bf16_to_float(bits[i]);
    const fp8::QuantizedCols q = fp8::quantize_cols(bits, rows, c, offsets, padded, 0xAB, -1.0f);
    const std::vector<std::int64_t> cum_expected{0, 3, 3, 4, 5, 7, 7};
    BOOST_TEST(q.cum == cum_expected, boost::test_tools::per_element());
    BOOST_TEST(padded >= 7 * 128);
    for (std::int64_t e = 0; e < experts; ++e)
        for (std::int64_t pb = q.cum[e]; pb < q.cum[e + 1]; ++pb)
            for (std::int64_t col = 0; col < c; ++col) {
                const std::int64_t row0 = offsets[e] + (pb - q.cum[e]) * 128;
                const std::int64_t valid = std::min<std::int64_t>(128, offsets[e + 1] - row0);
                float amax = 0.0f;
                bool inf = false;
                for (std::int64_t r = 0; r < valid; ++r) {
                    const float v = x[(row0 + r) * c + col];
                    inf = inf || std::isinf(v);
                    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
                }
                const float s = q.scales[pb * c + col];
                BOOST_TEST_CONTEXT("expert " << e << " block " << pb << " column " << col) {
                    if (inf) {
                        BOOST_TEST(std::isinf(s));
                        continue;
                    }
                    BOOST_TEST(s == (amax > 0 ? amax / 448.0f : 1.0f));
                    for (std::int64_t r = 0; r < 128; ++r) {
                        const std::uint8_t b = q.q[col * padded + pb * 128 + r];
                        if (r >= valid) {
                            BOOST_TEST(int(b) == 0, "padding row " << r);
                            continue;
                        }
                        const float v = x[(row0 + r) * c + col];
                        if (std::isnan(v)) {
                            BOOST_TEST(fp8::e4m3_is_nan(b));
                            continue;
                        }
                        const float d = fp8::e4m3_to_float(b) * s;
                        BOOST_TEST(std::fabs(d - v) <= std::max(std::fabs(v) / 16.0f, std::ldexp(s, -10)) * 1.0001f);
                    }
                }
            }
    // Blocks past the routing's own count are not written.
    for (std::int64_t pb = 7; pb < padded / 128; ++pb)
        for (std::int64_t col = 0; col < c; ++col) {
            BOOST_TEST(q.scales[pb * c + col] == -1.0f);
            BOOST_TEST(int(q.q[col * padded + pb * 128]) == 0xAB);
        }
    // Offsets that are not monotone: bounded like the device (never a block past padded_rows).
    const std::vector<std::int32_t> wild{0, 500, 100, 700, 3};
    const std::int64_t wild_padded = fp8_wgrad_padded_rows(rows, 4);
    const fp8::QuantizedCols w = fp8::quantize_cols(bits, rows, c, wild, wild_padded);
    BOOST_TEST(w.q.size() == static_cast<std::size_t>(c * wild_padded));
}
