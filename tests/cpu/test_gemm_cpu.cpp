// Grouped GEMMs without a GPU: the tile heuristic gives valid configs for every reference
// shape (docs/DESIGN.md §6) and arch; every GEMM specialization of every reference shape (fc1/fc2
// fprop, fc1/fc2 dgrad, fc1/fc2 wgrad) renders and compiles for sm_90a with NVRTC through a
// compile-only context, within the cold-start budget; argument validation messages through the
// C ABI name the argument and the expected value.
#define BOOST_TEST_MODULE gemm_cpu
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compile_only.hpp"
#include "print_enums.hpp"
#include "thread_cpu_time.hpp"
#include "runtime/context.hpp"
#include "base/error.hpp"
#include "gemm/tile_config.hpp"
#include "moejit.h"
#include "gemm/group_gemm.hpp"
#include "reference_shapes.hpp"

using namespace moejit;

namespace {

using reference::kShapes;
using reference::Shape;

// Every GEMM of one MoE layer (merged fc1: N = 2I), with the C dtypes a layer uses.
struct LayerGemms {
    std::vector<GemmNkSpec> nk;
    std::vector<GemmMnSpec> mn;
};

LayerGemms layer_gemms(const Shape &s, int cc, std::int64_t rows_hint) {
    const auto bf16 = DType::bf16, fp32 = DType::fp32;
    const std::int64_t H = s.H, I = s.I;
    const std::int32_t E = s.E;
    LayerGemms g;
    g.nk.push_back(make_nk_spec(bf16, bf16, 2 * I, H, true, false, rows_hint, E, cc));   // fc1 fprop
    g.nk.push_back(make_nk_spec(bf16, bf16, H, I, true, false, rows_hint, E, cc));       // fc2 fprop
    g.nk.push_back(make_nk_spec(bf16, bf16, I, H, false, false, rows_hint, E, cc));      // fc2 dgrad
    g.nk.push_back(make_nk_spec(bf16, bf16, H, 2 * I, false, false, rows_hint, E, cc));  // fc1 dgrad
    for (auto c : {bf16, fp32}) {
        g.mn.push_back(make_mn_spec(bf16, c, 2 * I, H, false, rows_hint, E, cc));  // fc1 wgrad
        g.mn.push_back(make_mn_spec(bf16, c, H, I, false, rows_hint, E, cc));      // fc2 wgrad
    }
    // gradient accumulation across micro-batches
    g.mn.push_back(make_mn_spec(bf16, fp32, 2 * I, H, true, rows_hint, E, cc));
    g.mn.push_back(make_mn_spec(bf16, fp32, H, I, true, rows_hint, E, cc));
    return g;
}

using moejit::test::MemoryOnlyContext;  // every run really compiles

bool contains(const std::string &text, const std::string &part) {
    return text.find(part) != std::string::npos;
}

// Calls `call` and checks the status and that moejit_last_error() contains every fragment.
template <class F>
void expect_error(F &&call, moejit_status_t expected, std::initializer_list<const char *> fragments) {
    const moejit_status_t status = call();
    const std::string message = moejit_last_error();
    BOOST_TEST_CONTEXT("message: " << message) {
        BOOST_TEST(status == expected);
        for (const char *f : fragments) BOOST_TEST(contains(message, f), "missing '" << f << "'");
    }
}

void *fake_pointer(std::uintptr_t value) { return reinterpret_cast<void *>(value); }

// Aligned fake operands: validation never dereferences them.
template <class Args> void fake_operands(Args &a) {
    a.a = fake_pointer(0x10000), a.b = fake_pointer(0x20000), a.c = fake_pointer(0x30000);
    a.offsets = static_cast<const std::int32_t *>(fake_pointer(0x40000));
}

// with(edit): a call of `launch` on a copy of `good` changed by `edit`, for expect_error.
template <class Args, class Launch> auto args_editor(const moejit::test::CompileOnlyContext &context, const Args &good, Launch launch) {
    return [&context, &good, launch](auto edit) {
        Args a = good;
        edit(a);
        return [&context, a, launch] { return launch(context.get(), &a); };
    };
}

}  // namespace

// ---------------------------------------------------------------- tile configs

