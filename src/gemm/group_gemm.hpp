// Grouped GEMMs over expert row groups (docs/DESIGN.md §2-3): pure render functions (spec ->
// KernelSource, usable on a compile-only context for warmup) and launchers taking device
// pointers (used by the C ABI and by the layer plan).
//
// Expert e owns rows [offsets[e], offsets[e+1]) of the scattered operands (offsets int32 [E+1]
// on the device; offsets[E] = S = `rows`).
//   same_nk: A [S,K], C [S,N]. b_transposed: B [E,N,K], C_e = A_e · B_eᵀ (forward fc1/fc2);
//            else B [E,K,N], C_e = A_e · B_e (input gradients).
//   same_mn: A [S,M], B [S,N], C [E,M,N], C_e = A_eᵀ · B_e (weight gradients); an expert with
//            no rows gets exactly 0, or is left untouched when accumulating.
// A and B bf16 or fp16, fp32 accumulation, C in the operand dtype or fp32, optionally C += .
// N, K (same_nk) and M, N (same_mn) are compile-time constants of a specialization and must be
// multiples of 8 (16-byte rows); ragged tile edges are zero-filled. Tensors are row-major,
// contiguous; A and B 16-byte aligned, C aligned to two elements.
//
// Launch bound: the grid comes from S on the host (ceil(S/BM) + E M-tiles, gemm/
// tile_schedule.hpp), a device scheduler maps tiles to experts from `offsets`: no device->host
// sync, CUDA-graph capturable. Deterministic: no split-K, no atomics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "gemm/tile_config.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

// The compile-time part of a same_nk kernel.
struct GemmNkSpec {
    DType dtype = DType::bf16;    // A, B
    DType c_dtype = DType::bf16;  // dtype or fp32
    std::int64_t n = 0;
    std::int64_t k = 0;
    bool b_transposed = true;
    bool accumulate = false;
    GemmTileConfig tile;
    bool tunable = false;  // the tile is the heuristic's: tuning (Config::tuning()) may replace it
    bool gather_a = false;  // A's rows come from GemmOperands::row_token (wgmma engine only)
    // > 0: the reduction runs over two operand pairs, k < k_split from (a, b) and the rest
    // from (a2, b2), each laid out like a and b over its own K (k_split, k - k_split); wgmma
    // engine only, a multiple of 64, without gather_a. Split fc1's dgrad: dg·W_gate + du·W_up.
    std::int64_t k_split = 0;
    // fc1 fused with SwiGLU (wgmma engine; b_transposed, no accumulate, c_dtype = dtype, no
    // k_split; TMA stores of g and u need block_n >= 128): n = 2I, every tile holds [gate | up] of the same intermediate
    // columns: gate rows from b, up rows from b2 (merged: from b at row I). C gets g,
    // GemmOperands::glu u and aw = silu(g')·u'·w_s ([S, I]). Split: g and u [S, I] each;
    // merged: C is gate_up [S, 2I] with u at column I.
    struct Swiglu {
        bool on = false;
        bool limit = false;   // g' = min(g, L), u' = clamp(u, -L, L)
        bool merged = false;  // W_gate_up and gate_up; else W_gate/W_up and g/u apart
    } swiglu = {};
};

// The compile-time part of a same_mn kernel.
struct GemmMnSpec {
    DType dtype = DType::bf16;
    DType c_dtype = DType::fp32;
    std::int64_t m = 0;
    std::int64_t n = 0;
    bool accumulate = false;  // requires c_dtype FP32
    GemmTileConfig tile;
    bool tunable = false;  // the tile is the heuristic's: tuning (Config::tuning()) may replace it
};

// Specs with the tile config chosen for the problem (choose_tile_config: `forced`, the
// context's forced tile (forced_tile(config)), or the heuristic); tunable.
// rows_hint: the typical S (0 = unknown); compute_capability: e.g. ctx.compute_capability().
GemmNkSpec make_nk_spec(DType dtype, DType c_dtype, std::int64_t n,
                        std::int64_t k, bool b_transposed, bool accumulate,
                        std::int64_t rows_hint, std::int32_t num_experts,
                        int compute_capability, const ForcedTile *forced = nullptr);
// `spec` (every field but the tile set) with the tile chosen as make_nk_spec does.
GemmNkSpec with_chosen_tile(GemmNkSpec spec, std::int64_t rows_hint, std::int32_t num_experts,
                            int compute_capability, const ForcedTile *forced = nullptr);
GemmMnSpec make_mn_spec(DType dtype, DType c_dtype, std::int64_t m,
                        std::int64_t n, bool accumulate, std::int64_t rows_hint,
                        std::int32_t num_experts, int compute_capability,
                        const ForcedTile *forced = nullptr);

// `spec` with the store ring (GemmTileConfig::store_ring) on a cooperative TMA-store wgmma tile
// and the deepest operand ring that then fits, where that is deeper than the tile's own (not
// tunable then) and the rows per expert (rows_hint / num_experts) are where the ring measured
// faster: >= 256 for same_nk (>= 1024 for a gathered A with K >= 4096), >= 1024 (the K loop of
// a weight gradient) for same_mn (docs/
// DECISIONS.md "The store ring"); any other spec unchanged (MOEJIT_STORE_RING, layer_specs).
GemmNkSpec with_store_ring(GemmNkSpec spec, std::int64_t rows_hint, std::int32_t num_experts,
                           int compute_capability);
GemmMnSpec with_store_ring(GemmMnSpec spec, std::int64_t rows_hint, std::int32_t num_experts,
                           int compute_capability);

