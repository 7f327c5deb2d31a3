"""The FP8 peer of python -m moejit_bench (issue 31): the MoE layer on torch._scaled_grouped_mm
with row-wise scales, and the FP8 dense ceiling (torch._scaled_mm, 8192^3).

scaled_grouped_mm_layer computes docs/DESIGN.md section 2 (routing weight applied before fc2,
optional SwiGLU limit) as grouped_mm_layer does (routes sorted by expert on the device, group
ends as int32 offsets, no host synchronisation), with every forward GEMM and every input-gradient
GEMM in FP8 e4m3 with float32 row-wise scales:
  * activations per row (one scale per token row over the contraction dimension: x rows over H,
    SwiGLU·w_s rows over I, the output gradient's rows over H, the fc1 gradient's rows over 2I);
  * weights per output channel (one scale per row of W [E, N, K], over K), quantized on every
    call like moejit's fp8-block recipe;
  * forward: fc1 = _scaled_grouped_mm(xq [S,H] row-major, W1q^T [E,H,N] column-major, offs);
    SwiGLU and the routing weight in bf16; fc2 the same on the quantized SwiGLU output;
  * backward, dgrad: dA = _scaled_grouped_mm(dYq [S,N], (W^T quantized per row over N)^T, offs),
    one GEMM for fc1 (gate and up gradients side by side against [W_gate; W_up]);
  * backward, wgrad: bf16 torch._grouped_mm(dY^T, A, offs) -> [E, N, K] (dY^T column-major,
    A row-major: torch's own _grouped_mm backward layout, which takes any group size, empty
    groups included). Not FP8: row-wise
    scales for the wgrad would lie along the ragged token axis (one scale per expert group and
    row, segment reductions) and _scaled_grouped_mm's 2d-2d (ragged-K) case needs every group's
    start 16-byte aligned, i.e. token groups padded to multiples of 16. moejit's fp8-block
    recipe runs its weight gradients in e4m3 too (128x1 operands padded per expert), so on
    the weight gradients this peer does bf16 work where moejit does FP8.
Accumulation is float32 with use_fast_accum=False (FAST_ACCUM). Outputs are bf16. The FP8
GEMMs are the 2d-3d case (ragged M), which takes any group size; H and I must be multiples of
16 (16-byte rows of e4m3), as every reference shape is.

The real op needs CUDA sm_89+ (the benchmark runs on an H200); tests/python/test_bench_fp8.py
checks the quantizers against float64 on the CPU and the layer through an emulation of the op
that first runs torch's own meta checks (dtypes, layouts, scale shapes).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from .peers import _swiglu, _sort_routes

__all__ = ["E4M3", "E4M3_MAX", "FAST_ACCUM", "quantize_rows", "dequantize_rows",
           "scaled_grouped_mm_layer", "fp8_dense_ceiling"]

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
FAST_ACCUM = False
# A row of zeros gets this scale (any positive value: its codes are all zero).
_MIN_AMAX = 1e-12


def quantize_rows(t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """e4m3 codes of t [..., K] with one float32 scale per row (amax / 448 over the last
    dimension): (q [..., K] e4m3 contiguous, scale [...] float32), t ~= q * scale[..., None]."""
    tf = t.float()
    amax = tf.abs().amax(dim=-1).clamp(min=_MIN_AMAX)
    scale = amax / E4M3_MAX
    q = (tf / scale.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.contiguous(), scale.contiguous()


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """quantize_rows' inverse: q [..., K] e4m3, scale [...] -> q * scale[..., None] in dtype."""
    return (q.to(torch.float32) * scale.unsqueeze(-1)).to(dtype)


