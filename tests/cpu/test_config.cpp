// Strict configuration (issue 16 item 5), without a GPU: every MOEJIT_* environment value is
// parsed strictly when a context is created; a forced tile that cannot run fails when a plan
// picks its tiles, naming MOEJIT_GEMM_TILE. Through the public C ABI (as 0.3.0 had it), so the
// same file built against 0.3.0 shows the findings.
#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <string>

#include "compile_only.hpp"
#include "env_var.hpp"
#include "layer_args.h"
#include "moejit.h"

using moejit::test::EnvVar;
using moejit::test::TempDir;

namespace {

// Creates a compile-only, memory-only sm_90a context; returns the status (and destroys it).
moejit_status_t create_context(int jit_mode = MOEJIT_JIT_FROM_ENV) {
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.jit_mode = jit_mode;
    moejit_context_t ctx = nullptr;
    moejit_status_t st = moejit_context_create(&o, &ctx);
    if (st == MOEJIT_SUCCESS) moejit_context_destroy(ctx);
    return st;
}

bool last_error_has(const std::string &text) { return std::string(moejit_last_error()).find(text) != std::string::npos; }

moejit_plan_desc_t small_desc() {
    moejit_plan_desc_t d;
    layer_desc_init(&d, 256, 128, 4, 2);
    d.dtype = MOEJIT_DTYPE_BF16;
    return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(flags_accept_exactly_the_documented_spellings) {
    for (const char *var : {"MOEJIT_COMPILE", "MOEJIT_TUNE", "MOEJIT_GATHER", "MOEJIT_FUSE_SWIGLU", "MOEJIT_STORE_RING"}) {
        for (const char *good : {"1", "0", "on", "OFF", "True", "false", "yes", "No", ""}) {
            EnvVar v(var, good);
            BOOST_TEST(create_context() == MOEJIT_SUCCESS, var << "=\"" << good << "\": " << moejit_last_error());
        }
        for (const char *bad : {" off", "off ", "disabled", "2", "enable", "y", "-1"}) {
            EnvVar v(var, bad);
            BOOST_TEST(create_context() == MOEJIT_ERROR_INVALID_ARGUMENT, var << "=\"" << bad << "\"");
            BOOST_TEST(last_error_has(var), moejit_last_error());
            BOOST_TEST(last_error_has(std::string("\"") + bad + "\""), moejit_last_error());
            BOOST_TEST(last_error_has("expected 1, on, true or yes, 0, off, false or no"), moejit_last_error());
        }
    }
}

BOOST_AUTO_TEST_CASE(compile_off_spellings_turn_jit_off) {
    // The finding: " off" / "disabled" / "2" silently compiled. The accepted ones do turn it off:
    // a plan warmup on a memory-only context then misses.
    for (const char *off : {"off", "0", "FALSE", "no"}) {
        EnvVar v("MOEJIT_COMPILE", off);
        moejit_context_options_t o;
        moejit_context_options_init(&o);
        o.compile_only = 1;
        o.arch = "sm_90a";
        o.cache_dir = "";
        moejit_context_t ctx = nullptr;
        BOOST_REQUIRE(moejit_context_create(&o, &ctx) == MOEJIT_SUCCESS);
        moejit_plan_desc_t d = small_desc();
        BOOST_TEST(moejit_plan_warmup(ctx, &d, nullptr) == MOEJIT_ERROR_JIT_DISABLED);
        moejit_context_destroy(ctx);
    }
}

BOOST_AUTO_TEST_CASE(malformed_gemm_tile_fails_context_creation) {
    for (const char *bad : {"128x128", "wgmma_128x256x64_s3_q4", "big", "128x128x64_e2"}) {
        EnvVar v("MOEJIT_GEMM_TILE", bad);
        BOOST_TEST(create_context() == MOEJIT_ERROR_INVALID_ARGUMENT, "MOEJIT_GEMM_TILE=" << bad);
        BOOST_TEST(last_error_has("MOEJIT_GEMM_TILE"), moejit_last_error());
        BOOST_TEST(last_error_has(bad), moejit_last_error());
    }
    EnvVar ok("MOEJIT_GEMM_TILE", "wgmma_128x128x64_s4_g8");
    BOOST_TEST(create_context() == MOEJIT_SUCCESS, moejit_last_error());
}

BOOST_AUTO_TEST_CASE(gemm_tile_that_cannot_run_fails_when_the_plan_picks_tiles) {
    // Well-formed, but 8 stages of 128x256x64 bf16 need 384 KiB of shared memory: no sm_90
    // block has that. 0.3.0 accepted it and failed later (NVRTC or launch); the warmup
    // "succeeded". Now the plan's tile choice fails, naming the variable.
    EnvVar v("MOEJIT_GEMM_TILE", "wgmma_128x256x64_s8_g8");
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.jit_mode = MOEJIT_JIT_OFF;  // nothing compiles: the tile choice comes first
    moejit_context_t ctx = nullptr;
    BOOST_REQUIRE(moejit_context_create(&o, &ctx) == MOEJIT_SUCCESS);
    moejit_plan_desc_t d = small_desc();
    moejit_status_t st = moejit_plan_warmup(ctx, &d, nullptr);
    BOOST_TEST(st == MOEJIT_ERROR_UNSUPPORTED, moejit_status_string(st) << ": " << moejit_last_error());
    BOOST_TEST(last_error_has("MOEJIT_GEMM_TILE"), moejit_last_error());
    moejit_context_destroy(ctx);
}
