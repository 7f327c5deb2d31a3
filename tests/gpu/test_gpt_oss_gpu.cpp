// The layer with gpt-oss's experts (docs/DESIGN.md §2): interleaved gate/up columns, weights
// stored for x·W ([E,H,2I], [E,I,H]), the gpt-oss activation (u'+1)·g'·σ(α·g') with limit 7,
// and expert biases on fc1 and fc2 with their gradients; plus the biases and the activation on
// the other layouts (merged, not transposed). Through the public C ABI, against the float64
// reference of tests/support/reference_moe.hpp, which models gpt-oss's own expression
// (transformers' GptOssExperts: gate_up = x·W + b; gate, up = [..., ::2], [..., 1::2]; ...;
// out = (h·W_down + b_down)·w summed over the routes).
//
// Before each run every output, gradient, the saved buffer and the workspace are NaN-poisoned
// (accumulated gradients get a random fp32 prefill instead); afterwards every value must be
// finite and match the reference. Cases cover softmax top-k, duplicate routes, empty experts,
// every route to one expert, T = 1 and T = 0 (weight and bias gradients still written).
// The same cases run the pre-dispatched experts entry (moejit_plan_experts_forward/backward) on
// rows grouped by expert, against the reference with one route per row.
#include "gpu_main.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "layer_args.h"
#include "reference_moe.hpp"

MOEJIT_GPU_TEST_MAIN("gpt_oss_gpu")

using namespace moejit::test;

namespace {

// The reference rounds every tensor the device stores where the device does, so what is left
// are 1-ulp flips of fp32 vs float64 accumulation (see test_moe_layer_gpu.cpp): 5e-3 keeps the
// layer suite's margin. Bias gradients are fp32 sums of stored values: far tighter in practice.
constexpr double kTol = 5e-3;

enum class Routing { softmax_topk, uniform_duplicates, all_to_one };

struct Case {
    std::string name;
    std::int64_t T = 0, H = 0, I = 0;
    std::int32_t E = 0, k = 0;
    moejit_fc1_layout_t layout = MOEJIT_FC1_INTERLEAVED;
    bool transposed = true;
    bool bias = true;
    moejit_activation_t activation = MOEJIT_ACTIVATION_GPT_OSS;
    float limit = 7.0f;
    bool accumulate = false;
    Routing routing = Routing::softmax_topk;
    std::int32_t active = 0;  // routes use experts [0, active) (0: all)
    double fc1_scale = 3.0;   // std of g and u: ~2 % beyond the limit 7
    // The pre-dispatched experts entry instead of the layer: T rows (k = 1) sorted by expert,
    // with fp32 row weights or none (row_weights false: every weight 1, no weight gradient).
    bool experts_entry = false;
    bool row_weights = true;
    std::int64_t S() const { return T * k; }
};

struct Half {
    std::vector<std::uint16_t> bits;
    std::vector<float> values;
};

Half random_half(std::size_t n, std::mt19937_64 &rng, double scale) {
    std::normal_distribution<double> nd(0.0, scale);
    Half h;
    h.bits.resize(n);
    h.values.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        h.bits[i] = float_to_bf16(static_cast<float>(nd(rng)));
        h.values[i] = bf16_to_float(h.bits[i]);
    }
    return h;
}

// fc1 row (or column, transposed) of gate i and up i in the device layout.
std::int64_t gate_row(const Case &c, std::int64_t i) { return c.layout == MOEJIT_FC1_INTERLEAVED ? 2 * i : i; }
std::int64_t up_row(const Case &c, std::int64_t i) { return c.layout == MOEJIT_FC1_INTERLEAVED ? 2 * i + 1 : c.I + i; }

