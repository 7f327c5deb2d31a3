// moejit-warmup's plan configuration flags (--gather, --fuse-swiglu, --gemm-tile) against the
// library (issue 13 item 4, configuration as data), without a GPU and without compiling: for each
// option set, the kernels the warmup enumerates (its own worker contexts, tools/warmup/runner)
// are exactly plan_kernel_sources of a context created with the same options, over every plan
// variant the warmup runs; and the tool itself, `--check` with those flags, passes on a folder
// holding exactly those kernels (stand-in entries: compile-only contexts never load a cubin) and
// reads every one of them, while another option set fails there.
#define BOOST_TEST_MODULE warmup_config
#include <boost/test/unit_test.hpp>

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "capi_convert.hpp"  // the tool's C descriptors, as the library's
#include "compile_only.hpp"
#include "runtime/context.hpp"
#include "runtime/disk_cache.hpp"
#include "moe/plan.hpp"
#include "moejit.h"
#include "warmup/model_spec.hpp"
#include "warmup/runner.hpp"
#include "warmup/variants.hpp"

using moejit::test::TempDir;

namespace {

constexpr const char *kArch = "sm_90a";
constexpr const char *kSpec = "256,128,4,2";  // tiny: gathered by default (I <= 2048), wgmma
constexpr const char *kTile = "wgmma_128x128x64_s4_g8";

// One configuration, as warmup flags and as the context options they stand for.
struct OptionSet {
    const char *name;
    std::vector<std::string> flags;  // pairs: flag, value
    std::int32_t gather = MOEJIT_SWITCH_FROM_ENV, fuse_swiglu = MOEJIT_SWITCH_FROM_ENV;
    const char *gemm_tile = nullptr;
};

const std::vector<OptionSet> &option_sets() {
    static const std::vector<OptionSet> sets = {
        {"defaults", {}},
        {"gather_off", {"--gather", "off"}, MOEJIT_SWITCH_OFF},
        {"gather_on", {"--gather", "on"}, MOEJIT_SWITCH_ON},
        {"fuse_swiglu", {"--fuse-swiglu", "on"}, MOEJIT_SWITCH_FROM_ENV, MOEJIT_SWITCH_ON},
        {"gather_off_fuse_swiglu", {"--gather", "off", "--fuse-swiglu", "on"}, MOEJIT_SWITCH_OFF, MOEJIT_SWITCH_ON},
        {"tile", {"--gemm-tile", kTile}, MOEJIT_SWITCH_FROM_ENV, MOEJIT_SWITCH_FROM_ENV, kTile},
        {"tile_heuristic", {"--gemm-tile", "heuristic"}, MOEJIT_SWITCH_FROM_ENV, MOEJIT_SWITCH_FROM_ENV, ""},
    };
    return sets;
}

// Every plan variant the warmup runs for kSpec in bf16 (its own enumeration).
std::vector<warmup::WarmupJob> jobs() {
    moejit_plan_desc_t defaults;
    moejit_plan_desc_init(&defaults);
    warmup::VariantOptions variants;
    variants.dtypes = {MOEJIT_DTYPE_BF16};
    return warmup::enumerate_jobs({warmup::parse_spec(kSpec)}, variants, defaults);
}

using SourceSet = std::map<std::string, moejit::KernelSource>;  // by full source text

std::set<std::string> texts(const SourceSet &s) {
    std::set<std::string> out;
    for (const auto &[text, k] : s) out.insert(text);
    return out;
}

SourceSet kernels_of(const moejit::Context &ctx) {
    SourceSet out;
    for (const warmup::WarmupJob &job : jobs())
        for (moejit::KernelSource &k : moejit::plan_kernel_sources(moejit::to_internal(job.desc), ctx.config(), ctx.compute_capability()))
            out.emplace(k.source, std::move(k));
    return out;
}

struct ContextGuard {
    moejit_context_t c = nullptr;
    ~ContextGuard() { moejit_context_destroy(c); }
};

// The warmup's own worker context for `set` (flags parsed by the tool's code).
moejit_context_t warmup_context(const OptionSet &set, const std::string &root) {
    warmup::RunOptions run;
    run.arch = kArch;
    run.cache_dir = root;
    run.check = true;
    for (std::size_t i = 0; i < set.flags.size(); i += 2)
        BOOST_REQUIRE(warmup::apply_config_flag(run, set.flags[i], set.flags[i + 1]));
    moejit_status_t status;
    std::string message;
    moejit_context_t c = warmup::create_worker_context(run, nullptr, status, message);
    BOOST_REQUIRE_MESSAGE(c, set.name << ": " << message);
    return c;
}

// A context made by hand with the options `set` stands for.
moejit_context_t plan_context(const OptionSet &set, const std::string &root) {
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = kArch;
    o.cache_dir = root.c_str();
    o.gather = set.gather;
    o.fuse_swiglu = set.fuse_swiglu;
    o.gemm_tile = set.gemm_tile;
    moejit_context_t c = nullptr;
    BOOST_REQUIRE_MESSAGE(moejit_context_create(&o, &c) == MOEJIT_SUCCESS, set.name << ": " << moejit_last_error());
    return c;
}

// A valid cache entry under `ctx`'s folder for each source (a stand-in payload: compile-only
// contexts never load it).
void plant(moejit::Context &ctx, const SourceSet &sources) {
    moejit::DiskCache disk(ctx.jit().cache_dir(), moejit::Logger{});
    const moejit::CachedKernel payload{"stand_in", {'n', 'o', 't', ' ', 'a', ' ', 'c', 'u', 'b', 'i', 'n'}};
    for (const auto &[text, source] : sources) BOOST_REQUIRE(disk.store(source.name, ctx.jit().key(source), payload));
}

struct ToolRun {
    int status = -1;
    std::string out;
};

// moejit-warmup --check over kSpec (bf16, one worker, so disk hits = distinct kernels read).
ToolRun check(const std::string &root, const std::vector<std::string> &flags) {
    const char *tool = std::getenv("MOEJIT_WARMUP");
    BOOST_REQUIRE_MESSAGE(tool, "MOEJIT_WARMUP (the tool's path) is not set; tests/meson.build sets it");
    std::string cmd = std::string("'") + tool + "' --check --spec " + kSpec + " --dtype bf16 --arch " + kArch +
                      " --jobs 1 --cache-dir '" + root + "'";
    for (const std::string &f : flags) cmd += " '" + f + "'";
    cmd += " 2>&1";
    ToolRun r;
    FILE *p = ::popen(cmd.c_str(), "r");
    BOOST_REQUIRE(p);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
    const int w = ::pclose(p);
    r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
    return r;
}

long disk_hits(const std::string &out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex(R"((\d+) disk hits)")) ? std::stol(m[1]) : -1;
}