// Throws Status::invalid_argument (bad dtype, size) or Status::unsupported (tile
// config not runnable on the arch, sizes too large), naming the field.
void validate_nk_spec(const GemmNkSpec &spec, std::int32_t num_experts, int compute_capability);
void validate_mn_spec(const GemmMnSpec &spec, std::int32_t num_experts, int compute_capability);

// Pure: the full translation unit of one specialization (validates dtypes and sizes).
KernelSource render_group_gemm_nk(const GemmNkSpec &spec);
KernelSource render_group_gemm_mn(const GemmMnSpec &spec);
// Every kernel a launch of `spec` may use: the GEMM, then (wgmma same_mn) its split reduction.
std::vector<KernelSource> group_gemm_kernels(const GemmNkSpec &spec);
std::vector<KernelSource> group_gemm_kernels(const GemmMnSpec &spec);

struct GemmOperands {
    const void *a = nullptr;
    const void *b = nullptr;
    void *c = nullptr;
    const std::int32_t *offsets = nullptr;  // [E+1], device
    std::int64_t rows = 0;                  // S >= 0
    std::int32_t num_experts = 0;           // E >= 1
    void *stream = nullptr;                 // CUstream
    // same_mn on the wgmma engine: scratch for a split reduction (gemm/tile_schedule.hpp,
    // mn_split); without enough of it the reduction is not split. split_rows: -1 = the rule
    // (mn_split), 0 = never, > 0 = this segment length (a multiple of 64; tests).
    void *workspace = nullptr;
    std::size_t workspace_bytes = 0;
    std::int32_t split_rows = -1;
    // A same_nk spec with gather_a: `a` is the unscattered source [T, K] and row_token [S]
    // (device) names each scattered row's source row.
    const std::int32_t *row_token = nullptr;
    // A same_nk spec with k_split: the second operand pair (a2 [S, K - k_split], b2 like b).
    const void *a2 = nullptr;
    const void *b2 = nullptr;
    // A same_nk spec with swiglu: b2 = W_up (split; ignored when merged) and the epilogue's
    // other outputs and inputs.
    struct Glu {
        void *up = nullptr;           // split: u [S, I]; merged: gate_up + I (C is gate_up)
        void *aw = nullptr;           // [S, I]
        const float *w_s = nullptr;   // [S]
        float limit = 0.0f;           // spec.swiglu.limit: L > 0
    } glu = {};
};

// The kernels of one spec, fetched once by a caller that launches repeatedly (the layer plan),
// so that its launches neither render nor look up: `main` is the spec's GEMM (as rendered by
// render_group_gemm_*), `reduce` the split reduction of a wgmma same_mn spec (else null).
struct GemmKernels {
    const Kernel *main = nullptr;
    const Kernel *reduce = nullptr;
};
// Every kernel of `spec`, in the order group_gemm_kernels lists them.
GemmKernels bind_gemm_kernels(const std::vector<Kernel *> &kernels);

// Validate every argument (before touching the device), then compile/load and launch.
// same_nk with rows == 0 launches nothing (null tensors accepted); same_mn with rows == 0
// still writes C = 0 unless accumulating. A compile-only context is rejected after validation.
// `bound`: the spec's kernels (GemmKernels), used unless the launch needs another variant (a
// tuned tile, or a register epilogue for a C that TMA cannot store).
void launch_group_gemm_nk(Context &ctx, const GemmNkSpec &spec, const GemmOperands &ops,
                          const GemmKernels *bound = nullptr);
void launch_group_gemm_mn(Context &ctx, const GemmMnSpec &spec, const GemmOperands &ops,
                          const GemmKernels *bound = nullptr);

// The standalone grouped GEMMs' arguments (moejit_group_gemm_nk_args_t and _mn_args_t's
// fields, as the library uses them; capi/capi_convert.cpp makes them). The defaults are their
// *_init's; the integer flags are as the caller gave them (validated as 0 or 1).
struct GroupGemmNkArgs {
    DType dtype = DType::bf16;    // A, B
    DType c_dtype = DType::bf16;  // dtype or fp32
    std::int64_t rows = 0;        // S
    std::int64_t n = 0;
    std::int64_t k = 0;
    std::int32_t num_experts = 1;
    std::int32_t b_transposed = 1;  // 1: B [E,N,K]; 0: B [E,K,N]
    std::int32_t accumulate = 0;
    const void *a = nullptr;  // [S,K]
    const void *b = nullptr;
    void *c = nullptr;  // [S,N]
    const std::int32_t *offsets = nullptr;  // [E+1]
    void *stream = nullptr;
};
struct GroupGemmMnArgs {
    DType dtype = DType::bf16;
    DType c_dtype = DType::fp32;
    std::int64_t rows = 0;  // S
    std::int64_t m = 0;
    std::int64_t n = 0;
    std::int32_t num_experts = 1;
    std::int32_t accumulate = 0;
    const void *a = nullptr;  // [S,M]
    const void *b = nullptr;  // [S,N]
    void *c = nullptr;        // [E,M,N]
    const std::int32_t *offsets = nullptr;  // [E+1]
    void *stream = nullptr;
};

// The C ABI's ops: validate the args struct, pick the spec (tile: `tile` when given, else the
// context's forced tile or the heuristic), launch. Messages name the args fields ("args->n", ...).
void group_gemm_same_nk(Context &ctx, const GroupGemmNkArgs &args,
                        const GemmTileConfig *tile = nullptr);
void group_gemm_same_mn(Context &ctx, const GroupGemmMnArgs &args,
                        const GemmTileConfig *tile = nullptr);

}  // namespace moejit