// Logical [E,I,H] gate and up -> the device's fc1 weight ([E,2I,H], or [E,H,2I] transposed).
template <class V> std::vector<V> pack_fc1(const Case &c, const std::vector<V> &gate, const std::vector<V> &up) {
    const std::int64_t E = c.E, I = c.I, H = c.H;
    std::vector<V> w(std::size_t(E * 2 * I * H));
    for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t i = 0; i < I; ++i)
            for (std::int64_t h = 0; h < H; ++h) {
                const std::size_t src = std::size_t((e * I + i) * H + h);
                for (int which = 0; which < 2; ++which) {
                    const std::int64_t r = which ? up_row(c, i) : gate_row(c, i);
                    const std::size_t dst = c.transposed ? std::size_t((e * H + h) * 2 * I + r)
                                                         : std::size_t((e * 2 * I + r) * H + h);
                    w[dst] = which ? up[src] : gate[src];
                }
            }
    return w;
}
// The inverse for gradients: the device's fc1 gradient -> logical gate and up [E,I,H].
void unpack_fc1(const Case &c, const std::vector<float> &w, std::vector<float> &gate, std::vector<float> &up) {
    const std::int64_t E = c.E, I = c.I, H = c.H;
    gate.assign(std::size_t(E * I * H), 0.0f);
    up.assign(gate.size(), 0.0f);
    for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t i = 0; i < I; ++i)
            for (std::int64_t h = 0; h < H; ++h) {
                auto at = [&](std::int64_t r) {
                    return c.transposed ? w[std::size_t((e * H + h) * 2 * I + r)] : w[std::size_t((e * 2 * I + r) * H + h)];
                };
                gate[std::size_t((e * I + i) * H + h)] = at(gate_row(c, i));
                up[std::size_t((e * I + i) * H + h)] = at(up_row(c, i));
            }
}
// Logical [E,H,I] down <-> the device's ([E,I,H] transposed).
template <class V> std::vector<V> pack_down(const Case &c, const std::vector<V> &down, bool to_device = true) {
    if (!c.transposed) return down;
    const std::int64_t E = c.E, I = c.I, H = c.H;
    std::vector<V> w(down.size());
    for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t i = 0; i < I; ++i) {
                const std::size_t logical = std::size_t((e * H + h) * I + i), device = std::size_t((e * I + i) * H + h);
                if (to_device) w[device] = down[logical];
                else w[logical] = down[device];
            }
    return w;
}
// Logical [E,I] gate and up biases <-> the device's [E,2I] in fc1's column order.
template <class V> std::vector<V> pack_bias(const Case &c, const std::vector<V> &gate, const std::vector<V> &up) {
    std::vector<V> b(std::size_t(c.E * 2 * c.I));
    for (std::int64_t e = 0; e < c.E; ++e)
        for (std::int64_t i = 0; i < c.I; ++i) {
            b[std::size_t(e * 2 * c.I + gate_row(c, i))] = gate[std::size_t(e * c.I + i)];
            b[std::size_t(e * 2 * c.I + up_row(c, i))] = up[std::size_t(e * c.I + i)];
        }
    return b;
}
void unpack_bias(const Case &c, const std::vector<float> &b, std::vector<float> &gate, std::vector<float> &up) {
    gate.resize(std::size_t(c.E * c.I));
    up.resize(gate.size());
    for (std::int64_t e = 0; e < c.E; ++e)
        for (std::int64_t i = 0; i < c.I; ++i) {
            gate[std::size_t(e * c.I + i)] = b[std::size_t(e * 2 * c.I + gate_row(c, i))];
            up[std::size_t(e * c.I + i)] = b[std::size_t(e * 2 * c.I + up_row(c, i))];
        }
}

std::vector<float> bf16_values(const DeviceBuffer &b) {
    const auto bits = b.download<std::uint16_t>();
    std::vector<float> v(bits.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(bits[i]);
    return v;
}

struct Result {
    std::string line;
    bool ok = true;
    void check(const std::string &name, const std::vector<float> &got, const std::vector<float> &want, double tol) {
        double num = 0, den = 0;
        std::size_t nonfinite = 0;
        for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
            if (!std::isfinite(got[i])) ++nonfinite;
            num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
            den += double(want[i]) * want[i];
        }
        const double err = den > 0 ? std::sqrt(num / den) : (num == 0 ? 0.0 : INFINITY);
        const bool pass = got.size() == want.size() && nonfinite == 0 && err <= tol;
        char buf[160];
        std::snprintf(buf, sizeof buf, " %s %.1e%s", name.c_str(), err, pass ? "" : "!");
        line += buf;
        if (nonfinite) line += "(" + std::to_string(nonfinite) + " non-finite)";
        if (!pass) ok = false;
    }
};

