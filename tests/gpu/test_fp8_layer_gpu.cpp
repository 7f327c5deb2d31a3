// The layer's FP8 recipe on an H200 (issue 31, layer and API; moe/plan_fp8.hpp):
//   - the layer's own quantizer forms (templates/fp8_quant_layer.cuh) against the host mirror
//     (src/fp8/e4m3.hpp) bit for bit: the quantizing scatter, rows into a wider operand, the
//     transposed weight blocks (= the transpose of the forward quantization), the dequantizer;
//   - forward and backward through the C ABI (MOEJIT_RECIPE_FP8_BLOCK) against the float64
//     reference of tests/support/reference_moe.hpp on random inputs: duplicate routes, all
//     routes to one expert, empty experts, T = 1, T = 0, outliers of 1e4 in a few channels of x,
//     K = 7168 (deepseek-v3's H), split and merged fc1; every output NaN-filled before the calls
//     and checked written; ||out - ref|| / ||ref|| printed per output and gradient (FP8 e4m3
//     with block scales: a few 1e-2, the bound checked is 0.1, 0.15 with outliers);
//   - the weight cache (args->weight_cache): FILL / USE in every order, T = 0 FILL included,
//     change no bit of any output, run in the smaller cached workspace, and FILL writes every
//     value of both layouts (the cache NaN-filled first);
//   - a disabled case, `benchmark` (--run_test=benchmark): FP8 vs bf16 layer forward and
//     forward + backward time and TFLOP/s on qwen3-30b-a3b, deepseek-v3 and mixtral-8x7b, and
//     FP8 with the weight cache in USE (the micro-batches of one optimizer step).
// Exits 77 (skipped) without a GPU; prints "skipping" on a device that is not sm_90a.
#include "gpu_main.hpp"
#include "fp8_models.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "fp8/e4m3.hpp"
#include "fp8/fp8_layer_quant.hpp"
#include "layer_args.h"
#include "fp8/fp8.hpp"
#include "moe/fp8_weights.hpp"
#include "ops/swiglu.hpp"
#include "reference_moe.hpp"
#include "runtime/context.hpp"
#include "runtime/driver.hpp"

MOEJIT_GPU_TEST_MAIN("fp8_layer_gpu")

using namespace moejit;
using namespace moejit::test;

namespace {

bool hopper() { return hopper_or_skip("the FP8 layer needs"); }

std::mt19937_64 case_rng(const char *name) {
    return std::mt19937_64(test_seed() ^ std::hash<std::string>{}(name));
}

std::vector<std::uint16_t> random_bf16(std::size_t n, float scale, std::mt19937_64 &rng) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<std::uint16_t> v(n);
    for (auto &b : v) b = float_to_bf16(u(rng));
    return v;
}

std::vector<float> as_float(const std::vector<std::uint16_t> &bits) {
    std::vector<float> f(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_float(bits[i]);
    return f;
}

std::vector<double> to_double(const std::vector<float> &v) { return {v.begin(), v.end()}; }

std::vector<double> bf16_to_double(const std::vector<std::uint16_t> &bits) {
    std::vector<double> d(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) d[i] = bf16_to_float(bits[i]);
    return d;
}

std::size_t count_mismatch(const std::vector<std::uint8_t> &a, const std::vector<std::uint8_t> &b) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        bad += !(a[i] == b[i] || (fp8::e4m3_is_nan(a[i]) && fp8::e4m3_is_nan(b[i])));
    return bad;
}

std::size_t count_scale_mismatch(const std::vector<float> &a, const std::vector<float> &b) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], 4) != 0;
    return bad;
}

}  // namespace

// ---------------------------------------------------------------- the quantizer forms

