// The MoE layer plan without a GPU: descriptor validation through the C ABI (each bad field is
// named), plan creation refused on a compile-only context, warmup of a plan's kernels on a
// compile-only context (split and merged fc1) with a second context seeing only disk hits, and
// the saved/workspace layout arithmetic.
#define BOOST_TEST_MODULE plan_cpu
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "moe/layer_gemms.hpp"
#include "moe/plan.hpp"
#include "moe/plan_layout.hpp"
#include "capi_convert.hpp"  // the C descriptors these tests share with the C API, as the library's
#include "compile_only.hpp"
#include "layer_args.h"
#include "moejit.h"

namespace {

// A fresh, private cache root (removed afterwards).
using moejit::test::TempDir;

class CompileOnlyContext {
public:
    explicit CompileOnlyContext(const std::string &cache_dir, int jit_mode = MOEJIT_JIT_ON,
                                const char *arch = "sm_90a") {
        moejit_context_options_t options;
        BOOST_REQUIRE(moejit_context_options_init(&options) == MOEJIT_SUCCESS);
        options.compile_only = 1;
        options.arch = arch;
        options.cache_dir = cache_dir.c_str();
        options.jit_mode = jit_mode;
        BOOST_REQUIRE_MESSAGE(moejit_context_create(&options, &context_) == MOEJIT_SUCCESS,
                              moejit_last_error());
    }
    ~CompileOnlyContext() { moejit_context_destroy(context_); }
    CompileOnlyContext(const CompileOnlyContext &) = delete;
    CompileOnlyContext &operator=(const CompileOnlyContext &) = delete;
    moejit_context_t get() const { return context_; }
    moejit_cache_stats_t stats() const {
        moejit_cache_stats_t s;
        moejit_cache_stats_init(&s);
        BOOST_REQUIRE(moejit_context_cache_stats(context_, &s) == MOEJIT_SUCCESS);
        return s;
    }

private:
    moejit_context_t context_ = nullptr;
};

// A valid bf16 layer of this shape (fp32 weight gradients and routing, int64 indices).
moejit_plan_desc_t layer_desc(std::int64_t H, std::int64_t I, std::int32_t E, std::int32_t top_k,
                              moejit_fc1_layout_t layout = MOEJIT_FC1_SPLIT) {
    moejit_plan_desc_t d;
    layer_desc_init(&d, H, I, E, top_k);
    d.dtype = MOEJIT_DTYPE_BF16, d.weight_grad_dtype = MOEJIT_DTYPE_FP32;
    d.index_dtype = MOEJIT_DTYPE_INT64, d.routing_dtype = MOEJIT_DTYPE_FP32;
    d.fc1_layout = layout;
    return d;
}

// A small valid layer: H=256, I=128, E=4, k=2, bf16.
moejit_plan_desc_t small_desc(moejit_fc1_layout_t layout = MOEJIT_FC1_SPLIT) { return layer_desc(256, 128, 4, 2, layout); }

bool message_names(const char *field) {
    return std::string(moejit_last_error()).find(field) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(desc_init_gives_a_valid_default_shape) {
    moejit_plan_desc_t d;
    BOOST_TEST(moejit_plan_desc_init(&d) == MOEJIT_SUCCESS);
    BOOST_TEST(d.struct_size == sizeof d);
    BOOST_TEST(d.dtype == MOEJIT_DTYPE_BF16);
    BOOST_TEST(d.fc1_layout == MOEJIT_FC1_SPLIT);
    BOOST_TEST(d.weight_grad_accumulate == 0);
    BOOST_TEST(moejit_plan_desc_init(nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    moejit_forward_args_t f;
    moejit_backward_args_t b;
    BOOST_TEST(moejit_forward_args_init(&f) == MOEJIT_SUCCESS);
    BOOST_TEST(moejit_backward_args_init(&b) == MOEJIT_SUCCESS);
    BOOST_TEST(f.struct_size == sizeof f);
    BOOST_TEST(b.struct_size == sizeof b);
    BOOST_TEST(f.x == nullptr);
    BOOST_TEST(b.dx == nullptr);
}

// Every bad field gives MOEJIT_ERROR_INVALID_ARGUMENT with a message naming it, before anything
// is compiled (moejit_plan_warmup validates first; it works without a GPU).
BOOST_AUTO_TEST_CASE(bad_descriptors_name_the_field) {
    TempDir dir;
    CompileOnlyContext ctx(dir.string());
    struct Bad {
        const char *field;
        void (*edit)(moejit_plan_desc_t &);
    };
    const Bad cases[] = {
        {"dtype", [](moejit_plan_desc_t &d) { d.dtype = MOEJIT_DTYPE_FP32; }},
        {"dtype", [](moejit_plan_desc_t &d) { d.dtype = static_cast<moejit_dtype_t>(99); }},
        {"hidden_size", [](moejit_plan_desc_t &d) { d.hidden_size = 100; }},
        {"hidden_size", [](moejit_plan_desc_t &d) { d.hidden_size = 0; }},
        {"hidden_size", [](moejit_plan_desc_t &d) { d.hidden_size = -256; }},
        {"intermediate_size", [](moejit_plan_desc_t &d) { d.intermediate_size = 12; }},
        {"intermediate_size", [](moejit_plan_desc_t &d) { d.intermediate_size = 0; }},
        {"num_experts", [](moejit_plan_desc_t &d) { d.num_experts = 0; }},
        {"num_experts", [](moejit_plan_desc_t &d) { d.num_experts = -3; }},
        {"top_k", [](moejit_plan_desc_t &d) { d.top_k = 0; }},
        {"top_k", [](moejit_plan_desc_t &d) { d.top_k = 65; }},
        {"fc1_layout", [](moejit_plan_desc_t &d) { d.fc1_layout = static_cast<moejit_fc1_layout_t>(3); }},
        {"activation", [](moejit_plan_desc_t &d) { d.activation = static_cast<moejit_activation_t>(2); }},
        {"activation_alpha", [](moejit_plan_desc_t &d) { d.activation_alpha = std::numeric_limits<float>::quiet_NaN(); }},
        {"activation_alpha", [](moejit_plan_desc_t &d) { d.activation_alpha = -1.0f; }},
        {"weights_transposed", [](moejit_plan_desc_t &d) { d.weights_transposed = 2; }},
        {"has_bias", [](moejit_plan_desc_t &d) { d.has_bias = -1; }},
        {"swiglu_limit", [](moejit_plan_desc_t &d) { d.swiglu_limit = std::numeric_limits<float>::quiet_NaN(); }},
        {"swiglu_limit", [](moejit_plan_desc_t &d) { d.swiglu_limit = std::numeric_limits<float>::infinity(); }},
        {"weight_grad_dtype", [](moejit_plan_desc_t &d) { d.weight_grad_dtype = MOEJIT_DTYPE_FP16; }},
        {"weight_grad_dtype", [](moejit_plan_desc_t &d) { d.weight_grad_dtype = MOEJIT_DTYPE_INT32; }},
        {"weight_grad_accumulate", [](moejit_plan_desc_t &d) {
             d.weight_grad_dtype = MOEJIT_DTYPE_BF16;
             d.weight_grad_accumulate = 1;
         }},
        {"index_dtype", [](moejit_plan_desc_t &d) { d.index_dtype = MOEJIT_DTYPE_FP32; }},
        {"index_dtype", [](moejit_plan_desc_t &d) { d.index_dtype = MOEJIT_DTYPE_BF16; }},
        {"routing_dtype", [](moejit_plan_desc_t &d) { d.routing_dtype = MOEJIT_DTYPE_INT32; }},
        {"routing_dtype", [](moejit_plan_desc_t &d) { d.routing_dtype = MOEJIT_DTYPE_FP16; }},
        {"tokens_hint", [](moejit_plan_desc_t &d) { d.tokens_hint = -1; }},
        {"struct_size", [](moejit_plan_desc_t &d) { d.struct_size = std::size_t{1} << 20; }},  // garbage (a newer header's size needs a real buffer: test_bad_input.c)
        {"struct_size", [](moejit_plan_desc_t &d) { d.struct_size -= 4; }},  // truncated (sizeof - 8 is 0.5's 96)
        {"recipe", [](moejit_plan_desc_t &d) { d.recipe = static_cast<moejit_recipe_t>(2); }},
    };
    for (const Bad &c : cases) {
        moejit_plan_desc_t d = small_desc();
        c.edit(d);
        int kernels = -1;
        BOOST_TEST_CONTEXT("bad field " << c.field) {
            BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, &kernels) == MOEJIT_ERROR_INVALID_ARGUMENT);
            BOOST_TEST(message_names(c.field), "message: " << moejit_last_error());
        }
    }
    // NULL pointers name themselves too.
    moejit_plan_desc_t d = small_desc();
    BOOST_TEST(moejit_plan_warmup(ctx.get(), nullptr, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message_names("desc"));
    BOOST_TEST(moejit_plan_warmup(nullptr, &d, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message_names("context"));
    moejit_plan_t plan = reinterpret_cast<moejit_plan_t>(&d);  // must be overwritten with NULL
    BOOST_TEST(moejit_plan_create(nullptr, &d, &plan) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(plan == nullptr);
    BOOST_TEST(moejit_plan_create(ctx.get(), &d, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message_names("plan"));
    size_t bytes = 0;
    BOOST_TEST(moejit_plan_saved_size(nullptr, 4, &bytes) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(moejit_plan_workspace_size(nullptr, 4, &bytes) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(moejit_plan_forward(nullptr, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(moejit_plan_backward(nullptr, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    // Validation runs before compilation: nothing was compiled for all those failures.
    BOOST_TEST(ctx.stats().compiles == 0u);
    BOOST_TEST(ctx.stats().misses == 0u);
}

// Transposed weights and biases exist for the merged storages only; the split layout says so.
BOOST_AUTO_TEST_CASE(split_layout_rejects_transposed_weights_and_biases) {
    TempDir dir;
    CompileOnlyContext ctx(dir.string());
    for (int which = 0; which < 2; ++which) {
        moejit_plan_desc_t d = small_desc();
        d.fc1_layout = MOEJIT_FC1_SPLIT;
        (which ? d.has_bias : d.weights_transposed) = 1;
        BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, nullptr) == MOEJIT_ERROR_UNSUPPORTED);
        BOOST_TEST(message_names(which ? "has_bias" : "weights_transposed"), "message: " << moejit_last_error());
        d.fc1_layout = MOEJIT_FC1_INTERLEAVED;
        BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, nullptr) == MOEJIT_SUCCESS, moejit_last_error());
    }
    // gpt-oss as transformers stores it: every kernel of the plan compiles (NVRTC, sm_90a),
    // with the bias kernels on top of a plain plan's.
    moejit_plan_desc_t d = small_desc();
    int plain = 0, gpt_oss = 0;
    BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, &plain) == MOEJIT_SUCCESS, moejit_last_error());
    d.fc1_layout = MOEJIT_FC1_INTERLEAVED;
    d.activation = MOEJIT_ACTIVATION_GPT_OSS;
    d.swiglu_limit = 7.0f;
    d.weights_transposed = 1;
    d.has_bias = 1;
    d.weight_grad_dtype = MOEJIT_DTYPE_FP32;
    d.weight_grad_accumulate = 1;
    BOOST_TEST(moejit_plan_warmup(ctx.get(), &d, &gpt_oss) == MOEJIT_SUCCESS, moejit_last_error());
    BOOST_TEST(gpt_oss > plain);
}

// The edges of the valid range are accepted (validation is not stricter than documented).
BOOST_AUTO_TEST_CASE(valid_edge_descriptors_pass_validation) {
    moejit_plan_desc_t d = small_desc();
    BOOST_CHECK_NO_THROW(moejit::validate_plan_desc(moejit::to_internal(d)));
    d.weight_grad_accumulate = 1;  // with FP32 gradients
    BOOST_CHECK_NO_THROW(moejit::validate_plan_desc(moejit::to_internal(d)));
    d = layer_desc(8, 8, 1, 1);  // the smallest shape
    d.weight_grad_dtype = MOEJIT_DTYPE_BF16;  // the layer dtype
    d.routing_dtype = MOEJIT_DTYPE_BF16;
    d.index_dtype = MOEJIT_DTYPE_INT32;
    d.swiglu_limit = 7.0f;
    BOOST_CHECK_NO_THROW(moejit::validate_plan_desc(moejit::to_internal(d)));
    d = small_desc();
    d.dtype = MOEJIT_DTYPE_FP16;
    d.weight_grad_dtype = MOEJIT_DTYPE_FP16;
    d.routing_dtype = MOEJIT_DTYPE_FP16;
    d.swiglu_limit = -1.0f;  // <= 0: no limit
    BOOST_CHECK_NO_THROW(moejit::validate_plan_desc(moejit::to_internal(d)));
}

BOOST_AUTO_TEST_CASE(plan_create_on_a_compile_only_context_is_rejected) {
    TempDir dir;
    CompileOnlyContext ctx(dir.string());
    moejit_plan_desc_t d = small_desc();
    moejit_plan_t plan = reinterpret_cast<moejit_plan_t>(&d);
    BOOST_TEST(moejit_plan_create(ctx.get(), &d, &plan) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(plan == nullptr);
    // The message says what is wrong and what to do instead.
    BOOST_TEST(message_names("compile-only"), moejit_last_error());
    BOOST_TEST(message_names("moejit_plan_warmup"), moejit_last_error());
    BOOST_TEST(ctx.stats().compiles == 0u);
}

// Warmup compiles every kernel of a plan on a machine without a GPU; a second process (here a
// second fresh context on the same folder) then loads them all from disk, and a context with
// compilation switched off proves that warmup covered everything the plans need.
BOOST_AUTO_TEST_CASE(warmup_compiles_split_and_merged_then_disk_hits_only) {
    TempDir dir;
    const moejit_plan_desc_t split = small_desc(MOEJIT_FC1_SPLIT);
    const moejit_plan_desc_t merged = small_desc(MOEJIT_FC1_MERGED);

    // The pure kernel list: unique sources, readable file-name-safe names.
    const auto split_sources = moejit::plan_kernel_sources(moejit::to_internal(split), moejit::Config{}, 90);
    const auto merged_sources = moejit::plan_kernel_sources(moejit::to_internal(merged), moejit::Config{}, 90);
    std::set<std::string> unique_sources;
    for (const auto *list : {&split_sources, &merged_sources})
        for (const moejit::KernelSource &s : *list) {
            unique_sources.insert(s.source);
            BOOST_TEST(!s.name.empty());
            BOOST_TEST(s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos,
                       "kernel name " << s.name);
        }
    BOOST_TEST(split_sources.size() >= 10u);  // routing (3), scatter/gather (4), swiglu (2), GEMMs
    // Merged fc1 shares routing, scatter/gather, fc2 and its gradients with split.
    BOOST_TEST(unique_sources.size() < split_sources.size() + merged_sources.size());

    int n_split = 0, n_merged = 0;
    const auto t0 = std::chrono::steady_clock::now();
    {
        CompileOnlyContext ctx(dir.string());
        BOOST_REQUIRE_MESSAGE(moejit_plan_warmup(ctx.get(), &split, &n_split) == MOEJIT_SUCCESS,
                              moejit_last_error());
        BOOST_TEST(n_split == static_cast<int>(split_sources.size()));
        BOOST_TEST(ctx.stats().compiles == static_cast<std::uint64_t>(n_split));
        BOOST_REQUIRE_MESSAGE(moejit_plan_warmup(ctx.get(), &merged, &n_merged) == MOEJIT_SUCCESS,
                              moejit_last_error());
        BOOST_TEST(n_merged == static_cast<int>(merged_sources.size()));
        const moejit_cache_stats_t s = ctx.stats();
        BOOST_TEST(s.compiles == unique_sources.size());
        BOOST_TEST(s.compile_failures == 0u);
        BOOST_TEST(s.disk_hits == 0u);
        BOOST_TEST(s.memory_hits == static_cast<std::uint64_t>(n_split + n_merged) - unique_sources.size());
        // Warming again is free: memory hits only.
        int again = 0;
        BOOST_REQUIRE(moejit_plan_warmup(ctx.get(), &split, &again) == MOEJIT_SUCCESS);
        BOOST_TEST(again == n_split);
        BOOST_TEST(ctx.stats().compiles == unique_sources.size());
        std::printf("plan warmup: %d split + %d merged kernels, %zu unique, compiled in %.2f s (%.2f s NVRTC)\n",
                    n_split, n_merged, unique_sources.size(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    s.compile_seconds);
    }
    {
        CompileOnlyContext fresh(dir.string());
        int a = 0, b = 0;
        BOOST_REQUIRE_MESSAGE(moejit_plan_warmup(fresh.get(), &split, &a) == MOEJIT_SUCCESS, moejit_last_error());
        BOOST_REQUIRE_MESSAGE(moejit_plan_warmup(fresh.get(), &merged, &b) == MOEJIT_SUCCESS, moejit_last_error());
        BOOST_TEST(a == n_split);
        BOOST_TEST(b == n_merged);
        const moejit_cache_stats_t s = fresh.stats();
        BOOST_TEST(s.disk_hits == unique_sources.size());
        BOOST_TEST(s.compiles == 0u);
        BOOST_TEST(s.misses == 0u);
        BOOST_TEST(s.disk_rejects == 0u);
    }
    {
        // Compilation off: everything the two plans need is on disk.
        CompileOnlyContext strict(dir.string(), MOEJIT_JIT_OFF);
        BOOST_TEST(moejit_plan_warmup(strict.get(), &split, nullptr) == MOEJIT_SUCCESS, moejit_last_error());
        BOOST_TEST(moejit_plan_warmup(strict.get(), &merged, nullptr) == MOEJIT_SUCCESS, moejit_last_error());
        // A desc that was not warmed (with a limit: other SwiGLU kernels) is a distinct error.
        moejit_plan_desc_t other = split;
        other.swiglu_limit = 7.0f;
        BOOST_TEST(moejit_plan_warmup(strict.get(), &other, nullptr) == MOEJIT_ERROR_JIT_DISABLED);
        BOOST_TEST(strict.stats().compiles == 0u);
    }
}

namespace {

struct NamedRegion {
    const char *name;
    moejit::Region region;
    std::size_t min_bytes;
};

// Regions are 256-byte aligned, at least as large as their tensors, inside the buffer and
// pairwise disjoint.
void check_regions(const std::vector<NamedRegion> &regions, std::size_t total, const char *buffer) {
    for (const NamedRegion &r : regions) {
        BOOST_TEST_CONTEXT(buffer << "." << r.name) {
            BOOST_TEST(r.region.offset % moejit::kRegionAlignment == 0u);
            BOOST_TEST(r.region.bytes >= r.min_bytes);
            BOOST_TEST(r.region.offset + r.region.bytes <= total);
        }
    }
    for (std::size_t i = 0; i < regions.size(); ++i)
        for (std::size_t j = i + 1; j < regions.size(); ++j) {
            const moejit::Region &a = regions[i].region, &b = regions[j].region;
            const bool disjoint = a.bytes == 0 || b.bytes == 0 || a.offset + a.bytes <= b.offset ||
                                  b.offset + b.bytes <= a.offset;
            BOOST_TEST(disjoint, buffer << ": " << regions[i].name << " overlaps " << regions[j].name);
        }
}

}  // namespace

BOOST_AUTO_TEST_CASE(layout_regions_fit_their_tensors) {
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED})
        for (moejit_dtype_t dtype : {MOEJIT_DTYPE_BF16, MOEJIT_DTYPE_FP16})
            for (std::int64_t T : {0, 1, 3, 128, 1000, 4096})
                for (bool gathered : {true, false})
                    for (std::int32_t rw_in_backward : {0, 1}) {
                moejit_plan_desc_t d = layer_desc(2048, 768, 128, 8, layout);
                d.dtype = dtype;
                d.routing_weights_in_backward = rw_in_backward;
                const moejit::PlanLayout L(moejit::to_internal(d), T, gathered);
                BOOST_TEST_CONTEXT("T=" << T << " gathered=" << gathered << " rw_in_backward=" << rw_in_backward) {
                // w_s, the routing weights in scattered order: saved (0.13's layout, the default)
                // or, when the caller passes them to the backward (0.14), the forward's workspace
                // and a copy the backward scatters into its own.
                const bool w_s_saved = rw_in_backward == 0;
                BOOST_TEST(L.w_s_saved == w_s_saved);
                const moejit::Region none{};
                const std::size_t S = static_cast<std::size_t>(T * d.top_k), H = 2048, I = 768, E = 128;
                const std::size_t el = 2;
                // x's and dout's scatters live in the workspace (backward's; forward's too when
                // fc1 does not gather), never in saved.
                const std::size_t scattered = S * H * el;
                BOOST_TEST(L.tokens == T);
                BOOST_TEST(L.rows == T * d.top_k);
                BOOST_TEST(L.gathered == gathered);
                BOOST_TEST(L.xs.offset == 0u);
                check_regions({{"offsets", L.offsets, (E + 1) * 4},
                               {"scatter_index", L.scatter_index, S * 4},
                               {"w_s", w_s_saved ? L.w_s : none, w_s_saved ? S * 4 : 0},
                               {"gate_up", L.gate_up, S * 2 * I * el}},
                              L.saved_bytes, "saved");
                const std::size_t w_s_bytes = w_s_saved ? S * 4 : 0;  // S·4 fewer kept otherwise
                BOOST_TEST(L.saved_bytes <= (E + 1) * 4 + S * 4 + w_s_bytes + S * 2 * I * el +
                                                4 * moejit::kRegionAlignment);
                if (w_s_saved && S > 0) {  // 0.13's order: offsets, scatter_index, w_s, g|u
                    BOOST_TEST(L.w_s.offset > L.scatter_index.offset);
                    BOOST_TEST(L.w_s.offset < L.gate_up.offset);
                }
                BOOST_TEST(L.w_s_backward.bytes == (w_s_saved ? 0 : S * 4));
                // Forward and backward scratch may overlap each other (one call uses one set),
                // never within a set; xs belongs to both. row_token is the gathering forward's
                // (0.13: not saved). Scattered x: fc2 writes y over xs, which fc1 has read by then.
                // Gathered: forward never writes xs (backward's scratch may overlap its regions).
                check_regions({{"xs = y", gathered ? none : L.xs, gathered ? 0 : scattered},
                               {"counts", L.counts, E * 4},
                               {"routing", L.routing, 0},
                               {"w_s", w_s_saved ? none : L.w_s, w_s_saved ? 0 : S * 4},
                               {"row_token", L.row_token, gathered ? S * 4 : 0},
                               {"y", gathered ? L.y : none, gathered ? S * H * el : 0},
                               {"aw", L.aw, S * I * el}},
                              L.workspace_bytes, "forward workspace");
                BOOST_TEST(L.y.bytes == S * H * el);
                if (!gathered) BOOST_TEST(L.y.offset == L.xs.offset);
                if (gathered) BOOST_TEST(L.row_token.bytes == S * 4);
                // Backward: one [S,H] region serves dy's rows, then x's, then dxs in turn.
                BOOST_TEST(L.dy.offset == L.xs.offset);
                BOOST_TEST(L.dxs.offset == L.xs.offset);
                BOOST_TEST(L.dy.bytes == scattered);
                BOOST_TEST(L.dxs.bytes == scattered);
                check_regions({{"xs = dy = dxs", L.xs, scattered},
                               {"w_s_backward", L.w_s_backward, w_s_bytes == 0 ? S * 4 : 0},
                               {"daw", L.daw, S * I * el},
                               {"d_gate_up", L.d_gate_up, S * 2 * I * el},
                               {"d_w_s", L.d_w_s, S * 4},
                               {"wgrad_split", L.wgrad_split,
                                moejit::wgrad_split_workspace_bytes(moejit::to_internal(d), L.rows)},
                               {"bias_partial", L.bias_partial, 0}},
                              L.workspace_bytes, "backward workspace");
                }
            }
}

// A consuming backward (moejit_backward_args_t.consume_saved) writes d_gate_up over the saved g
// and u: the same saved buffer, no d_gate_up region, and a workspace smaller by at most its
// bytes that still holds everything else of both calls.
BOOST_AUTO_TEST_CASE(consuming_layout_drops_d_gate_up_only) {
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED})
        for (std::int64_t T : {0, 1, 3, 1000, 16384})
            for (bool gathered : {true, false}) {
                const moejit_plan_desc_t d = layer_desc(2048, 768, 128, 8, layout);
                const moejit::PlanDesc pd = moejit::to_internal(d);
                const moejit::PlanLayout keep(pd, T, gathered), spend(pd, T, gathered, "num_tokens", true);
                BOOST_TEST_CONTEXT("T=" << T << " gathered=" << gathered << " layout=" << layout) {
                    BOOST_TEST(!keep.consumes_saved);
                    BOOST_TEST(spend.consumes_saved);
                    BOOST_TEST(spend.saved_bytes == keep.saved_bytes);
                    BOOST_TEST(spend.gate_up.offset == keep.gate_up.offset);
                    BOOST_TEST(spend.d_gate_up.bytes == 0u);
                    BOOST_TEST(spend.workspace_bytes <= keep.workspace_bytes);
                    BOOST_TEST(keep.workspace_bytes - spend.workspace_bytes <= keep.d_gate_up.bytes);
                    // The forward's regions are the same; the backward's others keep their sizes.
                    BOOST_TEST(spend.y.offset == keep.y.offset);
                    BOOST_TEST(spend.aw.offset == keep.aw.offset);
                    BOOST_TEST(spend.daw.bytes == keep.daw.bytes);
                    BOOST_TEST(spend.d_w_s.bytes == keep.d_w_s.bytes);
                    BOOST_TEST(spend.wgrad_split.bytes == keep.wgrad_split.bytes);
                    const moejit::Region none{};
                    check_regions({{"xs = dy = dxs", spend.xs, keep.xs.bytes},
                                   {"w_s_backward", spend.w_s_backward, keep.w_s_backward.bytes},
                                   {"daw", spend.daw, keep.daw.bytes},
                                   {"d_gate_up", none, 0},
                                   {"d_w_s", spend.d_w_s, keep.d_w_s.bytes},
                                   {"wgrad_split", spend.wgrad_split, keep.wgrad_split.bytes},
                                   {"bias_partial", spend.bias_partial, 0}},
                                  spend.workspace_bytes, "consuming backward workspace");
                }
            }
    // qwen3-30b-a3b at T = 16384: the backward's d_gate_up was the workspace's largest excess over
    // the forward's, so the consuming workspace is the forward's (y [S,H] and a·w [S,I]).
    const moejit::PlanDesc q = moejit::to_internal(layer_desc(2048, 768, 128, 8, MOEJIT_FC1_MERGED));
    const moejit::PlanLayout keep(q, 16384, true), spend(q, 16384, true, "num_tokens", true);
    BOOST_TEST(keep.workspace_bytes - spend.workspace_bytes >= keep.d_gate_up.bytes / 2);
}

// The backward's parts (moejit_plan_backward_part, consuming layouts only): DOWN's regions are
// the consuming backward's fc2 side within its size; UP's are the [S,H] region (x's rows, then
// dxs) and, with biases, db_gate_up's partials, nothing else (its split scratch is the caller's
// dx).
BOOST_AUTO_TEST_CASE(backward_parts_layout) {
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED})
        for (bool bias : {false, true})
            for (std::int64_t T : {0, 1, 3, 1000, 16384})
                for (bool gathered : {true, false})
                    for (std::int32_t rw_in_backward : {0, 1}) {
                    if (bias && layout == MOEJIT_FC1_SPLIT) continue;  // biases need fc1 merged
                    moejit_plan_desc_t d = layer_desc(2048, 768, 128, 8, layout);
                    d.has_bias = bias;
                    d.routing_weights_in_backward = rw_in_backward;  // 1: DOWN holds w_s again
                    const moejit::PlanDesc pd = moejit::to_internal(d);
                    const moejit::PlanLayout keep(pd, T, gathered), L(pd, T, gathered, "num_tokens", true);
                    const std::size_t S = static_cast<std::size_t>(T * 8), H = 2048, I = 768, el = 2;
                    BOOST_TEST_CONTEXT("T=" << T << " gathered=" << gathered << " layout=" << layout
                                            << " bias=" << bias) {
                        BOOST_TEST(keep.down_workspace_bytes == 0u);
                        BOOST_TEST(keep.up_workspace_bytes == 0u);
                        BOOST_TEST(L.down_workspace_bytes <= L.workspace_bytes);
                        // DOWN's split scratch is fc2's alone, a prefix of wgrad_split.
                        const std::size_t fc2_split = moejit::wgrad_split_workspace_bytes(pd, L.rows, true);
                        BOOST_TEST(L.down_split_bytes == fc2_split);
                        BOOST_TEST(fc2_split <= L.wgrad_split.bytes);
                        BOOST_TEST(L.w_s_backward.bytes == (rw_in_backward ? S * 4 : 0));
                        check_regions({{"dy", L.dy, S * H * el},
                                       {"w_s_backward", L.w_s_backward, rw_in_backward ? S * 4 : 0},
                                       {"daw", L.daw, S * I * el},
                                       {"d_w_s", L.d_w_s, S * 4},
                                       {"fc2 split", moejit::Region{L.wgrad_split.offset, fc2_split}, fc2_split},
                                       {"bias_partial", L.bias_partial, 0}},
                                      L.down_workspace_bytes, "DOWN workspace");
                        check_regions({{"xs = dxs", L.xs, S * H * el},
                                       {"up_bias_partial", L.up_bias_partial,
                                        bias ? moejit::bias_grad_workspace_bytes(L.rows, 128, 2 * I) : 0}},
                                      L.up_workspace_bytes, "UP workspace");
                        BOOST_TEST(L.xs.offset == 0u);
                        if (!bias) BOOST_TEST(L.up_workspace_bytes == S * H * el);
                    }
                }
}

BOOST_AUTO_TEST_CASE(layout_sizes_are_monotonic_in_tokens_and_small_at_zero) {
    for (moejit_fc1_layout_t layout : {MOEJIT_FC1_SPLIT, MOEJIT_FC1_MERGED}) {
        moejit_plan_desc_t d = small_desc(layout);
        std::size_t prev_saved = 0, prev_ws = 0;
        for (std::int64_t T = 0; T <= 600; ++T) {
            const moejit::PlanLayout L(moejit::to_internal(d), T, true);
            BOOST_TEST_CONTEXT("T=" << T) {
                BOOST_TEST(L.saved_bytes >= prev_saved);
                BOOST_TEST(L.workspace_bytes >= prev_ws);
            }
            prev_saved = L.saved_bytes;
            prev_ws = L.workspace_bytes;
        }
        // T = 0: only the offsets (E+1 int32) and alignment padding remain.
        const moejit::PlanLayout zero(moejit::to_internal(d), 0, true);
        BOOST_TEST(zero.rows == 0);
        BOOST_TEST(zero.saved_bytes <= 8 * moejit::kRegionAlignment);
        BOOST_TEST(zero.workspace_bytes <= 8 * moejit::kRegionAlignment);
        BOOST_TEST(zero.offsets.bytes == (static_cast<std::size_t>(d.num_experts) + 1) * 4);
        // Large T: linear, dominated by the row tensors (g|u in saved; a·w is recomputed and
        // x's rows re-read by the backward, neither saved).
        const moejit::PlanLayout a(moejit::to_internal(d), 1000, true), b(moejit::to_internal(d), 2000, true);
        const std::size_t per_row_saved = 4 + 4 + 2 * d.intermediate_size * 2;  // scatter_index, w_s, g|u
        const double growth = static_cast<double>(b.saved_bytes - a.saved_bytes) / (1000.0 * d.top_k);
        // Alignment padding between regions changes by less than 256 bytes per region.
        BOOST_TEST(growth >= static_cast<double>(per_row_saved) - 1.0);
        BOOST_TEST(growth <= static_cast<double>(per_row_saved) + 1.0);
    }
    // Many experts: offsets grow with E even at T = 0.
    moejit_plan_desc_t d = small_desc();
    d.num_experts = 4096;
    BOOST_TEST(moejit::PlanLayout(moejit::to_internal(d), 0, true).offsets.bytes == 4097u * 4u);
}

// desc->routing_weights_in_backward (0.14, reserved0 before): 1 takes w_s (S fp32) out of saved,
// and the affine bound with it; anything but 0 and 1 is refused naming the field.
BOOST_AUTO_TEST_CASE(routing_weights_in_backward_takes_w_s_out_of_saved) {
    moejit_plan_desc_t d = layer_desc(2048, 768, 128, 8);
    std::int64_t per_token0 = 0, constant0 = 0, per_token1 = 0, constant1 = 0;
    BOOST_REQUIRE(moejit_saved_size_terms(&d, &per_token0, &constant0) == MOEJIT_SUCCESS);
    d.routing_weights_in_backward = 1;
    BOOST_REQUIRE(moejit_saved_size_terms(&d, &per_token1, &constant1) == MOEJIT_SUCCESS);
    BOOST_TEST(per_token0 - per_token1 == 4 * d.top_k);
    BOOST_TEST(constant1 <= constant0);
    // qwen3-30b-a3b at T = 16384: 385.0007 MiB saved (just above a 2 MiB granule), 384.5007.
    const moejit::PlanLayout keep(moejit::to_internal(layer_desc(2048, 768, 128, 8)), 16384, true),
        lean(moejit::to_internal(d), 16384, true);
    BOOST_TEST(keep.saved_bytes - lean.saved_bytes == 16384u * 8 * 4 + 0u);
    // The default is 0.13's saved layout, pinned: offsets at 0, scatter_index at 768, w_s, g|u.
    BOOST_TEST(keep.scatter_index.offset == 768u);
    BOOST_TEST(keep.w_s.offset == 768u + 524288u);
    BOOST_TEST(keep.gate_up.offset == 768u + 2 * 524288u);
    BOOST_TEST(keep.saved_bytes == 403702528u);  // 385.0007 MiB
    BOOST_TEST(lean.saved_bytes == 403702528u - 524288u);
    for (std::int32_t bad : {2, -1}) {
        d.routing_weights_in_backward = bad;
        BOOST_TEST(moejit_saved_size_terms(&d, &per_token1, &constant1) == MOEJIT_ERROR_INVALID_ARGUMENT);
        BOOST_TEST(message_names("desc->routing_weights_in_backward"), moejit_last_error());
    }
}

// moejit_saved_size_terms / moejit_experts_saved_size_terms: an affine bound from the
// descriptor alone that every plan's saved size stays under (gathered or not, any T or R), and
// tight (within the alignment padding of each region); bad input names the argument.
BOOST_AUTO_TEST_CASE(saved_size_terms_bound_every_layout) {
    std::uint64_t state = 0x5eed5eedULL ^ static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    auto draw = [&](std::int64_t lo, std::int64_t hi) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return lo + static_cast<std::int64_t>((state >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
    };
    for (int trial = 0; trial < 200; ++trial) {
        moejit_plan_desc_t d = small_desc(trial % 2 ? MOEJIT_FC1_MERGED : MOEJIT_FC1_SPLIT);
        d.hidden_size = 8 * draw(1, 1024);
        d.intermediate_size = 8 * draw(1, 512);
        d.num_experts = static_cast<std::int32_t>(draw(1, 512));
        d.top_k = static_cast<std::int32_t>(draw(1, 16));
        if (trial % 3 == 0) d.dtype = d.weight_grad_dtype = MOEJIT_DTYPE_FP16;
        std::int64_t per_token = -1, constant = -1, per_row = -1, experts_constant = -1;
        BOOST_REQUIRE_MESSAGE(moejit_saved_size_terms(&d, &per_token, &constant) == MOEJIT_SUCCESS,
                              moejit_last_error());
        BOOST_REQUIRE(moejit_experts_saved_size_terms(&d, &per_row, &experts_constant) == MOEJIT_SUCCESS);
        const moejit::PlanDesc desc = moejit::to_internal(d);
        for (std::int64_t T : {std::int64_t{0}, std::int64_t{1}, draw(2, 5000), draw(5000, 100000)}) {
            for (bool gathered : {false, true}) {
                const moejit::PlanLayout L(desc, T, gathered);
                const std::int64_t bound = per_token * T + constant;
                BOOST_TEST_CONTEXT("trial " << trial << " T=" << T << " gathered=" << gathered) {
                    BOOST_TEST(static_cast<std::int64_t>(L.saved_bytes) <= bound);
                    BOOST_TEST(bound - static_cast<std::int64_t>(L.saved_bytes) <=
                               static_cast<std::int64_t>(6 * moejit::kRegionAlignment + 4 * T * d.top_k));
                }
                const moejit::ExpertsLayout X(desc, T, gathered);
                BOOST_TEST(static_cast<std::int64_t>(X.saved_bytes) <= per_row * T + experts_constant);
            }
        }
    }
    moejit_plan_desc_t d = small_desc();
    std::int64_t a = 0, b = 0;
    BOOST_TEST(moejit_saved_size_terms(&d, nullptr, &b) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message_names("bytes_per_token"));
    BOOST_TEST(moejit_experts_saved_size_terms(&d, &a, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message_names("constant_bytes"));
    d.top_k = 0;
    BOOST_TEST(moejit_saved_size_terms(&d, &a, &b) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(message_names("desc->top_k"));
    BOOST_TEST(moejit_saved_size_terms(nullptr, &a, &b) == MOEJIT_ERROR_INVALID_ARGUMENT);
}
