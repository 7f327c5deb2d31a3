// Host side of the grouped-GEMM tile schedule: the launch bound computed from S (never from
// T), the persistent grid size, and a CPU emulation of the device scheduler for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moejit {

// Upper bound on the M-tiles of a same_nk grouped GEMM: sum_e ceil(count_e / BM) over any
// counts that sum to S = rows is at most ceil(S / BM) + min(E, S) (each non-empty expert wastes
// less than one tile, and at most S experts are non-empty). Computed from the scattered
// tensor's rows: with duplicate top-k routes one expert can own all S = T*k rows, so a bound
// from T misses rows (docs/DESIGN.md §3).
std::int64_t m_tile_bound(std::int64_t rows, std::int32_t num_experts, int block_m);

// Linear tiles of a same_nk launch: m_tile_bound * ceil(N / BN).
std::int64_t nk_tile_bound(std::int64_t rows, std::int32_t num_experts, int block_m,
                           std::int64_t n, int block_n);
// Tiles of a same_mn launch (exact, independent of the routing): E * ceil(M/BM) * ceil(N/BN).
std::int64_t mn_tile_count(std::int32_t num_experts, std::int64_t m, int block_m,
                           std::int64_t n, int block_n);

// Deterministic split of long weight-gradient reductions. An expert that owns many rows (all
// of S with duplicate routes) leaves a same_mn GEMM with few, very long tiles; above
// `split_rows` rows its reduction is cut into segments whose fp32 partials go to a workspace
// and are summed in a fixed order. The rule depends only on S, M and N (not on the device or
// the tile), so results are the same on every GPU and the plan can size its workspace without
// one: split only when one expert's ceil(M/128) x ceil(N/256) output tiles are fewer than
// kSplitTargetTiles, into segments of at least kMinSplitRows rows (a multiple of 64).
inline constexpr std::int64_t kSplitTargetTiles = 256;
inline constexpr std::int64_t kMinSplitRows = 4096;
struct MnSplit {
    int split_rows = 0;      // 0: no split
    std::int64_t slots = 0;  // bound on the partial tiles: floor(2 S / split_rows)
};
MnSplit mn_split(std::int64_t rows, std::int64_t m, std::int64_t n);
// Whether mn_split can split an M x N weight gradient at all (for some S).
bool mn_can_split(std::int64_t m, std::int64_t n);
// Workspace of a split: cum_slots[E+1] (int32, padded to 256 bytes), then slots x M x N fp32
// from mn_split_partials_offset.
std::size_t mn_split_partials_offset(std::int32_t num_experts);
std::size_t mn_split_workspace_bytes(const MnSplit &split, std::int32_t num_experts, std::int64_t m,
                                     std::int64_t n);
// mn_split's split when `bytes` of scratch hold it; else the finest coarser one they hold
// (longer segments, fewer slots), or none. A caller that lends less scratch than the plan's
// size queries ask for (a backward part lending dx, moejit_plan_backward_part) gets a slower
// split of the same rule, never an unsplit hour-long tile when a coarser split fits.
MnSplit mn_split_within(std::int64_t rows, std::int64_t m, std::int64_t n, std::int32_t num_experts,
                        std::size_t bytes);

// Persistent grid: one CTA per tile up to `max_resident` (blocks per SM x SMs); each CTA then
// loops over tiles with stride gridDim.x, so a tile bound larger than the grid costs nothing.
std::uint32_t persistent_ctas(std::int64_t tiles, std::int64_t max_resident);

// Result of replaying a schedule on the CPU: how often each (row, column block) was written.
struct ScheduleCoverage {
    std::int64_t rows = 0;
    int n_tiles = 0;
    std::vector<int> hits;          // [rows * n_tiles]
    std::int64_t tiles_run = 0;     // tiles the CTAs processed
    std::int64_t bad_tiles = 0;     // tiles mapped outside their expert's blocks
    std::int64_t missed() const;     // (row, n-block) pairs never written
    std::int64_t duplicated() const; // pairs written more than once
    bool exact() const { return bad_tiles == 0 && missed() == 0 && duplicated() == 0; }
};

// Replays the same_nk device scheduler (templates/group_gemm_schedule.cuh, the same code the
// kernel runs): `ctas` persistent CTAs walk tile ids below min(true M-tiles, m_tile_limit) *
// n_tiles. offsets has E+1 entries.
ScheduleCoverage emulate_nk_schedule(std::span<const std::int32_t> offsets, std::int64_t rows,
                                     int block_m, int n_tiles, int group_m,
                                     std::int64_t m_tile_limit, std::uint32_t ctas);

// The classic non-persistent layout the invariant forbids: a grid of E x blocks_per_expert x
// n_tiles CTAs, CTA (e, b, n) computing row block b of expert e. With blocks_per_expert taken
// from T (ceil(T / BM)), an expert owning more than T rows (duplicate routes) loses rows.
ScheduleCoverage emulate_per_expert_grid(std::span<const std::int32_t> offsets,
                                         std::int64_t rows, int block_m, int n_tiles,
                                         std::int64_t blocks_per_expert);

// Replays the split same_mn scheduler (sched::mn_item_tile, as the wgmma kernel runs it):
// every row of every expert must be reduced exactly once for every (m-block, n-block), and
// each split expert's partial slots must be distinct and below `split.slots`. Returns the
// number of violations (0 = exact).
std::int64_t emulate_mn_split_errors(std::span<const std::int32_t> offsets, std::int64_t rows,
                                     int split_rows, std::int64_t slot_bound, int m_tiles, int n_tiles,
                                     int group_m, std::uint32_t ctas);

// Replays the same_mn scheduler: every (expert, m-block, n-block) tile exactly once?
// Returns the number of tiles not visited exactly once (0 = exact).
std::int64_t emulate_mn_schedule_errors(std::int32_t num_experts, int m_tiles, int n_tiles,
                                        int group_m, std::uint32_t ctas);

}  // namespace moejit
