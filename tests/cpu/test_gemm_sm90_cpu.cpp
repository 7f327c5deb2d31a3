// The sm_90a (wgmma/TMA) same_nk grouped GEMM engine without a GPU: every forward specialization
// of every reference shape (docs/DESIGN.md §6) renders and compiles for sm_90a with NVRTC through a
// compile-only context, each within the 2 s cold-start budget; the PTX really uses wgmma,
// cp.async.bulk.tensor, mbarriers and setmaxnreg (so the kernel is on the Hopper path, not a
// fallback); argument validation names the field and the expected value.
#define BOOST_TEST_MODULE gemm_sm90_cpu
#include <boost/test/unit_test.hpp>

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cold_compile.hpp"
#include "compile_only.hpp"
#include "print_enums.hpp"
#include "ptx_sm90a.hpp"
#include "thread_cpu_time.hpp"
#include "layer_args.h"
#include "runtime/context.hpp"
#include "base/error.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/templates.hpp"
#include "gemm/group_gemm.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan.hpp"
#include "gemm/group_gemm_sm90.hpp"
#include "reference_shapes.hpp"

using namespace moejit;

namespace {

// The reference shapes; tokens and top-k do not change a forward specialization, so the
// 4k-token shapes render the kernels of their full-size namesakes again (deduplicated by name).
using reference::kShapes;
using reference::Shape;

constexpr int kHopper = 90;

// The heuristic's spec for a forward (B [E,N,K]) GEMM on sm_90a: must be the wgmma engine.
GemmNkSpec wgmma_spec(DType dtype, DType c_dtype, std::int64_t n, std::int64_t k,
                      bool accumulate, std::int32_t experts) {
    GemmNkSpec s = make_nk_spec(dtype, c_dtype, n, k, true, accumulate, 0, experts, kHopper);
    BOOST_TEST((s.tile.engine == GemmEngine::wgmma), "sm_90a forward GEMMs run on wgmma: " << to_string(s.tile));
    return s;
}

// Forward GEMMs of one layer (merged fc1: N = 2I) with C in bf16 and fp32.
std::vector<GemmNkSpec> forward_specs(const Shape &s) {
    std::vector<GemmNkSpec> out;
    const std::int64_t H = s.H, I = s.I;
    for (auto c : {DType::bf16, DType::fp32}) {
        out.push_back(wgmma_spec(DType::bf16, c, 2 * I, H, false, s.E));  // fc1
        out.push_back(wgmma_spec(DType::bf16, c, H, I, false, s.E));      // fc2
    }
    return out;
}

using moejit::test::MemoryOnlyContext;

bool contains(const std::string &text, const std::string &part) {
    return text.find(part) != std::string::npos;
}

// Runs `call`, expects moejit::Error with `status` and a message containing every fragment.
void expect_error(const std::function<void()> &call, Status status,
                  std::initializer_list<const char *> fragments) {
    try {
        call();
        BOOST_TEST(false, "expected an error");
    } catch (const Error &e) {
        BOOST_TEST_CONTEXT("message: " << e.what()) {
            BOOST_TEST(e.status() == status);
            for (const char *f : fragments) BOOST_TEST(contains(e.what(), f), "missing '" << f << "'");
        }
    }
}

using moejit::test::ptx_for_sm90a;

}  // namespace

