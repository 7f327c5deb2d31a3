// Tile configurations of the grouped GEMMs: the heuristic that picks BLOCK_M/N/K, pipeline
// stages and the warp layout per problem and arch, their validation, and the test override.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/dtype.hpp"
#include "runtime/config.hpp"

namespace moejit {

// Which kernel family runs a grouped GEMM.
enum class GemmEngine {
    mma_sync,  // portable (sm_80+): ldmatrix + mma.sync m16n8k16, cp.async ring (group_gemm.cuh)
    wgmma,     // sm_90a: TMA + mbarrier ring, producer warpgroup + 2 wgmma consumer warpgroups
               // (templates/sm90/); block_m 128, block_k 64, warps and o fixed by the kernel
};

// One specialization's tiling. mma.sync: warp tile = (block_m / warps_m) x (block_n / warps_n).
struct GemmTileConfig {
    GemmEngine engine = GemmEngine::mma_sync;
    int block_m = 128;
    int block_n = 128;
    int block_k = 64;
    int stages = 3;
    int warps_m = 2;
    int warps_n = 4;
    int group_m = 8;          // row blocks walked together (L2 reuse), see grouped_order
    int min_blocks_per_sm = 2;  // __launch_bounds__ minimum; caps registers at 64K / (threads * it)
    bool tma_store = false;     // wgmma only: stage C in shared memory, TMA-store it (16-bit C,
                                // not accumulating); "_e1" in the name
    int pingpong = 0;           // wgmma only: each consumer warpgroup owns whole 128 x BN tiles and
                                // the two take turns (block_n <= 128); "_p1" in the name (1: the
                                // two row blocks' wgmmas interleaved per k16 step; 2: one row
                                // block's k-slice, then the other's)
    bool store_ring = false;    // wgmma, cooperative, with tma_store: C leaves in 64 x 64 chunks
                                // through two staging slots per consumer instead of its whole
                                // 64 x BN row block (32 KiB of staging where 128 x 256 needs 64 KiB,
                                // so that tile keeps a fourth stage); "_r1" in the name. Opt-in
                                // (MOEJIT_STORE_RING=1 where the rows per expert are enough,
                                // or a forced tile): docs/DECISIONS.md "The store ring"