BOOST_AUTO_TEST_CASE(layer_quantizers_match_the_host_mirror) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("layer_quantizers");
    Context &ctx = internal_ctx();
    // Quantizing scatter: T tokens, k routes each, one dropped (-1) route; rows no route names
    // stay poisoned.
    {
        const std::int64_t T = 37, K = 384;
        const int k = 3;
        std::vector<std::uint16_t> x = random_bf16(static_cast<std::size_t>(T * K), 2.0f, rng);
        x[5 * K + 7] = float_to_bf16(1e4f);  // an outlier: its tile only
        std::vector<std::int32_t> index(static_cast<std::size_t>(T * k));
        std::vector<std::int64_t> perm(static_cast<std::size_t>(T * k));
        for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int64_t>(i);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (std::size_t i = 0; i < perm.size(); ++i) index[i] = static_cast<std::int32_t>(perm[i]);
        index[4] = -1;  // dropped
        DeviceBuffer dx = DeviceBuffer::from(x), di = DeviceBuffer::from(index);
        DeviceBuffer q(static_cast<std::size_t>(T * k * K)), s(static_cast<std::size_t>(T * k * (K / 128)) * 4);
        q.poison(), s.poison();
        fp8_quantize_scatter(ctx, {K, k}, dx.get(), di.as<std::int32_t>(), T, q.get(), s.as<float>(), nullptr);
        const fp8::Quantized host = fp8::quantize_rows(x, T, K);
        const auto gq = q.download<std::uint8_t>();
        const auto gs = s.download<float>();
        std::size_t bad = 0;
        for (std::int64_t t = 0; t < T; ++t)
            for (int j = 0; j < k; ++j) {
                const std::int32_t r = index[static_cast<std::size_t>(t * k + j)];
                if (r < 0) continue;
                for (std::int64_t c = 0; c < K; ++c)
                    bad += gq[static_cast<std::size_t>(r * K + c)] != host.q[static_cast<std::size_t>(t * K + c)];
                for (std::int64_t b = 0; b < K / 128; ++b)
                    bad += std::memcmp(&gs[static_cast<std::size_t>(r * (K / 128) + b)],
                                       &host.scales[static_cast<std::size_t>(t * (K / 128) + b)], 4) != 0;
            }
        BOOST_TEST(bad == 0u, "quantize_scatter: " << bad << " bytes or scales differ from the host mirror");
        // The dropped route's row (perm[4]) is not written.
        const std::int64_t dropped = perm[4];
        BOOST_TEST(gq[static_cast<std::size_t>(dropped * K)] == 0xFF);
    }
    // Rows into a wider operand (columns [128, 384) of a [rows, 512] matrix).
    {
        const std::int64_t rows = 70, K = 256, ld = 512;
        const std::vector<std::uint16_t> x = random_bf16(static_cast<std::size_t>(rows * K), 0.5f, rng);
        DeviceBuffer dx = DeviceBuffer::from(x);
        DeviceBuffer q(static_cast<std::size_t>(rows * ld)), s(static_cast<std::size_t>(rows * (ld / 128)) * 4);
        q.poison(), s.poison();
        fp8_quantize_rows_ld(ctx, {K}, dx.get(), rows, q.as<char>() + 128, ld, s.as<float>() + 1, ld / 128, nullptr);
        const fp8::Quantized host = fp8::quantize_rows(x, rows, K);
        const auto gq = q.download<std::uint8_t>();
        const auto gs = s.download<float>();
        std::size_t bad = 0, touched = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t c = 0; c < ld; ++c) {
                const std::uint8_t got = gq[static_cast<std::size_t>(r * ld + c)];
                if (c >= 128 && c < 128 + K)
                    bad += got != host.q[static_cast<std::size_t>(r * K + c - 128)];
                else
                    touched += got != 0xFF;
            }
            for (std::int64_t b = 0; b < K / 128; ++b)
                bad += std::memcmp(&gs[static_cast<std::size_t>(r * 4 + 1 + b)],
                                   &host.scales[static_cast<std::size_t>(r * 2 + b)], 4) != 0;
        }
        BOOST_TEST(bad == 0u, "quantize_rows_ld: " << bad << " differ from the host mirror");
        BOOST_TEST(touched == 0u, "quantize_rows_ld wrote " << touched << " bytes outside its columns");
    }
    // Transposed blocks: q_t[e][k][n] == quantize_blocks(w)[e][n][k], scales transposed.
    {
        const std::int64_t E = 3, N = 256, K = 384;
        std::vector<std::uint16_t> w = random_bf16(static_cast<std::size_t>(E * N * K), 0.05f, rng);
        w[static_cast<std::size_t>(N * K + 3 * K + 200)] = float_to_bf16(-3e3f);
        DeviceBuffer dw = DeviceBuffer::from(w);
        DeviceBuffer q(static_cast<std::size_t>(E * K * N)), s(static_cast<std::size_t>(E * (K / 128) * (N / 128)) * 4);
        q.poison(), s.poison();
        fp8_quantize_blocks_t(ctx, {N, K}, dw.get(), static_cast<std::int32_t>(E), q.get(), N, s.as<float>(), N / 128,
                              nullptr);
        const fp8::Quantized host = fp8::quantize_blocks(w, E, N, K);
        std::vector<std::uint8_t> host_t(host.q.size());
        std::vector<float> host_ts(host.scales.size());
        for (std::int64_t e = 0; e < E; ++e) {
            for (std::int64_t n = 0; n < N; ++n)
                for (std::int64_t c = 0; c < K; ++c)
                    host_t[static_cast<std::size_t>((e * K + c) * N + n)] = host.q[static_cast<std::size_t>((e * N + n) * K + c)];
            for (std::int64_t nb = 0; nb < N / 128; ++nb)
                for (std::int64_t kb = 0; kb < K / 128; ++kb)
                    host_ts[static_cast<std::size_t>((e * (K / 128) + kb) * (N / 128) + nb)] =
                        host.scales[static_cast<std::size_t>((e * (N / 128) + nb) * (K / 128) + kb)];
        }
        const std::size_t bad_q = count_mismatch(q.download<std::uint8_t>(), host_t);
        const std::size_t bad_s = count_scale_mismatch(s.download<float>(), host_ts);
        BOOST_TEST(bad_q == 0u, "quantize_blocks_t: " << bad_q << " bytes differ from the transposed host mirror");
        BOOST_TEST(bad_s == 0u, "quantize_blocks_t: " << bad_s << " scales differ");
    }
    // Dequantize: bf16(e4m3 · scale) of the host's quantization.
    {
        const std::int64_t rows = 33, K = 256;
        const std::vector<std::uint16_t> x = random_bf16(static_cast<std::size_t>(rows * K), 8.0f, rng);
        const fp8::Quantized host = fp8::quantize_rows(x, rows, K);
        DeviceBuffer q = DeviceBuffer::from(host.q), s = DeviceBuffer::from(host.scales);
        DeviceBuffer out(static_cast<std::size_t>(rows * K) * 2);
        out.poison();
        fp8_dequantize_rows(ctx, {K}, q.get(), s.as<float>(), rows, out.get(), nullptr);
        const auto got = out.download<std::uint16_t>();
        std::size_t bad = 0;
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < K; ++c) {
                const float want = round_to_bf16(fp8::e4m3_to_float(host.q[static_cast<std::size_t>(r * K + c)]) *
                                                 host.scales[static_cast<std::size_t>(r * (K / 128) + c / 128)]);
                bad += bf16_to_float(got[static_cast<std::size_t>(r * K + c)]) != want;
            }
        BOOST_TEST(bad == 0u, "dequantize_rows: " << bad << " values differ");
    }
}

// ---------------------------------------------------------------- the layer vs float64

