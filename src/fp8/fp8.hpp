// The FP8 block-scaled kernel family (issue 31, first pieces), in one home: the quantizers
// (templates/fp8_quant.cuh) and the FP8 grouped GEMM, same_nk forward form
// (templates/sm90/fp8_gemm.cuh). Here: their specs, the one validator (can_implement), the pure
// render functions and the launchers. Internal entry points (no C ABI yet).
//
// Layouts (row-major, contiguous):
//   activations  x bf16 [S, K]    -> q e4m3 [S, K],    scales fp32 [S, ceil(K/128)]     (1 x 128)
//   weights      w bf16 [E, N, K] -> q e4m3 [E, N, K], scales fp32 [E, ceil(N/128), ceil(K/128)]
//                                                                                  (128 x 128)
//   GEMM: C[rows of e] = A[rows of e] · B_eᵀ, A e4m3 [S, K] + a_scale, B e4m3 [E, N, K] + b_scale,
//         C bf16 (or fp32) [S, N]; offsets int32 [E+1] on the device, offsets[E] = S = rows.
// The rounding rules of the quantizers, and what a NaN or an inf does to its tile, are written
// in templates/fp8_quant.cuh; src/fp8/e4m3.hpp is their host mirror.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "runtime/context.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

// ------------------------------------------------------------------ specs (compile-time parts)

struct Fp8QuantRowsSpec {
    std::int64_t k = 0;  // a multiple of 16
};

struct Fp8QuantBlocksSpec {
    std::int64_t n = 0;  // >= 1
    std::int64_t k = 0;  // a multiple of 16
};

struct Fp8GemmSpec {
    std::int64_t n = 0;  // a multiple of 128 (B's scale blocks)
    std::int64_t k = 0;  // a multiple of 128
    DType c_dtype = DType::bf16;  // bf16, or fp32 (register epilogue; tests of accumulation)
    int block_n = 128;            // 128 or 256 (whole B scale blocks; n a multiple of it)
    int stages = 6;               // the operand ring; fp8_gemm_max_stages gives the deepest that fits
    int group_m = 8;              // row blocks walked together (L2 reuse of B)
    bool tma_store = true;        // bf16 C through TMA for full 64-row halves (needs a 16-byte aligned C)
    // Promotion: every 128-wide k block's wgmma partial sum is scaled into fp32 registers. false is
    // a test mode (all of K in the wgmma accumulator, k block 0's scales applied at the end:
    // exact only for operands whose scales do not change along K).
    bool promote = true;
    // With promotion and block_n 128: two temporary accumulators, so the next k block's wgmmas
    // run while this one is promoted (templates/sm90/fp8_gemm.cuh, OVERLAP).
    bool overlap = false;
};

// The spec for (n, k, c_dtype, block_n) with the deepest ring that fits `num_experts` on sm_90a
// (TMA stores for a bf16 C).
Fp8GemmSpec make_fp8_gemm_spec(std::int64_t n, std::int64_t k, DType c_dtype, std::int32_t num_experts,
                               int block_n = 128);
// Dynamic shared memory of a launch (host mirror of sm90/pipeline.cuh's carve_smem with the FP8
// config), and the deepest ring (<= 6 stages) that fits sm_90a with `num_experts`.
std::size_t fp8_gemm_smem_bytes(const Fp8GemmSpec &spec, std::int32_t num_experts);
int fp8_gemm_max_stages(const Fp8GemmSpec &spec, std::int32_t num_experts);

// ------------------------------------------------------------------ operands (device pointers)

struct Fp8QuantRowsOperands {
    const void *x = nullptr;  // [rows, K] bf16, 8-byte aligned
    void *q = nullptr;        // [rows, K] e4m3, 4-byte aligned
    float *scales = nullptr;  // [rows, ceil(K/128)]
    std::int64_t rows = 0;    // >= 0; 0 launches nothing
    void *stream = nullptr;
};

struct Fp8QuantBlocksOperands {
    const void *w = nullptr;  // [E, N, K] bf16, 16-byte aligned
    void *q = nullptr;        // [E, N, K] e4m3, 8-byte aligned
    float *scales = nullptr;  // [E, ceil(N/128), ceil(K/128)]
    std::int32_t num_experts = 0;  // >= 1
    void *stream = nullptr;
};

