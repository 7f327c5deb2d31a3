// The grouped-GEMM tile scheduler: maps a linear tile id to (expert, row block, column block).
// Plain integer code compiled twice: on the device by every grouped-GEMM kernel, and on the
// host by src/gemm/tile_schedule.cpp, whose CPU emulation of the schedule therefore tests
// exactly the code the GPU runs (the launch-bound invariant of docs/DESIGN.md §3).
// No includes: it must compile under NVRTC without headers and in plain C++.
#pragma once

#if defined(__CUDACC__)
#define MOEJIT_HD __host__ __device__ __forceinline__
#else
#define MOEJIT_HD inline
#endif

namespace moejit {
namespace sched {

MOEJIT_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }
MOEJIT_HD int min_int(int a, int b) { return a < b ? a : b; }
MOEJIT_HD int max_int(int a, int b) { return a > b ? a : b; }

// Rows [begin, end) of expert e. Offsets are clamped to [0, rows] so that a corrupt offsets
// tensor can make results wrong but never make a kernel read or write outside the tensors.
struct RowRange {
    int begin;
    int end;
};
MOEJIT_HD RowRange expert_rows(const int *offsets, int e, int rows) {
    int lo = min_int(max_int(offsets[e], 0), rows);
    int hi = min_int(max_int(offsets[e + 1], 0), rows);
    RowRange r;
    r.begin = lo;
    r.end = max_int(hi, lo);
    return r;
}

// M-tiles of one expert: ceil(count / BM); 0 for an empty expert.
MOEJIT_HD int expert_m_tiles(const int *offsets, int e, int rows, int block_m) {
    RowRange r = expert_rows(offsets, e, rows);
    return ceil_div(r.end - r.begin, block_m);
}

// Triton-style grouped order inside one expert's m_tiles x n_tiles block: `group` row blocks
// are walked column by column, so CTAs running at the same time share A row blocks and B
// column blocks in L2.
struct TileMN {
    int m;
    int n;
};
MOEJIT_HD TileMN grouped_order(int local, int m_tiles, int n_tiles, int group) {
    int per_group = group * n_tiles;
    int g = local / per_group;
    int first_m = g * group;
    int size = min_int(m_tiles - first_m, group);
    int in = local - g * per_group;
    TileMN t;
    t.m = first_m + in % size;
    t.n = in / size;
    return t;
}

struct TileCoord {
    int expert;
    int m_block;  // row block inside the expert (same_nk) or M block (same_mn)
    int n_block;
};

// same_nk: expert e owns the linear tiles [cum[e] * n_tiles, cum[e+1] * n_tiles), where cum is
// the exclusive prefix sum of expert_m_tiles (E+1 entries). Precondition: t < cum[E] * n_tiles.
// The expert is the last e with cum[e] <= t / n_tiles (empty experts have cum[e] == cum[e+1]
// and are skipped by taking the last one).
// The last e in [0, num_experts) with cum[e] <= v (cum non-decreasing, cum[0] = 0 <= v).
MOEJIT_HD int last_at_most(const int *cum, int num_experts, int v) {
    int lo = 0, hi = num_experts - 1;  // invariant: cum[lo] <= v
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (cum[mid] <= v)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

MOEJIT_HD TileCoord nk_tile(const int *cum, int num_experts, int n_tiles, int group, int t) {
    int mt = t / n_tiles;
    int lo = last_at_most(cum, num_experts, mt);
    int m_tiles = cum[lo + 1] - cum[lo];
    TileMN mn = grouped_order(t - cum[lo] * n_tiles, m_tiles, n_tiles, group);
    TileCoord c;
    c.expert = lo;
    c.m_block = mn.m;
    c.n_block = mn.n;
    return c;
}

// Where same_nk tile t lies: its expert, its first row, the end of the expert's rows (a tile
// may hold fewer than block_m of them) and its first column.
struct NkTilePlace {
    int expert;
    int row0;
    int row_end;
    int n0;
};
MOEJIT_HD NkTilePlace nk_tile_place(const int *cum, const int *offsets, int num_experts, int rows, int n_tiles,
                                    int group, int block_m, int block_n, int t) {
    TileCoord c = nk_tile(cum, num_experts, n_tiles, group, t);
    RowRange r = expert_rows(offsets, c.expert, rows);
    NkTilePlace p;
    p.expert = c.expert;
    p.row0 = r.begin + c.m_block * block_m;
    p.row_end = r.end;
    p.n0 = c.n_block * block_n;
    return p;
}

// same_mn: a fixed m_tiles x n_tiles block per expert, whatever its row count (the reduction
// runs over the expert's rows inside the tile), so the tile count is known on the host exactly.
MOEJIT_HD TileCoord mn_tile(int m_tiles, int n_tiles, int group, int t) {
    int per_expert = m_tiles * n_tiles;
    int e = t / per_expert;
    TileMN mn = grouped_order(t - e * per_expert, m_tiles, n_tiles, group);
    TileCoord c;
    c.expert = e;
    c.m_block = mn.m;
    c.n_block = mn.n;
    return c;
}

// same_mn with long reductions split (weight gradients of an expert owning many rows):
// expert e's rows are cut into segments of at most `split_rows` when it has more than that
// (split_rows = 0: never), each segment one work item of m_tiles x n_tiles tiles; every other
// expert (empty ones included) is one item. cum_items is the exclusive prefix sum of
// mn_items over experts (E+1 entries); t < cum_items[E] * m_tiles * n_tiles.
MOEJIT_HD bool mn_is_split(int count, int split_rows) { return split_rows > 0 && count > split_rows; }
MOEJIT_HD int mn_items(int count, int split_rows) {
    return mn_is_split(count, split_rows) ? ceil_div(count, split_rows) : 1;
}
MOEJIT_HD int mn_slots(int count, int split_rows) {
    return mn_is_split(count, split_rows) ? ceil_div(count, split_rows) : 0;
}
struct MnItemTile {
    int expert;
    int segment;  // index of the row segment inside the expert (0 when not split)
    int m_block;
    int n_block;
};
MOEJIT_HD MnItemTile mn_item_tile(const int *cum_items, int num_experts, int m_tiles, int n_tiles,
                                  int group, int t) {
    int per_item = m_tiles * n_tiles;
    int item = t / per_item;
    int lo = last_at_most(cum_items, num_experts, item);
    TileMN mn = grouped_order(t - item * per_item, m_tiles, n_tiles, group);
    MnItemTile r;
    r.expert = lo;
    r.segment = item - cum_items[lo];
    r.m_block = mn.m;
    r.n_block = mn.n;
    return r;
}

// The rows item `it` reduces over: its segment of a split expert, else all the expert's rows.
MOEJIT_HD RowRange mn_item_rows(const int *offsets, int rows, int split_rows, const MnItemTile &it) {
    RowRange r = expert_rows(offsets, it.expert, rows);
    if (mn_is_split(r.end - r.begin, split_rows)) {
        r.begin += it.segment * split_rows;
        r.end = min_int(r.end, r.begin + split_rows);
    }
    return r;
}

}  // namespace sched
}  // namespace moejit