// Unsets the configuration variables for one test (and restores nothing: tests set their own).
void clear_environment() {
    for (const char *v : {"MOEJIT_GATHER", "MOEJIT_FUSE_SWIGLU", "MOEJIT_GEMM_TILE", "MOEJIT_TUNE", "MOEJIT_COMPILE",
                          "MOEJIT_STORE_RING"})
        ::unsetenv(v);
}

}  // namespace

BOOST_AUTO_TEST_CASE(warmup_enumerates_what_a_plan_with_the_same_options_loads) {
    clear_environment();
    std::map<std::string, SourceSet> by_set;
    for (const OptionSet &set : option_sets()) {
        TempDir dir("moejit-warmup-config");
        ContextGuard tool{warmup_context(set, dir.string())}, plan{plan_context(set, dir.string())};
        const SourceSet want = kernels_of(plan.c->impl);
        const SourceSet have = kernels_of(tool.c->impl);
        BOOST_TEST(want.size() > 0u);
        std::set<std::string> want_names, have_names;
        for (const auto &[text, k] : want) want_names.insert(k.name);
        for (const auto &[text, k] : have) have_names.insert(k.name);
        BOOST_TEST(have_names == want_names, set.name);
        BOOST_TEST((texts(have) == texts(want)), set.name << ": the same sources");

        // The tool, with the flags, on a folder holding exactly these kernels: --check passes
        // and reads every entry (one worker: each distinct kernel is one disk hit).
        plant(plan.c->impl, want);
        const ToolRun r = check(dir.string(), set.flags);
        BOOST_TEST(r.status == 0, set.name << ": --check exit " << r.status << "\n" << r.out);
        BOOST_TEST(disk_hits(r.out) == static_cast<long>(want.size()), set.name << "\n" << r.out);
        by_set[set.name] = want;
    }
    // The flags matter: each changes the kernel set against the defaults (gather on is the
    // default rule here, and "heuristic" is the default tile), and a warmup without them does
    // not cover a folder warmed with them.
    BOOST_TEST((texts(by_set["gather_on"]) == texts(by_set["defaults"])));
    BOOST_TEST((texts(by_set["tile_heuristic"]) == texts(by_set["defaults"])));
    for (const char *changed : {"gather_off", "fuse_swiglu", "gather_off_fuse_swiglu", "tile"})
        BOOST_TEST((texts(by_set[changed]) != texts(by_set["defaults"])), changed << " changes the kernels");
    TempDir dir("moejit-warmup-config");
    {
        ContextGuard plan{plan_context(option_sets()[1], dir.string())};  // gather off
        plant(plan.c->impl, by_set["gather_off"]);
    }
    BOOST_TEST(check(dir.string(), {"--gather", "off"}).status == 0);
    const ToolRun other = check(dir.string(), {});
    BOOST_TEST(other.status == 3, "a warmup with the defaults finds kernels missing\n" << other.out);
}