namespace {

enum class Routing { distinct, duplicates, all_to_one, empty_experts };

struct LayerCase {
    const char *name;
    std::int64_t T, H, I;
    std::int32_t E, k;
    Routing routing = Routing::distinct;
    moejit_fc1_layout_t layout = MOEJIT_FC1_MERGED;
    bool outliers = false;
    double tolerance = 0.1;
};

std::vector<std::int64_t> make_routes(const LayerCase &c, std::mt19937_64 &rng) {
    std::vector<std::int64_t> sel(static_cast<std::size_t>(c.T * c.k));
    for (std::int64_t t = 0; t < c.T; ++t) {
        std::vector<std::int64_t> experts(static_cast<std::size_t>(c.E));
        for (std::int32_t e = 0; e < c.E; ++e) experts[static_cast<std::size_t>(e)] = e;
        std::shuffle(experts.begin(), experts.end(), rng);
        for (std::int32_t j = 0; j < c.k; ++j) {
            std::int64_t e = experts[static_cast<std::size_t>(j % c.E)];
            switch (c.routing) {
            case Routing::distinct: break;
            case Routing::duplicates: e = (j % 2 == 1) ? sel[static_cast<std::size_t>(t * c.k + j - 1)] : e; break;
            case Routing::all_to_one: e = 0; break;
            case Routing::empty_experts: e = e % std::max(1, c.E / 4); break;  // only the first quarter
            }
            sel[static_cast<std::size_t>(t * c.k + j)] = e;
        }
    }
    return sel;
}

// Per expert [I,H] gate rows then [I,H] up rows: [E,2I,H].
std::vector<std::uint16_t> merge_fc1(const std::vector<std::uint16_t> &g, const std::vector<std::uint16_t> &u,
                                     std::int64_t E, std::int64_t I, std::int64_t H) {
    std::vector<std::uint16_t> m(static_cast<std::size_t>(E * 2 * I * H));
    for (std::int64_t e = 0; e < E; ++e) {
        std::copy_n(g.begin() + e * I * H, I * H, m.begin() + e * 2 * I * H);
        std::copy_n(u.begin() + e * I * H, I * H, m.begin() + e * 2 * I * H + I * H);
    }
    return m;
}

std::vector<double> merge_fc1(const std::vector<float> &g, const std::vector<float> &u, std::int64_t E, std::int64_t I,
                              std::int64_t H) {
    std::vector<double> m(static_cast<std::size_t>(E * 2 * I * H));
    for (std::int64_t e = 0; e < E; ++e) {
        std::copy_n(g.begin() + e * I * H, I * H, m.begin() + e * 2 * I * H);
        std::copy_n(u.begin() + e * I * H, I * H, m.begin() + e * 2 * I * H + I * H);
    }
    return m;
}

moejit_plan_desc_t case_desc(const LayerCase &c, moejit_recipe_t recipe) {
    moejit_plan_desc_t d;
    layer_desc_init(&d, c.H, c.I, c.E, c.k);
    d.fc1_layout = c.layout;
    d.routing_dtype = MOEJIT_DTYPE_FP32;
    d.recipe = recipe;
    return d;
}

PlanDesc to_internal_desc(const LayerCase &c, moejit_recipe_t recipe) {
    const moejit_plan_desc_t d = case_desc(c, recipe);
    PlanDesc p;
    p.dtype = DType::bf16;
    p.hidden_size = d.hidden_size, p.intermediate_size = d.intermediate_size;
    p.num_experts = d.num_experts, p.top_k = d.top_k;
    p.fc1_layout = static_cast<Fc1Layout>(d.fc1_layout);
    p.recipe = static_cast<Recipe>(d.recipe);
    return p;
}

moejit_plan_t make_plan(const LayerCase &c, moejit_recipe_t recipe) {
    const moejit_plan_desc_t d = case_desc(c, recipe);
    moejit_plan_t plan = nullptr;
    MOEJIT_TEST_OK(moejit_plan_create(gpu_context(), &d, &plan));
    return plan;
}

void run_layer_case(const LayerCase &c) {
    BOOST_TEST_CONTEXT(c.name) {
        std::mt19937_64 rng = case_rng(c.name);
        const std::int64_t T = c.T, H = c.H, I = c.I, E = c.E, k = c.k;
        const bool merged = c.layout != MOEJIT_FC1_SPLIT;
        std::vector<std::uint16_t> x = random_bf16(static_cast<std::size_t>(T * H), 1.0f, rng);
        if (c.outliers)  // a few hot channels, as LLM activations have
            for (std::int64_t t = 0; t < T; ++t)
                for (std::int64_t ch : {std::int64_t{3}, H / 2 + 5, H - 1})
                    x[static_cast<std::size_t>(t * H + ch)] = float_to_bf16((t % 2 ? -1.0f : 1.0f) * 1e4f);
        const std::vector<std::uint16_t> wg = random_bf16(static_cast<std::size_t>(E * I * H), 1.0f / std::sqrt(float(H)), rng);
        const std::vector<std::uint16_t> wu = random_bf16(static_cast<std::size_t>(E * I * H), 1.0f / std::sqrt(float(H)), rng);
        const std::vector<std::uint16_t> wd = random_bf16(static_cast<std::size_t>(E * H * I), 1.0f / std::sqrt(float(I)), rng);
        const std::vector<std::uint16_t> dout = random_bf16(static_cast<std::size_t>(T * H), 1.0f, rng);
        const std::vector<std::int64_t> sel = make_routes(c, rng);
        std::vector<float> rw(static_cast<std::size_t>(T * k));
        std::uniform_real_distribution<float> wdist(0.05f, 1.0f);
        for (float &w : rw) w = wdist(rng);

        // float64 reference (the bf16 storage model of reference_moe.hpp; FP8's own error dominates).
        const std::vector<float> xf = as_float(x), wgf = as_float(wg), wuf = as_float(wu), wdf = as_float(wd),
                                 doutf = as_float(dout);
        MoeRefConfig cfg;
        cfg.tokens = T, cfg.hidden = H, cfg.intermediate = I, cfg.experts = static_cast<std::int32_t>(E);
        cfg.top_k = static_cast<std::int32_t>(k);
        const MoeRefResult ref = moe_reference(cfg, MoeRefInputs{xf, sel, rw, wgf, wuf, wdf, doutf});

        DeviceBuffer d_x = DeviceBuffer::from(x), d_sel = DeviceBuffer::from(sel), d_rw = DeviceBuffer::from(rw);
        DeviceBuffer d_dout = DeviceBuffer::from(dout), d_wd = DeviceBuffer::from(wd);
        DeviceBuffer d_wg, d_wu, d_wgu;
        if (merged)
            d_wgu = DeviceBuffer::from(merge_fc1(wg, wu, E, I, H));
        else
            d_wg = DeviceBuffer::from(wg), d_wu = DeviceBuffer::from(wu);
        moejit_plan_t plan = make_plan(c, MOEJIT_RECIPE_FP8_BLOCK);
        std::size_t saved_bytes = 0, workspace_bytes = 0;
        MOEJIT_TEST_OK(moejit_plan_saved_size(plan, T, &saved_bytes));
        MOEJIT_TEST_OK(moejit_plan_workspace_size(plan, T, &workspace_bytes));
        DeviceBuffer out(static_cast<std::size_t>(std::max<std::int64_t>(T * H, 1)) * 2), saved(saved_bytes),
            workspace(workspace_bytes);
        DeviceBuffer dx(out.bytes()), drw(static_cast<std::size_t>(std::max<std::int64_t>(T * k, 1)) * 4);
        DeviceBuffer dwd(static_cast<std::size_t>(E * H * I) * 2), dwg, dwu, dwgu;
        if (merged)
            dwgu = DeviceBuffer(static_cast<std::size_t>(E * 2 * I * H) * 2);
        else
            dwg = DeviceBuffer(static_cast<std::size_t>(E * I * H) * 2), dwu = DeviceBuffer(dwg.bytes());
        for (DeviceBuffer *b : {&out, &saved, &workspace, &dx, &drw, &dwd, &dwg, &dwu, &dwgu}) b->poison();

        moejit_forward_args_t f;
        moejit_forward_args_init(&f);
        f.num_tokens = T;
        f.x = d_x.get(), f.selected_experts = d_sel.get(), f.routing_weights = d_rw.get();
        f.w_gate = d_wg.get(), f.w_up = d_wu.get(), f.w_gate_up = d_wgu.get(), f.w_down = d_wd.get();
        f.out = out.get();
        f.saved = saved.get(), f.saved_size = saved.bytes();
        f.workspace = workspace.get(), f.workspace_size = workspace.bytes();
        MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
        workspace.poison();  // the backward must not read the forward's workspace
        moejit_backward_args_t b;
        layer_backward_args(&f, &b);
        b.dout = d_dout.get(), b.dx = dx.get(), b.d_routing_weights = drw.get();
        b.dw_gate = dwg.get(), b.dw_up = dwu.get(), b.dw_gate_up = dwgu.get(), b.dw_down = dwd.get();
        MOEJIT_TEST_OK(moejit_plan_backward(plan, &b));
        synchronize();
        moejit_plan_destroy(plan);

        auto check = [&](const char *what, const std::vector<double> &got, const std::vector<double> &want) {
            const double err = relative_error(got, want);
            std::printf("fp8 layer %-34s %-16s rel err %.4f%s\n", c.name, what, err,
                        all_finite(got) ? "" : " (NOT ALL WRITTEN / non-finite)");
            BOOST_TEST(all_finite(got), what << ": an output was not written (NaN) or is not finite");
            BOOST_TEST(err < c.tolerance, what << ": relative error " << err << " (bound " << c.tolerance << ")");
        };
        if (T > 0) {
            check("out", bf16_to_double(out.download<std::uint16_t>()), to_double(ref.out));
            check("dx", bf16_to_double(dx.download<std::uint16_t>()), to_double(merged ? ref.dx_merged : ref.dx_split));
            const std::vector<double> got_drw = to_double(drw.download<float>()), want_drw = to_double(ref.d_routing_weights);
            if (got_drw.size() >= 64) {
                check("d_routing_weights", got_drw, want_drw);
            } else {
                // A few routes (T = 1): each value is a dot product over I whose terms cancel, and
                // FP8's error scales with the terms, not with the sum (0.18 against the plain
                // relative bound of 0.1 for one seed on an H200, 0.055 and 0.064 for two others).
                // So the error is measured against the terms' magnitudes Σ_i |a_i·daw_i|.
                double err2 = 0, scale2 = 0;
                for (std::size_t p = 0; p < got_drw.size(); ++p) {
                    const std::int64_t row = ref.scatter_index[p];
                    double terms = 0;
                    for (std::int64_t i = 0; i < I; ++i)
                        terms += std::fabs(double(ref.aw[row * I + i]) * ref.daw[row * I + i]) / ref.w_s[row];
                    err2 += (got_drw[p] - want_drw[p]) * (got_drw[p] - want_drw[p]);
                    scale2 += terms * terms;
                }
                const double err = std::sqrt(err2 / scale2);
                std::printf("fp8 layer %-34s %-16s rel err %.4f of the terms' magnitudes%s\n", c.name, "d_routing_weights",
                            err, all_finite(got_drw) ? "" : " (NOT ALL WRITTEN / non-finite)");
                BOOST_TEST(all_finite(got_drw), "d_routing_weights: an output was not written (NaN) or is not finite");
                BOOST_TEST(err < c.tolerance, "d_routing_weights: error " << err << " of the terms' magnitudes");
            }
        }
        std::vector<double> got_dwd = bf16_to_double(dwd.download<std::uint16_t>());
        if (T == 0) {
            BOOST_TEST(std::all_of(got_dwd.begin(), got_dwd.end(), [](double v) { return v == 0.0; }),
                       "T = 0: dw_down must be written with zeros");
            return;
        }
        check("dw_down", got_dwd, to_double(ref.dw_down));
        if (merged) {
            check("dw_gate_up", bf16_to_double(dwgu.download<std::uint16_t>()), merge_fc1(ref.dw_gate, ref.dw_up, E, I, H));
        } else {
            check("dw_gate", bf16_to_double(dwg.download<std::uint16_t>()), to_double(ref.dw_gate));
            check("dw_up", bf16_to_double(dwu.download<std::uint16_t>()), to_double(ref.dw_up));
        }
    }
}

}  // namespace