struct Fp8GemmOperands {
    const void *a = nullptr;          // [S, K] e4m3, 16-byte aligned
    const float *a_scale = nullptr;   // [S, K/128]
    const void *b = nullptr;          // [E, N, K] e4m3, 16-byte aligned
    const float *b_scale = nullptr;   // [E, N/128, K/128]
    void *c = nullptr;                // [S, N] c_dtype, 4-byte aligned (16 for TMA stores)
    const std::int32_t *offsets = nullptr;  // [E+1]
    std::int64_t rows = 0;            // S >= 0; 0 launches nothing
    std::int32_t num_experts = 0;     // E >= 1
    void *stream = nullptr;
};

// ------------------------------------------------------------------ the validator

// Why a launch of `spec` on a context of `arch` (with `ops`, when given) cannot run, or nothing
// when it can. The one check of the family's arguments: the launchers call it first and throw
// its refusal (Status::invalid_argument for bad values, Status::unsupported for shapes, dtypes
// and arches this family does not run), naming the field and what is supported.
struct Fp8Refusal {
    Status status;
    std::string message;
};
std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8QuantRowsSpec &spec,
                                        const Fp8QuantRowsOperands *ops = nullptr);
std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8QuantBlocksSpec &spec,
                                        const Fp8QuantBlocksOperands *ops = nullptr);
// Without ops the shared-memory check assumes one expert.
std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8GemmSpec &spec,
                                        const Fp8GemmOperands *ops = nullptr);

// ------------------------------------------------------------------ render (pure) and launch

KernelSource render_fp8_quant_rows(const Fp8QuantRowsSpec &spec);
KernelSource render_fp8_quant_blocks(const Fp8QuantBlocksSpec &spec);
KernelSource render_fp8_group_gemm_nk(const Fp8GemmSpec &spec);

// Validate (can_implement), then compile/load and launch on ops.stream: no host sync, graph
// capturable. The GEMM's grid and tile bound come from S (ceil(S/128) + min(E, S) M-tiles), a
// device scheduler maps tiles to experts from `offsets`. A spec with tma_store and a C that is
// not 16-byte aligned runs its register-epilogue variant.
void fp8_quantize_rows(Context &ctx, const Fp8QuantRowsSpec &spec, const Fp8QuantRowsOperands &ops);
void fp8_quantize_blocks(Context &ctx, const Fp8QuantBlocksSpec &spec, const Fp8QuantBlocksOperands &ops);
void fp8_group_gemm_nk(Context &ctx, const Fp8GemmSpec &spec, const Fp8GemmOperands &ops);

// ------------------------------------------------------------------ weight gradients (issue 31)
//
// dW[e] = A_eᵀ · B_e over expert e's rows (varlen-K), A bf16 [S, M] and B bf16 [S, N] the
// scattered rows grouped per expert by offsets [E+1] (on the device, offsets[E] = S), dW
// [E, M, N] bf16 or fp32. The recipe: both operands e4m3 per 128 rows x 1 column (the transposed
// tiling), each expert's rows padded with zeros to whole 128-row blocks so no block mixes two
// experts (fp8_quantize_cols), then the block-scaled GEMM that promotes every 128-row block into
// fp32 with the outer product of the block's two scale vectors (fp8_wgrad_gemm).
//   quantized x [S, C] -> q e4m3 [C, P] (transposed: the rows K-major), scales fp32 [P/128, C],
//   P = fp8_wgrad_padded_rows(S, E) = 128 (ceil(S/128) + min(E, S)): a bound from S, so nothing
//   waits for the routing on the host.

// The padded row count P of the quantized operands (0 when rows is 0).
std::int64_t fp8_wgrad_padded_rows(std::int64_t rows, std::int32_t num_experts);

struct Fp8QuantColsSpec {
    std::int64_t c = 0;  // columns, a positive multiple of 64
};

struct Fp8QuantColsOperands {
    const void *x = nullptr;                // [rows, c] bf16, 16-byte aligned
    const std::int32_t *offsets = nullptr;  // [E+1]
    void *q = nullptr;                      // [c, padded_rows] e4m3, 16-byte aligned
    float *scales = nullptr;                // [padded_rows / 128, c]
    std::int64_t rows = 0;                  // >= 0; 0 launches nothing
    std::int32_t num_experts = 0;           // >= 1
    std::int64_t padded_rows = 0;           // >= fp8_wgrad_padded_rows(rows, E), a multiple of 128
    void *stream = nullptr;
    // Gathered rows: row r is x's row row_token[r], x the unscattered [tokens, c] (a token outside
    // [0, tokens) reads as zeros, on the device).
    const std::int32_t *row_token = nullptr;  // [rows] or null
    std::int64_t tokens = 0;
};