BOOST_AUTO_TEST_CASE(every_reference_layer_gemm_compiles_for_sm90a) {
    std::map<std::string, KernelSource> sources;  // deduplicated by name
    for (const Shape &s : kShapes)
        for (const GemmNkSpec &spec : forward_specs(s)) {
            BOOST_CHECK_NO_THROW(validate_nk_spec(spec, s.E, kHopper));
            KernelSource ks = render_group_gemm_nk(spec);
            sources.emplace(ks.name, ks);
        }
    // Every GEMM a plan launches (forward, input and weight gradients, both fc1 layouts) runs
    // on the wgmma engine on sm_90a.
    for (const Shape &s : kShapes)
        for (auto layout : {Fc1Layout::merged, Fc1Layout::split}) {
            PlanDesc d{};
            d.hidden_size = s.H;
            d.intermediate_size = s.I;
            d.num_experts = s.E;
            d.top_k = 4;
            d.fc1_layout = layout;
            for (KernelSource &ks : layer_gemm_sources(d, Config{}, kHopper)) {
                BOOST_TEST(ks.template_name == "sm90/kernels.cuh", ks.name);
                sources.emplace(ks.name, ks);
            }
        }
    // The other tile widths, fp16 and accumulate, once each.
    GemmNkSpec extra = wgmma_spec(DType::fp16, DType::fp32, 1408, 2880, true, 8);
    for (int bn : {64, 128, 256}) {
        extra.tile.block_n = bn;
        extra.tile.stages = bn == 256 ? 4 : 5;
        BOOST_CHECK_NO_THROW(validate_nk_spec(extra, 8, kHopper));
        KernelSource ks = render_group_gemm_nk(extra);
        sources.emplace(ks.name, ks);
    }
    MemoryOnlyContext context("sm_90a");
    double worst = 0, total = 0;
    for (auto &[name, ks] : sources) {
        double sec = 0;
        BOOST_TEST_CONTEXT(name) { sec = moejit::test::cold_compile_seconds(context, ks); }
        worst = std::max(worst, sec);
        total += sec;
    }
    std::printf("group_gemm_sm90: %zu kernels, NVRTC mean %.2f s, worst %.2f s\n", sources.size(),
                total / sources.size(), worst);
}

BOOST_AUTO_TEST_CASE(ptx_uses_wgmma_tma_mbarriers_and_setmaxnreg) {
    for (int bn : {128, 256}) {
        GemmNkSpec spec = wgmma_spec(DType::bf16, DType::bf16, 1536, 2048, false, 128);
        spec.tile.block_n = bn;
        spec.tile.stages = 4;
        const std::string ptx = ptx_for_sm90a(render_group_gemm_nk(spec));
        BOOST_TEST_CONTEXT("block_n " << bn) {
            moejit::test::check_ptx(
                ptx,
                {"wgmma.mma_async.sync.aligned.m64n" + std::to_string(bn) + "k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d",
                 "cp.async.bulk.tensor.3d", "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "setmaxnreg.inc",
                 "setmaxnreg.dec"},
                {"mma.sync", "cp.async.cg"});  // no mma.sync or cp.async fallback
        }
    }
    // Input gradient (B [E,K,N] MN-major: transpose-B flag) and weight gradient (both operands
    // MN-major, the foreign-row zeroing made visible to the async proxy).
    const std::string dgrad = ptx_for_sm90a(render_group_gemm_nk(
        make_nk_spec(DType::bf16, DType::bf16, 768, 2048, false, false, 0, 128, kHopper)));
    BOOST_TEST(contains(dgrad, "k16.f32.bf16.bf16"));
    BOOST_TEST(contains(dgrad, "p, 1, 1, 0, 1;"), "transpose-B immediate");
    const std::string wgrad = ptx_for_sm90a(render_group_gemm_mn(
        make_mn_spec(DType::bf16, DType::fp32, 2048, 768, true, 0, 128, kHopper)));
    BOOST_TEST(contains(wgrad, "p, 1, 1, 1, 1;"), "transpose-A and -B immediates");
    BOOST_TEST(contains(wgrad, "fence.proxy.async.shared::cta"));
    BOOST_TEST(contains(wgrad, "cp.async.bulk.tensor.2d"));
}