void run_case(const Case &c) {
    std::mt19937_64 rng(test_seed() ^ std::hash<std::string>{}(c.name));
    const std::int64_t T = c.T, H = c.H, I = c.I, E = c.E, k = c.k, S = c.S();
    Half x = random_half(std::size_t(T * H), rng, 1.0), dout = random_half(std::size_t(T * H), rng, 1.0);
    Half wg = random_half(std::size_t(E * I * H), rng, c.fc1_scale / std::sqrt(double(H)));
    Half wu = random_half(std::size_t(E * I * H), rng, c.fc1_scale / std::sqrt(double(H)));
    Half wd = random_half(std::size_t(E * H * I), rng, 1.0 / std::sqrt(double(I)));
    Half bg = random_half(std::size_t(E * I), rng, 0.5), bu = random_half(std::size_t(E * I), rng, 0.5);
    Half bd = random_half(std::size_t(E * H), rng, 0.5);

    // Routing: int64 ids and fp32 weights.
    std::vector<std::int64_t> sel(static_cast<std::size_t>(S));
    std::vector<float> rw(static_cast<std::size_t>(S));
    const std::int32_t active = c.active ? c.active : c.E;
    std::uniform_real_distribution<double> ud(0.1, 1.0);
    std::normal_distribution<double> nd;
    for (std::int64_t t = 0; t < T; ++t) {
        if (c.routing == Routing::softmax_topk) {
            std::vector<std::pair<double, std::int32_t>> logits(static_cast<std::size_t>(active));
            for (std::int32_t e = 0; e < active; ++e) logits[std::size_t(e)] = {nd(rng), e};
            std::partial_sort(logits.begin(), logits.begin() + k, logits.end(), std::greater<>());
            double sum = 0;
            for (std::int64_t j = 0; j < k; ++j) sum += std::exp(logits[std::size_t(j)].first - logits[0].first);
            for (std::int64_t j = 0; j < k; ++j) {
                sel[std::size_t(t * k + j)] = logits[std::size_t(j)].second;
                rw[std::size_t(t * k + j)] = float(std::exp(logits[std::size_t(j)].first - logits[0].first) / sum);
            }
        } else {
            for (std::int64_t j = 0; j < k; ++j) {
                sel[std::size_t(t * k + j)] =
                    c.routing == Routing::all_to_one ? 0 : std::int64_t(rng() % std::uint64_t(active));
                rw[std::size_t(t * k + j)] = float(ud(rng));
            }
        }
    }

    if (c.experts_entry) {
        // Rows grouped by expert: a stable sort of the one-route rows by expert id.
        std::vector<std::size_t> order(sel.size());
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sel[a] < sel[b]; });
        std::vector<std::int64_t> sorted_sel(sel.size());
        std::vector<float> sorted_rw(rw.size());
        for (std::size_t i = 0; i < order.size(); ++i) {
            sorted_sel[i] = sel[order[i]];
            sorted_rw[i] = c.row_weights ? rw[order[i]] : 1.0f;
        }
        sel = std::move(sorted_sel);
        rw = std::move(sorted_rw);
    }

    const MoeRefConfig cfg{.tokens = T, .hidden = H, .intermediate = I, .experts = c.E, .top_k = c.k,
                           .limit = c.limit, .activation = c.activation == MOEJIT_ACTIVATION_GPT_OSS ? 1 : 0,
                           .alpha = 1.702, .bias = c.bias, .dtype = Storage::bf16, .routing = Storage::fp32};
    MoeRefInputs in{x.values, sel, rw, wg.values, wu.values, wd.values, dout.values};
    if (c.bias) {
        in.b_gate = bg.values;
        in.b_up = bu.values;
        in.b_down = bd.values;
    }
    const MoeRefResult ref = moe_reference(cfg, in);

    moejit_plan_desc_t d;
    MOEJIT_TEST_OK(layer_desc_init(&d, H, I, c.E, c.k));
    d.dtype = MOEJIT_DTYPE_BF16;
    d.fc1_layout = c.layout;
    d.activation = c.activation;
    d.swiglu_limit = c.limit;
    d.weights_transposed = c.transposed;
    d.has_bias = c.bias;
    d.weight_grad_dtype = MOEJIT_DTYPE_FP32;
    d.weight_grad_accumulate = c.accumulate;
    d.index_dtype = MOEJIT_DTYPE_INT64;
    d.routing_dtype = MOEJIT_DTYPE_FP32;
    moejit_plan_t plan = nullptr;
    MOEJIT_TEST_OK(moejit_plan_create(gpu_context(), &d, &plan));
    std::size_t saved_bytes = 0, ws_bytes = 0;
    if (c.experts_entry) {
        MOEJIT_TEST_OK(moejit_plan_experts_saved_size(plan, T, &saved_bytes));
        MOEJIT_TEST_OK(moejit_plan_experts_workspace_size(plan, T, &ws_bytes));
    } else {
        MOEJIT_TEST_OK(moejit_plan_saved_size(plan, T, &saved_bytes));
        MOEJIT_TEST_OK(moejit_plan_workspace_size(plan, T, &ws_bytes));
    }

    auto upload = [](const auto &host) { return DeviceBuffer::from(host); };
    DeviceBuffer d_x = upload(x.bits), d_dout = upload(dout.bits), d_sel = upload(sel), d_rw = upload(rw);
    DeviceBuffer d_wgu = upload(pack_fc1(c, wg.bits, wu.bits)), d_wd = upload(pack_down(c, wd.bits));
    DeviceBuffer d_bgu = upload(pack_bias(c, bg.bits, bu.bits)), d_bd = upload(bd.bits);
    auto bytes = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    DeviceBuffer out(bytes(T * H * 2)), dx(bytes(T * H * 2)), drw(bytes(S * 4));
    DeviceBuffer saved(saved_bytes), ws(ws_bytes);
    DeviceBuffer dwgu(bytes(E * 2 * I * H * 4)), dwd(bytes(E * H * I * 4));
    DeviceBuffer dbgu(bytes(E * 2 * I * 4)), dbd(bytes(E * H * 4));
    for (DeviceBuffer *b : {&out, &dx, &drw, &saved, &ws, &dwgu, &dwd, &dbgu, &dbd}) b->poison();
    std::vector<float> pre_wgu, pre_wd, pre_bgu, pre_bd;
    if (c.accumulate) {
        auto prefill = [&](DeviceBuffer &b, std::vector<float> &v) {
            v.resize(b.bytes() / 4);
            for (float &f : v) f = float(nd(rng));
            b.upload(v);
        };
        prefill(dwgu, pre_wgu);
        prefill(dwd, pre_wd);
        prefill(dbgu, pre_bgu);
        prefill(dbd, pre_bd);
    }

    // What the two entries' argument structs share: the weights (and biases), saved and
    // workspace in the forward; the weight and bias gradients in the backward.
    auto weights_and_memory = [&](auto &a) {
        a.w_gate_up = d_wgu.get(), a.w_down = d_wd.get();
        a.saved = saved.get(), a.saved_size = saved_bytes;
        a.workspace = ws.get(), a.workspace_size = ws_bytes;
    };
    auto forward_biases = [&](auto &fa) {
        if (c.bias) fa.b_gate_up = d_bgu.get(), fa.b_down = d_bd.get();
    };
    auto weight_grads = [&](auto &ba) {
        ba.dw_gate_up = dwgu.get(), ba.dw_down = dwd.get();
        if (c.bias) ba.b_down = d_bd.get(), ba.db_gate_up = dbgu.get(), ba.db_down = dbd.get();
    };
    if (c.experts_entry) {
        // The routing index of the reference is the experts' grouping: rows of e are
        // [offsets[e], offsets[e+1]).
        DeviceBuffer d_offsets = upload(ref.offsets);
        const float *row_w = c.row_weights ? static_cast<const float *>(d_rw.get()) : nullptr;
        moejit_experts_forward_args_t fa;
        MOEJIT_TEST_OK(moejit_experts_forward_args_init(&fa));
        fa.num_rows = T;
        fa.xs = d_x.get();
        fa.expert_offsets = static_cast<const std::int32_t *>(d_offsets.get());
        fa.row_weights = row_w;
        fa.ys = out.get();
        weights_and_memory(fa);
        forward_biases(fa);
        MOEJIT_TEST_OK(moejit_plan_experts_forward(plan, &fa));
        moejit_experts_backward_args_t ba;
        MOEJIT_TEST_OK(moejit_experts_backward_args_init(&ba));
        ba.num_rows = T;
        ba.xs = d_x.get();
        ba.expert_offsets = fa.expert_offsets;
        ba.row_weights = row_w;
        ba.dys = d_dout.get();
        ba.dxs = dx.get();
        ba.d_row_weights = c.row_weights ? static_cast<float *>(drw.get()) : nullptr;
        weights_and_memory(ba);
        weight_grads(ba);
        MOEJIT_TEST_OK(moejit_plan_experts_backward(plan, &ba));
        synchronize();  // before d_offsets goes
    } else {
        moejit_forward_args_t fa;
        MOEJIT_TEST_OK(moejit_forward_args_init(&fa));
        fa.num_tokens = T;
        fa.x = d_x.get();
        fa.selected_experts = d_sel.get();
        fa.routing_weights = d_rw.get();
        fa.out = out.get();
        weights_and_memory(fa);
        forward_biases(fa);
        MOEJIT_TEST_OK(moejit_plan_forward(plan, &fa));
        moejit_backward_args_t ba;
        MOEJIT_TEST_OK(layer_backward_args(&fa, &ba));
        ba.dout = d_dout.get();
        ba.dx = dx.get();
        ba.d_routing_weights = drw.get();
        weight_grads(ba);
        MOEJIT_TEST_OK(moejit_plan_backward(plan, &ba));
    }
    synchronize();

    // Expected gradients: the float64 sums, or added to the prefill (accumulate).
    auto expected = [&](const std::vector<float> &sum, const std::vector<float> &prefill) {
        std::vector<float> w(sum);
        if (!prefill.empty())
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = float(double(prefill[i]) + sum[i]);
        return w;
    };
    std::vector<float> got_g, got_u, pre_g, pre_u;
    unpack_fc1(c, dwgu.download<float>(), got_g, got_u);
    if (c.accumulate) unpack_fc1(c, pre_wgu, pre_g, pre_u);
    const std::vector<float> got_d = pack_down(c, dwd.download<float>(), false);
    const std::vector<float> pre_d = c.accumulate ? pack_down(c, pre_wd, false) : std::vector<float>{};

    Result r;
    r.check("out", bf16_values(out), ref.out, kTol);
    r.check("dx", bf16_values(dx), ref.dx_merged, kTol);
    if (!c.experts_entry || c.row_weights)
        r.check(c.experts_entry ? "d_row_weights" : "d_routing_weights", drw.download<float>(), ref.d_routing_weights,
                kTol);
    r.check("dW_gate", got_g, expected(ref.dw_gate, pre_g), kTol);
    r.check("dW_up", got_u, expected(ref.dw_up, pre_u), kTol);
    r.check("dW_down", got_d, expected(ref.dw_down, pre_d), kTol);
    if (c.bias) {
        std::vector<float> gb, gu, pb, pu;
        unpack_bias(c, dbgu.download<float>(), gb, gu);
        if (c.accumulate) unpack_bias(c, pre_bgu, pb, pu);
        r.check("db_gate", gb, expected(ref.db_gate, pb), kTol);
        r.check("db_up", gu, expected(ref.db_up, pu), kTol);
        r.check("db_down", dbd.download<float>(), expected(ref.db_down, pre_bd), kTol);
    }
    std::printf("[%s] %s (%s=%lld H=%lld I=%lld E=%d k=%d) |%s | %s\n", c.experts_entry ? "experts" : "gpt_oss",
                c.name.c_str(), c.experts_entry ? "R" : "T", (long long)T, (long long)H, (long long)I, c.E, c.k,
                r.line.c_str(), r.ok ? "PASS" : "FAIL");
    std::fflush(stdout);
    BOOST_TEST(r.ok, c.name << ":" << r.line);
    moejit_plan_destroy(plan);
}

