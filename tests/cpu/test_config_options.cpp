// Configuration as data (issue 13 item 4), through the public C ABI without a GPU: the switches
// of moejit_context_options_t (tune, gather, fuse_swiglu, gemm_tile, and jit_mode) beat their
// MOEJIT_* variables, which beat the built-in defaults; bad values are INVALID_ARGUMENT naming
// the field; the released sizes of the options struct are still accepted (their missing fields
// take the environment); and moejit_plan_describe_desc reports what a plan resolves.
#define BOOST_TEST_MODULE config_options
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "compile_only.hpp"
#include "env_var.hpp"
#include "layer_args.h"
#include "moejit.h"
#include "moejit/moejit.hpp"

using moejit::test::EnvVar;

namespace {

struct Clean {
    Clean() {
        for (const char *v : {"MOEJIT_COMPILE", "MOEJIT_TUNE", "MOEJIT_GATHER", "MOEJIT_FUSE_SWIGLU", "MOEJIT_GEMM_TILE",
                              "MOEJIT_STORE_RING"})
            ::unsetenv(v);
    }
};
BOOST_TEST_GLOBAL_FIXTURE(Clean);

moejit_context_options_t options() {
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    return o;
}

moejit_plan_desc_t small_desc() {
    moejit_plan_desc_t d;
    layer_desc_init(&d, 256, 128, 4, 2);  // I <= 2048: gathered by default on sm_90a
    return d;
}

using Description = std::map<std::string, std::string>;

Description parse(const std::string &text) {
    Description out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        const auto eq = line.find('=');
        BOOST_REQUIRE_MESSAGE(eq != std::string::npos, "not key=value: " << line);
        out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
}

// What a plan of small_desc() resolves on a context made with `o` (which must succeed).
Description describe(const moejit_context_options_t &o, moejit_plan_desc_t d = small_desc()) {
    moejit_context_t c = nullptr;
    BOOST_REQUIRE_MESSAGE(moejit_context_create(&o, &c) == MOEJIT_SUCCESS, moejit_last_error());
    size_t need = 0;
    BOOST_REQUIRE_MESSAGE(moejit_plan_describe_desc(c, &d, nullptr, 0, &need) == MOEJIT_SUCCESS, moejit_last_error());
    std::string text(need, '\1');
    size_t again = 0;
    BOOST_REQUIRE(moejit_plan_describe_desc(c, &d, text.data(), text.size(), &again) == MOEJIT_SUCCESS);
    moejit_context_destroy(c);
    BOOST_TEST(again == need);
    BOOST_TEST(text.back() == '\0');
    text.pop_back();
    BOOST_TEST(text.find('\0') == std::string::npos);
    return parse(text);
}

moejit_status_t create(const moejit_context_options_t &o) {
    moejit_context_t c = nullptr;
    const moejit_status_t st = moejit_context_create(&o, &c);
    moejit_context_destroy(c);
    return st;
}

bool last_error_has(const std::string &s) { return std::string(moejit_last_error()).find(s) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(defaults_without_options_or_environment) {
    const Description d = describe(options());
    BOOST_TEST(d.at("arch") == "sm_90a");
    for (const char *key : {"jit", "tune", "gather", "fuse_swiglu", "gemm_tile", "store_ring"})
        BOOST_TEST(d.at(std::string(key) + "_from") == "default", key);
    BOOST_TEST(d.at("store_ring") == "off");
    BOOST_TEST(d.at("jit") == "on");
    BOOST_TEST(d.at("tune") == "off");
    BOOST_TEST(d.at("gather") == "on", "the rule: I <= 2048 on the wgmma engine");
    BOOST_TEST(d.at("fuse_swiglu") == "off");
    BOOST_TEST(d.at("gemm_tile") == "heuristic");
    for (const char *role : {"fc1", "fc2", "fc2_dgrad", "fc1_dgrad", "fc2_wgrad", "fc1_wgrad"})
        BOOST_TEST(d.at(std::string("tile_") + role).rfind("wgmma_", 0) == 0u, role);
    BOOST_TEST(d.count("tile_fc1_dgrad_acc") == 0u, "split fc1's dgrad is one GEMM here (I % 64 == 0)");
    // Another arch: the mma.sync engine gathers nothing, whatever the rule says.
    moejit_context_options_t o = options();
    o.arch = "sm_80";
    const Description portable = describe(o);
    BOOST_TEST(portable.at("gather") == "off");
    BOOST_TEST(portable.at("tile_fc1").rfind("wgmma_", 0) == std::string::npos);
    BOOST_TEST(portable.count("tile_fc1_dgrad_acc") == 1u);
}

// Each switch: option > environment > default, and the description says which one decided.
BOOST_AUTO_TEST_CASE(option_beats_environment_beats_default) {
    struct Switch {
        const char *key, *variable;
        std::int32_t moejit_context_options_t::*field;
        const char *env_value, *env_result;  // a variable value that differs from the default
    };
    const Switch switches[] = {
        {"tune", "MOEJIT_TUNE", &moejit_context_options_t::tune, "1", "on"},
        {"gather", "MOEJIT_GATHER", &moejit_context_options_t::gather, "0", "off"},
        {"fuse_swiglu", "MOEJIT_FUSE_SWIGLU", &moejit_context_options_t::fuse_swiglu, "yes", "on"},
    };
    for (const Switch &s : switches) {
        const std::string from = std::string(s.key) + "_from";
        moejit_context_options_t o = options();
        {
            EnvVar v(s.variable, s.env_value);
            Description d = describe(o);
            BOOST_TEST(d.at(s.key) == s.env_result, s.variable << "=" << s.env_value);
            BOOST_TEST(d.at(from) == "environment");
            for (std::int32_t value : {MOEJIT_SWITCH_ON, MOEJIT_SWITCH_OFF}) {
                o.*s.field = value;
                d = describe(o);
                BOOST_TEST(d.at(s.key) == (value == MOEJIT_SWITCH_ON ? "on" : "off"), s.key << " over the environment");
                BOOST_TEST(d.at(from) == "option");
            }
        }
        o.*s.field = MOEJIT_SWITCH_FROM_ENV;
        BOOST_TEST(describe(o).at(from) == "default", s.key);
    }
    // jit_mode (since 0.1) follows the same order over MOEJIT_COMPILE.
    moejit_context_options_t o = options();
    {
        EnvVar v("MOEJIT_COMPILE", "off");
        BOOST_TEST(describe(o).at("jit") == "off");
        BOOST_TEST(describe(o).at("jit_from") == "environment");
        o.jit_mode = MOEJIT_JIT_ON;
        BOOST_TEST(describe(o).at("jit") == "on");
        BOOST_TEST(describe(o).at("jit_from") == "option");
    }
    // The tile: the option's text, "" for the heuristic over the variable, NULL for the variable.
    const char *env_tile = "wgmma_128x128x64_s4_g8", *option_tile = "wgmma_128x256x64_s3_g8";
    o = options();
    EnvVar v("MOEJIT_GEMM_TILE", env_tile);
    Description d = describe(o);
    BOOST_TEST(d.at("gemm_tile") == env_tile);
    BOOST_TEST(d.at("gemm_tile_from") == "environment");
    BOOST_TEST(d.at("tile_fc2") == env_tile);
    o.gemm_tile = option_tile;
    d = describe(o);
    BOOST_TEST(d.at("gemm_tile") == option_tile);
    BOOST_TEST(d.at("gemm_tile_from") == "option");
    BOOST_TEST(d.at("tile_fc2") == option_tile);
    BOOST_TEST(d.at("tile_fc1_wgrad") == option_tile);
    o.gemm_tile = "";
    d = describe(o);
    BOOST_TEST(d.at("gemm_tile") == "heuristic");
    BOOST_TEST(d.at("gemm_tile_from") == "option");
    BOOST_TEST(d.at("tile_fc2") != env_tile);
    // A forced tile turns tuning off, asked for or not.
    o.gemm_tile = nullptr;
    o.tune = MOEJIT_SWITCH_ON;
    BOOST_TEST(describe(o).at("tune") == "off");
    o.gemm_tile = "";
    BOOST_TEST(describe(o).at("tune") == "on");
}

// A request the layer cannot honour reads off: the SwiGLU epilogue needs plain SwiGLU.
BOOST_AUTO_TEST_CASE(description_says_what_the_plan_does) {
    moejit_context_options_t o = options();
    o.fuse_swiglu = MOEJIT_SWITCH_ON;
    o.gather = MOEJIT_SWITCH_OFF;
    moejit_plan_desc_t d = small_desc();
    Description fused = describe(o, d);
    BOOST_TEST(fused.at("fuse_swiglu") == "on");
    BOOST_TEST(fused.at("gather") == "off");
    BOOST_TEST(fused.at("tile_fc1") != describe(options(), d).at("tile_fc1"));
    d.activation = MOEJIT_ACTIVATION_GPT_OSS;
    d.fc1_layout = MOEJIT_FC1_INTERLEAVED;
    Description oss = describe(o, d);
    BOOST_TEST(oss.at("fuse_swiglu") == "off");
    BOOST_TEST(oss.at("fuse_swiglu_from") == "option");
}

// MOEJIT_STORE_RING (environment only): the layer's cooperative TMA-store tiles take the store
// ring and the deeper operand ring it leaves room for (a 128 x 256 tile: four stages, not
// three); a forced tile wins over it.
BOOST_AUTO_TEST_CASE(store_ring_from_the_environment) {
    moejit_plan_desc_t d;
    layer_desc_init(&d, 2048, 768, 128, 8);
    const Description plain = describe(options(), d);
    BOOST_TEST(plain.at("tile_fc2") == "wgmma_128x256x64_s3_g8_e1");
    EnvVar ring("MOEJIT_STORE_RING", "1");
    const Description with = describe(options(), d);
    BOOST_TEST(with.at("store_ring") == "on");
    BOOST_TEST(with.at("store_ring_from") == "environment");
    BOOST_TEST(with.at("tile_fc2") == "wgmma_128x256x64_s4_g8_e1_r1");
    // 256 rows per expert (tokens_hint 0: 4096 tokens, top-8 over 128 experts): every 128 x 256
    // TMA-store tile of a same_nk GEMM took the ring and a fourth stage; the weight gradients
    // (K = the rows of one expert) take it from 1024 rows per expert.
    for (const char *role : {"fc1", "fc2", "fc2_dgrad", "fc1_dgrad"}) {
        const std::string tile = with.at(std::string("tile_") + role);
        BOOST_TEST(tile.find("wgmma_128x256x64_s4_") == 0u, role << ": " << tile);
        BOOST_TEST(tile.find("_e1_r1") != std::string::npos, role << ": " << tile);
    }
    for (const char *role : {"fc2_wgrad", "fc1_wgrad"})
        BOOST_TEST(with.at(std::string("tile_") + role).find("_r1") == std::string::npos, role);
    moejit_plan_desc_t long_experts = d;
    long_experts.tokens_hint = 16384;  // 1024 rows per expert
    for (const char *role : {"fc2_wgrad", "fc1_wgrad"})
        BOOST_TEST(describe(options(), long_experts).at(std::string("tile_") + role).find("_e1_r1") != std::string::npos, role);
    moejit_plan_desc_t few_rows = d;
    few_rows.tokens_hint = 2048;  // 128 rows per expert: no GEMM takes it
    for (const auto &[key, tile] : describe(options(), few_rows))
        if (key.rfind("tile_", 0) == 0) BOOST_TEST(tile.find("_r1") == std::string::npos, key << ": " << tile);
    BOOST_TEST(describe(options(), few_rows).at("store_ring") == "off", "describe says what the plan does");
    // deepseek-v3 (H 7168, I 2048, 256 experts, top-8, 8192 tokens: 256 rows per expert): fc1
    // gathers x's rows over K = 7168, so it takes the ring from 1024 rows per expert only; the
    // other same_nk GEMMs take it at 256 as above.
    moejit_plan_desc_t deepseek;
    layer_desc_init(&deepseek, 7168, 2048, 256, 8);
    deepseek.tokens_hint = 8192;
    const Description ds = describe(options(), deepseek);
    BOOST_TEST(ds.at("gather") == "on");
    BOOST_TEST(ds.at("tile_fc1").find("_r1") == std::string::npos, ds.at("tile_fc1"));
    for (const char *role : {"fc2", "fc2_dgrad", "fc1_dgrad"})
        BOOST_TEST(ds.at(std::string("tile_") + role).find("_e1_r1") != std::string::npos, role);
    deepseek.tokens_hint = 32768;  // 1024 rows per expert
    BOOST_TEST(describe(options(), deepseek).at("tile_fc1").find("_e1_r1") != std::string::npos);
    moejit_context_options_t forced = options();
    forced.gemm_tile = "wgmma_128x128x64_s4_g8";
    const Description f = describe(forced, d);
    BOOST_TEST(f.at("store_ring") == "off");
    BOOST_TEST(f.at("tile_fc2") == "wgmma_128x128x64_s4_g8");
    // The mma.sync engine has no ring: describe says what the plan does.
    moejit_context_options_t portable = options();
    portable.arch = "sm_80";
    BOOST_TEST(describe(portable, d).at("store_ring") == "off");
    BOOST_TEST(describe(portable, d).at("store_ring_from") == "environment");
    // At BLOCK_N 128 the ring buys no stage: those tiles keep the whole row block's staging.
    moejit_plan_desc_t narrow;
    layer_desc_init(&narrow, 128, 128, 8, 2);
    for (const auto &[key, tile] : describe(options(), narrow))
        if (key.rfind("tile_", 0) == 0) BOOST_TEST(tile.find("_r1") == std::string::npos, key << ": " << tile);
}

BOOST_AUTO_TEST_CASE(bad_option_values_name_the_field) {
    struct Bad {
        std::int32_t moejit_context_options_t::*field;
        const char *name;
    };
    for (const Bad &b : {Bad{&moejit_context_options_t::tune, "options->tune"},
                         Bad{&moejit_context_options_t::gather, "options->gather"},
                         Bad{&moejit_context_options_t::fuse_swiglu, "options->fuse_swiglu"}}) {
        for (std::int32_t value : {3, -1, 1000}) {
            moejit_context_options_t o = options();
            o.*b.field = value;
            BOOST_TEST(create(o) == MOEJIT_ERROR_INVALID_ARGUMENT, b.name << " = " << value);
            BOOST_TEST(last_error_has(b.name), moejit_last_error());
            BOOST_TEST(last_error_has("MOEJIT_SWITCH_ON"), moejit_last_error());
        }
    }
    for (const char *bad : {"big", "128x128", "wgmma_128x256x64_s3_q4"}) {
        moejit_context_options_t o = options();
        o.gemm_tile = bad;
        BOOST_TEST(create(o) == MOEJIT_ERROR_INVALID_ARGUMENT, bad);
        BOOST_TEST(last_error_has("options->gemm_tile"), moejit_last_error());
        BOOST_TEST(last_error_has(bad), moejit_last_error());
    }
    // Well-formed but unable to run the layer (384 KiB of shared memory): UNSUPPORTED when the
    // plan picks its tiles, naming the option, not the variable.
    moejit_context_options_t o = options();
    o.gemm_tile = "wgmma_128x256x64_s8_g8";
    o.jit_mode = MOEJIT_JIT_OFF;
    moejit_context_t c = nullptr;
    BOOST_REQUIRE(moejit_context_create(&o, &c) == MOEJIT_SUCCESS);
    const moejit_plan_desc_t d = small_desc();
    BOOST_TEST(moejit_plan_warmup(c, &d, nullptr) == MOEJIT_ERROR_UNSUPPORTED);
    BOOST_TEST(last_error_has("options->gemm_tile=wgmma_128x256x64_s8_g8"), moejit_last_error());
    BOOST_TEST(moejit_plan_describe_desc(c, &d, nullptr, 0, nullptr) == MOEJIT_ERROR_UNSUPPORTED);
    moejit_context_destroy(c);
}

// The environment is validated whether or not an option overrides it: a typo fails anywhere.
BOOST_AUTO_TEST_CASE(bad_environment_fails_even_under_an_option) {
    moejit_context_options_t o = options();
    o.gather = MOEJIT_SWITCH_ON;
    EnvVar v("MOEJIT_GATHER", "sometimes");
    BOOST_TEST(create(o) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("MOEJIT_GATHER"), moejit_last_error());
    EnvVar t("MOEJIT_GATHER", nullptr), tile("MOEJIT_GEMM_TILE", "huge");
    o.gemm_tile = "";
    BOOST_TEST(create(o) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("environment variable MOEJIT_GEMM_TILE"), moejit_last_error());
}

// The 0.1-0.5 options struct (56 bytes on LP64, before `tune`) is accepted; the fields it lacks
// take their defaults, i.e. the environment: whatever lies past its struct_size is not read.
BOOST_AUTO_TEST_CASE(released_struct_sizes_are_accepted) {
    const std::size_t v01 = offsetof(moejit_context_options_t, tune);
    BOOST_TEST(v01 == 56u);
    BOOST_TEST(sizeof(moejit_context_options_t) == 80u);
    moejit_context_options_t o = options();
    std::memset(reinterpret_cast<unsigned char *>(&o) + v01, 0xFF, sizeof o - v01);  // garbage
    o.struct_size = v01;
    EnvVar g("MOEJIT_GATHER", "0"), f("MOEJIT_FUSE_SWIGLU", "1");
    const Description d = describe(o);
    BOOST_TEST(d.at("gather") == "off");
    BOOST_TEST(d.at("gather_from") == "environment");
    BOOST_TEST(d.at("fuse_swiglu") == "on");
    BOOST_TEST(d.at("tune_from") == "default");
    BOOST_TEST(d.at("gemm_tile") == "heuristic");
    // The init functions: the sized one writes the caller's size; the unsized one, kept for
    // 0.1-0.3 binaries, writes the 0.3 struct (56 bytes) forever.
    unsigned char buf[sizeof(moejit_context_options_t) + 16];
    std::memset(buf, 0xA5, sizeof buf);
    auto *p = reinterpret_cast<moejit_context_options_t *>(buf);
    BOOST_TEST((moejit_context_options_init)(p) == MOEJIT_SUCCESS);
    BOOST_TEST(p->struct_size == v01);
    for (std::size_t i = v01; i < sizeof buf; ++i) BOOST_TEST_REQUIRE(buf[i] == 0xA5);
    BOOST_TEST(moejit_context_options_init_sized(p, v01) == MOEJIT_SUCCESS);
    BOOST_TEST(moejit_context_options_init_sized(p, v01 + 8) == MOEJIT_ERROR_INVALID_ARGUMENT, "no header has it");
    BOOST_TEST(moejit_context_options_init(p) == MOEJIT_SUCCESS);
    BOOST_TEST(p->struct_size == sizeof(moejit_context_options_t));
    BOOST_TEST(p->tune == MOEJIT_SWITCH_FROM_ENV);
    BOOST_TEST(p->gather == MOEJIT_SWITCH_FROM_ENV);
    BOOST_TEST(p->fuse_swiglu == MOEJIT_SWITCH_FROM_ENV);
    BOOST_TEST(p->gemm_tile == nullptr);
    // A size between the released ones is refused, naming it.
    o.struct_size = v01 + 8;
    BOOST_TEST(create(o) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("options->struct_size"), moejit_last_error());
}

// moejit_plan_describe's buffer contract (moejit_plan_describe_desc shares it).
BOOST_AUTO_TEST_CASE(describe_buffer_contract) {
    moejit::test::CompileOnlyContext ctx("sm_90a", moejit::test::CompileOnlyContext::Cache::memory_only);
    const moejit_plan_desc_t d = small_desc();
    size_t need = 0;
    BOOST_TEST(moejit_plan_describe_desc(ctx.get(), &d, nullptr, 0, &need) == MOEJIT_SUCCESS);
    BOOST_TEST(need > 10u);
    BOOST_TEST(moejit_plan_describe_desc(ctx.get(), &d, nullptr, 0, nullptr) == MOEJIT_SUCCESS);
    char small[8];
    std::memset(small, 'x', sizeof small);
    size_t again = 0;
    BOOST_TEST(moejit_plan_describe_desc(ctx.get(), &d, small, sizeof small, &again) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("size is 8"), moejit_last_error());
    BOOST_TEST(again == need);
    BOOST_TEST(std::string(small) == "arch=sm");  // truncated, NUL-terminated
    BOOST_TEST(moejit_plan_describe_desc(ctx.get(), &d, nullptr, 5, &again) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("buf is NULL"), moejit_last_error());
    BOOST_TEST(moejit_plan_describe_desc(nullptr, &d, nullptr, 0, &need) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("context"), moejit_last_error());
    BOOST_TEST(moejit_plan_describe_desc(ctx.get(), nullptr, nullptr, 0, &need) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("desc"), moejit_last_error());
    moejit_plan_desc_t bad = d;
    bad.hidden_size = 250;
    BOOST_TEST(moejit_plan_describe_desc(ctx.get(), &bad, nullptr, 0, &need) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("desc->hidden_size"), moejit_last_error());
    BOOST_TEST(moejit_plan_describe(nullptr, nullptr, 0, &need) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(last_error_has("plan"), moejit_last_error());
}

// The C++ wrapper's options builder sets the same fields.
BOOST_AUTO_TEST_CASE(cpp_wrapper_options) {
    moejit::api::ContextOptions o;
    o.compile_only = true;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.gather = false;
    o.fuse_swiglu = true;
    o.gemm_tile = "wgmma_128x128x64_s4_g8";
    moejit::api::Context ctx(o);
    const std::string text = ctx.describe_plan(small_desc());
    const Description d = parse(text);
    BOOST_TEST(d.at("gather") == "off");
    BOOST_TEST(d.at("gather_from") == "option");
    BOOST_TEST(d.at("gemm_tile") == "wgmma_128x128x64_s4_g8");
    BOOST_TEST(d.at("fuse_swiglu") == "on");
    moejit::api::ContextOptions bad;
    bad.compile_only = true;
    bad.arch = "sm_90a";
    bad.gemm_tile = "big";
    try {
        moejit::api::Context never(bad);
        BOOST_FAIL("expected an exception");
    } catch (const moejit::api::Exception &e) {
        BOOST_TEST(e.status() == MOEJIT_ERROR_INVALID_ARGUMENT);
        BOOST_TEST(std::string(e.what()).find("options->gemm_tile") != std::string::npos);
    }
}
