// The kernel ABI: every kernel takes exactly one of these structs, by value, as its only
// parameter (`const __grid_constant__ Args args`), and the host launches it with the same struct
// (Context::launch). This header is the one definition both sides compile: NVRTC includes it from
// the embedded templates, the host (g++) as "templates/kernel_args.h". So it has no includes and
// only plain C++ types (pointers, int, long long, float): no CUDA builtins for the host, no
// cuda.h for the device. Element pointers whose type depends on the specialization (bf16, fp16,
// fp32) are void pointers; each kernel casts them to its T.
//
// The layout is checked twice: sizeof of each struct travels with its KernelSource and must equal
// the parameter size the driver reports for the loaded kernel (runtime/jit_engine.cpp), and a launch
// must pass a struct of that size (Context::launch).
#pragma once

namespace moejit {
namespace kargs {

// A CUtensorMap as the kernels see it: opaque, 128 bytes, 64-byte aligned (the host
// static_asserts both against CUtensorMap). Inside a __grid_constant__ parameter TMA reads it
// from parameter space.
struct alignas(64) TmaDesc {
    unsigned long long opaque[16];
};
static_assert(sizeof(TmaDesc) == 128 && alignof(TmaDesc) == 64, "TmaDesc must match CUtensorMap");

// ------------------------------------------------------------------ routing index (routing.cuh)

struct RoutingHistogramArgs {
    const void *selected;  // [S] Id
    long long rows;
    int rows_per_warp;
    int num_chunks;
    int *hist;  // [E, num_chunks]
};

struct RoutingRowScanArgs {
    int *hist;
    int num_chunks;
    int num_experts;
    int *counts;  // [E]
};

struct RoutingRankArgs {
    const void *selected;  // [S] Id
    long long rows;
    int rows_per_warp;
    int num_chunks;
    const int *chunk_prefix;
    const int *counts;
    int *offsets;        // [E+1]
    int *scatter_index;  // [S]
};

// ------------------------------------------------------------- scatter / gather (scatter_gather.cuh)

struct ScatterArgs {
    const void *x;  // [T, H] T
    const int *scatter_index;
    long long num_tokens;
    void *xs;  // [S, H] T
};

struct GatherArgs {
    const void *ys;  // [S, H] T
    const int *scatter_index;
    const void *weights;  // [T, k] W, or null
    long long num_tokens;
    void *out;               // [T, H] T
    const void *bias;        // [E, H] T (kBias)
    const float *bias_scale;  // [S]
    const int *offsets;
    int num_experts;
};

struct ScatterWeightsArgs {
    const void *weights;  // [T, k] W
    const int *scatter_index;
    long long rows;
    float *w_s;      // [S]
    int *row_token;  // [S] or null
    int top_k;
};

struct GatherWeightsArgs {
    const float *d_w_s;  // [S]
    const int *scatter_index;
    long long rows;
    void *d_weights;  // [T, k] W
};

// ------------------------------------------------------------- gated activations (swiglu.cuh)

struct GatedForwardArgs {
    const void *gate;
    const void *up;
    const float *w_s;
    void *a;
    void *aw;
    long long rows;
    float limit;
    float alpha;
    const void *bias;
    const int *offsets;
    int num_experts;
};

struct GatedBackwardArgs {
    const void *gate;
    const void *up;
    const float *w_s;
    const void *daw;
    void *d_gate;
    void *d_up;
    float *d_w_s;
    void *aw;
    long long rows;
    float limit;
    float alpha;
};

// ------------------------------------------------------------- expert biases (expert_bias.cuh)

struct BiasPartialArgs {
    const void *m;  // [S, cols] T
    const float *scale;
    const int *offsets;
    int num_experts;
    long long cols;
    float *partial;
};

struct BiasReduceArgs {
    const float *partial;
    const int *offsets;
    long long cols;
    void *out;  // [E, cols] O
};

struct BiasRowDotArgs {
    const void *dy;    // [S, cols] T
    const void *bias;  // [E, cols] T
    const int *offsets;
    int num_experts;
    long long rows;
    long long cols;
    float *d_w_s;
};

// ------------------------------------------------------------- experts entry rows (expert_rows.cuh)

struct PrepareRowsArgs {
    const float *weights;
    long long rows;
    float *w_s;
    int *row_token;
};

struct AddRowBiasArgs {
    void *ys;          // [R, cols] T
    const void *bias;  // [E, cols] T
    const float *w_s;
    const int *offsets;
    int num_experts;
    long long rows;
    long long cols;
};

// ------------------------------------------------------------- grouped GEMM, mma.sync (group_gemm.cuh)

struct GemmNkArgs {
    const void *a;  // [S, K] T
    const void *b;  // [E, N, K] or [E, K, N] T
    void *c;        // [S, N] CT
    const int *offsets;
    int rows;
    int num_experts;
    int m_tile_bound;
};

struct GemmMnArgs {
    const void *a;  // [S, M] T
    const void *b;  // [S, N] T
    void *c;        // [E, M, N] CT
    const int *offsets;
    int rows;
    int num_experts;
};

// ------------------------------------------------------------- grouped GEMM, wgmma (sm90/kernels.cuh)

// The SwiGLU epilogue's extra operands (sm90/epilogue.cuh).
struct GluArgs {
    void *up;          // u's element 0 (split: its own [S, I]; merged: gate_up + I)
    void *aw;          // [S, I]
    const float *w_s;  // [S]
    float limit;       // used when LIMIT
};

struct Sm90NkArgs {
    TmaDesc tma_a, tma_b, tma_c;     // A, B, C (sm90/group_gemm.cuh describes each map)
    TmaDesc tma_a2, tma_b2, tma_c2;  // the second operand pair, SwiGLU's u
    void *c;                         // [S, N] CT
    const void *gather_src;          // [T, K] T (GATHER_A)
    const int *row_token;
    const int *offsets;
    int rows;
    int num_experts;
    int m_tile_bound;
    GluArgs glu;
};

// What a same_mn launch and its split reduction share: C, the rows' experts and the split
// (the reduction sums the partials the GEMM left for exactly these).
struct MnSplitTarget {
    void *c;  // [E, M, N] CT
    const int *offsets;
    int rows;
    int num_experts;
    int split_rows;
    int max_slots;
};

struct Sm90MnArgs {
    TmaDesc tma_a, tma_b, tma_c;
    MnSplitTarget out;
    int *partials_index;
    float *partials;
};

struct SplitReduceArgs {
    MnSplitTarget out;
    const int *index;
    const float *partials;
};

// ------------------------------------------------------------- FP8 block-scaled family (fp8_quant.cuh, sm90/fp8_gemm.cuh)

// bf16 [rows, K] -> e4m3 [rows, K] + fp32 scales [rows, ceil(K/128)] (one per 1 x 128 tile).
struct Fp8QuantRowsArgs {
    const void *x;   // [rows, K] bf16
    void *q;         // [rows, K] e4m3
    float *scales;   // [rows, ceil(K/128)]
    long long rows;
};

// bf16 [E, N, K] -> e4m3 [E, N, K] + fp32 scales [E, ceil(N/128), ceil(K/128)] (128 x 128 blocks).
struct Fp8QuantBlocksArgs {
    const void *w;   // [E, N, K] bf16
    void *q;         // [E, N, K] e4m3
    float *scales;   // [E, ceil(N/128), ceil(K/128)]
    int num_experts;
};

// FP8 same_nk: C[rows of e] = A[rows of e] · B_eᵀ with block scales (sm90/fp8_gemm.cuh).
struct Sm90Fp8NkArgs {
    TmaDesc tma_a, tma_b, tma_c;  // A [S, K] e4m3, B [E, N, K] e4m3, C [S, N] (EPI_TMA)
    void *c;                      // [S, N] CT
    const float *a_scale;         // [S, K/128]
    const float *b_scale;         // [E, N/128, K/128]
    const int *offsets;
    int rows;
    int num_experts;
    int m_tile_bound;
};

// ------------------------------------------------------------- FP8 weight gradients (fp8_quant.cuh, sm90/fp8_wgrad.cuh)

// bf16 [rows, C] (rows grouped per expert by offsets) -> e4m3 [C, P] transposed, each expert's
// rows padded with zeros to whole 128-row blocks (P = padded_rows = 128 * block_bound), and fp32
// scales [P/128, C] (one per 128 rows x 1 column). With row_token, row r is x's row
// row_token[r] (x is then the unscattered [tokens, C]; a token outside [0, tokens) reads zeros).
struct Fp8QuantColsArgs {
    const void *x;       // [rows, C] bf16, or [tokens, C] with row_token
    const int *offsets;  // [E+1]
    void *q;             // [C, P] e4m3
    float *scales;       // [P/128, C]
    int rows;
    int num_experts;
    int block_bound;     // P / 128
    const int *row_token;  // [rows] or NULL
    int tokens;
};

// FP8 weight gradient: dW[e] (+)= A_eᵀ · B_e over expert e's padded 128-row blocks.
struct Sm90Fp8WgradArgs {
    TmaDesc tma_a, tma_b, tma_c;  // qa [M, P] e4m3, qb [N, P] e4m3 (K-major), dW [E, M, N] (EPI_TMA)
    void *c;                      // dW [E, M, N] CT
    const float *a_scale;         // [P/128, M]
    const float *b_scale;         // [P/128, N]
    const int *offsets;           // [E+1] the unpadded rows'
    int rows;
    int num_experts;
    int block_bound;              // P / 128
};

// The FP8 layer's quantizer forms (fp8_quant_layer.cuh); K (and N) multiples of 128.
// x [T, K] bf16 -> q [S, K] e4m3 + scales [S, K/128]: token t's tiles to rows scatter_index[t, j].
struct Fp8QuantScatterArgs {
    const void *x;
    const int *scatter_index;  // [T, k]
    void *q;
    float *scales;
    long long num_tokens;
};

// bf16 [rows, K] -> e4m3 rows at q + r * q_ld, scales at scales + r * scale_ld.
struct Fp8QuantRowsLdArgs {
    const void *x;
    void *q;
    float *scales;
    long long rows;
    long long q_ld;
    long long scale_ld;
};

// bf16 [E, N, K] -> e4m3 transposed: q[e][k][n] at q + (e * K + k) * q_ld + n, scales
// [(e * K/128 + kb) * scale_ld + nb] (128 x 128 blocks).
struct Fp8QuantBlocksTArgs {
    const void *w;
    void *q;
    float *scales;
    int num_experts;
    long long q_ld;
    long long scale_ld;
};

// e4m3 [rows, K] + scales [rows, K/128] -> bf16 [rows, K].
struct Fp8DequantRowsArgs {
    const void *q;
    const float *scales;
    void *x;
    long long rows;
};

// fc1's bf16 g, u -> saved e4m3 1 x 128 tiles (gate_up's own layout) and aw = act(g, u)·w_s as
// e4m3 1 x 128 tiles, in one pass.
struct Fp8SwigluQuantArgs {
    const void *gate_up;   // split: g [S, I] then u [S, I]; merged / interleaved: [S, 2I] bf16
    const float *w_s;      // [S]
    void *saved_q;         // e4m3 in gate_up's element layout
    float *saved_scales;   // one per 128 consecutive elements of that layout
    void *awq;             // [S, I] e4m3
    float *aw_scales;      // [S, I/128]
    long long rows;        // S
    float limit;           // > 0 with the kernel's LIMIT
    float alpha;           // gpt-oss's
};

// The saved e4m3 g, u and d(a·w) -> d_gate_up (bf16, gate_up's layout), its e4m3 1 x 128 tiles
// for fc1's dgrad ([S, 2I]: split rows are [d_gate | d_up]), d_w_s, and a·w recomputed (bf16,
// over daw) in one pass.
struct Fp8SwigluBackwardQuantArgs {
    const void *saved_q;        // e4m3 in gate_up's element layout
    const float *saved_scales;  // one per 128 consecutive elements of it
    void *daw;                  // [S, I] bf16: d(a·w) in, a·w out
    const float *w_s;           // [S]
    void *d_gate_up;            // bf16 in gate_up's layout
    float *d_w_s;               // [S]
    void *dguq;                 // [S, 2I] e4m3
    float *dgu_scales;          // [S, 2I/128]
    long long rows;             // S
    float limit;
    float alpha;
};

// ------------------------------------------------------------- experts entry offsets (expert_rows.cuh)

// The bits of the context's device error word (moejit.h, moejit_device_error_t: same values).
constexpr unsigned kDeviceErrorExpertOffsets = 1u;

// checked[e] = the caller's offsets bounded into a monotone sequence in [0, R] (checked[0] = 0,
// checked[e] = clamp(offsets[e], checked[e-1], R)); any entry it had to change sets
// kDeviceErrorExpertOffsets in *errors.
struct CheckOffsetsArgs {
    const int *offsets;  // [E+1] the caller's
    int *checked;        // [E+1] workspace
    unsigned *errors;    // the context's device error word
    int num_experts;
    int rows;
};

// Zero the rows no expert owns, [checked[E], R): a [R, row_vecs] matrix of 16-byte vectors
// and/or an fp32 [R] vector (either may be null).
struct ZeroUnassignedRowsArgs {
    void *data;
    float *values;
    const int *offsets;  // checked
    int num_experts;
    long long rows;
    long long row_vecs;
};

}  // namespace kargs
}  // namespace moejit