// The forward's fused SwiGLU quantizer gives the bytes and scales of the three kernels it
// replaces (row quantizer on gate_up, the SwiGLU forward, row quantizer on its aw), bit for bit,
// in every layout and activation; NaN and an outlier stay in their tiles; every output written.
// The backward's likewise (dequantizer, SwiGLU backward, row quantizer of d_gate_up), but for
// d_w_s, which it sums in its own order.
BOOST_AUTO_TEST_CASE(swiglu_quantize_equals_the_three_kernels) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("swiglu_quantize");
    Context &ctx = internal_ctx();
    struct Case {
        std::int64_t I;
        Fp8GateUpLayout layout;
        Activation act;
        float limit;
    };
    for (const Case &c : {Case{256, Fp8GateUpLayout::split, Activation::swiglu, 0.0f},
                          Case{256, Fp8GateUpLayout::merged, Activation::swiglu, 0.0f},
                          Case{256, Fp8GateUpLayout::interleaved, Activation::swiglu, 0.0f},
                          Case{384, Fp8GateUpLayout::merged, Activation::swiglu, 7.0f},
                          Case{128, Fp8GateUpLayout::interleaved, Activation::gpt_oss, 7.0f},
                          Case{640, Fp8GateUpLayout::split, Activation::gpt_oss, 0.0f}})
        for (std::int64_t S : {std::int64_t{1}, std::int64_t{333}}) {
            BOOST_TEST_CONTEXT("I=" << c.I << " layout " << int(c.layout) << " act " << int(c.act) << " limit "
                                    << c.limit << " S=" << S) {
                const std::int64_t I = c.I, n = S * 2 * I;
                std::vector<std::uint16_t> gu = random_bf16(static_cast<std::size_t>(n), 3.0f, rng);
                gu[static_cast<std::size_t>(n / 3)] = 0x7FC0;                // NaN
                gu[static_cast<std::size_t>(n / 2 + 5)] = float_to_bf16(1e4f);  // an outlier
                std::vector<float> w(static_cast<std::size_t>(S));
                std::uniform_real_distribution<float> uw(0.05f, 1.0f);
                for (float &v : w) v = uw(rng);
                DeviceBuffer d_gu = DeviceBuffer::from(gu), d_w = DeviceBuffer::from(w);
                const bool merged = c.layout != Fp8GateUpLayout::split;
                const std::int64_t q_rows = merged ? S : 2 * S, q_k = merged ? 2 * I : I;
                // Reference: the three kernels.
                DeviceBuffer ref_q(static_cast<std::size_t>(n)), ref_s(static_cast<std::size_t>(n / 128) * 4);
                DeviceBuffer aw(static_cast<std::size_t>(S * I) * 2), ref_aq(static_cast<std::size_t>(S * I)),
                    ref_as(static_cast<std::size_t>(S * I / 128) * 4);
                for (DeviceBuffer *b : {&ref_q, &ref_s, &aw, &ref_aq, &ref_as}) b->poison();
                fp8_quantize_rows(ctx, {q_k}, {d_gu.get(), ref_q.get(), ref_s.as<float>(), q_rows, nullptr});
                // The SwiGLU op's fields both directions share, over g, u in `gu`'s layout.
                auto swiglu_fields = [&](auto &args, void *gu_bytes) {
                    args.rows = S;
                    args.intermediate = I;
                    args.merged = merged;
                    args.interleaved = c.layout == Fp8GateUpLayout::interleaved;
                    args.limit = c.limit;
                    args.gate = merged ? nullptr : gu_bytes;
                    args.up = merged ? nullptr : static_cast<char *>(gu_bytes) + S * I * 2;
                    args.gate_up = merged ? gu_bytes : nullptr;
                    args.w_s = d_w.as<float>();
                    args.activation = c.act;
                };
                SwigluForwardArgs act;
                swiglu_fields(act, d_gu.get());
                act.aw = aw.get();
                swiglu_forward(ctx, act);
                fp8_quantize_rows(ctx, {I}, {aw.get(), ref_aq.get(), ref_as.as<float>(), S, nullptr});
                // Fused.
                DeviceBuffer q(ref_q.bytes()), sc(ref_s.bytes()), aq(ref_aq.bytes()), as(ref_as.bytes());
                for (DeviceBuffer *b : {&q, &sc, &aq, &as}) b->poison();
                fp8_swiglu_quantize(ctx, {I, c.layout, c.act, c.limit > 0.0f}, d_gu.get(), d_w.as<float>(), S, c.limit,
                                    act.alpha, q.get(), sc.as<float>(), aq.get(), as.as<float>(), nullptr);
                BOOST_TEST((q.download<std::uint8_t>() == ref_q.download<std::uint8_t>()), "saved g, u bytes differ");
                BOOST_TEST((sc.download<std::uint32_t>() == ref_s.download<std::uint32_t>()), "saved scales differ");
                BOOST_TEST((aq.download<std::uint8_t>() == ref_aq.download<std::uint8_t>()), "a·w bytes differ");
                BOOST_TEST((as.download<std::uint32_t>() == ref_as.download<std::uint32_t>()), "a·w scales differ");
                const auto scales = sc.download<std::uint32_t>();
                BOOST_TEST(std::count(scales.begin(), scales.end(), 0xFFFFFFFFu) == 0, "saved scales left unwritten");

                // The backward's fused kernel against its three: dequantize the saved g, u, the
                // SwiGLU backward, d_gate_up's row quantizer ([S, 2I]; split: two strided halves).
                const std::vector<std::uint16_t> daw_bits = random_bf16(static_cast<std::size_t>(S * I), 1.0f, rng);
                DeviceBuffer ref_daw = DeviceBuffer::from(daw_bits), fused_daw = DeviceBuffer::from(daw_bits);
                DeviceBuffer gu_bf16(static_cast<std::size_t>(n) * 2), ref_dgu(static_cast<std::size_t>(n) * 2),
                    ref_dws(static_cast<std::size_t>(S) * 4), ref_dq(static_cast<std::size_t>(n)),
                    ref_ds(static_cast<std::size_t>(n / 128) * 4);
                for (DeviceBuffer *b : {&gu_bf16, &ref_dgu, &ref_dws, &ref_dq, &ref_ds}) b->poison();
                fp8_dequantize_rows(ctx, {q_k}, q.get(), sc.as<float>(), q_rows, gu_bf16.get(), nullptr);
                SwigluBackwardArgs back;
                swiglu_fields(back, gu_bf16.get());
                back.daw = ref_daw.get();
                back.d_gate = merged ? nullptr : ref_dgu.get();
                back.d_up = merged ? nullptr : static_cast<char *>(ref_dgu.get()) + S * I * 2;
                back.d_gate_up = merged ? ref_dgu.get() : nullptr;
                back.d_w_s = ref_dws.as<float>();
                back.aw = ref_daw.get();
                swiglu_backward(ctx, back);
                if (merged) {
                    fp8_quantize_rows(ctx, {2 * I}, {ref_dgu.get(), ref_dq.get(), ref_ds.as<float>(), S, nullptr});
                } else {
                    auto *dq = static_cast<char *>(ref_dq.get());
                    fp8_quantize_rows_ld(ctx, {I}, ref_dgu.get(), S, dq, 2 * I, ref_ds.as<float>(), 2 * I / 128, nullptr);
                    fp8_quantize_rows_ld(ctx, {I}, static_cast<char *>(ref_dgu.get()) + S * I * 2, S, dq + I, 2 * I,
                                         ref_ds.as<float>() + I / 128, 2 * I / 128, nullptr);
                }
                DeviceBuffer dgu(ref_dgu.bytes()), dws(ref_dws.bytes()), dq(ref_dq.bytes()), ds(ref_ds.bytes());
                for (DeviceBuffer *b : {&dgu, &dws, &dq, &ds}) b->poison();
                fp8_swiglu_backward_quantize(ctx, {I, c.layout, c.act, c.limit > 0.0f}, q.get(), sc.as<float>(),
                                             fused_daw.get(), d_w.as<float>(), S, c.limit, act.alpha, dgu.get(),
                                             dws.as<float>(), dq.get(), ds.as<float>(), nullptr);
                BOOST_TEST((dgu.download<std::uint16_t>() == ref_dgu.download<std::uint16_t>()), "d_gate_up differs");
                BOOST_TEST((fused_daw.download<std::uint16_t>() == ref_daw.download<std::uint16_t>()),
                           "a·w recomputed over daw differs");
                BOOST_TEST((dq.download<std::uint8_t>() == ref_dq.download<std::uint8_t>()), "d_gate_up's e4m3 differs");
                BOOST_TEST((ds.download<std::uint32_t>() == ref_ds.download<std::uint32_t>()), "d_gate_up's scales differ");
                // d_w_s: its own summation order, so near, not equal (NaN where the row has one).
                const auto got = dws.download<float>(), want = ref_dws.download<float>();
                int bad = 0;
                for (std::int64_t r = 0; r < S; ++r) {
                    const float a = got[r], b = want[r];
                    bad += std::isnan(b) ? !std::isnan(a) : !(std::fabs(a - b) <= 1e-4f * (std::fabs(b) + 1.0f));
                }
                BOOST_TEST(bad == 0, bad << " of " << S << " d_w_s rows differ beyond the summation order");
            }
        }
}

