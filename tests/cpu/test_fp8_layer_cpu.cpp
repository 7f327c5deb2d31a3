// The layer's FP8 recipe without a GPU (issue 31, layer and API): moejit_plan_warmup on a
// compile-only sm_90a context renders and compiles every kernel of an FP8 plan (split, merged
// and interleaved fc1; a small and a qwen3-30b-a3b shape), the FP8 kernels are exactly the
// plan's list, the recipe field's refusals name the field and what is supported (unknown
// recipe, another arch, another dtype, H or I not a multiple of 128, transposed weights,
// biases), a struct_size from a 0.5-0.10 header (96 bytes, no recipe) gets bf16 whatever its
// tail holds, the plan compiles the FP8 weight-gradient kernels and its workspace holds their
// scratch, and the FP8 saved buffer is about half the bf16 one (printed) with its affine
// bound holding.
#define BOOST_TEST_MODULE fp8_layer_cpu
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "compile_only.hpp"
#include "fp8_models.hpp"
#include "layer_args.h"
#include "moe/plan.hpp"
#include "moe/plan_fp8.hpp"
#include "moe/plan_layout.hpp"
#include "moejit.h"
#include "capi_convert.hpp"
#include "capi_struct.hpp"

using moejit::test::CompileOnlyContext;

namespace {

moejit_plan_desc_t fp8_desc(std::int64_t H, std::int64_t I, std::int32_t E, std::int32_t k,
                            moejit_fc1_layout_t layout = MOEJIT_FC1_MERGED) {
    moejit_plan_desc_t d;
    layer_desc_init(&d, H, I, E, k);
    d.fc1_layout = layout;
    d.recipe = MOEJIT_RECIPE_FP8_BLOCK;
    return d;
}

bool last_error_has(const char *part) { return std::string(moejit_last_error()).find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(desc_init_defaults_to_bf16_and_the_abi_pins_hold) {
    moejit_plan_desc_t d;
    std::memset(&d, 0xAB, sizeof d);
    BOOST_REQUIRE(moejit_plan_desc_init(&d) == MOEJIT_SUCCESS);
    BOOST_TEST(d.struct_size == sizeof d);
    BOOST_TEST(d.recipe == MOEJIT_RECIPE_BF16);
    BOOST_TEST(d.reserved_0_5_tail == 0);
    BOOST_TEST(d.routing_weights_in_backward == 0);  // 0.14, reserved0 before: saved keeps w_s
    BOOST_TEST(sizeof(moejit_plan_desc_t) == 104u);
    BOOST_TEST(offsetof(moejit_plan_desc_t, recipe) == 96u);
    BOOST_TEST(sizeof(moejit_recipe_t) == 4u);
    // A 0.5-0.10 caller's init (96 bytes) writes nothing past them.
    std::memset(&d, 0xCD, sizeof d);
    BOOST_REQUIRE(moejit_plan_desc_init_sized(&d, 96) == MOEJIT_SUCCESS);
    BOOST_TEST(d.struct_size == 96u);
    const auto *bytes = reinterpret_cast<const unsigned char *>(&d);
    for (std::size_t i = 96; i < sizeof d; ++i) BOOST_TEST(bytes[i] == 0xCD);
}

// The forward and backward args grew the weight cache in 0.11: the init writes NONE, and an
// older caller's struct (0.5: 136 / 184 bytes) is read with NONE whatever lies past its size.
BOOST_AUTO_TEST_CASE(args_grew_the_weight_cache_and_old_sizes_mean_none) {
    BOOST_TEST(sizeof(moejit_forward_args_t) == 160u);
    BOOST_TEST(sizeof(moejit_backward_args_t) == 208u);
    BOOST_TEST(offsetof(moejit_forward_args_t, weight_cache) == 136u);
    BOOST_TEST(offsetof(moejit_backward_args_t, weight_cache) == 184u);
    moejit_forward_args_t f;
    std::memset(&f, 0xAB, sizeof f);
    BOOST_REQUIRE(moejit_forward_args_init(&f) == MOEJIT_SUCCESS);
    BOOST_TEST(f.weight_cache == nullptr);
    BOOST_TEST(f.weight_cache_size == 0u);
    BOOST_TEST(f.weight_cache_mode == MOEJIT_WEIGHT_CACHE_NONE);
    BOOST_TEST(f.reserved_0_11 == 0);
    std::memset(&f, 0xAB, sizeof f);
    BOOST_REQUIRE(moejit_forward_args_init_sized(&f, 136) == MOEJIT_SUCCESS);
    const moejit::ForwardArgs fa = moejit::to_internal(moejit::read_struct(&f, "args"));
    BOOST_TEST(fa.weight_cache.buffer == nullptr);
    BOOST_TEST(fa.weight_cache.mode == 0);
    BOOST_TEST(fa.weight_cache.reserved == 0);
    moejit_backward_args_t b;
    std::memset(&b, 0xAB, sizeof b);
    BOOST_REQUIRE(moejit_backward_args_init_sized(&b, 184) == MOEJIT_SUCCESS);
    const moejit::BackwardArgs ba = moejit::to_internal(moejit::read_struct(&b, "args"));
    BOOST_TEST(ba.weight_cache.buffer == nullptr);
    BOOST_TEST(ba.weight_cache.mode == 0);
    BOOST_REQUIRE(moejit_backward_args_init(&b) == MOEJIT_SUCCESS);  // the unsized init: 152 bytes
    BOOST_TEST(moejit::to_internal(moejit::read_struct(&b, "args")).weight_cache.mode == 0);
}

// An old binary's 96-byte struct has no recipe: whatever lies past its size, and in the tail
// padding it never named, the library reads bf16.
BOOST_AUTO_TEST_CASE(old_struct_size_gets_bf16) {
    for (std::uint32_t garbage : {0u, 1u, 0xFFFFFFFFu, 0x01010101u}) {
        moejit_plan_desc_t d = fp8_desc(256, 128, 4, 2);
        d.struct_size = 96;
        std::memcpy(&d.reserved_0_5_tail, &garbage, 4);
        std::memcpy(&d.recipe, &garbage, 4);
        const moejit::PlanDesc p = moejit::to_internal(moejit::read_struct(&d, "desc"));
        BOOST_TEST(static_cast<int>(p.recipe) == 0);
        d.struct_size = 80;  // 0.1
        BOOST_TEST(static_cast<int>(moejit::to_internal(moejit::read_struct(&d, "desc")).recipe) == 0);
    }
    // Through the C ABI: a 96-byte FP8 request on an sm_80 context is a bf16 plan (warms up),
    // the same struct at 104 bytes is refused naming the arch.
    CompileOnlyContext ctx("sm_80");
    moejit_plan_desc_t d = fp8_desc(256, 128, 4, 2);
    d.struct_size = 96;
    int kernels = 0;
    BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, &kernels) == MOEJIT_SUCCESS, moejit_last_error());
    BOOST_TEST(kernels > 0);
    d.struct_size = sizeof d;
    BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, &kernels) == MOEJIT_ERROR_UNSUPPORTED);
    BOOST_TEST(last_error_has("sm_80"), moejit_last_error());
    BOOST_TEST(last_error_has("recipe"), moejit_last_error());
}

