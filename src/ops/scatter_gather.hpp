// Scatter and gather between token order and expert-sorted order (docs/DESIGN.md §2), and the same
// for per-route weights. Pure render functions (usable on a compile-only context for warmup)
// and launchers taking device pointers (used by the C ABI and by the layer plan).
//
// Shapes: T tokens, k = top_k, S = T·k, H = hidden_size. x, out [T,H]; xs, ys [S,H];
// scatter_index [T,k] int32 (from routing_index); weights [T,k]; w_s, d_w_s [S] fp32. Row
// tensors are row-major, contiguous and 16-byte aligned (rows move as 16-byte vectors, so H must
// be a multiple of 8). A scatter_index outside [0,S) (a dropped route) is skipped by scatter
// and scatter_weights, and contributes 0 to gather and gather_weights.
// Determinism: gather sums in fp32 in fixed j order; every output is bitwise identical across
// runs and independent of the launch geometry.
#pragma once

#include <cstdint>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

inline constexpr std::int64_t kScatterMaxHidden = 65536;
inline constexpr std::int32_t kScatterMaxTopK = 64;

// How threads cover a row of H / 8 16-byte vectors (a pure function of H).
struct RowGeometry {
    std::int32_t vectors = 0;            // H / 8
    std::int32_t threads_per_row = 0;    // a power of two <= 1024
    std::int32_t vectors_per_thread = 0; // <= 8
    std::int32_t rows_per_block = 0;
    std::int32_t block_threads = 0;      // threads_per_row * rows_per_block
};
RowGeometry row_geometry(std::int64_t hidden_size);

struct ScatterSpec {
    DType dtype = DType::bf16;  // bf16 or fp16
    std::int64_t hidden_size = 0;              // H, a positive multiple of 8, <= kScatterMaxHidden
    std::int32_t top_k = 0;                    // k in [1, kScatterMaxTopK]
};

// weight_dtype: DType::fp32, the row dtype, or 0 for "no weights" (all 1).
struct GatherSpec {
    DType dtype = DType::bf16;
    std::int64_t hidden_size = 0;
    std::int32_t top_k = 0;
    DType weight_dtype = static_cast<DType>(0);
    bool bias = false;  // GatherArgs::bias is added (the layer's fc2 bias)
};

// Throw Status::invalid_argument / Status::unsupported naming the bad field.
void validate_scatter_spec(const ScatterSpec &spec);
void validate_gather_spec(const GatherSpec &spec);
// bf16, fp16 or fp32 (the per-route weight kernels).
void validate_weight_dtype(DType weight_dtype);

// Pure: the full translation unit of one specialization (validates the spec first).
KernelSource render_scatter(const ScatterSpec &spec);
KernelSource render_gather(const GatherSpec &spec);
KernelSource render_scatter_weights(DType weight_dtype);
KernelSource render_gather_weights(DType weight_dtype);

struct ScatterArgs {
    ScatterSpec spec;
    const void *x = nullptr;                     // [T,H]
    const std::int32_t *scatter_index = nullptr; // [T,k]
    std::int64_t num_tokens = 0;                 // T >= 0
    void *xs = nullptr;                          // [S,H]
    void *stream = nullptr;
};

struct GatherArgs {
    GatherSpec spec;                             // weight_dtype ignored when weights is null
    const void *ys = nullptr;                    // [S,H]
    const std::int32_t *scatter_index = nullptr; // [T,k]
    const void *weights = nullptr;               // [T,k] in spec.weight_dtype, or null (= 1)
    std::int64_t num_tokens = 0;
    void *out = nullptr;                         // [T,H]
    void *stream = nullptr;
    // Optional (spec.bias): out[t] += Σ_j bias_scale[s]·bias[e(s)] for s = scatter_index[t,j]
    // and e(s) its expert from offsets [E+1] (device).
    const void *bias = nullptr;                  // [E,H] in spec.dtype
    const float *bias_scale = nullptr;           // [S]
    const std::int32_t *offsets = nullptr;
    std::int32_t num_experts = 0;
};

struct WeightsScatterArgs {
    DType weight_dtype = DType::fp32;  // of weights
    const void *weights = nullptr;                    // [T,k]
    const std::int32_t *scatter_index = nullptr;      // [T,k]
    std::int64_t num_tokens = 0;
    std::int32_t top_k = 0;
    float *w_s = nullptr;                             // [S]
    std::int32_t *row_token = nullptr;                // [S] or NULL: the token of each scattered row
    void *stream = nullptr;
};

struct WeightsGatherArgs {
    DType weight_dtype = DType::fp32;  // of d_weights
    const float *d_w_s = nullptr;                     // [S]
    const std::int32_t *scatter_index = nullptr;      // [T,k]
    std::int64_t num_tokens = 0;
    std::int32_t top_k = 0;
    void *d_weights = nullptr;                        // [T,k]
    void *stream = nullptr;
};

// Validate every argument (before touching the device, so that works on a compile-only
// context), then compile/load and launch. T == 0 launches nothing; null tensors are then
// accepted. A compile-only context is rejected after validation.
void scatter(Context &ctx, const ScatterArgs &args);
void gather(Context &ctx, const GatherArgs &args);
void scatter_weights(Context &ctx, const WeightsScatterArgs &args);
void gather_weights(Context &ctx, const WeightsGatherArgs &args);

// For callers that launch repeatedly (the layer plan): the same, with a kernel fetched once
// with ctx.kernel(render_...(spec)) for the spec of `args` (for gather:
// effective_gather_spec(args), whose weight_dtype is 0 when weights is null). Arguments are
// still validated; the kernel is trusted to match.
GatherSpec effective_gather_spec(const GatherArgs &args);
void scatter(Context &ctx, const ScatterArgs &args, Kernel &kernel);
void gather(Context &ctx, const GatherArgs &args, Kernel &kernel);
void scatter_weights(Context &ctx, const WeightsScatterArgs &args, Kernel &kernel);
void gather_weights(Context &ctx, const WeightsGatherArgs &args, Kernel &kernel);

}  // namespace moejit