BOOST_AUTO_TEST_CASE(spec_heuristic_fits_and_names_are_distinct) {
    for (const Shape &s : kShapes)
        for (const GemmNkSpec &spec : forward_specs(s)) {
            BOOST_TEST_CONTEXT(s.name << " n " << spec.n << " k " << spec.k) {
                BOOST_TEST(spec.tile.stages >= (spec.tile.tma_store ? 3 : 4), "deep enough ring");
                BOOST_TEST(gemm_smem_bytes(spec.tile, GemmKind::same_nk, s.E) <= std::size_t{227 * 1024});
            }
        }
    GemmNkSpec a = wgmma_spec(DType::bf16, DType::bf16, 512, 256, false, 8);
    GemmNkSpec b = a;
    b.accumulate = true;
    GemmNkSpec c = a;
    c.c_dtype = DType::fp32;
    GemmNkSpec d = a;
    d.tile.block_n = 128;
    d.tile.stages = 4;
    d.tile.pingpong = false;
    std::set<std::string> names;
    for (const auto &s : {a, b, c, d}) {
        const KernelSource ks = render_group_gemm_nk(s);
        BOOST_TEST(ks.entry.rfind("moejit::sm90::group_gemm_nk_kernel<384, Cfg, ", 0) == 0u, ks.entry);
        BOOST_TEST(ks.param_bytes == sizeof(kargs::Sm90NkArgs));
        BOOST_TEST(ks.template_name == "sm90/kernels.cuh");
        BOOST_TEST(ks.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos, ks.name);
        names.insert(ks.name);
    }
    BOOST_TEST(names.size() == 4u);
    BOOST_TEST(wgmma_spec(DType::bf16, DType::bf16, 64, 256, false, 8).tile.block_n == 64);
    // Input and weight gradients run on wgmma too; other arches never get wgmma.
    BOOST_TEST((make_nk_spec(DType::bf16, DType::bf16, 512, 256, false, false, 0, 8, kHopper).tile.engine ==
                GemmEngine::wgmma));
    BOOST_TEST((make_mn_spec(DType::bf16, DType::fp32, 512, 256, false, 0, 8, kHopper).tile.engine ==
                GemmEngine::wgmma));
    for (int cc : {80, 86, 89, 100})
        BOOST_TEST((make_nk_spec(DType::bf16, DType::bf16, 512, 256, true, false, 0, 8, cc).tile.engine ==
                    GemmEngine::mma_sync));
    // The name round-trips through MOEJIT_GEMM_TILE's syntax.
    BOOST_TEST(to_string(d.tile) == "wgmma_128x128x64_s4_g8_e1");
    BOOST_TEST((parse_tile_config(to_string(d.tile), "t") == d.tile));
    GemmNkSpec e = d;
    e.tile.pingpong = true;
    BOOST_TEST(to_string(e.tile) == "wgmma_128x128x64_s4_g8_e1_p1");
    BOOST_TEST((parse_tile_config(to_string(e.tile), "t") == e.tile));
    BOOST_TEST(render_group_gemm_nk(e).name != render_group_gemm_nk(d).name);
    BOOST_TEST(render_group_gemm_nk(e).source.find("Config<__nv_bfloat16, __nv_bfloat16, 128, 4, 8, true, true>") !=
               std::string::npos);
    // Cooperative kernels render without the ping-pong argument (their sources, keys and cubins
    // stay those of 0.6).
    BOOST_TEST(render_group_gemm_nk(d).source.find("Config<__nv_bfloat16, __nv_bfloat16, 128, 4, 8, true>") !=
               std::string::npos);
    BOOST_TEST((parse_tile_config("wgmma_128x128x64_p0", "t").pingpong == false));
    BOOST_TEST((parse_tile_config("wgmma_128x128x64_p2", "t").pingpong == 2));
    BOOST_CHECK_THROW(parse_tile_config("wgmma_128x128x64_p3", "t"), Error);
}