BOOST_AUTO_TEST_CASE(tile_config_text_round_trips) {
    GemmTileConfig c;
    c.block_m = 64;
    c.block_n = 256;
    c.block_k = 64;
    c.stages = 3;
    c.warps_m = 1;
    c.warps_n = 8;
    c.group_m = 4;
    c.min_blocks_per_sm = 1;
    BOOST_TEST(to_string(c) == "64x256x64_s3_w1x8_g4_o1");
    BOOST_TEST((parse_tile_config(to_string(c), "t") == c));
    GemmTileConfig d = parse_tile_config("128x256x32", "t");
    BOOST_TEST((d.block_m == 128 && d.block_n == 256 && d.block_k == 32));
    BOOST_TEST(d.stages == GemmTileConfig{}.stages);
    for (const char *bad : {"", "128", "128x128", "128x128x32_", "128x128x32_q4", "axbxc",
                            "128x128x32_w2"}) {
        try {
            parse_tile_config(bad, "MOEJIT_GEMM_TILE");
            BOOST_ERROR("accepted '" << bad << "'");
        } catch (const Error &e) {
            BOOST_TEST(e.status() == Status::invalid_argument);
            BOOST_TEST(contains(e.what(), "MOEJIT_GEMM_TILE"));
        }
    }
}

BOOST_AUTO_TEST_CASE(tile_config_validation_names_the_problem) {
    GemmProblem p;
    p.n = 256, p.k = 256, p.num_experts = 8;
    auto expect = [&](GemmTileConfig c, int cc, const char *fragment) {
        try {
            validate_tile_config(c, p, cc);
            BOOST_ERROR("accepted " << to_string(c) << " on sm_" << cc);
        } catch (const Error &e) {
            BOOST_TEST(e.status() == Status::unsupported);
            BOOST_TEST(contains(e.what(), fragment), e.what());
        }
    };
    GemmTileConfig ok;
    BOOST_CHECK_NO_THROW(validate_tile_config(ok, p, 90));
    BOOST_CHECK_NO_THROW(validate_tile_config(ok, p, 80));
    expect(ok, 75, "compute capability 75");
    // Each: `ok` changed by `edit`, refused on sm_<cc> with a message containing `fragment`.
    struct BadTile {
        void (*edit)(GemmTileConfig &);
        int cc;
        const char *fragment;
    };
    using T = GemmTileConfig;
    for (const BadTile &bad : {
             BadTile{[](T &c) { c.block_m = 96; }, 90, "block_m"},
             BadTile{[](T &c) { c.block_k = 16; }, 90, "block_k"},
             BadTile{[](T &c) { c.warps_m = 3; }, 90, "warps"},
             BadTile{[](T &c) { c.block_n = 64, c.warps_n = 8, c.warps_m = 1; }, 90, "multiple of 16"},
             BadTile{[](T &c) { c.block_m = 256, c.block_n = 256; }, 90, "accumulator registers"},
             BadTile{[](T &c) { c.block_k = 64, c.stages = 8; }, 90, "shared memory"},
             BadTile{[](T &c) { c.stages = 4, c.block_k = 64; }, 86, "shared memory"},  // 128 KiB > 99 KiB on sm_86
             BadTile{[](T &c) { c.stages = 1; }, 90, "stages"},
         }) {
        GemmTileConfig c = ok;
        bad.edit(c);
        expect(c, bad.cc, bad.fragment);
    }
}

// The heuristic's choice validates for every GEMM of every reference shape, on every arch
// family, for the full batch and for a single token.
BOOST_AUTO_TEST_CASE(heuristic_is_valid_for_every_reference_shape) {
    for (int cc : {80, 86, 89, 90, 100, 120})
        for (const Shape &s : kShapes)
            for (std::int64_t rows : {s.T * s.k, std::int64_t{s.k}, std::int64_t{0}}) {
                LayerGemms g = layer_gemms(s, cc, rows);
                for (const GemmNkSpec &spec : g.nk)
                    BOOST_CHECK_NO_THROW(validate_nk_spec(spec, s.E, cc));
                for (const GemmMnSpec &spec : g.mn)
                    BOOST_CHECK_NO_THROW(validate_mn_spec(spec, s.E, cc));
            }
}