// Without a flag the tool takes the environment, as a context without the option does; a flag
// beats the environment.
BOOST_AUTO_TEST_CASE(warmup_flags_beat_the_environment_as_options_do) {
    clear_environment();
    TempDir dir("moejit-warmup-config");
    const OptionSet &gather_off = option_sets()[1];
    {
        ContextGuard plan{plan_context(gather_off, dir.string())};
        plant(plan.c->impl, kernels_of(plan.c->impl));
    }
    BOOST_TEST(check(dir.string(), {}).status == 3, "defaults: gathered, not covered");
    ::setenv("MOEJIT_GATHER", "0", 1);
    BOOST_TEST(check(dir.string(), {}).status == 0, "MOEJIT_GATHER=0 without a flag: covered");
    BOOST_TEST(check(dir.string(), {"--gather", "on"}).status == 3, "--gather on beats MOEJIT_GATHER=0");
    {
        // In-process too: the option beats the variable; unset, the variable beats the rule.
        ContextGuard env{plan_context(option_sets()[0], dir.string())};
        ContextGuard on{plan_context(option_sets()[2], dir.string())};
        ContextGuard off{plan_context(gather_off, dir.string())};
        BOOST_TEST((texts(kernels_of(env.c->impl)) == texts(kernels_of(off.c->impl))), "MOEJIT_GATHER=0 = gather off");
        BOOST_TEST((texts(kernels_of(on.c->impl)) != texts(kernels_of(off.c->impl))));
    }
    ::unsetenv("MOEJIT_GATHER");
    const ToolRun bad = check(dir.string(), {"--gather", "maybe"});
    BOOST_TEST(bad.status == 2, bad.out);
    BOOST_TEST(bad.out.find("--gather \"maybe\": expected on or off") != std::string::npos, bad.out);
    const ToolRun bad_tile = check(dir.string(), {"--gemm-tile", "big"});
    BOOST_TEST(bad_tile.status == 2, bad_tile.out);
    BOOST_TEST(bad_tile.out.find("options->gemm_tile") != std::string::npos, bad_tile.out);
}