BOOST_AUTO_TEST_CASE(layer_matches_float64) {
    if (!hopper()) return;
    const LayerCase cases[] = {
        {"merged random T=200", 200, 256, 256, 8, 2},
        {"split random T=200", 200, 256, 256, 8, 2, Routing::distinct, MOEJIT_FC1_SPLIT},
        {"merged duplicates", 150, 384, 128, 6, 4, Routing::duplicates},
        {"split duplicates", 150, 384, 128, 6, 4, Routing::duplicates, MOEJIT_FC1_SPLIT},
        {"all to expert 0", 300, 256, 256, 8, 2, Routing::all_to_one},
        {"empty experts", 260, 256, 384, 16, 2, Routing::empty_experts},
        {"T=1", 1, 256, 256, 8, 4},
        {"T=1 split", 1, 256, 128, 4, 1, Routing::distinct, MOEJIT_FC1_SPLIT},
        {"T=0", 0, 256, 128, 4, 2},
        {"outliers 1e4", 200, 512, 256, 8, 2, Routing::distinct, MOEJIT_FC1_MERGED, true, 0.15},
        {"K=7168 (deepseek-v3 H)", 64, 7168, 256, 8, 2},
        {"K=7168 split", 48, 7168, 256, 4, 2, Routing::distinct, MOEJIT_FC1_SPLIT},
    };
    for (const LayerCase &c : cases) run_layer_case(c);
}

