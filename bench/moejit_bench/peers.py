"""PyTorch implementations of the same MoE layer, for tests and benchmarks.

Both compute docs/DESIGN.md section 2 exactly (routing weight applied before fc2, optional SwiGLU
limit) and are differentiable through autograd:
- eager_loop_layer: one slice per expert, plain matmuls (run it in float64 for a reference);
- grouped_mm_layer: torch._grouped_mm (CUTLASS grouped GEMM), no host synchronisation.
Arguments as for moejit.torch.fused_moe, with the fc1 weights given either split or merged.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

__all__ = ["eager_loop_layer", "grouped_mm_layer", "routing_topk", "routing_all_to_expert0"]


def routing_topk(tokens: int, num_experts: int, top_k: int, dtype: torch.dtype,
                 device, generator: Optional[torch.Generator] = None, empty_experts: int = 0):
    """Softmax top-k of random logits, weights renormalised; (selected int64, weights).
    empty_experts > 0 keeps the last that many experts unrouted."""
    logits = torch.randn(tokens, num_experts, device=device, generator=generator)
    if empty_experts:
        logits[:, num_experts - empty_experts:] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    weights, selected = probs.topk(top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return selected, weights.to(dtype)


def routing_all_to_expert0(tokens: int, top_k: int, dtype: torch.dtype, device,
                           generator: Optional[torch.Generator] = None):
    """Every route to expert 0 (duplicate routes: expert 0 owns S = T*k rows)."""
    selected = torch.zeros(tokens, top_k, dtype=torch.int64, device=device)
    weights = torch.rand(tokens, top_k, device=device, generator=generator) + 0.1
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return selected, weights.to(dtype)


def _swiglu(g: torch.Tensor, u: torch.Tensor, limit: Optional[float]) -> torch.Tensor:
    if limit is not None:
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
    return F.silu(g) * u


def _fc1_split(w_gate, w_up, w_gate_up):
    if w_gate_up is not None:
        inter = w_gate_up.shape[1] // 2
        return w_gate_up[:, :inter], w_gate_up[:, inter:]
    return w_gate, w_up


def eager_loop_layer(x, selected_experts, routing_weights, w_gate=None, w_up=None,
                     w_gate_up=None, w_down=None, swiglu_limit: Optional[float] = None):
    """Per-expert loop; synchronises with the host once per expert (torch.where)."""
    tokens, hidden = x.shape
    experts = w_down.shape[0]
    # unbind once: per-expert views whose gradients autograd stacks in one step
    if w_gate_up is not None:
        fc1 = w_gate_up.unbind(0)
        inter = w_gate_up.shape[1] // 2
    else:
        gates, ups = w_gate.unbind(0), w_up.unbind(0)
    downs = w_down.unbind(0)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = torch.zeros(tokens, hidden, dtype=acc, device=x.device)
    for e in range(experts):
        t_idx, j_idx = torch.where(selected_experts == e)
        if t_idx.numel() == 0:
            continue
        xe = x[t_idx]
        if w_gate_up is not None:
            gu = xe @ fc1[e].t()
            g, u = gu[:, :inter], gu[:, inter:]
        else:
            g, u = xe @ gates[e].t(), xe @ ups[e].t()
        a = _swiglu(g, u, swiglu_limit)
        aw = a * routing_weights[t_idx, j_idx].unsqueeze(1).to(a.dtype)
        y = aw @ downs[e].t()
        out = out.index_add(0, t_idx, y.to(acc))
    return out.to(x.dtype)


def _sort_routes(x, selected_experts, routing_weights, experts: int):
    """The routes sorted by expert on the device (stable), without host synchronisation:
    (offs, the int32 group ends; position, the sorted row of each route; xs, the token row of
    each sorted row; w_rows, its routing weight)."""
    top_k = selected_experts.shape[1]
    flat = selected_experts.reshape(-1).long()
    counts = torch.zeros(experts, dtype=torch.int64, device=x.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))  # bincount would sync for its size
    offs = torch.cumsum(counts, 0).to(torch.int32)       # group ends
    order = torch.sort(flat, stable=True).indices        # route id of each sorted row
    position = torch.empty_like(order)                   # sorted row of each route
    position[order] = torch.arange(order.numel(), device=x.device)
    xs = x.index_select(0, order // top_k)
    w_rows = routing_weights.reshape(-1).index_select(0, order)
    return offs, position, xs, w_rows


def grouped_mm_layer(x, selected_experts, routing_weights, w_gate=None, w_up=None,
                     w_gate_up=None, w_down=None, swiglu_limit: Optional[float] = None):
    """The layer on torch._grouped_mm: routes sorted by expert on the device (stable), one
    grouped GEMM per projection; no host synchronisation."""
    tokens, hidden = x.shape
    top_k = selected_experts.shape[1]
    offs, position, xs, w_rows = _sort_routes(x, selected_experts, routing_weights,
                                             w_down.shape[0])
    if w_gate_up is not None:
        inter = w_gate_up.shape[1] // 2
        gu = torch._grouped_mm(xs, w_gate_up.transpose(-2, -1), offs=offs)
        g, u = gu[:, :inter], gu[:, inter:]
    else:
        g = torch._grouped_mm(xs, w_gate.transpose(-2, -1), offs=offs)
        u = torch._grouped_mm(xs, w_up.transpose(-2, -1), offs=offs)
    aw = _swiglu(g, u, swiglu_limit) * w_rows.unsqueeze(1).to(g.dtype)
    y = torch._grouped_mm(aw, w_down.transpose(-2, -1), offs=offs)
    return y.index_select(0, position).view(tokens, top_k, hidden).sum(dim=1)