BOOST_AUTO_TEST_CASE(refusals_name_the_field_and_what_is_supported) {
    CompileOnlyContext ctx("sm_90a");
    struct Bad {
        const char *what;
        moejit_status_t status;
        std::initializer_list<const char *> parts;
        void (*edit)(moejit_plan_desc_t &);
    };
    const Bad cases[] = {
        {"unknown recipe", MOEJIT_ERROR_INVALID_ARGUMENT, {"desc->recipe", "MOEJIT_RECIPE_FP8_BLOCK"},
         [](moejit_plan_desc_t &d) { d.recipe = static_cast<moejit_recipe_t>(7); }},
        {"negative recipe", MOEJIT_ERROR_INVALID_ARGUMENT, {"desc->recipe", "-1"},
         [](moejit_plan_desc_t &d) { d.recipe = static_cast<moejit_recipe_t>(-1); }},
        {"fp16", MOEJIT_ERROR_UNSUPPORTED, {"desc->dtype", "bf16"},
         [](moejit_plan_desc_t &d) {
             d.dtype = MOEJIT_DTYPE_FP16, d.weight_grad_dtype = MOEJIT_DTYPE_FP16, d.routing_dtype = MOEJIT_DTYPE_FP32;
         }},
        {"H 192", MOEJIT_ERROR_UNSUPPORTED, {"desc->hidden_size", "192", "multiples of 128"},
         [](moejit_plan_desc_t &d) { d.hidden_size = 192; }},
        {"I 64", MOEJIT_ERROR_UNSUPPORTED, {"desc->intermediate_size", "64", "multiples of 128"},
         [](moejit_plan_desc_t &d) { d.intermediate_size = 64; }},
        {"transposed", MOEJIT_ERROR_UNSUPPORTED, {"desc->weights_transposed"},
         [](moejit_plan_desc_t &d) { d.weights_transposed = 1; }},
        {"bias", MOEJIT_ERROR_UNSUPPORTED, {"desc->has_bias"}, [](moejit_plan_desc_t &d) { d.has_bias = 1; }},
    };
    for (const Bad &c : cases) {
        BOOST_TEST_CONTEXT(c.what) {
            moejit_plan_desc_t d = fp8_desc(256, 128, 4, 2);
            c.edit(d);
            int kernels = -1;
            BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, &kernels) == c.status, moejit_last_error());
            for (const char *part : c.parts) BOOST_TEST(last_error_has(part), moejit_last_error());
            BOOST_TEST(kernels == -1);  // refused before anything compiled
            std::int64_t a = 0, b = 0;
            BOOST_TEST(moejit_saved_size_terms(&d, &a, &b) == c.status);
        }
    }
    // Another arch: refused naming it (never a silent bf16 plan), also on Ampere with sm_80.
    for (const char *arch : {"sm_80", "sm_89"}) {
        BOOST_TEST_CONTEXT(arch) {
            moejit::test::CompileOnlyContext other(arch);
            moejit_plan_desc_t d = fp8_desc(256, 128, 4, 2);
            BOOST_TEST(moejit_plan_warmup(other.get(), &d, nullptr) == MOEJIT_ERROR_UNSUPPORTED);
            BOOST_TEST(last_error_has("sm_90a"), moejit_last_error());
            BOOST_TEST(last_error_has(std::string(arch).substr(0, 5).c_str()), moejit_last_error());
            // The same desc with the bf16 recipe is fine there.
            d.recipe = MOEJIT_RECIPE_BF16;
            BOOST_TEST(moejit_plan_warmup(other.get(), &d, nullptr) == MOEJIT_SUCCESS, moejit_last_error());
        }
    }
}