    int threads() const { return engine == GemmEngine::wgmma ? 384 : 32 * warps_m * warps_n; }
    bool operator==(const GemmTileConfig &) const = default;
};

// "128x128x32_s4_w2x4_g8_o2", or "wgmma_128x256x64_s3_g8_e1" ("_p1" appended for ping-pong
// consumers, "_r1" for the store ring): readable and file-name safe; used in kernel names.
std::string to_string(const GemmTileConfig &config);
// Parses "[wgmma_]BMxBNxBK[_sSTAGES][_wWMxWN][_gGROUP][_oMINBLOCKS][_e0|_e1][_p0|_p1|_p2][_r0|_r1]"
// (omitted fields keep defaults; the wgmma_ prefix selects the sm_90a engine, which ignores _w and
// _o; _e1 is its TMA-store epilogue, _p1 its ping-pong consumers, _r1 the store ring); throws
// Status::invalid_argument naming `what` on malformed text.
GemmTileConfig parse_tile_config(std::string_view text, const char *what);

enum class GemmKind {
    same_nk,  // C[S,N] = A[S,K] · B_e(ᵀ): forward (B [E,N,K]) and input gradients (B [E,K,N])
    same_mn,  // C[E,M,N] = A_eᵀ · B_e: weight gradients, reduction over the expert's rows
};

// What the heuristic looks at. For same_mn, `m`/`n` are the output sizes; for same_nk `n`/`k`.
struct GemmProblem {
    GemmKind kind = GemmKind::same_nk;
    DType dtype = DType::bf16;
    DType c_dtype = DType::bf16;
    std::int64_t m = 0;  // same_mn only
    std::int64_t n = 0;
    std::int64_t k = 0;  // same_nk only
    bool b_transposed = true;  // same_nk only
    bool accumulate = false;   // C += A·B
    std::int64_t rows_hint = 0;  // typical S; 0: unknown (assume large)
    std::int32_t num_experts = 1;
    bool gather_a = false;  // same_nk: A's rows gathered through a row index (wgmma engine only)
    std::int64_t k_split = 0;  // same_nk: K split over two operand pairs at k_split (wgmma engine only)
    bool swiglu = false;       // same_nk: fc1 with the SwiGLU epilogue (wgmma engine only)
};

// Shared memory per SM and per block for a compute capability (major*10+minor).
struct SmemLimits {
    std::size_t per_block;  // largest dynamic + static allocation of one block
    std::size_t per_sm;     // total, including the 1 KiB the hardware reserves per block
};
SmemLimits smem_limits(int compute_capability);

// Dynamic shared memory of a specialization: the pipeline stages, plus (same_nk) the per-expert
// cumulative tile counts the device scheduler keeps in shared memory; wgmma adds 1 KiB of
// alignment slack (128-byte-swizzled tiles start 1024-byte aligned), two mbarriers per stage
// and the scan's per-warp sums.
std::size_t gemm_smem_bytes(const GemmTileConfig &config, GemmKind kind, std::int32_t num_experts);

// The most stages in [min_stages, 6] with which `config` fits one block's shared memory on
// `compute_capability` beside the schedule of `num_experts` (gemm_smem_bytes); 0 if none does.
int deepest_stages(GemmTileConfig config, GemmKind kind, std::int32_t num_experts, int compute_capability,
                   int min_stages);

// Throws Status::unsupported (naming the field and the allowed values) if `config` cannot
// run `problem` on `compute_capability`: divisibility, warp tiles, registers, shared memory.
void validate_tile_config(const GemmTileConfig &config, const GemmProblem &problem,
                          int compute_capability);
// The part of it that needs no arch: gathered A rows, two operand pairs and the SwiGLU epilogue
// exist on the wgmma engine only (renderers call it too, so warmup never renders an mma.sync kernel that would
// ignore them).
void require_engine_features(const GemmTileConfig &config, const GemmProblem &problem);

// Whether the wgmma engine can run `problem` (sm_90a, i.e. compute capability 9.0: moejit
// always compiles cc 9.0 for sm_90a).
bool wgmma_supports(const GemmProblem &problem, int compute_capability);

// A tile forced on every grouped GEMM of a context (options->gemm_tile or MOEJIT_GEMM_TILE,
// runtime/config.hpp), with its origin as messages name it ("options->gemm_tile", "environment
// variable MOEJIT_GEMM_TILE").
struct ForcedTile {
    GemmTileConfig tile;
    std::string origin;
};

// The configuration's forced tile (runtime/config.hpp keeps it as text), parsed: nullopt for
// the heuristic; a bad spelling is Status::invalid_argument naming its origin.
std::optional<ForcedTile> forced_tile(const Config &config);
// At context creation: the context's forced tile and MOEJIT_GEMM_TILE, whether or not an
// option overrides it (a typo in the environment fails wherever it is, as every variable does).
void check_forced_tiles(const Config &config);

// The forced tile when there is one (it must fit the problem: else Status::unsupported
// naming its origin, the tile and the violated limit), else the heuristic.
GemmTileConfig choose_tile_config(const GemmProblem &problem, int compute_capability, const ForcedTile *forced);
// The heuristic (documented in tile_config.cpp). Always returns a config that validates.
GemmTileConfig heuristic_tile_config(const GemmProblem &problem, int compute_capability);

// Blocks per SM the persistent grid assumes: min_blocks_per_sm, reduced if shared memory
// does not allow it.
int blocks_per_sm(const GemmTileConfig &config, GemmKind kind, std::int32_t num_experts,
                  int compute_capability);

}  // namespace moejit