// ---------------------------------------------------------------- the weight cache

namespace {

// One forward + backward of an FP8 plan with the given cache modes; every output downloaded as
// bytes (the cache must not change a bit: the same quantization feeds the same GEMMs).
struct Fp8Outputs {
    std::vector<std::uint8_t> out, dx, drw, dwgu, dwd;
};

struct CacheCase {
    const char *name;
    moejit_weight_cache_mode_t forward, backward;
    bool fill_at_t0 = false;  // a FILL forward with T = 0 first; both calls then USE
};

}  // namespace

BOOST_AUTO_TEST_CASE(weight_cache_changes_no_bit) {
    if (!hopper()) return;
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_MERGED, MOEJIT_FC1_SPLIT}) {
        const LayerCase c{layout == MOEJIT_FC1_SPLIT ? "cache split" : "cache merged", 200, 256, 384, 8, 2,
                          Routing::duplicates, layout};
        BOOST_TEST_CONTEXT(c.name) {
            std::mt19937_64 rng = case_rng(c.name);
            const std::int64_t T = c.T, H = c.H, I = c.I, E = c.E, k = c.k;
            const bool merged = layout != MOEJIT_FC1_SPLIT;
            const std::vector<std::int64_t> sel = make_routes(c, rng);
            std::vector<float> rw(static_cast<std::size_t>(T * k));
            std::uniform_real_distribution<float> wdist(0.05f, 1.0f);
            for (float &w : rw) w = wdist(rng);
            DeviceBuffer d_x = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(T * H), 1.0f, rng));
            DeviceBuffer d_dout = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(T * H), 1.0f, rng));
            DeviceBuffer d_sel = DeviceBuffer::from(sel), d_rw = DeviceBuffer::from(rw);
            const float s1 = 1.0f / std::sqrt(float(H)), s2 = 1.0f / std::sqrt(float(I));
            DeviceBuffer d_wgu, d_wg, d_wu;
            if (merged)
                d_wgu = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(E * 2 * I * H), s1, rng));
            else
                d_wg = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(E * I * H), s1, rng)),
                d_wu = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(E * I * H), s1, rng));
            DeviceBuffer d_wd = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(E * H * I), s2, rng));
            moejit_plan_t plan = make_plan(c, MOEJIT_RECIPE_FP8_BLOCK);
            std::size_t saved_bytes = 0, workspace_bytes = 0, cached_bytes = 0, cache_bytes = 0;
            MOEJIT_TEST_OK(moejit_plan_saved_size(plan, T, &saved_bytes));
            MOEJIT_TEST_OK(moejit_plan_workspace_size(plan, T, &workspace_bytes));
            MOEJIT_TEST_OK(moejit_plan_cached_workspace_size(plan, T, &cached_bytes));
            MOEJIT_TEST_OK(moejit_plan_weight_cache_size(plan, &cache_bytes));
            BOOST_TEST(cached_bytes < workspace_bytes);
            DeviceBuffer cache(cache_bytes);
            cache.poison();

            auto run = [&](const CacheCase &cc) {
                const bool uses_cache = cc.forward != MOEJIT_WEIGHT_CACHE_NONE;
                // A cached call gets exactly the smaller workspace: it must not touch more.
                DeviceBuffer saved(saved_bytes), workspace(uses_cache ? cached_bytes : workspace_bytes);
                DeviceBuffer out(static_cast<std::size_t>(T * H) * 2), dx(out.bytes()),
                    drw(static_cast<std::size_t>(T * k) * 4), dwd(static_cast<std::size_t>(E * H * I) * 2),
                    dwgu(static_cast<std::size_t>(E * 2 * I * H) * 2);
                for (DeviceBuffer *b : {&saved, &workspace, &out, &dx, &drw, &dwd, &dwgu}) b->poison();
                moejit_forward_args_t f;
                moejit_forward_args_init(&f);
                f.x = d_x.get(), f.selected_experts = d_sel.get(), f.routing_weights = d_rw.get();
                f.w_gate = d_wg.get(), f.w_up = d_wu.get(), f.w_gate_up = d_wgu.get(), f.w_down = d_wd.get();
                f.out = out.get();
                f.saved = saved.get(), f.saved_size = saved.bytes();
                f.workspace = workspace.get(), f.workspace_size = workspace.bytes();
                f.weight_cache = cache.get(), f.weight_cache_size = cache.bytes();
                if (cc.fill_at_t0) {  // T = 0 fills the cache all the same
                    f.num_tokens = 0;
                    f.weight_cache_mode = MOEJIT_WEIGHT_CACHE_FILL;
                    MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
                }
                f.num_tokens = T;
                f.weight_cache_mode = cc.forward;
                MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
                moejit_backward_args_t b;
                layer_backward_args(&f, &b);
                b.dout = d_dout.get(), b.dx = dx.get(), b.d_routing_weights = drw.get();
                b.dw_down = dwd.get();
                if (merged) b.dw_gate_up = dwgu.get();
                else b.dw_gate = dwgu.get(), b.dw_up = dwgu.as<char>() + E * I * H * 2;
                b.weight_cache = cache.get(), b.weight_cache_size = cache.bytes(), b.weight_cache_mode = cc.backward;
                MOEJIT_TEST_OK(moejit_plan_backward(plan, &b));
                synchronize();
                return Fp8Outputs{out.download<std::uint8_t>(), dx.download<std::uint8_t>(), drw.download<std::uint8_t>(),
                                  dwgu.download<std::uint8_t>(), dwd.download<std::uint8_t>()};
            };
            const Fp8Outputs none = run({"none", MOEJIT_WEIGHT_CACHE_NONE, MOEJIT_WEIGHT_CACHE_NONE});
            for (const CacheCase &cc : {CacheCase{"fill, then use", MOEJIT_WEIGHT_CACHE_FILL, MOEJIT_WEIGHT_CACHE_USE},
                                        CacheCase{"use, use (the cache as filled above)", MOEJIT_WEIGHT_CACHE_USE,
                                                  MOEJIT_WEIGHT_CACHE_USE},
                                        CacheCase{"fill at T = 0, then use, use", MOEJIT_WEIGHT_CACHE_USE,
                                                  MOEJIT_WEIGHT_CACHE_USE, true},
                                        CacheCase{"use, fill (backward refills)", MOEJIT_WEIGHT_CACHE_USE,
                                                  MOEJIT_WEIGHT_CACHE_FILL}}) {
                if (cc.fill_at_t0) cache.poison();  // nothing but the T = 0 FILL may have written it
                const Fp8Outputs got = run(cc);
                BOOST_TEST_CONTEXT(cc.name) {
                    BOOST_TEST(got.out == none.out, "out differs from the uncached call");
                    BOOST_TEST(got.dx == none.dx, "dx differs");
                    BOOST_TEST(got.drw == none.drw, "d_routing_weights differs");
                    BOOST_TEST(got.dwgu == none.dwgu, "dw_gate_up (split: dw_gate, dw_up) differs");
                    BOOST_TEST(got.dwd == none.dwd, "dw_down differs");
                }
            }
            // Every value of the cache was written by the FILLs: the poison (0xFF bytes) is NaN as
            // e4m3 and as fp32, which finite weights never quantize to.
            const std::vector<std::uint8_t> bytes = cache.download<std::uint8_t>();
            const Fp8WeightCacheLayout L(to_internal_desc(c, MOEJIT_RECIPE_FP8_BLOCK));
            std::size_t unwritten = 0;
            for (const Fp8WeightRegions *w : {&L.forward, &L.transposed}) {
                for (const Region &r : {w->w1_q, w->w2_q})
                    for (std::size_t i = r.offset; i < r.offset + r.bytes; ++i) unwritten += (bytes[i] & 0x7F) == 0x7F;
                for (const Region &r : {w->w1_scale, w->w2_scale})
                    for (std::size_t i = r.offset; i < r.offset + r.bytes; i += 4) {
                        float v;
                        std::memcpy(&v, &bytes[i], 4);
                        unwritten += !std::isfinite(v);
                    }
            }
            BOOST_TEST(unwritten == 0u, unwritten << " values of the weight cache are NaN (unwritten)");
            moejit_plan_destroy(plan);
        }
    }
}