// Warmup compiles every FP8 kernel for sm_90a, and the plan's list holds each FP8 kernel and the
// bf16 weight-gradient GEMMs, not the bf16 forward GEMMs.
BOOST_AUTO_TEST_CASE(warmup_compiles_every_fp8_layer_kernel_for_sm90a) {
    CompileOnlyContext ctx("sm_90a");
    struct Shape {
        std::int64_t H, I;
        std::int32_t E, k;
        moejit_fc1_layout_t layout;
    };
    for (const Shape &s : {Shape{256, 128, 4, 2, MOEJIT_FC1_SPLIT}, Shape{256, 128, 4, 2, MOEJIT_FC1_MERGED},
                           Shape{256, 256, 4, 1, MOEJIT_FC1_INTERLEAVED}, Shape{2048, 768, 128, 8, MOEJIT_FC1_MERGED}}) {
        BOOST_TEST_CONTEXT("H " << s.H << " I " << s.I << " E " << s.E << " k " << s.k << " layout " << s.layout) {
            const moejit_plan_desc_t d = fp8_desc(s.H, s.I, s.E, s.k, s.layout);
            int kernels = 0;
            BOOST_REQUIRE_MESSAGE(moejit_plan_warmup(ctx.get(), &d, &kernels) == MOEJIT_SUCCESS, moejit_last_error());
            const moejit::PlanDesc p = moejit::to_internal(d);
            std::set<std::string> names;
            for (const auto &k : moejit::plan_kernel_sources(p, ctx.impl().config(), 90)) names.insert(k.name);
            BOOST_TEST(kernels == static_cast<int>(names.size()));
            int fp8_gemms = 0, fp8_wgrads = 0, quant_cols = 0;
            for (const auto &k : moejit::fp8_layer_sources(p)) {
                BOOST_TEST(names.count(k.name) == 1u, k.name);
                fp8_gemms += k.name.rfind("fp8_gemm_nk", 0) == 0;
                fp8_wgrads += k.name.rfind("fp8_wgrad_", 0) == 0;
                quant_cols += k.name.rfind("fp8_quant_cols_", 0) == 0;
            }
            BOOST_TEST(fp8_gemms == 4);
            // The weight gradients' FP8 GEMMs (fc2's, fc1's) and a column quantizer per distinct
            // width (H, I, and 2I when fc1 is merged).
            BOOST_TEST(fp8_wgrads == 2);
            const std::set<std::int64_t> widths{s.H, s.I, s.layout == MOEJIT_FC1_SPLIT ? s.I : 2 * s.I};
            BOOST_TEST(quant_cols == static_cast<int>(widths.size()));
            for (const std::string &n : names) {
                // Every GEMM is FP8: no bf16 GEMM or split reduction is compiled; no bf16 scatter
                // either (the FP8 scatters quantize, the weight gradients gather).
                const bool bf16_gemm = (n.find("gemm") != std::string::npos || n.find("split_reduce") != std::string::npos) &&
                                       n.rfind("fp8_", 0) != 0;
                BOOST_TEST(!bf16_gemm, n << ": a bf16 GEMM kernel in an FP8 plan");
                BOOST_TEST(n.rfind("scatter_bf16_h", 0) != 0, n << ": a bf16 scatter in an FP8 plan");
            }
            std::printf("fp8 layer H=%lld I=%lld E=%d k=%d layout %d: %d kernels compiled for sm_90a\n",
                        static_cast<long long>(s.H), static_cast<long long>(s.I), s.E, s.k, s.layout, kernels);
        }
    }
}