// The heuristic keeps cooperative consumers (ping-pong measured slower in the layer); ping-pong
// tiles validate only where they can run.
BOOST_AUTO_TEST_CASE(pingpong_heuristic_and_validation) {
    auto nk = [](std::int64_t n, std::int64_t k, std::int64_t rows, std::int32_t experts) {
        return make_nk_spec(DType::bf16, DType::bf16, n, k, true, false, rows, experts, kHopper).tile;
    };
    for (const GemmTileConfig &t : {nk(4096, 7168, 8192 * 8, 256), nk(768, 2048, 16384 * 8, 128),
                                    nk(1536, 256, 24576 * 8, 128), nk(28672, 4096, 8192 * 2, 8)})
        BOOST_TEST(!t.pingpong, to_string(t));
    BOOST_TEST(!make_mn_spec(DType::bf16, DType::bf16, 2048, 768, false, 4096, 128, kHopper).tile.pingpong);
    // A forced ping-pong tile with the deepest ring next to two 128 x 128 staging tiles fits.
    GemmTileConfig pp = parse_tile_config("wgmma_128x128x64_s5_g8_e1_p1", "t");
    BOOST_TEST(gemm_smem_bytes(pp, GemmKind::same_nk, 256) <= std::size_t{227 * 1024});
    pp.stages = 6;
    BOOST_TEST(gemm_smem_bytes(pp, GemmKind::same_nk, 1) > std::size_t{227 * 1024});
    // Validation names the rule.
    const GemmNkSpec good = wgmma_spec(DType::bf16, DType::bf16, 512, 256, false, 8);
    GemmNkSpec wide = good;
    wide.tile.pingpong = true;
    wide.tile.block_n = 256;
    expect_error([&] { validate_nk_spec(wide, 8, kHopper); }, Status::unsupported, {"_p1", "block_n must be 64 or 128"});
    GemmTileConfig sync = parse_tile_config("128x128x64_s3_p1", "t");
    GemmProblem problem;
    expect_error([&] { validate_tile_config(sync, problem, 80); }, Status::unsupported, {"_p1", "wgmma engine"});
}