// An FP8 plan's experts entry refuses (no FP8 form yet), naming the recipe.
BOOST_AUTO_TEST_CASE(experts_entry_refuses_fp8) {
    if (!hopper()) return;
    const LayerCase c{"experts", 4, 256, 128, 4, 2};
    moejit_plan_t plan = make_plan(c, MOEJIT_RECIPE_FP8_BLOCK);
    moejit_experts_forward_args_t a;
    moejit_experts_forward_args_init(&a);
    BOOST_TEST(moejit_plan_experts_forward(plan, &a) == MOEJIT_ERROR_UNSUPPORTED);
    BOOST_TEST(std::string(moejit_last_error()).find("RECIPE_FP8_BLOCK") != std::string::npos, moejit_last_error());
    moejit_plan_destroy(plan);
}

// ---------------------------------------------------------------- benchmark

namespace {

// n bf16 values from a 1 Mi-element random pattern, repeated (host generation of billions of
// values would dominate the run; the values do not change the work).
void fill_device_bf16(DeviceBuffer &b, float scale, std::mt19937_64 &rng) {
    const std::size_t n = b.bytes() / 2, chunk = std::min<std::size_t>(n, std::size_t{1} << 20);
    const std::vector<std::uint16_t> pattern = random_bf16(chunk, scale, rng);
    DeviceBuffer p = DeviceBuffer::from(pattern);
    for (std::size_t at = 0; at < n; at += chunk)
        MOEJIT_CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(b.get()) + at * 2, reinterpret_cast<CUdeviceptr>(p.get()),
                                    std::min(chunk, n - at) * 2, nullptr));
    synchronize();
}

}  // namespace

