// The launch-bound invariant of docs/DESIGN.md §3, checked on the CPU with the device scheduler's own
// code (templates/group_gemm_schedule.cuh): for random and adversarial count vectors the
// schedule sized from S covers every (row, column block) exactly once, and a bound taken from T
// provably misses rows when duplicate routes send all T*k rows to one expert.
#define BOOST_TEST_MODULE launch_bounds
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "gemm/tile_schedule.hpp"
#include "templates/group_gemm_schedule.cuh"

using namespace moejit;

namespace {

std::uint64_t seed() {
    if (const char *s = std::getenv("MOEJIT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    static const std::uint64_t value = std::random_device{}();
    return value;
}

std::vector<std::int32_t> offsets_of(const std::vector<int> &counts) {
    std::vector<std::int32_t> offsets(counts.size() + 1, 0);
    for (std::size_t e = 0; e < counts.size(); ++e) offsets[e + 1] = offsets[e] + counts[e];
    return offsets;
}

// Routes of T tokens with top-k drawn uniformly with replacement: duplicates included.
std::vector<int> random_routing(std::int64_t tokens, int top_k, int experts, std::mt19937_64 &rng) {
    std::vector<int> counts(experts, 0);
    std::uniform_int_distribution<int> pick(0, experts - 1);
    for (std::int64_t i = 0; i < tokens * top_k; ++i) ++counts[pick(rng)];
    return counts;
}

// Skewed: a random subset of experts gets everything, with a heavy head.
std::vector<int> skewed_routing(std::int64_t rows, int experts, std::mt19937_64 &rng) {
    std::vector<int> counts(experts, 0);
    std::uniform_int_distribution<int> pick(0, experts - 1);
    const int hot = pick(rng);
    for (std::int64_t i = 0; i < rows; ++i) {
        if (rng() % 4 != 0)
            ++counts[hot];
        else if (rng() % 2)
            ++counts[pick(rng)];
        else
            ++counts[(hot + 1) % experts];
    }
    return counts;
}

std::int64_t true_m_tiles(const std::vector<int> &counts, int bm) {
    std::int64_t t = 0;
    for (int c : counts) t += (c + bm - 1) / bm;
    return t;
}

// The whole launch as the dispatcher sizes it, replayed: exact coverage for several grids.
void check_exact(const std::vector<int> &counts, int bm, int n_tiles, const char *what) {
    const std::vector<std::int32_t> offsets = offsets_of(counts);
    const std::int64_t S = offsets.back();
    const int E = static_cast<int>(counts.size());
    const std::int64_t bound = m_tile_bound(S, E, bm);
    BOOST_TEST_CONTEXT(what << ": S=" << S << " E=" << E << " BM=" << bm << " n_tiles=" << n_tiles) {
        BOOST_TEST(true_m_tiles(counts, bm) <= bound);
        const std::int64_t tiles = bound * n_tiles;
        for (std::int64_t resident : {std::int64_t{1}, std::int64_t{7}, std::int64_t{264}, tiles + 5}) {
            for (int group : {1, 8}) {
                const std::uint32_t ctas = persistent_ctas(tiles, resident);
                ScheduleCoverage cov = emulate_nk_schedule(offsets, S, bm, n_tiles, group, bound, ctas);
                BOOST_TEST(cov.exact(), "ctas=" << ctas << " group=" << group << " missed="
                                                 << cov.missed() << " duplicated=" << cov.duplicated()
                                                 << " bad=" << cov.bad_tiles);
                BOOST_TEST(cov.tiles_run == true_m_tiles(counts, bm) * n_tiles);
            }
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(bound_formula) {
    BOOST_TEST(m_tile_bound(0, 8, 128) == 0);
    BOOST_TEST(m_tile_bound(1, 8, 128) == 2);      // one row: ceil(1/128) + min(8, 1)
    BOOST_TEST(m_tile_bound(256, 8, 128) == 10);   // 2 + 8
    BOOST_TEST(m_tile_bound(256, 1000, 128) == 258);  // at most S experts are non-empty
    BOOST_TEST(nk_tile_bound(256, 8, 128, 300, 128) == 30);
    BOOST_TEST(mn_tile_count(4, 300, 128, 200, 128) == 4 * 3 * 2);
    BOOST_TEST(persistent_ctas(10, 264) == 10u);
    BOOST_TEST(persistent_ctas(100000, 264) == 264u);
    BOOST_TEST(persistent_ctas(0, 264) == 0u);
}

// The bound is attained up to rounding by the worst case: every expert one row past a tile.
BOOST_AUTO_TEST_CASE(bound_is_never_exceeded) {
    std::mt19937_64 rng(seed());
    BOOST_TEST_MESSAGE("seed " << seed());
    for (int trial = 0; trial < 2000; ++trial) {
        const int E = 1 + static_cast<int>(rng() % 300);
        const int bm = 32 << (rng() % 4);
        const std::int64_t rows = static_cast<std::int64_t>(rng() % 20000);
        std::vector<int> counts = trial % 2 ? skewed_routing(rows, E, rng)
                                            : random_routing(rows, 1, E, rng);
        BOOST_TEST_REQUIRE(true_m_tiles(counts, bm) <= m_tile_bound(rows, E, bm));
    }
    std::vector<int> worst(64, 129);  // each expert wastes 127 rows of a second tile
    BOOST_TEST(true_m_tiles(worst, 128) == 128);
    BOOST_TEST(m_tile_bound(64 * 129, 64, 128) == 65 + 64);
}

BOOST_AUTO_TEST_CASE(random_routing_is_covered_exactly) {
    std::mt19937_64 rng(seed() + 1);
    for (int trial = 0; trial < 40; ++trial) {
        const int E = 1 + static_cast<int>(rng() % 64);
        const int top_k = 1 + static_cast<int>(rng() % std::min(E, 8));
        const std::int64_t T = static_cast<std::int64_t>(rng() % 700);
        const int bm = 32 << (rng() % 3);
        const int n_tiles = 1 + static_cast<int>(rng() % 5);
        check_exact(random_routing(T, top_k, E, rng), bm, n_tiles, "random");
        check_exact(skewed_routing(T * top_k, E, rng), bm, n_tiles, "skewed");
    }
}

BOOST_AUTO_TEST_CASE(adversarial_counts_are_covered_exactly) {
    // All rows to one expert, at every position.
    for (int hot : {0, 3, 7}) {
        std::vector<int> counts(8, 0);
        counts[hot] = 256;
        check_exact(counts, 128, 3, "all to one expert");
    }
    check_exact({256}, 128, 2, "E = 1");
    check_exact({0, 0, 0, 0}, 128, 2, "S = 0");
    check_exact({0, 1, 0, 0}, 128, 2, "S = 1");
    check_exact({0, 2, 0, 0}, 64, 2, "T = 1, k = 2, duplicate route");
    check_exact({0, 0, 0, 5}, 64, 1, "only the last expert");
    check_exact({5, 0, 0, 0}, 64, 1, "only the first expert");
    check_exact(std::vector<int>(300, 1), 128, 2, "one row per expert (the bound's worst case)");
    check_exact(std::vector<int>(16, 129), 128, 2, "one row past a tile each");
    check_exact(std::vector<int>(16, 128), 128, 2, "exact tiles");
    check_exact({128, 0, 0, 1, 0, 255, 0, 0}, 128, 4, "empty experts between full ones");
    check_exact({100, 100, 100, 100}, 32, 3, "k = E: every token to every expert");
}

// docs/DESIGN.md §3's seed bug: T = 128, k = 2, every route to expert 0, BM = 128. Expert 0 owns
// S = 256 rows. A bound from T (ceil(T/BM) = 1 tile, per expert or in total) computes rows
// 0..127 only; rows 128..255 stay stale. The bound from S covers them.
BOOST_AUTO_TEST_CASE(bound_from_tokens_misses_duplicate_rows) {
    const int T = 128, k = 2, E = 8, bm = 128, n_tiles = 3;
    std::vector<int> counts(E, 0);
    counts[0] = T * k;
    const std::vector<std::int32_t> offsets = offsets_of(counts);
    const std::int64_t S = offsets.back();
    BOOST_TEST(S == 256);

    const std::int64_t t_blocks = (T + bm - 1) / bm;  // "an expert never gets more than T rows"
    ScheduleCoverage per_expert = emulate_per_expert_grid(offsets, S, bm, n_tiles, t_blocks);
    BOOST_TEST(per_expert.missed() == 128 * n_tiles);
    for (int r = 0; r < 256; ++r)
        for (int n = 0; n < n_tiles; ++n)
            BOOST_TEST_REQUIRE(per_expert.hits[r * n_tiles + n] == (r < 128 ? 1 : 0));

    ScheduleCoverage total = emulate_nk_schedule(offsets, S, bm, n_tiles, 8, t_blocks, 264);
    BOOST_TEST(total.missed() == 128 * n_tiles);

    // The same layouts sized from S are exact.
    const std::int64_t s_blocks = (S + bm - 1) / bm;
    BOOST_TEST(emulate_per_expert_grid(offsets, S, bm, n_tiles, s_blocks).exact());
    BOOST_TEST(emulate_nk_schedule(offsets, S, bm, n_tiles, 8, m_tile_bound(S, E, bm), 264).exact());
}

// Corrupt offsets must never send a tile outside [0, S): they are clamped on the device.
BOOST_AUTO_TEST_CASE(corrupt_offsets_stay_in_bounds) {
    const std::vector<std::int32_t> offsets = {-5, 10, 7, 400, 1 << 30};
    const std::int64_t S = 300;
    ScheduleCoverage cov;
    // A row outside [0, S) would throw std::out_of_range from the emulation's bounds check.
    BOOST_REQUIRE_NO_THROW(cov = emulate_nk_schedule(offsets, S, 64, 2, 8, m_tile_bound(S, 4, 64), 5));
    BOOST_TEST(cov.bad_tiles == 0);
    BOOST_TEST(cov.tiles_run > 0);
}

BOOST_AUTO_TEST_CASE(grouped_order_is_a_permutation) {
    for (int mt : {1, 2, 7, 8, 9, 33})
        for (int nt : {1, 3, 16})
            for (int group : {1, 4, 8, 64}) {
                std::vector<int> seen(static_cast<std::size_t>(mt * nt), 0);
                for (int l = 0; l < mt * nt; ++l) {
                    sched::TileMN t = sched::grouped_order(l, mt, nt, group);
                    BOOST_TEST_REQUIRE((t.m >= 0 && t.m < mt && t.n >= 0 && t.n < nt));
                    ++seen[static_cast<std::size_t>(t.m * nt + t.n)];
                }
                for (int s : seen) BOOST_TEST_REQUIRE(s == 1);
            }
}

BOOST_AUTO_TEST_CASE(mn_schedule_visits_every_tile_once) {
    for (int E : {1, 3, 128})
        for (int mt : {1, 5, 16})
            for (int nt : {1, 6})
                for (std::uint32_t ctas : {1u, 7u, 264u, 100000u}) {
                    const std::int64_t tiles = std::int64_t{E} * mt * nt;
                    BOOST_TEST_REQUIRE(emulate_mn_schedule_errors(E, mt, nt, 8, persistent_ctas(tiles, ctas)) == 0);
                }
}

// The split weight-gradient schedule (what the wgmma same_mn kernel runs): for all-to-one-expert,
// skewed, random and empty routings, every row is reduced exactly once per output tile, split
// experts' partial slots are distinct and within the host's bound floor(2 S / split_rows), and
// every other expert (empty ones too) is written directly once per tile.
BOOST_AUTO_TEST_CASE(mn_split_schedule_reduces_every_row_once) {
    std::mt19937_64 rng(0x5EED5EEDu);
    auto offsets_of = [](const std::vector<int> &counts) {
        std::vector<std::int32_t> o(counts.size() + 1, 0);
        for (std::size_t e = 0; e < counts.size(); ++e) o[e + 1] = o[e] + counts[e];
        return o;
    };
    std::vector<std::vector<int>> cases = {
        {1000},                    // E = 1, one long expert
        {0, 0, 777, 0},            // all routes to one expert, empties around it
        {64, 65, 128, 129, 0, 1},  // around the segment length
        {300, 300, 300},
    };
    for (int i = 0; i < 20; ++i) {  // random skew: one heavy expert among light ones
        std::vector<int> c(1 + rng() % 12);
        for (int &x : c) x = static_cast<int>(rng() % 100);
        c[rng() % c.size()] += static_cast<int>(rng() % 2000);
        cases.push_back(c);
    }
    for (const std::vector<int> &counts : cases) {
        const std::vector<std::int32_t> offsets = offsets_of(counts);
        const std::int64_t S = offsets.back();
        for (int split : {64, 128, 192})
            for (int mt : {1, 3})
                for (int nt : {1, 2})
                    for (std::uint32_t ctas : {1u, 5u, 132u}) {
                        BOOST_TEST_CONTEXT("S " << S << " E " << counts.size() << " split " << split << " tiles " << mt
                                                << "x" << nt << " ctas " << ctas) {
                            BOOST_TEST(emulate_mn_split_errors(offsets, S, split, 2 * S / split, mt, nt, 8, ctas) == 0);
                        }
                    }
    }
    // split_rows = 0 is the plain schedule.
    BOOST_TEST(emulate_mn_split_errors(offsets_of({5, 0, 9}), 14, 0, 0, 2, 3, 8, 4) == 0);
}

// mn_split_within (a backward part's split scratch in dx): mn_split when it fits, else the
// finest coarser split that fits (its bound reduces every row once), else none; never more
// scratch than given.
BOOST_AUTO_TEST_CASE(mn_split_within_fits_the_scratch) {
    const std::int32_t E = 16;
    for (std::int64_t rows : {4096, 5000, 16384, 131072, 196608})
        for (std::int64_t m : {256, 512, 1536})
            for (std::size_t mib : {0, 1, 4, 16, 64, 1024}) {
                const std::int64_t n = 512;
                const std::size_t bytes = mib << 20;
                const MnSplit full = mn_split(rows, m, n), got = mn_split_within(rows, m, n, E, bytes);
                BOOST_TEST_CONTEXT("rows " << rows << " m " << m << " scratch " << mib << " MiB") {
                    if (full.split_rows == 0 || mn_split_workspace_bytes(full, E, m, n) <= bytes) {
                        BOOST_TEST(got.split_rows == full.split_rows);
                        continue;
                    }
                    BOOST_TEST(mn_split_workspace_bytes(got, E, m, n) <= bytes);
                    if (got.split_rows == 0) continue;  // nothing coarser fits
                    BOOST_TEST(got.split_rows > full.split_rows);
                    BOOST_TEST(got.split_rows % 64 == 0);
                    BOOST_TEST(got.split_rows < rows);
                    BOOST_TEST(got.slots == 2 * rows / got.split_rows);
                    // Every row reduced once with the coarser split: all rows to one expert.
                    std::vector<std::int32_t> offsets(E + 1, static_cast<std::int32_t>(rows));
                    offsets[0] = 0;
                    if (rows <= 16384)
                        BOOST_TEST(emulate_mn_split_errors(offsets, rows, got.split_rows, got.slots, 2, 2, 8, 64) == 0);
                }
            }
    // The GPU suite's parts_split_in_dx case: fc1's merged gradient (M 512, N 512) over 16384 rows
    // of one expert, in dx's 4 MiB: 3 slots of 1 MiB, segments of 8256 rows (not 4096 and 8).
    const MnSplit in_dx = mn_split_within(16384, 512, 512, E, std::size_t{4} << 20);
    BOOST_TEST(mn_split(16384, 512, 512).slots == 8);
    BOOST_TEST(in_dx.split_rows == 8256);
    BOOST_TEST(in_dx.slots == 3);
    BOOST_TEST(mn_split_within(16384, 512, 512, E, std::size_t{2} << 20).split_rows == 0);  // 1 slot: none
}

// The rule: no split when one expert's output tiles fill the GPU, or when no expert can exceed
// the segment (S small); segments >= 4096 rows, multiples of 64; the workspace holds the bound.
BOOST_AUTO_TEST_CASE(mn_split_rule) {
    // deepseek-v3 fc2 wgrad (H 7168 x I 2048: 448 tiles of 128 x 256): never split.
    BOOST_TEST(mn_split(65536, 7168, 2048).split_rows == 0);
    // small-expert-7b fc2 wgrad (1536 x 256: 12 tiles), S = 196608: 22 segments of 8960 rows.
    const MnSplit s = mn_split(196608, 1536, 256);
    BOOST_TEST(s.split_rows == 8960);
    BOOST_TEST(s.slots == 2 * 196608 / 8960);
    BOOST_TEST(mn_split_workspace_bytes(s, 128, 1536, 256) ==
               std::size_t{768} + static_cast<std::size_t>(s.slots) * 1536 * 256 * 4);
    // Balanced routing never reaches the segment length: small S gives no split at all.
    BOOST_TEST(mn_split(4096, 1536, 256).split_rows == 0);
    for (std::int64_t rows : {5000, 100000, 1 << 22}) {
        const MnSplit r = mn_split(rows, 512, 512);
        BOOST_TEST_CONTEXT("rows " << rows) {
            BOOST_TEST(r.split_rows >= 4096);
            BOOST_TEST(r.split_rows % 64 == 0);
            BOOST_TEST(r.split_rows < rows);
        }
    }
}
