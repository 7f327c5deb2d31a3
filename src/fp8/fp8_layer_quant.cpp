// Render and launch of the FP8 layer's quantizer forms (fp8/fp8_layer_quant.hpp).
#include "fp8/fp8_layer_quant.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.hpp"
#include "fp8/fp8_launch_common.hpp"

namespace moejit {
namespace {

constexpr int kThreads = 256;

void require_dim(std::int64_t v, const char *what, const char *field) {
    if (!(v > 0 && v % 128 == 0 && v <= (std::int64_t{1} << 30)))
        fail(Status::unsupported, "{}: {} = {}: the FP8 layer's quantizers support positive multiples of 128", what,
             field, v);
}

void require_sm90a(const Context &ctx, const char *what) {
    if (ctx.arch() != "sm_90a")
        fail(Status::unsupported, "{}: the FP8 kernels need an sm_90a context (Hopper), got {}", what, ctx.arch());
}


// Every launcher's steps: the arch and the device first, then the kernel (rendering validates
// the spec even when there is no work), then `ctas` CTAs of kThreads, at most `per_sm` per SM
// (grid-stride kernels), or all of them with kEveryCta (a kernel whose every CTA has its own
// work); nothing is launched for ctas <= 0 (no rows, tokens or experts).
constexpr int kEveryCta = 0;
template <class Spec, class Args>
void launch(Context &ctx, const char *what, KernelSource (*render)(const Spec &), const Spec &spec, std::int64_t ctas,
            int per_sm, void *stream, const Args &args) {
    require_sm90a(ctx, what);
    ctx.require_device(what);
    const Kernel &kernel = ctx.kernel(render(spec));
    if (ctas <= 0) return;
    LaunchShape shape;
    shape.grid_x = per_sm == kEveryCta ? static_cast<std::uint32_t>(ctas) : fp8_grid_for(ctx, ctas, per_sm);
    shape.block_x = kThreads;
    ctx.launch(kernel, shape, stream, args);
}

}  // namespace

KernelSource render_fp8_quant_scatter(const Fp8QuantScatterSpec &spec) {
    require_dim(spec.k, "fp8_quantize_scatter", "k");
    if (spec.top_k < 1 || spec.top_k > 64)
        fail(Status::unsupported, "fp8_quantize_scatter: top_k = {}: expected 1..64", spec.top_k);
    const std::string name = fmt::format("fp8_quant_scatter_bf16_k{}_top{}", spec.k, spec.top_k);
    return instantiate_kernel<kargs::Fp8QuantScatterArgs>(
        {name, "fp8_quant_layer.cuh", "FP8 quantizing scatter, 1 x 128 tiles: " + name, "",
         "moejit::quant::quantize_scatter_kernel", fmt::format("{}, {}, {}", kThreads, spec.k, spec.top_k)});
}

KernelSource render_fp8_quant_rows_ld(const Fp8QuantRowsLdSpec &spec) {
    require_dim(spec.k, "fp8_quantize_rows_ld", "k");
    const std::string name = fmt::format("fp8_quant_rows_ld_bf16_k{}", spec.k);
    return instantiate_kernel<kargs::Fp8QuantRowsLdArgs>(
        {name, "fp8_quant_layer.cuh", "FP8 quantizer into strided rows, 1 x 128 tiles: " + name, "",
         "moejit::quant::quantize_rows_ld_kernel", fmt::format("{}, {}", kThreads, spec.k)});
}

KernelSource render_fp8_quant_blocks_t(const Fp8QuantBlocksTSpec &spec) {
    require_dim(spec.n, "fp8_quantize_blocks_t", "n");
    require_dim(spec.k, "fp8_quantize_blocks_t", "k");
    const std::string name = fmt::format("fp8_quant_blocks_t_bf16_n{}_k{}", spec.n, spec.k);
    return instantiate_kernel<kargs::Fp8QuantBlocksTArgs>(
        {name, "fp8_quant_layer.cuh", "FP8 quantizer, 128 x 128 blocks, transposed: " + name, "",
         "moejit::quant::quantize_blocks_t_kernel", fmt::format("{}, {}", spec.n, spec.k)});
}

KernelSource render_fp8_dequant_rows(const Fp8DequantRowsSpec &spec) {
    require_dim(spec.k, "fp8_dequantize_rows", "k");
    const std::string name = fmt::format("fp8_dequant_rows_bf16_k{}", spec.k);
    return instantiate_kernel<kargs::Fp8DequantRowsArgs>(
        {name, "fp8_quant_layer.cuh", "FP8 dequantizer, 1 x 128 tiles: " + name, "",
         "moejit::quant::dequantize_rows_kernel", fmt::format("{}, {}", kThreads, spec.k)});
}

namespace {

// Both fused SwiGLU quantizers: the spec checked, the kernel named `prefix`_i..._layout_act.
KernelSource render_swiglu_quant(const Fp8SwigluQuantSpec &spec, const char *what, const char *prefix,
                                 const char *kernel, KernelSource (*instantiate)(const KernelInstance &)) {
    require_dim(spec.intermediate, what, "intermediate");
    const int layout = static_cast<int>(spec.layout), act = static_cast<int>(spec.activation);
    if (layout < 0 || layout > 2)
        fail(Status::invalid_argument, "{}: layout = {}: expected split, merged or interleaved", what, layout);
    if (act < 0 || act > 1)
        fail(Status::invalid_argument, "{}: activation = {}: expected swiglu (0) or gpt_oss (1)", what, act);
    static constexpr const char *kLayoutNames[] = {"split", "merged", "interleaved"};
    const std::string name = fmt::format("{}_i{}_{}_{}{}", prefix, spec.intermediate, kLayoutNames[layout],
                                         act == 0 ? "swiglu" : "gptoss", spec.has_limit ? "_limit" : "");
    return instantiate({name, "fp8_quant_layer.cuh", std::string(what) + ", 1 x 128 tiles: " + name, "", kernel,
                        fmt::format("{}, {}, {}, {}, {}", kThreads, spec.intermediate, layout, act,
                                    spec.has_limit ? "true" : "false")});
}

}  // namespace

KernelSource render_fp8_swiglu_quant(const Fp8SwigluQuantSpec &spec) {
    return render_swiglu_quant(spec, "fp8_swiglu_quantize", "fp8_swiglu_quant", "moejit::quant::swiglu_quantize_kernel",
                               &instantiate_kernel<kargs::Fp8SwigluQuantArgs>);
}

KernelSource render_fp8_swiglu_backward_quant(const Fp8SwigluQuantSpec &spec) {
    return render_swiglu_quant(spec, "fp8_swiglu_backward_quantize", "fp8_swiglu_bwd_quant",
                               "moejit::quant::swiglu_backward_quantize_kernel",
                               &instantiate_kernel<kargs::Fp8SwigluBackwardQuantArgs>);
}

void fp8_quantize_scatter(Context &ctx, const Fp8QuantScatterSpec &spec, const void *x, const std::int32_t *scatter_index,
                          std::int64_t num_tokens, void *q, float *scales, void *stream) {
    launch(ctx, "fp8_quantize_scatter", &render_fp8_quant_scatter, spec, fp8_row_tile_ctas(num_tokens * (spec.k / 128)), 16,
           stream, kargs::Fp8QuantScatterArgs{x, scatter_index, q, scales, num_tokens});
}

void fp8_quantize_rows_ld(Context &ctx, const Fp8QuantRowsLdSpec &spec, const void *x, std::int64_t rows, void *q,
                          std::int64_t q_ld, float *scales, std::int64_t scale_ld, void *stream) {
    launch(ctx, "fp8_quantize_rows_ld", &render_fp8_quant_rows_ld, spec, fp8_row_tile_ctas(rows * (spec.k / 128)), 16, stream,
           kargs::Fp8QuantRowsLdArgs{x, q, scales, rows, q_ld, scale_ld});
}

void fp8_quantize_blocks_t(Context &ctx, const Fp8QuantBlocksTSpec &spec, const void *w, std::int32_t num_experts,
                           void *q, std::int64_t q_ld, float *scales, std::int64_t scale_ld, void *stream) {
    // One CTA per 128 x 128 block.
    const std::int64_t blocks = std::int64_t{num_experts} * (spec.n / 128) * (spec.k / 128);
    launch(ctx, "fp8_quantize_blocks_t", &render_fp8_quant_blocks_t, spec, blocks, 8, stream,
           kargs::Fp8QuantBlocksTArgs{w, q, scales, num_experts, q_ld, scale_ld});
}

void fp8_swiglu_quantize(Context &ctx, const Fp8SwigluQuantSpec &spec, const void *gate_up, const float *w_s,
                         std::int64_t rows, float limit, float alpha, void *saved_q, float *saved_scales, void *awq,
                         float *aw_scales, void *stream) {
    // Two (row, tile) items a warp (templates/fp8_quant_layer.cuh, kSwigluQuantItemsPerWarp).
    constexpr std::int64_t kItemsPerWarp = 2;
    const std::int64_t items = rows * (spec.intermediate / 128);
    const std::int64_t ctas = (items + kThreads / 32 * kItemsPerWarp - 1) / (kThreads / 32 * kItemsPerWarp);
    launch(ctx, "fp8_swiglu_quantize", &render_fp8_swiglu_quant, spec, ctas, 16, stream,
           kargs::Fp8SwigluQuantArgs{gate_up, w_s, saved_q, saved_scales, awq, aw_scales, rows, limit, alpha});
}

void fp8_swiglu_backward_quantize(Context &ctx, const Fp8SwigluQuantSpec &spec, const void *saved_q,
                                  const float *saved_scales, void *daw, const float *w_s, std::int64_t rows,
                                  float limit, float alpha, void *d_gate_up, float *d_w_s, void *dguq,
                                  float *dgu_scales, void *stream) {
    // One warp per row, every row its own (no grid stride).
    launch(ctx, "fp8_swiglu_backward_quantize", &render_fp8_swiglu_backward_quant, spec,
           (rows + kThreads / 32 - 1) / (kThreads / 32), kEveryCta, stream,
           kargs::Fp8SwigluBackwardQuantArgs{saved_q, saved_scales, daw, w_s, d_gate_up, d_w_s, dguq, dgu_scales,
                                             rows, limit, alpha});
}

void fp8_dequantize_rows(Context &ctx, const Fp8DequantRowsSpec &spec, const void *q, const float *scales,
                         std::int64_t rows, void *x, void *stream) {
    launch(ctx, "fp8_dequantize_rows", &render_fp8_dequant_rows, spec, fp8_row_tile_ctas(rows * (spec.k / 128)), 16, stream,
           kargs::Fp8DequantRowsArgs{q, scales, x, rows});
}

}  // namespace moejit