// Saved bytes: FP8 keeps g, u as e4m3 + scales (2I + I/16 bytes a row) instead of bf16 (4I).
BOOST_AUTO_TEST_CASE(saved_buffer_is_about_half_and_its_bound_holds) {
    for (const moejit::test::Fp8Model &m : moejit::test::kFp8Models) {
        moejit_plan_desc_t d = fp8_desc(m.H, m.I, m.E, m.k);
        const moejit::PlanDesc fp8 = moejit::to_internal(d);
        moejit::PlanDesc bf16 = fp8;
        bf16.recipe = moejit::Recipe::bf16;
        const std::size_t f = moejit::Fp8Layout(fp8, m.T).saved_bytes;
        const std::size_t b = moejit::PlanLayout(bf16, m.T, false).saved_bytes;
        const double ratio = static_cast<double>(f) / static_cast<double>(b);
        std::printf("%s T=%lld: saved FP8 %.1f MiB vs bf16 %.1f MiB (%.3f); FP8 workspace %.1f MiB\n", m.name,
                    static_cast<long long>(m.T), f / 1048576.0, b / 1048576.0, ratio,
                    moejit::Fp8Layout(fp8, m.T).workspace_bytes / 1048576.0);
        BOOST_TEST(ratio < 0.6);
        BOOST_TEST(ratio > 0.45);
        std::int64_t per_token = 0, constant = 0;
        BOOST_REQUIRE(moejit_saved_size_terms(&d, &per_token, &constant) == MOEJIT_SUCCESS);
        std::mt19937_64 rng(std::random_device{}());
        for (int i = 0; i < 50; ++i) {
            const std::int64_t T = static_cast<std::int64_t>(rng() % 20000);
            const std::size_t saved = moejit::Fp8Layout(fp8, T).saved_bytes;
            BOOST_TEST(static_cast<std::int64_t>(saved) <= per_token * T + constant, "T=" << T);
        }
    }
    // The workspace holds fp8_weight_grad's scratch for each of its calls, from a 256-byte
    // boundary of a 16-byte aligned workspace (+256). Within a call two regions share bytes only
    // where their lives (kFp8ForwardLives, kFp8BackwardLives) do not meet, and they do share:
    // the workspace is smaller than its regions side by side. H = 7168, I = 256: y outgrows the
    // forward's fc1 regions it lies over.
    for (auto [H, I] : {std::pair<std::int64_t, std::int64_t>{2048, 768}, {7168, 256}})
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED}) {
        const moejit::PlanDesc p = moejit::to_internal(fp8_desc(H, I, 128, 8, layout));
        const std::int64_t fc1_m = layout == MOEJIT_FC1_SPLIT ? I : 2 * I;
        for (std::int64_t T : {0, 1, 7, 333, 8192}) {
            const moejit::Fp8Layout L(p, T);
            for (auto [m, n] : {std::pair{H, I}, std::pair{fc1_m, H}}) {
                const std::size_t need = moejit::fp8_weight_grad_workspace_bytes(L.rows, p.num_experts, m, n);
                BOOST_TEST(L.wgrad.bytes >= (need > 0 ? need + 256 : 0), "T=" << T << " m=" << m << " n=" << n);
            }
            auto check_lives = [&](const auto &lives, const char *call) {
                std::size_t side_by_side = 0, extent = 0;
                for (const moejit::Fp8RegionLife &a : lives) {
                    const moejit::Region &ra = L.*(a.region);
                    side_by_side += ra.bytes;
                    extent = std::max(extent, ra.offset + ra.bytes);
                    BOOST_TEST(ra.offset + ra.bytes <= L.cached_workspace_bytes, call << " " << a.name << " T=" << T);
                    for (const moejit::Fp8RegionLife &b : lives) {
                        if (a.region == b.region) continue;
                        const moejit::Region &rb = L.*(b.region);
                        const bool share = ra.bytes > 0 && rb.bytes > 0 && ra.offset < rb.offset + rb.bytes &&
                                           rb.offset < ra.offset + ra.bytes;
                        const bool meet = a.first <= b.last && b.first <= a.last;
                        BOOST_TEST(!(share && meet), call << ": " << a.name << " and " << b.name
                                                          << " share bytes while both alive, T=" << T);
                    }
                }
                if (T >= 333) BOOST_TEST(extent < side_by_side, call << " T=" << T);
            };
            check_lives(moejit::kFp8ForwardLives, "forward");
            check_lives(moejit::kFp8BackwardLives, "backward");
            const moejit::Fp8WeightRegions &W = L.weights;
            // The weights come last, so a call with a weight cache needs only what precedes them.
            for (const moejit::Region &r : {W.w1_q, W.w1_scale, W.w2_q, W.w2_scale})
                BOOST_TEST((r.offset >= L.cached_workspace_bytes && r.offset + r.bytes <= L.workspace_bytes), "T=" << T);
            BOOST_TEST(L.workspace_bytes - L.cached_workspace_bytes >= static_cast<std::size_t>(3 * I * H * p.num_experts));
        }
    }
    // Bad T: named, as every size query.
    const moejit::PlanDesc p = moejit::to_internal(fp8_desc(256, 128, 4, 2));
    BOOST_CHECK_THROW(moejit::Fp8Layout(p, -1), moejit::Error);
    BOOST_CHECK_THROW(moejit::Fp8Layout(p, std::int64_t{1} << 40), moejit::Error);
}