BOOST_AUTO_TEST_CASE(validation_names_the_field) {
    const auto INVALID = Status::invalid_argument, UNSUPPORTED = Status::unsupported;
    const GemmNkSpec good = wgmma_spec(DType::bf16, DType::bf16, 512, 256, false, 8);
    auto with = [&](auto edit, std::int32_t experts = 8) {
        GemmNkSpec s = good;
        edit(s);
        return [s, experts] { validate_nk_spec(s, experts, kHopper); };
    };
    using S = GemmNkSpec;
    expect_error(with([](S &s) { s.dtype = DType::fp32; }), INVALID, {"dtype", "BF16"});
    expect_error(with([](S &s) { s.c_dtype = DType::fp16; }), INVALID, {"c_dtype"});
    expect_error(with([](S &s) { s.n = 100; }), INVALID, {"n must be", "multiple of 8", "100"});
    expect_error(with([](S &s) { s.k = 0; }), INVALID, {"k must be"});
    expect_error(with([](S &s) { s.k = std::int64_t{1} << 24; }), UNSUPPORTED, {"k = "});
    expect_error(with([](S &s) { s.tile.block_n = 96; }), UNSUPPORTED, {"block_n", "64, 128 or 256"});
    expect_error(with([](S &s) { s.tile.block_m = 64; }), UNSUPPORTED, {"block_m must be 128"});
    expect_error(with([](S &s) { s.tile.stages = 1; }), UNSUPPORTED, {"stages"});
    expect_error(with([](S &s) { s.tile.block_n = 256; s.tile.stages = 8; s.tile.pingpong = false; }), UNSUPPORTED,
                 {"shared memory"});
    expect_error(with([](S &) {}, 0), INVALID, {"num_experts"});
    expect_error(with([](S &) {}, 65535), UNSUPPORTED, {"65535 experts", "shared memory"});
    expect_error(with([](S &s) { s.k_split = 100; }), INVALID, {"k_split is 100", "multiple of 64", "k = 256"});
    expect_error(with([](S &s) { s.k_split = 256; }), INVALID, {"k_split is 256"});
    expect_error(with([](S &s) { s.k_split = 128; s.gather_a = true; }), INVALID, {"k_split (128) and gather_a"});
    BOOST_CHECK_NO_THROW(with([](S &s) { s.k_split = 128; })());
    BOOST_CHECK_NO_THROW(with([](S &) {})());

    // The launcher: wrong arch first, then a compile-only context cannot launch.
    GemmOperands ops;
    ops.a = reinterpret_cast<const void *>(0x10000);
    ops.b = reinterpret_cast<const void *>(0x20000);
    ops.c = reinterpret_cast<void *>(0x30000);
    ops.offsets = reinterpret_cast<const std::int32_t *>(0x40000);
    ops.rows = 1000;
    ops.num_experts = 8;
    MemoryOnlyContext sm80("sm_80");
    expect_error([&] { launch_group_gemm_nk(sm80.impl(), good, ops); }, UNSUPPORTED, {"sm_90a", "sm_80"});
    // An explicit "sm_90" target compiles for sm_90a (same devices), so wgmma is allowed.
    MemoryOnlyContext sm90("sm_90");
    BOOST_TEST(sm90.impl().arch() == "sm_90a");
    expect_error([&] { launch_group_gemm_nk(sm90.impl(), good, ops); }, INVALID, {"compile-only"});
    MemoryOnlyContext sm90a("sm_90a");
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), good, ops); }, INVALID, {"compile-only"});
    GemmOperands bad = ops;
    bad.a = reinterpret_cast<const void *>(0x10008);
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), good, bad); }, INVALID, {"a must be 16-byte aligned"});
    bad = ops;
    bad.offsets = nullptr;
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), good, bad); }, INVALID, {"offsets is NULL"});
    bad = ops;
    bad.rows = -1;
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), good, bad); }, INVALID, {"rows"});
    // Two operand pairs need both second operands; the mma.sync engine has no second pair.
    GemmNkSpec pairs = good;
    pairs.k_split = 128;
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), pairs, ops); }, INVALID, {"a2 or b2 is NULL"});
    GemmNkSpec portable = make_nk_spec(DType::bf16, DType::bf16, 512, 256, false, false, 0, 8, 80);
    portable.k_split = 128;
    expect_error([&] { render_group_gemm_nk(portable); }, UNSUPPORTED, {"two operand pairs", "wgmma"});
}

// Split fc1's dgrad is one GEMM over two operand pairs (K = 2I, k_split = I) where the wgmma
// engine runs it and I is a multiple of 64; otherwise a GEMM and an accumulating one.
BOOST_AUTO_TEST_CASE(split_fc1_dgrad_reduces_both_pairs_in_one_gemm) {
    auto dgrad_of = [](std::int64_t I, Fc1Layout layout, int cc) {
        PlanDesc d{};
        d.hidden_size = 1536;
        d.intermediate_size = I;
        d.num_experts = 128;
        d.top_k = 8;
        d.fc1_layout = layout;
        const LayerSpecs s = layer_specs(d, Config{}, cc);
        bool renders_acc = false;
        for (const KernelSource &ks : layer_gemm_sources(d, Config{}, cc))
            renders_acc |= ks.name == render_group_gemm_nk(s.fc1_dgrad_acc).name;
        return std::pair{s.fc1_dgrad, renders_acc};
    };
    auto [pairs, pairs_acc] = dgrad_of(256, Fc1Layout::split, kHopper);
    BOOST_TEST(pairs.k == 512);
    BOOST_TEST(pairs.k_split == 256);
    BOOST_TEST(!pairs_acc, "no accumulating dgrad is rendered");
    BOOST_TEST(contains(render_group_gemm_nk(pairs).name, "_k512_ks256_bn"));
    auto [ragged, ragged_acc] = dgrad_of(200, Fc1Layout::split, kHopper);  // I % 64 != 0
    BOOST_TEST(ragged.k == 200);
    BOOST_TEST(ragged.k_split == 0);
    BOOST_TEST(ragged_acc);
    auto [merged, merged_acc] = dgrad_of(256, Fc1Layout::merged, kHopper);
    BOOST_TEST(merged.k == 512);
    BOOST_TEST(merged.k_split == 0);
    BOOST_TEST(!merged_acc);
    auto [portable, portable_acc] = dgrad_of(256, Fc1Layout::split, 80);
    BOOST_TEST(portable.k_split == 0);
    BOOST_TEST(portable_acc);
}

