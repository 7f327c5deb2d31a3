// The FP8 layer's quantizer forms (templates/fp8_quant_layer.cuh; issue 31, the layer): the
// scatter that quantizes, rows into a wider operand, transposed weight blocks, and the
// dequantizer of saved rows. Same rules as fp8.hpp's quantizers (one tile quantizes to the same
// bytes and scale in every form). Every dimension is a multiple of 128 here (the layer's rule);
// the renders refuse others, naming the field.
#pragma once

#include <cstdint>

#include "ops/activation.hpp"
#include "runtime/context.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit {

struct Fp8QuantScatterSpec {
    std::int64_t k = 0;      // H, a multiple of 128
    std::int32_t top_k = 0;  // 1..64
};
struct Fp8QuantRowsLdSpec {
    std::int64_t k = 0;  // a multiple of 128
};
struct Fp8QuantBlocksTSpec {
    std::int64_t n = 0, k = 0;  // the source's [N, K] per expert, multiples of 128
};
struct Fp8DequantRowsSpec {
    std::int64_t k = 0;  // a multiple of 128
};
// fc1's output layout as the SwiGLU kernels name it: g then u [S, I] each, [S, 2I] g columns
// then u columns, [S, 2I] with (g, u) pairs interleaved.
enum class Fp8GateUpLayout : int { split = 0, merged = 1, interleaved = 2 };
struct Fp8SwigluQuantSpec {
    std::int64_t intermediate = 0;  // I, a multiple of 128
    Fp8GateUpLayout layout = Fp8GateUpLayout::split;
    Activation activation = Activation::swiglu;
    bool has_limit = false;
};

KernelSource render_fp8_quant_scatter(const Fp8QuantScatterSpec &spec);
KernelSource render_fp8_quant_rows_ld(const Fp8QuantRowsLdSpec &spec);
KernelSource render_fp8_quant_blocks_t(const Fp8QuantBlocksTSpec &spec);
KernelSource render_fp8_dequant_rows(const Fp8DequantRowsSpec &spec);
KernelSource render_fp8_swiglu_quant(const Fp8SwigluQuantSpec &spec);
KernelSource render_fp8_swiglu_backward_quant(const Fp8SwigluQuantSpec &spec);

// Launchers on `stream` (no sync; nothing launched for 0 rows or tokens). Pointers: device, the
// layer's 256-byte aligned regions. Shapes as in templates/kernel_args.h.
// x [T, k] bf16 -> q [T·top_k, k] e4m3 + scales [T·top_k, k/128] through scatter_index [T, top_k].
void fp8_quantize_scatter(Context &ctx, const Fp8QuantScatterSpec &spec, const void *x, const std::int32_t *scatter_index,
                          std::int64_t num_tokens, void *q, float *scales, void *stream);
// x [rows, k] bf16 -> e4m3 rows of stride q_ld bytes, scale rows of stride scale_ld floats.
void fp8_quantize_rows_ld(Context &ctx, const Fp8QuantRowsLdSpec &spec, const void *x, std::int64_t rows, void *q,
                          std::int64_t q_ld, float *scales, std::int64_t scale_ld, void *stream);
// w [E, n, k] bf16 -> q[e] = the transposed e4m3 [k, q_ld] (columns 0..n of each row written),
// scales [E, k/128, scale_ld].
void fp8_quantize_blocks_t(Context &ctx, const Fp8QuantBlocksTSpec &spec, const void *w, std::int32_t num_experts,
                           void *q, std::int64_t q_ld, float *scales, std::int64_t scale_ld, void *stream);
// fc1's bf16 output gate_up (spec.layout) and w_s [S] -> saved_q (e4m3 in gate_up's element
// layout) + saved_scales (one per 128 consecutive elements), and aw = act(g, u)·w_s (rounded to
// bf16) as awq [S, I] e4m3 + aw_scales [S, I/128]; the same bytes as fp8_quantize_rows on
// gate_up, the SwiGLU forward and fp8_quantize_rows on its aw. limit > 0 with spec.has_limit.
void fp8_swiglu_quantize(Context &ctx, const Fp8SwigluQuantSpec &spec, const void *gate_up, const float *w_s,
                         std::int64_t rows, float limit, float alpha, void *saved_q, float *saved_scales, void *awq,
                         float *aw_scales, void *stream);
// The backward's: saved_q + saved_scales (as fp8_swiglu_quantize wrote them), daw [S, I] bf16
// (d(a·w) in; a·w recomputed out) and w_s [S] -> d_gate_up (bf16, spec.layout), d_w_s [S], and
// d_gate_up's 1 x 128 tiles dguq [S, 2I] e4m3 + dgu_scales [S, 2I/128] (split rows as
// [d_gate | d_up]). d_gate_up, a·w, dguq and dgu_scales are the bytes of fp8_dequantize_rows,
// the SwiGLU backward and fp8_quantize_rows (split: fp8_quantize_rows_ld twice); d_w_s is summed
// in this kernel's own fixed order.
void fp8_swiglu_backward_quantize(Context &ctx, const Fp8SwigluQuantSpec &spec, const void *saved_q,
                                  const float *saved_scales, void *daw, const float *w_s, std::int64_t rows,
                                  float limit, float alpha, void *d_gate_up, float *d_w_s, void *dguq,
                                  float *dgu_scales, void *stream);
// q [rows, k] e4m3 + scales [rows, k/128] -> x [rows, k] bf16.
void fp8_dequantize_rows(Context &ctx, const Fp8DequantRowsSpec &spec, const void *q, const float *scales,
                         std::int64_t rows, void *x, void *stream);

}  // namespace moejit