Case gpt_oss(std::string name, std::int64_t T, Routing routing = Routing::softmax_topk) {
    Case c;
    c.name = std::move(name);
    c.T = T;
    c.H = 512;
    c.I = 384;
    c.E = 16;
    c.k = 4;
    c.routing = routing;
    return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpt_oss_interleaved_transposed_bias) {
    run_case(gpt_oss("gpt-oss softmax top-4", 1024));
    Case dup = gpt_oss("gpt-oss duplicate routes, 5 of 16 experts used", 777, Routing::uniform_duplicates);
    dup.active = 5;
    run_case(dup);
    run_case(gpt_oss("gpt-oss every route to expert 0", 300, Routing::all_to_one));
    run_case(gpt_oss("gpt-oss T=1", 1));
    run_case(gpt_oss("gpt-oss T=0", 0));
}

BOOST_AUTO_TEST_CASE(gpt_oss_accumulate_into_fp32) {
    Case c = gpt_oss("gpt-oss main_grad accumulate", 640, Routing::uniform_duplicates);
    c.accumulate = true;
    run_case(c);
    Case z = gpt_oss("gpt-oss main_grad accumulate T=0", 0);
    z.accumulate = true;
    run_case(z);
}

BOOST_AUTO_TEST_CASE(other_layouts) {
    Case a = gpt_oss("gpt-oss interleaved, [E,2I,H] weights, no bias", 512);
    a.transposed = false;
    a.bias = false;
    run_case(a);
    Case b = gpt_oss("SwiGLU merged with biases", 512);
    b.layout = MOEJIT_FC1_MERGED;
    b.transposed = false;
    b.activation = MOEJIT_ACTIVATION_SWIGLU;
    b.limit = 0.0f;
    b.fc1_scale = 1.0;
    run_case(b);
    Case t = gpt_oss("SwiGLU merged, transposed, biases, limit 7", 512, Routing::uniform_duplicates);
    t.layout = MOEJIT_FC1_MERGED;
    t.activation = MOEJIT_ACTIVATION_SWIGLU;
    run_case(t);
    Case big = gpt_oss("gpt-oss-like H=2880 I=2880 E=32 k=4", 2048);
    big.H = 2880;
    big.I = 2880;
    big.E = 32;
    run_case(big);
}