// A forced tile (a context's options->gemm_tile or MOEJIT_GEMM_TILE, runtime/config.hpp) replaces
// the heuristic; without one the spec gets the heuristic's, whatever the environment says (the
// context resolved it, not the spec).
BOOST_AUTO_TEST_CASE(forced_tile_overrides_the_heuristic) {
    const ForcedTile forced{parse_tile_config("64x128x64_s4", "test"), "test"};
    GemmNkSpec spec = make_nk_spec(DType::bf16, DType::bf16, 512, 512, true, false, 4096, 8, 90, &forced);
    BOOST_TEST(spec.tile.block_m == 64);
    BOOST_TEST(spec.tile.block_k == 64);
    BOOST_TEST(spec.tile.stages == 4);
    ::setenv("MOEJIT_GEMM_TILE", "64x128x64_s4", 1);  // not read here
    GemmNkSpec plain = make_nk_spec(DType::bf16, DType::bf16, 512, 512, true, false, 4096, 8, 90);
    ::unsetenv("MOEJIT_GEMM_TILE");
    BOOST_TEST((plain.tile == heuristic_tile_config(GemmProblem{GemmKind::same_nk, DType::bf16,
                                                                DType::bf16, 0, 512, 512, true,
                                                                false, 4096, 8},
                                                    90)));
}

// ---------------------------------------------------------------- rendering