BOOST_AUTO_TEST_CASE(benchmark, *boost::unit_test::disabled()) {
    if (!hopper()) return;
    for (const moejit::test::Fp8Model &m : moejit::test::kFp8Models) {
        std::mt19937_64 rng = case_rng(m.name);
        const LayerCase c{m.name, m.T, m.H, m.I, m.E, m.k};
        const std::int64_t T = m.T, H = m.H, I = m.I, E = m.E, k = m.k, S = T * k;
        // Balanced random routing: k distinct experts per token.
        std::vector<std::int64_t> sel = make_routes(c, rng);
        std::vector<float> rw(static_cast<std::size_t>(T * k), 1.0f / static_cast<float>(k));
        DeviceBuffer x(static_cast<std::size_t>(T * H) * 2), dout(x.bytes());
        DeviceBuffer wgu(static_cast<std::size_t>(E * 2 * I * H) * 2), wd(static_cast<std::size_t>(E * H * I) * 2);
        fill_device_bf16(x, 1.0f, rng), fill_device_bf16(dout, 1.0f, rng);
        fill_device_bf16(wgu, 1.0f / std::sqrt(float(H)), rng), fill_device_bf16(wd, 1.0f / std::sqrt(float(I)), rng);
        DeviceBuffer d_sel = DeviceBuffer::from(sel), d_rw = DeviceBuffer::from(rw);
        DeviceBuffer out(x.bytes()), dx(x.bytes()), drw(static_cast<std::size_t>(T * k) * 4);
        DeviceBuffer dwgu(wgu.bytes()), dwd(wd.bytes());
        const double fwd_flop = 6.0 * S * H * I, bwd_flop = 12.0 * S * H * I;
        double fwd_ms[2] = {0, 0}, step_ms[2] = {0, 0};
        for (moejit_recipe_t recipe : {MOEJIT_RECIPE_BF16, MOEJIT_RECIPE_FP8_BLOCK}) {
            moejit_plan_t plan = make_plan(c, recipe);
            std::size_t saved_bytes = 0, workspace_bytes = 0;
            MOEJIT_TEST_OK(moejit_plan_saved_size(plan, T, &saved_bytes));
            MOEJIT_TEST_OK(moejit_plan_workspace_size(plan, T, &workspace_bytes));
            DeviceBuffer saved(saved_bytes), workspace(workspace_bytes);
            moejit_forward_args_t f;
            moejit_forward_args_init(&f);
            f.num_tokens = T, f.x = x.get(), f.selected_experts = d_sel.get(), f.routing_weights = d_rw.get();
            f.w_gate_up = wgu.get(), f.w_down = wd.get(), f.out = out.get();
            f.saved = saved.get(), f.saved_size = saved.bytes(), f.workspace = workspace.get();
            f.workspace_size = workspace.bytes();
            moejit_backward_args_t b;
            layer_backward_args(&f, &b);
            b.dout = dout.get(), b.dx = dx.get(), b.d_routing_weights = drw.get();
            b.dw_gate_up = dwgu.get(), b.dw_down = dwd.get();
            auto time_ms = [&](bool with_backward) {
                for (int i = 0; i < 2; ++i) {  // warm up
                    MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
                    if (with_backward) MOEJIT_TEST_OK(moejit_plan_backward(plan, &b));
                }
                return mean_event_ms(10, [&] {
                    MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
                    if (with_backward) MOEJIT_TEST_OK(moejit_plan_backward(plan, &b));
                });
            };
            const int r = recipe == MOEJIT_RECIPE_FP8_BLOCK;
            fwd_ms[r] = time_ms(false);
            step_ms[r] = time_ms(true);
            if (r) {  // the micro-batches of one optimizer step: the weights quantized once, then USE
                std::size_t cache_bytes = 0, cached_bytes = 0;
                MOEJIT_TEST_OK(moejit_plan_weight_cache_size(plan, &cache_bytes));
                MOEJIT_TEST_OK(moejit_plan_cached_workspace_size(plan, T, &cached_bytes));
                DeviceBuffer cache(cache_bytes);
                f.weight_cache = b.weight_cache = cache.get();
                f.weight_cache_size = b.weight_cache_size = cache.bytes();
                f.weight_cache_mode = MOEJIT_WEIGHT_CACHE_FILL;
                MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
                f.weight_cache_mode = b.weight_cache_mode = MOEJIT_WEIGHT_CACHE_USE;
                const double cached_fwd = time_ms(false), cached_step = time_ms(true);
                std::printf("layer benchmark %s fp8-block, weight cache USE: forward %.3f ms (%.0f TFLOP/s), "
                            "forward+backward %.3f ms (%.0f TFLOP/s), %.2fx bf16; cache %.1f MiB, workspace %.1f MiB\n",
                            m.name, cached_fwd, fwd_flop / (cached_fwd * 1e-3) / 1e12, cached_step,
                            (fwd_flop + bwd_flop) / (cached_step * 1e-3) / 1e12, step_ms[0] / cached_step,
                            cache_bytes / 1048576.0, cached_bytes / 1048576.0);
                f.weight_cache_mode = b.weight_cache_mode = MOEJIT_WEIGHT_CACHE_NONE;
            }
            std::printf("layer benchmark %s T=%lld H=%lld I=%lld E=%lld k=%lld %s: forward %.3f ms (%.0f TFLOP/s), "
                        "forward+backward %.3f ms (%.0f TFLOP/s); saved %.1f MiB, workspace %.1f MiB\n",
                        m.name, (long long)T, (long long)H, (long long)I, (long long)E, (long long)k,
                        r ? "fp8-block" : "bf16     ", fwd_ms[r], fwd_flop / (fwd_ms[r] * 1e-3) / 1e12, step_ms[r],
                        (fwd_flop + bwd_flop) / (step_ms[r] * 1e-3) / 1e12, saved_bytes / 1048576.0,
                        workspace_bytes / 1048576.0);
            moejit_plan_destroy(plan);
        }
        std::printf("layer benchmark %s: fp8-block vs bf16 speedup forward %.2fx, forward+backward %.2fx\n", m.name,
                    fwd_ms[0] / fwd_ms[1], step_ms[0] / step_ms[1]);
    }
}