// With fuse_swiglu on (options->fuse_swiglu, MOEJIT_FUSE_SWIGLU=1) fc1 computes SwiGLU in its
// epilogue on the wgmma engine: one GEMM over N = 2I for either layout, g and u through TMA
// stores, no standalone forward SwiGLU kernel; by default, and on other engines, the unfused
// path.
BOOST_AUTO_TEST_CASE(fc1_swiglu_epilogue_rule_and_validation) {
    PlanDesc d{};
    d.hidden_size = 2048;
    d.intermediate_size = 768;
    d.num_experts = 128;
    d.top_k = 8;
    d.swiglu_limit = 7.0f;
    Config config;
    auto has_swiglu_fwd = [&](int cc) {
        for (const KernelSource &ks : plan_kernel_sources(d, config, cc))
            if (contains(ks.name, "swiglu_fwd")) return true;
        return false;
    };
    BOOST_TEST(!layer_specs(d, config, kHopper).fused_swiglu, "opt-in");
    BOOST_TEST(has_swiglu_fwd(kHopper));
    config.fuse_swiglu = {true, ConfigSource::option};
    for (auto layout : {Fc1Layout::split, Fc1Layout::merged}) {
        d.fc1_layout = layout;
        const LayerSpecs s = layer_specs(d, config, kHopper);
        BOOST_TEST(s.fused_swiglu);
        BOOST_TEST(s.fc1.n == 2 * 768);
        BOOST_TEST(s.fc1.swiglu.on);
        BOOST_TEST(s.fc1.swiglu.limit);
        BOOST_TEST(s.fc1.swiglu.merged == (layout == Fc1Layout::merged));
        BOOST_TEST(s.fc1.tile.tma_store, "g and u leave through TMA stores");
        BOOST_TEST(!has_swiglu_fwd(kHopper));
        const LayerSpecs portable = layer_specs(d, config, 80);
        BOOST_TEST(!portable.fused_swiglu);
        BOOST_TEST(!portable.fc1.swiglu.on);
        BOOST_TEST(has_swiglu_fwd(80));
    }
    const GemmNkSpec good = layer_specs(d, config, kHopper).fc1;
    BOOST_TEST(good.swiglu.on);

    const auto INVALID = Status::invalid_argument, UNSUPPORTED = Status::unsupported;
    BOOST_CHECK_NO_THROW(validate_nk_spec(good, 128, kHopper));
    auto with = [&](auto edit) {
        GemmNkSpec s = good;
        edit(s);
        return [s] { validate_nk_spec(s, 128, kHopper); };
    };
    using S = GemmNkSpec;
    expect_error(with([](S &s) { s.b_transposed = false; }), INVALID, {"SwiGLU epilogue needs b_transposed"});
    expect_error(with([](S &s) { s.c_dtype = DType::fp32; }), INVALID, {"c_dtype = dtype"});
    expect_error(with([](S &s) { s.n = 1544; }), INVALID, {"n is 1544", "I a multiple of 8"});
    expect_error(with([](S &s) { s.tile.block_n = 64; }), UNSUPPORTED, {"TMA stores (_e1) need block_n >= 128"});
    BOOST_CHECK_NO_THROW(with([](S &s) { s.tile.block_n = 64; s.tile.tma_store = false; })());
    GemmNkSpec portable = make_nk_spec(DType::bf16, DType::bf16, 1536, 2048, true, false, 0, 8, 80);
    portable.swiglu.on = true;
    expect_error([&] { render_group_gemm_nk(portable); }, UNSUPPORTED, {"SwiGLU epilogue needs the wgmma engine"});
    // The launcher wants the epilogue's outputs and, split, W_up.
    MemoryOnlyContext sm90a("sm_90a");
    GemmOperands ops;
    ops.a = reinterpret_cast<const void *>(0x10000);
    ops.b = reinterpret_cast<const void *>(0x20000);
    ops.c = reinterpret_cast<void *>(0x30000);
    ops.offsets = reinterpret_cast<const std::int32_t *>(0x40000);
    ops.row_token = reinterpret_cast<const std::int32_t *>(0x50000);
    ops.rows = 1000;
    ops.num_experts = 128;
    GemmNkSpec split = good;
    split.swiglu.merged = false;
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), split, ops); }, INVALID, {"b2 (W_up) is NULL"});
    ops.b2 = reinterpret_cast<const void *>(0x60000);
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), split, ops); }, INVALID, {"glu.up, glu.aw and glu.w_s"});
    ops.glu.up = reinterpret_cast<void *>(0x70000);
    ops.glu.aw = reinterpret_cast<void *>(0x80000);
    ops.glu.w_s = reinterpret_cast<const float *>(0x90000);
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), split, ops); }, INVALID, {"glu.limit is 0"});
    ops.glu.limit = 7.0f;
    expect_error([&] { launch_group_gemm_nk(sm90a.impl(), split, ops); }, INVALID, {"compile-only"});
}