// The pre-dispatched experts entry (moejit_plan_experts_*): the rows of one route each, grouped
// by expert, against the same float64 reference with k = 1 (its routing index is then the
// identity and its offsets the grouping). The SwiGLU merged layout without biases (Qwen,
// DeepSeek, Mixtral) and gpt-oss's; the rows one GPU of an expert-parallel layer receives:
// some experts empty, every row on one expert, R = 1, R = 0, no row weights.
BOOST_AUTO_TEST_CASE(pre_dispatched_experts) {
    auto experts = [](std::string name, std::int64_t R, bool gpt) {
        Case c = gpt_oss(std::move(name), R, Routing::uniform_duplicates);
        c.experts_entry = true;
        c.k = 1;
        if (!gpt) {
            c.layout = MOEJIT_FC1_MERGED;
            c.transposed = false;
            c.bias = false;
            c.activation = MOEJIT_ACTIVATION_SWIGLU;
            c.limit = 0.0f;
            c.fc1_scale = 1.0;
        }
        return c;
    };
    run_case(experts("SwiGLU merged, rows over 16 experts", 3000, false));
    Case sparse = experts("SwiGLU merged, 5 of 16 experts own rows", 1500, false);
    sparse.active = 5;
    run_case(sparse);
    Case one = experts("SwiGLU merged, every row on expert 0", 2048, false);
    one.routing = Routing::all_to_one;
    run_case(one);
    Case plain = experts("SwiGLU merged, no row weights", 1000, false);
    plain.row_weights = false;
    run_case(plain);
    run_case(experts("SwiGLU merged R=1", 1, false));
    run_case(experts("SwiGLU merged R=0", 0, false));
    run_case(experts("gpt-oss interleaved, transposed, biases", 2000, true));
    Case acc = experts("gpt-oss, fp32 accumulation, expert 0 only", 700, true);
    acc.routing = Routing::all_to_one;
    acc.accumulate = true;
    run_case(acc);
    run_case(experts("gpt-oss R=0", 0, true));
}
