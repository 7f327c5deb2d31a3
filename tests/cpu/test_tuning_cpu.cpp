// The opt-in tile tuning's host half (gemm/tuning.hpp): the key names everything a winner
// depends on, the candidates are valid for the problem and start with the heuristic's tile,
// winners survive a new store (a new process) through the cache folder, and a corrupt or
// foreign file is ignored rather than trusted. The timing half runs on the H200
// (tests/gpu/test_group_gemm_gpu.cpp, tuning case).
#define BOOST_TEST_MODULE tuning_cpu
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "compile_only.hpp"
#include "runtime/context.hpp"
#include "gemm/tuning.hpp"

using namespace moejit;

namespace {

GemmProblem nk_problem() {
    GemmProblem p;
    p.kind = GemmKind::same_nk;
    p.n = 1536;
    p.k = 2048;
    p.num_experts = 128;
    return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(key_names_every_input) {
    const GemmProblem base = nk_problem();
    const std::string k0 = tuning_key(base, 100000, 90);
    std::set<std::string> keys = {k0};
    auto vary = [&](auto edit, std::int64_t rows = 100000, int cc = 90) {
        GemmProblem p = base;
        edit(p);
        keys.insert(tuning_key(p, rows, cc));
    };
    vary([](GemmProblem &p) { p.kind = GemmKind::same_mn; });
    vary([](GemmProblem &p) { p.dtype = DType::fp16; });
    vary([](GemmProblem &p) { p.c_dtype = DType::fp32; });
    vary([](GemmProblem &p) { p.m = 64; });
    vary([](GemmProblem &p) { p.n = 1544; });
    vary([](GemmProblem &p) { p.k = 2056; });
    vary([](GemmProblem &p) { p.b_transposed = false; });
    vary([](GemmProblem &p) { p.accumulate = true; });
    vary([](GemmProblem &p) { p.num_experts = 64; });
    vary([](GemmProblem &) {}, 300000);  // another size class
    vary([](GemmProblem &) {}, 100000, 80);
    BOOST_TEST(keys.size() == 12u);
    // One winner per power-of-two size class of S.
    BOOST_TEST(tuning_key(base, 70000, 90) == k0);
    BOOST_TEST(tuning_key(base, 131072, 90) == k0);
    BOOST_TEST(tuning_key(base, 131073, 90) != k0);
}

BOOST_AUTO_TEST_CASE(candidates_are_valid_and_start_with_the_heuristic) {
    for (int cc : {80, 90}) {
        for (GemmKind kind : {GemmKind::same_nk, GemmKind::same_mn}) {
            GemmProblem p = nk_problem();
            p.kind = kind;
            p.m = 2048;
            const std::vector<GemmTileConfig> c = tuning_candidates(p, cc);
            BOOST_TEST_CONTEXT("sm_" << cc << (kind == GemmKind::same_nk ? " nk" : " mn")) {
                BOOST_TEST_REQUIRE(c.size() >= 3u);
                BOOST_TEST((c.front() == heuristic_tile_config(p, cc)));
                std::set<std::string> names;
                for (const GemmTileConfig &t : c) {
                    BOOST_CHECK_NO_THROW(validate_tile_config(t, p, cc));
                    BOOST_TEST((t.engine == GemmEngine::wgmma) == (cc == 90), to_string(t));
                    names.insert(to_string(t));
                }
                BOOST_TEST(names.size() == c.size(), "no duplicates");
                // Ping-pong consumers are a same_nk candidate on sm_90a only.
                const bool pingpong = std::any_of(c.begin(), c.end(), [](const GemmTileConfig &t) { return t.pingpong != 0; });
                BOOST_TEST(pingpong == (cc == 90 && kind == GemmKind::same_nk));
            }
        }
    }
    // fp32 C: no TMA-store candidate (it stages 16-bit C only).
    GemmProblem f = nk_problem();
    f.c_dtype = DType::fp32;
    for (const GemmTileConfig &t : tuning_candidates(f, 90)) BOOST_TEST(!t.tma_store, to_string(t));
}

BOOST_AUTO_TEST_CASE(winners_persist_and_bad_files_are_ignored) {
    moejit::test::TempDir dir("moejit-tuning");
    const std::string key = tuning_key(nk_problem(), 4096, 90);
    const GemmTileConfig winner = parse_tile_config("wgmma_128x128x64_s5_g16_e1", "t");
    {
        TuningStore a(dir.string());
        BOOST_TEST(!a.find(key).has_value());
        a.save(key, winner);
        BOOST_TEST((a.find(key) == winner));
    }
    TuningStore b(dir.string());  // a later process
    BOOST_TEST((b.find(key) == winner));
    const std::string path = b.path_for(key);
    BOOST_TEST(std::filesystem::exists(path));
    BOOST_TEST(path.find("/tuning/") != std::string::npos);
    // No temp files left behind.
    int files = 0;
    for (const auto &entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
        ++files;
        BOOST_TEST(entry.path().extension() == ".txt", entry.path().string());
    }
    BOOST_TEST(files == 1);

    const std::string other = tuning_key(nk_problem(), 1 << 20, 90);
    auto write = [&](const std::string &text) {
        std::ofstream(TuningStore(dir.string()).path_for(other), std::ios::trunc) << text;
    };
    write("garbage\n");
    BOOST_TEST(!TuningStore(dir.string()).find(other).has_value());
    write("moejit-tuning 1\n" + key + "\nwgmma_128x128x64_s5\n");  // another key's winner
    BOOST_TEST(!TuningStore(dir.string()).find(other).has_value());
    write("moejit-tuning 1\n" + other + "\nnot a tile\n");
    BOOST_TEST(!TuningStore(dir.string()).find(other).has_value());
    TuningStore c(dir.string());
    c.save(other, winner);  // replaces the bad file
    BOOST_TEST((TuningStore(dir.string()).find(other) == winner));

    TuningStore memory("");
    memory.save(key, winner);
    BOOST_TEST((memory.find(key) == winner));
    BOOST_TEST(memory.path_for(key).empty());
}

// Tuning is the context's: options->tune over MOEJIT_TUNE over off, and never with a forced
// tile (options->gemm_tile or MOEJIT_GEMM_TILE). Read once, when the context is created.
BOOST_AUTO_TEST_CASE(tuning_is_resolved_per_context_unless_a_tile_is_forced) {
    ::unsetenv("MOEJIT_GEMM_TILE");
    ::unsetenv("MOEJIT_TUNE");
    auto tuning = [](Switch tune = Switch::from_env, const char *tile = nullptr) {
        ConfigOptions o;
        o.tune = tune;
        o.gemm_tile = tile;
        return resolve_config(o).tuning();
    };
    BOOST_TEST(!tuning());
    BOOST_TEST(tuning(Switch::on));
    for (const char *on : {"1", "on", "TRUE", "yes"}) {
        ::setenv("MOEJIT_TUNE", on, 1);
        BOOST_TEST(tuning(), on);
        BOOST_TEST(!tuning(Switch::off), "the option wins over " << on);
    }
    ::setenv("MOEJIT_TUNE", "0", 1);
    BOOST_TEST(!tuning());
    BOOST_TEST(tuning(Switch::on));
    ::setenv("MOEJIT_TUNE", "1", 1);
    BOOST_TEST(!tuning(Switch::from_env, "128x128x64"), "an explicit tile wins");
    ::setenv("MOEJIT_GEMM_TILE", "128x128x64", 1);
    BOOST_TEST(!tuning(), "a tile from the environment wins");
    BOOST_TEST(tuning(Switch::from_env, ""), "\"\": the heuristic, over MOEJIT_GEMM_TILE");
    ::unsetenv("MOEJIT_GEMM_TILE");
    // A context reads the switch once, when it is created.
    moejit::test::CompileOnlyContext tuned("sm_90a");
    BOOST_TEST(tuned.impl().tuning());
    ::unsetenv("MOEJIT_TUNE");
    BOOST_TEST(tuned.impl().tuning());
    moejit::test::CompileOnlyContext plain("sm_90a");
    BOOST_TEST(!plain.impl().tuning());
}
