#include "gemm/tile_schedule.hpp"

#include <algorithm>

#include "templates/group_gemm_schedule.cuh"

namespace moejit {

std::int64_t m_tile_bound(std::int64_t rows, std::int32_t num_experts, int block_m) {
    if (rows <= 0 || num_experts <= 0) return 0;
    return (rows + block_m - 1) / block_m + std::min<std::int64_t>(num_experts, rows);
}

std::int64_t nk_tile_bound(std::int64_t rows, std::int32_t num_experts, int block_m,
                           std::int64_t n, int block_n) {
    return m_tile_bound(rows, num_experts, block_m) * ((n + block_n - 1) / block_n);
}

std::int64_t mn_tile_count(std::int32_t num_experts, std::int64_t m, int block_m,
                           std::int64_t n, int block_n) {
    if (num_experts <= 0) return 0;
    return std::int64_t{num_experts} * ((m + block_m - 1) / block_m) * ((n + block_n - 1) / block_n);
}

std::uint32_t persistent_ctas(std::int64_t tiles, std::int64_t max_resident) {
    return static_cast<std::uint32_t>(std::max<std::int64_t>(0, std::min(tiles, max_resident)));
}

std::int64_t ScheduleCoverage::missed() const {
    return std::count(hits.begin(), hits.end(), 0);
}
std::int64_t ScheduleCoverage::duplicated() const {
    return std::count_if(hits.begin(), hits.end(), [](int h) { return h > 1; });
}

namespace {

ScheduleCoverage empty_coverage(std::int64_t rows, int n_tiles) {
    ScheduleCoverage cov;
    cov.rows = rows;
    cov.n_tiles = n_tiles;
    cov.hits.assign(static_cast<std::size_t>(std::max<std::int64_t>(rows, 0)) * n_tiles, 0);
    return cov;
}

void mark(ScheduleCoverage &cov, int row_begin, int row_end, int n_block) {
    // at(): a row outside [0, S) is a scheduler bug and must fail loudly, not corrupt memory.
    for (int r = row_begin; r < row_end; ++r) ++cov.hits.at(static_cast<std::size_t>(r) * cov.n_tiles + n_block);
}

}  // namespace

ScheduleCoverage emulate_nk_schedule(std::span<const std::int32_t> offsets, std::int64_t rows,
                                     int block_m, int n_tiles, int group_m,
                                     std::int64_t m_tile_limit, std::uint32_t ctas) {
    ScheduleCoverage cov = empty_coverage(rows, n_tiles);
    const int E = static_cast<int>(offsets.size()) - 1;
    const int S = static_cast<int>(rows);
    if (E < 1) return cov;
    // The kernel's block-wide scan, serially.
    std::vector<int> cum(static_cast<std::size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e) cum[e + 1] = cum[e] + sched::expert_m_tiles(offsets.data(), e, S, block_m);
    const std::int64_t m_tiles = std::min<std::int64_t>(cum[E], m_tile_limit);
    const std::int64_t total = m_tiles * n_tiles;
    for (std::uint32_t b = 0; b < ctas; ++b) {
        for (std::int64_t t = b; t < total; t += ctas) {
            ++cov.tiles_run;
            sched::TileCoord tc = sched::nk_tile(cum.data(), E, n_tiles, group_m, static_cast<int>(t));
            sched::RowRange rr = sched::expert_rows(offsets.data(), tc.expert, S);
            const int expert_tiles = cum[tc.expert + 1] - cum[tc.expert];
            if (tc.m_block < 0 || tc.m_block >= expert_tiles || tc.n_block < 0 || tc.n_block >= n_tiles) {
                ++cov.bad_tiles;
                continue;
            }
            const int row0 = rr.begin + tc.m_block * block_m;
            mark(cov, row0, std::min(row0 + block_m, rr.end), tc.n_block);
        }
    }
    return cov;
}

ScheduleCoverage emulate_per_expert_grid(std::span<const std::int32_t> offsets,
                                         std::int64_t rows, int block_m, int n_tiles,
                                         std::int64_t blocks_per_expert) {
    ScheduleCoverage cov = empty_coverage(rows, n_tiles);
    const int E = static_cast<int>(offsets.size()) - 1;
    const int S = static_cast<int>(rows);
    for (int e = 0; e < E; ++e) {
        sched::RowRange rr = sched::expert_rows(offsets.data(), e, S);
        for (std::int64_t b = 0; b < blocks_per_expert; ++b) {
            const std::int64_t row0 = rr.begin + b * block_m;
            if (row0 >= rr.end) break;  // the CTA finds no rows and exits
            for (int n = 0; n < n_tiles; ++n) {
                ++cov.tiles_run;
                mark(cov, static_cast<int>(row0), static_cast<int>(std::min<std::int64_t>(row0 + block_m, rr.end)), n);
            }
        }
    }
    return cov;
}

std::int64_t emulate_mn_schedule_errors(std::int32_t num_experts, int m_tiles, int n_tiles,
                                        int group_m, std::uint32_t ctas) {
    const std::int64_t total = std::int64_t{num_experts} * m_tiles * n_tiles;
    std::vector<int> hits(static_cast<std::size_t>(total), 0);
    std::int64_t bad = 0;
    for (std::uint32_t b = 0; b < ctas; ++b) {
        for (std::int64_t t = b; t < total; t += ctas) {
            sched::TileCoord tc = sched::mn_tile(m_tiles, n_tiles, group_m, static_cast<int>(t));
            if (tc.expert < 0 || tc.expert >= num_experts || tc.m_block < 0 || tc.m_block >= m_tiles ||
                tc.n_block < 0 || tc.n_block >= n_tiles) {
                ++bad;
                continue;
            }
            ++hits[(static_cast<std::size_t>(tc.expert) * m_tiles + tc.m_block) * n_tiles + tc.n_block];
        }
    }
    return bad + std::count_if(hits.begin(), hits.end(), [](int h) { return h != 1; });
}

namespace {

std::int64_t nominal_expert_tiles(std::int64_t m, std::int64_t n) { return ((m + 127) / 128) * ((n + 255) / 256); }

}  // namespace

bool mn_can_split(std::int64_t m, std::int64_t n) {
    return m > 0 && n > 0 && nominal_expert_tiles(m, n) < kSplitTargetTiles;  // else one expert fills the GPU
}

MnSplit mn_split(std::int64_t rows, std::int64_t m, std::int64_t n) {
    MnSplit s;
    if (rows <= 0 || !mn_can_split(m, n)) return s;
    const std::int64_t expert_tiles = nominal_expert_tiles(m, n);
    const std::int64_t segments = (kSplitTargetTiles + expert_tiles - 1) / expert_tiles;
    std::int64_t split = std::max(kMinSplitRows, (rows + segments - 1) / segments);
    split = (split + 63) / 64 * 64;
    if (split >= rows || split > (std::int64_t{1} << 30)) return s;  // no expert can exceed it
    s.split_rows = static_cast<int>(split);
    s.slots = 2 * rows / split;
    return s;
}

std::size_t mn_split_partials_offset(std::int32_t num_experts) {
    const std::size_t header = (static_cast<std::size_t>(std::max(num_experts, 0)) + 1) * 4;
    return (header + 255) / 256 * 256;
}

std::size_t mn_split_workspace_bytes(const MnSplit &split, std::int32_t num_experts, std::int64_t m,
                                     std::int64_t n) {
    if (split.split_rows <= 0) return 0;
    return mn_split_partials_offset(num_experts) +
           static_cast<std::size_t>(split.slots) * static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * 4;
}

MnSplit mn_split_within(std::int64_t rows, std::int64_t m, std::int64_t n, std::int32_t num_experts,
                        std::size_t bytes) {
    const MnSplit wanted = mn_split(rows, m, n);
    if (wanted.split_rows == 0 || mn_split_workspace_bytes(wanted, num_experts, m, n) <= bytes) return wanted;
    const std::size_t header = mn_split_partials_offset(num_experts);
    const std::size_t slot_bytes = static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * 4;
    const std::int64_t max_slots = bytes > header ? static_cast<std::int64_t>((bytes - header) / slot_bytes) : 0;
    if (max_slots < 2) return MnSplit{};  // a split expert has two segments at least
    // floor(2 S / split) <= max_slots once split > 2 S / (max_slots + 1); rounded up to 64 rows.
    std::int64_t split = 2 * rows / (max_slots + 1) + 1;
    split = (std::max(split, std::int64_t{wanted.split_rows}) + 63) / 64 * 64;
    if (split >= rows || split > (std::int64_t{1} << 30)) return MnSplit{};
    MnSplit s;
    s.split_rows = static_cast<int>(split);
    s.slots = 2 * rows / split;
    return s;
}

std::int64_t emulate_mn_split_errors(std::span<const std::int32_t> offsets, std::int64_t rows, int split_rows,
                                     std::int64_t slot_bound, int m_tiles, int n_tiles, int group_m,
                                     std::uint32_t ctas) {
    const int E = static_cast<int>(offsets.size()) - 1;
    const int R = static_cast<int>(rows);
    std::vector<int> cum_items(static_cast<std::size_t>(E) + 1, 0), cum_slots(static_cast<std::size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e) {
        const sched::RowRange rr = sched::expert_rows(offsets.data(), e, R);
        cum_items[e + 1] = cum_items[e] + sched::mn_items(rr.end - rr.begin, split_rows);
        cum_slots[e + 1] = cum_slots[e] + sched::mn_slots(rr.end - rr.begin, split_rows);
    }
    std::int64_t bad = cum_slots[E] > slot_bound ? 1 : 0;
    // row_hits[(row * m_tiles + m) * n_tiles + n]; slot_hits[(slot * m_tiles + m) * n_tiles + n]
    const std::size_t per = static_cast<std::size_t>(m_tiles) * n_tiles;
    std::vector<int> row_hits(static_cast<std::size_t>(R) * per, 0), slot_hits(static_cast<std::size_t>(cum_slots[E]) * per, 0),
        direct_hits(static_cast<std::size_t>(E) * per, 0);
    const std::int64_t total = std::int64_t{cum_items[E]} * m_tiles * n_tiles;
    for (std::uint32_t b = 0; b < ctas; ++b) {
        for (std::int64_t t = b; t < total; t += ctas) {
            const sched::MnItemTile it =
                sched::mn_item_tile(cum_items.data(), E, m_tiles, n_tiles, group_m, static_cast<int>(t));
            if (it.expert < 0 || it.expert >= E || it.m_block < 0 || it.m_block >= m_tiles || it.n_block < 0 ||
                it.n_block >= n_tiles) {
                ++bad;
                continue;
            }
            const sched::RowRange er = sched::expert_rows(offsets.data(), it.expert, R);
            const int count = er.end - er.begin;
            const sched::RowRange rr = sched::mn_item_rows(offsets.data(), R, split_rows, it);
            const int begin = rr.begin, end = rr.end;
            const std::size_t tile = static_cast<std::size_t>(it.m_block) * n_tiles + it.n_block;
            if (sched::mn_is_split(count, split_rows)) {
                if (it.segment >= sched::mn_slots(count, split_rows) || begin >= end) {
                    ++bad;
                    continue;
                }
                ++slot_hits[static_cast<std::size_t>(cum_slots[it.expert] + it.segment) * per + tile];
            } else {
                if (it.segment != 0) ++bad;
                ++direct_hits[static_cast<std::size_t>(it.expert) * per + tile];
            }
            for (int r = begin; r < end; ++r) ++row_hits[static_cast<std::size_t>(r) * per + tile];
        }
    }
    auto not_once = [](const std::vector<int> &v) { return std::count_if(v.begin(), v.end(), [](int h) { return h != 1; }); };
    // Every row once per output tile, every slot once per tile; every unsplit expert (empty ones
    // included: they write zeros) written directly once per tile.
    std::int64_t direct_errors = 0;
    for (int e = 0; e < E; ++e) {
        const sched::RowRange rr = sched::expert_rows(offsets.data(), e, R);
        const int want = sched::mn_is_split(rr.end - rr.begin, split_rows) ? 0 : 1;
        for (std::size_t t = 0; t < per; ++t) direct_errors += direct_hits[static_cast<std::size_t>(e) * per + t] != want;
    }
    return bad + not_once(row_hits) + not_once(slot_hits) + direct_errors;
}

}  // namespace moejit