def _fp8_grouped(aq: torch.Tensor, a_scale: torch.Tensor, wq: torch.Tensor,
                 w_scale: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """aq [S, K] e4m3 row-major (scale [S]) times each group's wq[e] [N, K]^T (scale [E, N]):
    [S, N] bf16. wq.transpose(-2, -1) is the column-major [E, K, N] operand the op wants."""
    return torch._scaled_grouped_mm(aq, wq.transpose(-2, -1), a_scale, w_scale, offs=offs,
                                    out_dtype=torch.bfloat16, use_fast_accum=FAST_ACCUM)


class _Fp8GroupedLinear(torch.autograd.Function):
    """outputs[i] = a[rows of e] @ weights[i][e]^T per expert group; a quantized once for all
    weights. Backward: one FP8 dgrad over the weights side by side, bf16 wgrad per weight."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, offs: torch.Tensor, *weights: torch.Tensor):
        aq, a_scale = quantize_rows(a)
        outs = []
        for w in weights:
            wq, w_scale = quantize_rows(w)
            outs.append(_fp8_grouped(aq, a_scale, wq, w_scale, offs))
        ctx.save_for_backward(a, offs, *weights)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads: Optional[torch.Tensor]):
        a, offs, *weights = ctx.saved_tensors
        grads = [g.contiguous() if g is not None else
                 torch.zeros(a.shape[0], w.shape[1], dtype=a.dtype, device=a.device)
                 for g, w in zip(grads, weights)]
        d_a = None
        if ctx.needs_input_grad[0]:
            g_cat = torch.cat(grads, dim=1) if len(grads) > 1 else grads[0]
            w_cat = torch.cat(weights, dim=1) if len(weights) > 1 else weights[0]
            gq, g_scale = quantize_rows(g_cat)                   # [S, N] over N
            wtq, wt_scale = quantize_rows(w_cat.transpose(1, 2))  # [E, K, N] over N
            d_a = _fp8_grouped(gq, g_scale, wtq, wt_scale, offs).to(a.dtype)
        d_weights = []
        for i, (g, w) in enumerate(zip(grads, weights)):
            if ctx.needs_input_grad[2 + i]:
                d_weights.append(torch._grouped_mm(g.t(), a, offs=offs).to(w.dtype))
            else:
                d_weights.append(None)
        return (d_a, None, *d_weights)


def scaled_grouped_mm_layer(x, selected_experts, routing_weights, w_gate=None, w_up=None,
                            w_gate_up=None, w_down=None, swiglu_limit: Optional[float] = None):
    """The layer with FP8 row-wise scaled grouped GEMMs (module docstring); arguments as for
    moejit.torch.fused_moe, fc1 weights split or merged; bf16 in, bf16 out."""
    tokens, hidden = x.shape
    top_k = selected_experts.shape[1]
    offs, position, xs, w_rows = _sort_routes(x, selected_experts, routing_weights,
                                             w_down.shape[0])
    fc1: Sequence[torch.Tensor] = (w_gate_up,) if w_gate_up is not None else (w_gate, w_up)
    outs = _Fp8GroupedLinear.apply(xs, offs, *fc1)
    if w_gate_up is not None:
        inter = w_gate_up.shape[1] // 2
        g, u = outs[0][:, :inter], outs[0][:, inter:]
    else:
        g, u = outs
    aw = _swiglu(g, u, swiglu_limit) * w_rows.unsqueeze(1).to(g.dtype)
    (y,) = _Fp8GroupedLinear.apply(aw, offs, w_down)
    return y.index_select(0, position).view(tokens, top_k, hidden).sum(dim=1)


def fp8_scaled_mm(aq, a_scale, bq, b_scale) -> torch.Tensor:
    """aq [M, K] e4m3 (scale [M]) @ bq [N, K]^T (scale [N]) -> [M, N] bf16 with
    torch._scaled_mm's row-wise scaling (scale_a [M, 1], scale_b [1, N])."""
    return torch._scaled_mm(aq, bq.t(), a_scale.unsqueeze(1), b_scale.unsqueeze(0),
                            out_dtype=torch.bfloat16, use_fast_accum=FAST_ACCUM)


def fp8_dense_ceiling(time_ms, warmup: int, reps: int, n: int = 8192) -> float:
    """TFLOP/s of an n^3 e4m3 GEMM with row-wise scales (torch._scaled_mm, bf16 out), the
    practical ceiling of the FP8 rows; time_ms(fn, warmup, reps) -> per-rep milliseconds."""
    import statistics
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    aq, a_scale = quantize_rows(a)
    bq, b_scale = quantize_rows(b)
    del a, b
    ms = statistics.median(time_ms(lambda: fp8_scaled_mm(aq, a_scale, bq, b_scale), warmup,
                                   max(reps, 10)))
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12