// The store ring (_r1, opt-in): the name round-trips, the staging shrinks to two 64 x 64 slots
// per consumer so 128 x 256 keeps a fourth stage, validation names the rule, and the ring
// kernels (plain, gathered with the SwiGLU epilogue, weight gradient) compile for sm_90a with
// one store group per chunk and a wait that leaves the newest group storing.
BOOST_AUTO_TEST_CASE(store_ring_names_staging_validation_and_ptx) {
    const GemmTileConfig ring = parse_tile_config("wgmma_128x256x64_s4_g8_e1_r1", "t");
    BOOST_TEST(ring.store_ring);
    BOOST_TEST(to_string(ring) == "wgmma_128x256x64_s4_g8_e1_r1");
    BOOST_TEST(!parse_tile_config("wgmma_128x256x64_s4_g8_e1_r0", "t").store_ring);
    BOOST_CHECK_THROW(parse_tile_config("wgmma_128x256x64_r2", "t"), Error);
    GemmTileConfig whole = ring;
    whole.store_ring = false;
    for (std::int32_t experts : {1, 128, 256}) {
        BOOST_TEST(gemm_smem_bytes(ring, GemmKind::same_nk, experts) <= std::size_t{227 * 1024});
        BOOST_TEST(gemm_smem_bytes(whole, GemmKind::same_nk, experts) > std::size_t{227 * 1024}, "the point");
    }
    // same_mn's split schedule keeps 2 (E + 1) ints more: four stages fit up to 128 experts.
    BOOST_TEST(gemm_smem_bytes(ring, GemmKind::same_mn, 128) <= std::size_t{227 * 1024});
    BOOST_TEST(gemm_smem_bytes(ring, GemmKind::same_mn, 256) > std::size_t{227 * 1024});
    // Two slots of 8 KiB per consumer at BN 128 and 256 (BN 128: the whole row block's size);
    // one at BN 64.
    auto staging = [](const char *text) {
        GemmTileConfig t = parse_tile_config(text, "t");
        GemmTileConfig none = t;
        none.tma_store = false;
        none.store_ring = false;
        return gemm_smem_bytes(t, GemmKind::same_nk, 8) - gemm_smem_bytes(none, GemmKind::same_nk, 8);
    };
    BOOST_TEST(staging("wgmma_128x256x64_s4_e1_r1") == std::size_t{32 * 1024});
    BOOST_TEST(staging("wgmma_128x256x64_s3_e1") == std::size_t{64 * 1024});
    BOOST_TEST(staging("wgmma_128x128x64_s4_e1_r1") == std::size_t{32 * 1024});
    BOOST_TEST(staging("wgmma_128x64x64_s4_e1_r1") == std::size_t{16 * 1024});

    GemmNkSpec nk = wgmma_spec(DType::bf16, DType::bf16, 2048, 768, false, 128);
    nk.tile = ring;
    BOOST_CHECK_NO_THROW(validate_nk_spec(nk, 128, kHopper));
    const KernelSource ring_source = render_group_gemm_nk(nk);
    BOOST_TEST(contains(ring_source.source, "Config<__nv_bfloat16, __nv_bfloat16, 256, 4, 8, true, 0, true>"));
    GemmNkSpec nk_whole = nk;
    nk_whole.tile = whole;  // the same stages: only _r1 tells the two apart
    BOOST_TEST(render_group_gemm_nk(nk_whole).name != ring_source.name);
    BOOST_TEST(contains(ring_source.name, "_r1"));
    const auto UNSUPPORTED = Status::unsupported;
    GemmNkSpec no_tma = nk;
    no_tma.tile.tma_store = false;
    expect_error([&] { validate_nk_spec(no_tma, 128, kHopper); }, UNSUPPORTED, {"store ring (_r1)", "_e1"});
    GemmNkSpec pingpong = nk;
    pingpong.tile.block_n = 128;
    pingpong.tile.pingpong = 1;
    expect_error([&] { validate_nk_spec(pingpong, 128, kHopper); }, UNSUPPORTED, {"store ring (_r1)", "_p0"});
    GemmTileConfig sync = parse_tile_config("128x128x64_s3_r1", "t");
    GemmProblem problem;
    expect_error([&] { validate_tile_config(sync, problem, 80); }, UNSUPPORTED, {"_r1", "wgmma engine"});

    // fc1 with the SwiGLU epilogue over gathered rows, on the ring.
    PlanDesc d{};
    d.hidden_size = 2048;
    d.intermediate_size = 768;
    d.num_experts = 128;
    d.top_k = 8;
    Config config;
    config.fuse_swiglu = {true, ConfigSource::option};
    GemmNkSpec glu = layer_specs(d, config, kHopper).fc1;
    BOOST_TEST(glu.swiglu.on);
    glu.gather_a = true;
    glu.tile = ring;
    BOOST_CHECK_NO_THROW(validate_nk_spec(glu, 128, kHopper));
    GemmMnSpec mn = make_mn_spec(DType::bf16, DType::bf16, 2048, 768, false, 0, 128, kHopper);
    mn.tile = ring;
    BOOST_CHECK_NO_THROW(validate_mn_spec(mn, 128, kHopper));
    auto count = [](const std::string &text, const std::string &part) {
        std::size_t n = 0;
        for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
        return n;
    };
    std::map<std::string, std::size_t> waits;
    for (const KernelSource &ks : {ring_source, render_group_gemm_nk(glu), render_group_gemm_mn(mn)}) {
        BOOST_TEST_CONTEXT(ks.name) {
            const std::string ptx = ptx_for_sm90a(ks);
            BOOST_TEST(contains(ptx, "cp.async.bulk.wait_group.read 1;"), "the ring's wait");
            BOOST_TEST(contains(ptx, "cp.async.bulk.commit_group"));
            BOOST_TEST(contains(ptx, "fence.proxy.async.shared::cta"));
            waits[ks.name] = count(ptx, "cp.async.bulk.wait_group.read 1;");
        }
    }
    // The SwiGLU epilogue's aw goes through the ring at BN 256: two more chunks than g and u's four.
    BOOST_TEST(waits[render_group_gemm_nk(glu).name] == waits[ring_source.name] + 2);
}