BOOST_AUTO_TEST_CASE(render_names_are_readable_and_distinct) {
    std::map<std::string, int> names;
    for (bool bt : {true, false})
        for (bool acc : {true, false})
            for (auto c : {DType::bf16, DType::fp32}) {
                GemmNkSpec s;
                s.n = 2880, s.k = 1408;
                s.b_transposed = bt;
                s.accumulate = acc;
                s.c_dtype = c;
                KernelSource ks = render_group_gemm_nk(s);
                ++names[ks.name];
                BOOST_TEST(ks.template_name == "group_gemm.cuh");
                BOOST_TEST(contains(ks.source, "#include \"group_gemm.cuh\""));
                BOOST_TEST(contains(ks.source, ks.entry));
                BOOST_TEST(contains(ks.source, "2880, 1408"));
                for (char ch : ks.name) BOOST_TEST_REQUIRE(((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'));
            }
    GemmMnSpec m;
    m.m = 2048, m.n = 768;
    KernelSource mk = render_group_gemm_mn(m);
    BOOST_TEST(mk.name == "group_gemm_mn_bf16_cfp32_m2048_n768_" + to_string(m.tile));
    ++names[mk.name];
    BOOST_TEST(names.size() == 9u);
    for (const auto &[name, count] : names) BOOST_TEST(count == 1, name);
}

// ---------------------------------------------------------------- NVRTC

// Every specialization a layer of each reference shape needs, compiled for sm_90a on two
// threads (one compile-only context each: the 2-core CI machine), timed per kernel.
BOOST_AUTO_TEST_CASE(every_reference_specialization_compiles_for_sm90a) {
    std::map<std::string, KernelSource> sources;  // deduplicated by name
    for (const Shape &s : kShapes) {
        LayerGemms g = layer_gemms(s, 90, s.T * s.k);
        for (const auto &spec : g.nk) {
            KernelSource ks = render_group_gemm_nk(spec);
            sources.emplace(ks.name, ks);
        }
        for (const auto &spec : g.mn) {
            KernelSource ks = render_group_gemm_mn(spec);
            sources.emplace(ks.name, ks);
        }
    }
    std::vector<KernelSource> list;
    for (auto &[name, ks] : sources) list.push_back(ks);
    BOOST_TEST_MESSAGE("compiling " << list.size() << " grouped-GEMM specializations for sm_90a");

    constexpr int kThreads = 2;
    std::vector<double> seconds(list.size(), 0.0);
    std::vector<std::string> errors(list.size());
    {
        std::vector<std::unique_ptr<MemoryOnlyContext>> contexts;
        for (int w = 0; w < kThreads; ++w) contexts.push_back(std::make_unique<MemoryOnlyContext>("sm_90a"));
        std::vector<std::thread> threads;
        for (int w = 0; w < kThreads; ++w)
            threads.emplace_back([&, w] {
                for (std::size_t i = w; i < list.size(); i += kThreads) {
                    const double start = moejit::test::thread_cpu_seconds();
                    try {
                        contexts[w]->impl().kernel(list[i]);
                    } catch (const std::exception &e) {
                        errors[i] = e.what();
                    }
                    seconds[i] = moejit::test::thread_cpu_seconds() - start;
                }
            });
        for (auto &t : threads) t.join();
    }
    double worst = 0, total = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
        BOOST_TEST_CONTEXT(list[i].name) { BOOST_TEST(errors[i].empty(), errors[i]); }
        worst = std::max(worst, seconds[i]);
        total += seconds[i];
    }
    BOOST_TEST_MESSAGE("NVRTC per kernel: mean " << total / list.size() << " s, worst " << worst << " s");
    std::printf("group_gemm: %zu kernels, NVRTC mean %.2f s, worst %.2f s\n", list.size(),
                total / list.size(), worst);
    // Budget: < 2 s of compile (thread CPU time) per specialization.
    BOOST_TEST(worst < 2.0);
}

// sm_80 too: the same template must stay Ampere-compatible (one kernel of each kind).
BOOST_AUTO_TEST_CASE(specializations_compile_for_sm80) {
    MemoryOnlyContext context("sm_80");
    for (bool bt : {true, false}) {
        GemmNkSpec s = make_nk_spec(DType::fp16, DType::fp32, 1408, 2880, bt, true, 8192, 8, 80);
        BOOST_CHECK_NO_THROW(context.impl().kernel(render_group_gemm_nk(s)));
    }
    GemmMnSpec m = make_mn_spec(DType::bf16, DType::bf16, 2880, 1408, false, 8192, 8, 80);
    BOOST_CHECK_NO_THROW(context.impl().kernel(render_group_gemm_mn(m)));
}

// ---------------------------------------------------------------- argument validation

BOOST_AUTO_TEST_CASE(nk_argument_validation) {
    MemoryOnlyContext context("sm_90a");
    moejit_group_gemm_nk_args_t good;
    BOOST_REQUIRE(moejit_group_gemm_nk_args_init(&good) == MOEJIT_SUCCESS);
    BOOST_TEST(good.struct_size == sizeof(good));
    good.rows = 1000, good.n = 256, good.k = 512, good.num_experts = 8;
    fake_operands(good);
    const auto INVALID = MOEJIT_ERROR_INVALID_ARGUMENT, UNSUPPORTED = MOEJIT_ERROR_UNSUPPORTED;
    auto with = args_editor(context, good, moejit_group_gemm_same_nk);
    using A = moejit_group_gemm_nk_args_t;
    expect_error([&] { return moejit_group_gemm_same_nk(nullptr, &good); }, INVALID, {"context is NULL"});
    expect_error([&] { return moejit_group_gemm_same_nk(context.get(), nullptr); }, INVALID, {"args is NULL"});
    expect_error(with([](A &a) { a.struct_size -= 8; }), INVALID, {"args->struct_size"});
    expect_error(with([](A &a) { a.dtype = MOEJIT_DTYPE_FP32; }), INVALID, {"args->dtype", "BF16"});
    expect_error(with([](A &a) { a.c_dtype = MOEJIT_DTYPE_INT32; }), INVALID, {"args->c_dtype", "FP32"});
    expect_error(with([](A &a) { a.c_dtype = MOEJIT_DTYPE_FP16; }), INVALID, {"args->c_dtype"});
    expect_error(with([](A &a) { a.n = 1001; }), INVALID, {"args->n", "multiple of 8", "1001"});
    expect_error(with([](A &a) { a.k = 0; }), INVALID, {"args->k", "multiple of 8"});
    expect_error(with([](A &a) { a.k = -8; }), INVALID, {"args->k"});
    expect_error(with([](A &a) { a.n = std::int64_t{1} << 24; }), UNSUPPORTED, {"args->n"});
    expect_error(with([](A &a) { a.num_experts = 0; }), INVALID, {"args->num_experts", ">= 1"});
    expect_error(with([](A &a) { a.rows = -1; }), INVALID, {"args->rows"});
    expect_error(with([](A &a) { a.rows = std::int64_t{1} << 31; }), INVALID, {"args->rows", "int32"});
    expect_error(with([](A &a) { a.b_transposed = 2; }), INVALID, {"args->b_transposed", "0 or 1"});
    expect_error(with([](A &a) { a.accumulate = -1; }), INVALID, {"args->accumulate", "0 or 1"});
    expect_error(with([](A &a) { a.a = nullptr; }), INVALID, {"args->a is NULL"});
    expect_error(with([](A &a) { a.b = nullptr; }), INVALID, {"args->b is NULL"});
    expect_error(with([](A &a) { a.c = nullptr; }), INVALID, {"args->c is NULL"});
    expect_error(with([](A &a) { a.offsets = nullptr; }), INVALID, {"args->offsets is NULL"});
    expect_error(with([](A &a) { a.a = fake_pointer(0x10008); }), INVALID, {"args->a", "16-byte aligned"});
    expect_error(with([](A &a) { a.c = fake_pointer(0x30002); }), INVALID, {"args->c", "4-byte aligned"});
    // Everything valid: a compile-only context cannot launch, and says so.
    expect_error(with([](A &) {}), INVALID, {"compile-only"});
    expect_error(with([](A &a) { a.rows = 0; a.a = a.b = nullptr; a.c = nullptr; }), INVALID, {"compile-only"});
}

BOOST_AUTO_TEST_CASE(mn_argument_validation) {
    MemoryOnlyContext context("sm_90a");
    moejit_group_gemm_mn_args_t good;
    BOOST_REQUIRE(moejit_group_gemm_mn_args_init(&good) == MOEJIT_SUCCESS);
    BOOST_TEST(good.struct_size == sizeof(good));
    BOOST_TEST(good.c_dtype == MOEJIT_DTYPE_FP32);
    good.rows = 1000, good.m = 256, good.n = 512, good.num_experts = 8;
    fake_operands(good);
    const auto INVALID = MOEJIT_ERROR_INVALID_ARGUMENT;
    auto with = args_editor(context, good, moejit_group_gemm_same_mn);
    using A = moejit_group_gemm_mn_args_t;
    expect_error([&] { return moejit_group_gemm_same_mn(nullptr, &good); }, INVALID, {"context is NULL"});
    expect_error(with([](A &a) { a.struct_size = std::size_t{1} << 20; }), INVALID, {"args->struct_size"});  // garbage; a newer header's size: test_bad_input.c
    expect_error(with([](A &a) { a.m = 12; }), INVALID, {"args->m", "multiple of 8", "12"});
    expect_error(with([](A &a) { a.n = 0; }), INVALID, {"args->n"});
    expect_error(with([](A &a) { a.dtype = MOEJIT_DTYPE_INT64; }), INVALID, {"args->dtype"});
    expect_error(with([](A &a) { a.accumulate = 1; a.c_dtype = MOEJIT_DTYPE_BF16; }), INVALID,
                 {"args->accumulate", "MOEJIT_DTYPE_FP32"});
    expect_error(with([](A &a) { a.accumulate = 3; }), INVALID, {"args->accumulate", "0 or 1"});
    expect_error(with([](A &a) { a.num_experts = -2; }), INVALID, {"args->num_experts"});
    expect_error(with([](A &a) { a.b = nullptr; }), INVALID, {"args->b is NULL"});
    expect_error(with([](A &a) { a.c = fake_pointer(0x30004); }), INVALID, {"args->c", "8-byte aligned"});
    // rows == 0 still writes C = 0: c and offsets are required, a and b are not.
    expect_error(with([](A &a) { a.rows = 0; a.c = nullptr; }), INVALID, {"args->c is NULL"});
    expect_error(with([](A &a) { a.rows = 0; a.a = a.b = nullptr; }), INVALID, {"compile-only"});
    expect_error(with([](A &) {}), INVALID, {"compile-only"});
}

// The C++ launcher reports an unusable tile config as UNSUPPORTED before touching the device.
BOOST_AUTO_TEST_CASE(launcher_rejects_bad_tile_and_arch) {
    MemoryOnlyContext context("sm_90a");
    GroupGemmNkArgs args;
    args.rows = 64;
    args.n = 256;
    args.k = 256;
    args.num_experts = 2;
    args.a = fake_pointer(0x10000);
    args.b = fake_pointer(0x20000);
    args.c = fake_pointer(0x30000);
    args.offsets = static_cast<const std::int32_t *>(fake_pointer(0x40000));
    GemmTileConfig bad;
    bad.block_n = 48;
    try {
        group_gemm_same_nk(context.impl(), args, &bad);
        BOOST_ERROR("accepted block_n = 48");
    } catch (const Error &e) {
        BOOST_TEST(e.status() == Status::unsupported);
        BOOST_TEST(contains(e.what(), "block_n"), e.what());
    }
}