// The weight cache (moejit_weight_cache_mode_t): its layout, and every refusal of its fields,
// each before anything runs (the calls check them before asking for a device).
BOOST_AUTO_TEST_CASE(weight_cache_layout_and_refusals) {
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED}) {
        const moejit::PlanDesc p = moejit::to_internal(fp8_desc(2048, 768, 128, 8, layout));
        const moejit::Fp8WeightCacheLayout C(p);
        const std::int64_t weights = 3 * p.intermediate_size * p.hidden_size * p.num_experts;  // e4m3 bytes per layout
        const std::int64_t scales = 3 * (p.intermediate_size / 128) * (p.hidden_size / 128) * p.num_experts * 4;
        // Both layouts, each its e4m3 bytes and fp32 block scales, and nothing else but alignment.
        BOOST_TEST(C.bytes >= static_cast<std::size_t>(2 * (weights + scales)));
        BOOST_TEST(C.bytes <= static_cast<std::size_t>(2 * (weights + scales) + 8 * 256));
        std::vector<moejit::Region> all;
        for (const moejit::Fp8WeightRegions *w : {&C.forward, &C.transposed})
            for (const moejit::Region &r : {w->w1_q, w->w1_scale, w->w2_q, w->w2_scale}) all.push_back(r);
        for (std::size_t i = 0; i < all.size(); ++i) {
            BOOST_TEST(all[i].offset % 256 == 0u);
            BOOST_TEST(all[i].offset + all[i].bytes <= C.bytes);
            for (std::size_t j = i + 1; j < all.size(); ++j)
                BOOST_TEST((all[i].offset + all[i].bytes <= all[j].offset || all[j].offset + all[j].bytes <= all[i].offset));
        }
        // The workspace with a cache is the workspace less (at least) one layout of the weights.
        const moejit::Fp8Layout L(p, 8192);
        BOOST_TEST(L.workspace_bytes - L.cached_workspace_bytes >= static_cast<std::size_t>(weights + scales));
    }

    // The calls' refusals, on a plan of a compile-only context (its kernels compile; none runs).
    CompileOnlyContext ctx("sm_90a");
    const moejit::PlanDesc p = moejit::to_internal(fp8_desc(256, 128, 4, 2, MOEJIT_FC1_MERGED));
    moejit::Plan plan(ctx.impl(), p);
    const std::size_t cache_bytes = plan.weight_cache_bytes();
    BOOST_TEST(cache_bytes == moejit::Fp8WeightCacheLayout(p).bytes);
    BOOST_TEST(plan.cached_workspace_bytes(64) < plan.workspace_bytes(64));
    alignas(256) static unsigned char fake[256];  // never written: every case fails before a launch
    auto forward = [&](auto change) {
        moejit::ForwardArgs a;
        a.num_tokens = 0;  // no tensors needed, but the weights are (FILL reads them at T = 0)
        a.weights.w_gate_up = fake;
        a.weights.w_down = fake;
        a.saved = fake;
        a.saved_size = plan.saved_bytes(0);
        a.workspace = fake;
        a.workspace_size = plan.workspace_bytes(0);
        a.weight_cache = moejit::WeightCacheArgs{fake, cache_bytes, 1, 0};
        change(a);
        try {
            plan.forward(a);
        } catch (const moejit::Error &e) {
            return std::pair{e.status(), std::string(e.what())};
        }
        return std::pair{moejit::Status::success, std::string()};
    };
    auto refused = [&](auto change, moejit::Status status, const char *names) {
        const auto [st, message] = forward(change);
        BOOST_TEST(static_cast<int>(st) == static_cast<int>(status), names << ": " << message);
        BOOST_TEST(message.find(names) != std::string::npos, message);
    };
    using moejit::Status;
    refused([](moejit::ForwardArgs &a) { a.weight_cache.mode = 3; }, Status::invalid_argument, "args->weight_cache_mode is 3");
    refused([](moejit::ForwardArgs &a) { a.weight_cache.mode = -1; }, Status::invalid_argument, "MOEJIT_WEIGHT_CACHE_USE (2)");
    refused([](moejit::ForwardArgs &a) { a.weight_cache.reserved = 7; }, Status::invalid_argument, "args->reserved_0_11");
    refused([](moejit::ForwardArgs &a) { a.weight_cache.buffer = nullptr; }, Status::invalid_argument, "args->weight_cache is NULL");
    refused([](moejit::ForwardArgs &a) { a.weight_cache.buffer = fake + 8; }, Status::invalid_argument, "16-byte aligned");
    refused([&](moejit::ForwardArgs &a) { a.weight_cache.size = cache_bytes - 1; }, Status::invalid_argument,
            "moejit_plan_weight_cache_size");
    refused([](moejit::ForwardArgs &a) { a.weights.w_down = nullptr; }, Status::invalid_argument, "args->w_down");
    // With a cache the workspace may be the smaller size; without, it may not.
    refused([&](moejit::ForwardArgs &a) { a.workspace_size = plan.cached_workspace_bytes(0) - 1; }, Status::invalid_argument,
            "moejit_plan_cached_workspace_size");
    refused([&](moejit::ForwardArgs &a) {
                a.weight_cache = moejit::WeightCacheArgs{};
                a.workspace_size = plan.cached_workspace_bytes(0);
            },
            Status::invalid_argument, "moejit_plan_workspace_size");
    // Valid fields get as far as the device (this context has none).
    refused([&](moejit::ForwardArgs &a) { a.workspace_size = plan.cached_workspace_bytes(0); }, Status::invalid_argument,
            "compile-only");
    refused([](moejit::ForwardArgs &a) { a.weight_cache.mode = 2; }, Status::invalid_argument, "compile-only");

    // A bf16 plan refuses the cache, and its size queries say why.
    moejit::PlanDesc bf16 = p;
    bf16.recipe = moejit::Recipe::bf16;
    moejit::Plan bplan(ctx.impl(), bf16);
    BOOST_CHECK_THROW(bplan.weight_cache_bytes(), moejit::Error);
    try {
        bplan.cached_workspace_bytes(8);
    } catch (const moejit::Error &e) {
        BOOST_TEST(static_cast<int>(e.status()) == static_cast<int>(moejit::Status::unsupported));
        BOOST_TEST(std::string(e.what()).find("MOEJIT_RECIPE_FP8_BLOCK plans only") != std::string::npos, e.what());
    }
    moejit::BackwardArgs b;
    b.weight_cache = moejit::WeightCacheArgs{fake, cache_bytes, 2, 0};
    try {
        bplan.backward(b);
        BOOST_TEST(false, "a bf16 plan's backward took a weight cache");
    } catch (const moejit::Error &e) {
        BOOST_TEST(static_cast<int>(e.status()) == static_cast<int>(moejit::Status::unsupported));
        BOOST_TEST(std::string(e.what()).find("MOEJIT_WEIGHT_CACHE_USE") != std::string::npos, e.what());
    }

    // The consuming backward (0.12) on the same bf16 plan: a forward and a consuming backward take
    // moejit_plan_consuming_workspace_size bytes and get as far as the device; a keeping backward
    // refuses that size naming moejit_plan_workspace_size; consume_saved is 0 or 1. (The FP8 plan
    // consumes nothing: the two sizes are equal there.)
    const std::int64_t T = 64;
    const std::size_t consuming = bplan.workspace_bytes(T, true), keeping = bplan.workspace_bytes(T);
    BOOST_TEST(consuming < keeping);
    BOOST_TEST(plan.workspace_bytes(T, true) == plan.workspace_bytes(T));
    auto outcome = [](auto call) {
        try {
            call();
        } catch (const moejit::Error &e) {
            return std::pair{e.status(), std::string(e.what())};
        }
        return std::pair{moejit::Status::success, std::string()};
    };
    auto expect = [](const std::pair<moejit::Status, std::string> &got, const char *names) {
        BOOST_TEST(static_cast<int>(got.first) == static_cast<int>(moejit::Status::invalid_argument), got.second);
        BOOST_TEST(got.second.find(names) != std::string::npos, got.second);
    };
    moejit::ForwardArgs f;
    f.num_tokens = T;
    f.x = f.selected_experts = f.routing_weights = fake;
    f.out = fake;
    f.weights.w_gate_up = f.weights.w_down = fake;
    f.saved = fake;
    f.saved_size = bplan.saved_bytes(T);
    f.workspace = fake;
    f.workspace_size = consuming;
    expect(outcome([&] { bplan.forward(f); }), "compile-only");
    f.workspace_size = consuming - 1;
    expect(outcome([&] { bplan.forward(f); }), "moejit_plan_consuming_workspace_size");
    moejit::BackwardArgs k;
    k.num_tokens = T;
    k.x = k.dout = k.routing_weights = fake;
    k.dx = k.d_routing_weights = fake;
    k.weights.w_gate_up = k.weights.w_down = fake;
    k.grads.dw_gate_up = k.grads.dw_down = fake;
    k.saved = fake;
    k.saved_size = bplan.saved_bytes(T);
    k.workspace = fake;
    k.workspace_size = consuming;
    k.consume_saved = 1;
    expect(outcome([&] { bplan.backward(k); }), "compile-only");
    k.workspace_size = consuming - 1;
    expect(outcome([&] { bplan.backward(k); }), "moejit_plan_consuming_workspace_size");
    k.workspace_size = consuming;
    k.consume_saved = 0;
    expect(outcome([&] { bplan.backward(k); }), "moejit_plan_workspace_size for");
    k.workspace_size = keeping;
    expect(outcome([&] { bplan.backward(k); }), "compile-only");
    k.consume_saved = 2;
    expect(outcome([&] { bplan.backward(k); }), "args->consume_saved is 2");

    // The backward's parts (0.13): each part's size; DOWN needs none of UP's pointers and UP none
    // of DOWN's (both get as far as the device); each checks its own workspace size, the part
    // value and consume_saved; an FP8 plan has no parts.
    using moejit::BackwardPart;
    const std::size_t down = bplan.backward_part_workspace_bytes(T, BackwardPart::down),
                      up = bplan.backward_part_workspace_bytes(T, BackwardPart::up);
    const moejit::PlanLayout L = bplan.layout(T, true);
    BOOST_TEST(down <= consuming);
    BOOST_TEST(up == static_cast<std::size_t>(L.rows) * bplan.desc().hidden_size * 2);  // [S,H] bf16, no bias
    BOOST_TEST(up < down);
    moejit::BackwardArgs dn = k, u = k;
    dn.consume_saved = u.consume_saved = 1;
    dn.x = dn.dx = nullptr, dn.weights.w_gate_up = nullptr, dn.grads.dw_gate_up = nullptr;
    dn.workspace_size = down;
    expect(outcome([&] { bplan.backward_part(BackwardPart::down, dn); }), "compile-only");
    dn.workspace_size = down - 1;
    expect(outcome([&] { bplan.backward_part(BackwardPart::down, dn); }),
           "moejit_plan_backward_part_workspace_size(DOWN)");
    dn.workspace_size = down;
    // The routing weights: this plan keeps them in saved (desc.routing_weights_in_backward 0, the
    // 0.13 behaviour) and reads none; a plan made with 1 (0.14) requires them in the whole
    // backward and in DOWN (it scatters them again), and its DOWN workspace holds them.
    dn.routing_weights = nullptr;
    expect(outcome([&] { bplan.backward_part(BackwardPart::down, dn); }), "compile-only");
    moejit::BackwardArgs kn = dn;  // a whole consuming backward without the routing weights
    kn.workspace_size = consuming;
    expect(outcome([&] { bplan.backward(kn); }), "args->x is NULL");  // needs x, not them
    kn.x = kn.dx = fake, kn.weights.w_gate_up = kn.grads.dw_gate_up = fake;
    expect(outcome([&] { bplan.backward(kn); }), "compile-only");
    {
        moejit::PlanDesc rw = bf16;
        rw.routing_weights_in_backward = 1;
        moejit::Plan rplan(ctx.impl(), rw);
        BOOST_TEST(rplan.saved_bytes(T) < bplan.saved_bytes(T));
        BOOST_TEST(rplan.backward_part_workspace_bytes(T, BackwardPart::down) > down);
        moejit::BackwardArgs rk = kn, rdn = dn;
        rk.saved_size = rdn.saved_size = rplan.saved_bytes(T);
        rk.workspace_size = rplan.workspace_bytes(T, true);
        rdn.workspace_size = rplan.backward_part_workspace_bytes(T, BackwardPart::down);
        expect(outcome([&] { rplan.backward(rk); }), "args->routing_weights is NULL");
        expect(outcome([&] { rplan.backward_part(BackwardPart::down, rdn); }), "args->routing_weights is NULL");
        rk.routing_weights = rdn.routing_weights = fake;
        expect(outcome([&] { rplan.backward(rk); }), "compile-only");
        expect(outcome([&] { rplan.backward_part(BackwardPart::down, rdn); }), "compile-only");
        rk.num_tokens = rdn.num_tokens = 0;  // no rows: nothing to scatter, none required
        rk.routing_weights = rdn.routing_weights = nullptr;
        rk.saved_size = rdn.saved_size = rplan.saved_bytes(0);
        rk.workspace_size = rplan.workspace_bytes(0, true);
        rdn.workspace_size = rplan.backward_part_workspace_bytes(0, BackwardPart::down);
        expect(outcome([&] { rplan.backward(rk); }), "compile-only");
        expect(outcome([&] { rplan.backward_part(BackwardPart::down, rdn); }), "compile-only");
    }
    dn.routing_weights = fake;
    dn.dout = nullptr;
    expect(outcome([&] { bplan.backward_part(BackwardPart::down, dn); }), "args->dout is NULL");
    u.dout = u.routing_weights = u.d_routing_weights = nullptr, u.weights.w_down = nullptr, u.grads.dw_down = nullptr;
    u.workspace_size = up;
    expect(outcome([&] { bplan.backward_part(BackwardPart::up, u); }), "compile-only");
    u.workspace_size = up - 1;
    expect(outcome([&] { bplan.backward_part(BackwardPart::up, u); }), "moejit_plan_backward_part_workspace_size(UP)");
    u.workspace_size = up;
    u.grads.dw_gate_up = nullptr;
    expect(outcome([&] { bplan.backward_part(BackwardPart::up, u); }), "args->dw_gate_up is NULL");
    u.grads.dw_gate_up = fake;
    u.consume_saved = 0;
    expect(outcome([&] { bplan.backward_part(BackwardPart::up, u); }), "args->consume_saved is 0, expected 1");
    expect(outcome([&] { bplan.backward_part(static_cast<BackwardPart>(3), dn); }), "part is 3");
    expect(outcome([&] { (void)bplan.backward_part_workspace_bytes(T, static_cast<BackwardPart>(0)); }), "part is 0");
    const auto fp8 = outcome([&] { (void)plan.backward_part_workspace_bytes(T, BackwardPart::down); });
    BOOST_TEST(static_cast<int>(fp8.first) == static_cast<int>(moejit::Status::unsupported), fp8.second);
    BOOST_TEST(fp8.second.find("no parts yet") != std::string::npos, fp8.second);
}