struct Fp8WgradSpec {
    std::int64_t m = 0;  // dW's rows, a positive multiple of 128
    std::int64_t n = 0;  // dW's columns, a positive multiple of 128
    DType c_dtype = DType::bf16;  // bf16 or fp32
    bool accumulate = false;      // dW += (register epilogue); empty experts leave dW[e] as it is
    int stages = 6;
    int group_m = 8;
    bool tma_store = true;        // bf16 dW through TMA (not with accumulate; needs a 16-byte aligned dW)
    // The next 128-row block's wgmmas run while this one is promoted (two temporaries, the scale
    // vectors copied into each stage; templates/sm90/fp8_wgrad.cuh, OVERLAP).
    bool overlap = false;
};

// The spec with the deepest ring that fits sm_90a with `num_experts` (TMA stores for a bf16 dW
// that is not accumulated into).
Fp8WgradSpec make_fp8_wgrad_spec(std::int64_t m, std::int64_t n, DType c_dtype, std::int32_t num_experts,
                                 bool accumulate = false, bool overlap = false);
std::size_t fp8_wgrad_smem_bytes(const Fp8WgradSpec &spec, std::int32_t num_experts);

struct Fp8WgradGemmOperands {
    const void *a = nullptr;          // qa [m, padded_rows] e4m3, 16-byte aligned
    const float *a_scale = nullptr;   // [padded_rows / 128, m], 16-byte aligned
    const void *b = nullptr;          // qb [n, padded_rows] e4m3, 16-byte aligned
    const float *b_scale = nullptr;   // [padded_rows / 128, n], 16-byte aligned
    void *c = nullptr;                // dW [E, m, n] c_dtype
    const std::int32_t *offsets = nullptr;  // [E+1] the unpadded rows'
    std::int64_t rows = 0;            // S >= 1
    std::int32_t num_experts = 0;     // E >= 1
    std::int64_t padded_rows = 0;     // as the quantizer's
    void *stream = nullptr;
};

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8QuantColsSpec &spec,
                                        const Fp8QuantColsOperands *ops = nullptr);
std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8WgradSpec &spec,
                                        const Fp8WgradGemmOperands *ops = nullptr);

KernelSource render_fp8_quant_cols(const Fp8QuantColsSpec &spec);
KernelSource render_fp8_wgrad_gemm(const Fp8WgradSpec &spec);

void fp8_quantize_cols(Context &ctx, const Fp8QuantColsSpec &spec, const Fp8QuantColsOperands &ops);
void fp8_wgrad_gemm(Context &ctx, const Fp8WgradSpec &spec, const Fp8WgradGemmOperands &ops);

// The whole weight gradient in one call (what the FP8 layer calls): quantize A and B into the
// workspace, then the GEMM; no host sync, graph capturable. rows = 0 writes dW = 0 (or leaves it,
// accumulating).
struct Fp8WgradArgs {
    const void *a = nullptr;               // [rows, m] bf16, 16-byte aligned (e.g. dout)
    const void *b = nullptr;               // [rows, n] bf16, 16-byte aligned (e.g. x)
    void *dw = nullptr;                    // [E, m, n] dw_dtype
    const std::int32_t *offsets = nullptr; // [E+1]
    std::int64_t rows = 0;                 // S >= 0
    std::int32_t num_experts = 0;          // E >= 1
    std::int64_t m = 0, n = 0;             // multiples of 128
    DType dw_dtype = DType::bf16;          // bf16 or fp32
    bool accumulate = false;               // dW += A_eᵀ · B_e
    bool overlap = false;                  // the GEMM's overlapped promotion (Fp8WgradSpec::overlap)
    void *workspace = nullptr;             // fp8_weight_grad_workspace_bytes, 256-byte aligned
    std::size_t workspace_bytes = 0;
    void *stream = nullptr;
    // Gathered operands (Fp8QuantColsOperands::row_token): a or b non-null reads that operand's
    // rows from the unscattered [tokens, m or n] through row_token.
    const std::int32_t *row_token = nullptr;  // [rows]
    std::int64_t tokens = 0;
    bool gather_a = false, gather_b = false;
    // b's e4m3 form is in the workspace already: the previous call had the same b, rows,
    // num_experts, m, n and workspace (the split fc1's dW_gate and dW_up share x's rows).
    bool b_quantized = false;
};
// Scratch of fp8_weight_grad: qa, qb, and both scale arrays, each 256-byte aligned.
std::size_t fp8_weight_grad_workspace_bytes(std::int64_t rows, std::int32_t num_experts, std::int64_t m,
                                            std::int64_t n);
// The checks of fp8_weight_grad's arguments (the launchers' own checks follow).
std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8WgradArgs &args);
void fp8_weight_grad(Context &ctx, const Fp8WgradArgs &args);

}  // namespace moejit
