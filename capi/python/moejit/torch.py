"""PyTorch binding: fused_moe / fused_moe_merged (autograd functions) and MoEExperts.

    import torch, moejit.torch as mt
    experts = mt.MoEExperts(num_experts=128, hidden_size=2048, intermediate_size=768,
                            device="cuda", dtype=torch.bfloat16)
    weights, selected = torch.softmax(router(x), dim=-1).topk(8, dim=-1)
    out = experts(x, selected, weights / weights.sum(-1, keepdim=True))

Everything is launched on torch.cuda.current_stream(); outputs, the saved buffer and the
workspace come from PyTorch's allocator, and nothing synchronises with the host, so a layer
can be captured in a CUDA graph once it has run eagerly for its shape (the first call JIT
compiles and loads kernels, which cannot happen during capture).
"""

from __future__ import annotations

import math
import threading
from typing import Dict, Optional, Tuple

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from . import errors
from ._validate import LayerSpec, TensorInfo, check_layer
from .core import Context, Plan

__all__ = ["fused_moe", "fused_moe_merged", "MoEExperts", "clear_caches"]

_lock = threading.RLock()
_contexts: Dict[int, Context] = {}
_plans: Dict[Tuple, Plan] = {}

# Test hook: fill every output, the saved buffer and the workspace with NaN / 0xFF before a
# launch, so a test can prove the library wrote all of it.
_debug_poison = False

# The library reads x and the weights with 16-byte vector loads.
_ALIGNMENT = 16


def _context(device_index: int) -> Context:
    """One moejit context per CUDA device, alive for the whole process."""
    with _lock:
        context = _contexts.get(device_index)
        if context is None:
            context = Context(device_ordinal=device_index)
            _contexts[device_index] = context
        return context


def _tokens_bucket(tokens: int) -> int:
    # The plan's tile choice may depend on T; powers of two bound the number of plans.
    return 0 if tokens <= 0 else 1 << (tokens - 1).bit_length()


def _plan(spec: LayerSpec, device: torch.device) -> Plan:
    bucket = _tokens_bucket(spec.num_tokens)
    key = (device.index, spec.hidden_size, spec.intermediate_size, spec.num_experts, spec.top_k,
           spec.dtype, spec.index_dtype, spec.routing_dtype, spec.merged, spec.swiglu_limit,
           bucket)
    with _lock:
        plan = _plans.get(key)
        if plan is not None:
            return plan
        if torch.cuda.is_current_stream_capturing():
            raise errors.InvalidArgumentError(
                "moejit: this layer shape is first used during CUDA graph capture; run it once "
                "eagerly before capturing (JIT compilation and module loading cannot be "
                "captured)")
        plan = Plan(_context(device.index), dtype=spec.dtype, hidden_size=spec.hidden_size,
                    intermediate_size=spec.intermediate_size, num_experts=spec.num_experts,
                    top_k=spec.top_k, merged=spec.merged, swiglu_limit=spec.swiglu_limit or None,
                    weight_grad_dtype=spec.dtype, index_dtype=spec.index_dtype,
                    routing_dtype=spec.routing_dtype, tokens_hint=bucket)
        _plans[key] = plan
        return plan


def clear_caches() -> None:
    """Drops every cached plan (kernels stay in the contexts' caches)."""
    with _lock:
        plans = list(_plans.values())
        _plans.clear()
    for plan in plans:
        plan.close()


def _empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if _debug_poison:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _empty_bytes(size: int, device: torch.device) -> torch.Tensor:
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    if _debug_poison:
        buffer.fill_(0xFF)  # NaN in every float format, -1 in every integer
    return buffer


def _info(where: str, name: str, tensor) -> Optional[TensorInfo]:
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        raise errors.InvalidArgumentError(
            f"{where}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
    return TensorInfo(tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""),
                      str(tensor.device), tensor.is_contiguous())


def _check_alignment(where: str, **tensors) -> None:
    for name, tensor in tensors.items():
        if tensor is not None and tensor.numel() and tensor.data_ptr() % _ALIGNMENT:
            raise errors.InvalidArgumentError(
                f"{where}: {name} must start at a {_ALIGNMENT}-byte aligned address (a view "
                f"at an odd offset is not supported); pass a copy (.clone())")


class _FusedMoEFunction(torch.autograd.Function):
    """Inputs: spec, x [T,H], selected_experts [T,k], routing_weights [T,k], w_gate, w_up,
    w_gate_up, w_down (the absent layout's weights are None)."""

    @staticmethod
    def forward(ctx, spec: LayerSpec, x, selected_experts, routing_weights, w_gate, w_up,
                w_gate_up, w_down):
        device = x.device
        plan = _plan(spec, device)
        tokens = spec.num_tokens
        saved_size = plan.saved_size(tokens)
        workspace_size = plan.workspace_size(tokens)
        out = _empty((tokens, spec.hidden_size), x.dtype, device)
        saved = _empty_bytes(saved_size, device)
        workspace = _empty_bytes(workspace_size, device)
        plan.forward(num_tokens=tokens, x=x, selected_experts=selected_experts,
                     routing_weights=routing_weights, w_gate=w_gate, w_up=w_up,
                     w_gate_up=w_gate_up, w_down=w_down, out=out, saved=saved,
                     saved_size=saved_size, workspace=workspace, workspace_size=workspace_size,
                     stream=torch.cuda.current_stream(device).cuda_stream)
        ctx.spec = spec
        ctx.plan = plan
        # Backward re-reads x's rows (saved no longer holds their scatter); selected_experts is
        # not needed. save_for_backward keeps a reference, no copy.
        ctx.save_for_backward(x, routing_weights, w_gate, w_up, w_gate_up, w_down, saved)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        spec: LayerSpec = ctx.spec
        plan: Plan = ctx.plan
        x, routing_weights, w_gate, w_up, w_gate_up, w_down, saved = ctx.saved_tensors
        device = saved.device
        dtype = w_down.dtype
        expected = (spec.num_tokens, spec.hidden_size)
        if tuple(dout.shape) != expected:
            raise errors.InvalidArgumentError(
                f"moejit backward: the output gradient has shape {list(dout.shape)}, expected "
                f"{list(expected)}")
        # Autograd may hand over an expanded or differently typed gradient (e.g. from sum()).
        dout = dout.to(device=device, dtype=dtype).contiguous()
        if dout.numel() and dout.data_ptr() % _ALIGNMENT:
            dout = dout.clone()
        tokens = spec.num_tokens
        workspace_size = plan.workspace_size(tokens)
        dx = _empty(expected, dtype, device)
        d_routing = _empty(tuple(routing_weights.shape), routing_weights.dtype, device)
        grads = {name: (_empty(tuple(w.shape), dtype, device) if w is not None else None)
                 for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_gate_up", w_gate_up),
                                 ("w_down", w_down))}
        workspace = _empty_bytes(workspace_size, device)
        plan.backward(num_tokens=tokens, x=x, dout=dout, routing_weights=routing_weights,
                      w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down,
                      saved=saved, saved_size=saved.numel(), dx=dx,
                      d_routing_weights=d_routing, dw_gate=grads["w_gate"],
                      dw_up=grads["w_up"], dw_gate_up=grads["w_gate_up"],
                      dw_down=grads["w_down"], workspace=workspace,
                      workspace_size=workspace_size,
                      stream=torch.cuda.current_stream(device).cuda_stream)
        needs = ctx.needs_input_grad
        keep = lambda i, g: g if needs[i] else None  # noqa: E731
        return (None, keep(1, dx), None, keep(3, d_routing), keep(4, grads["w_gate"]),
                keep(5, grads["w_up"]), keep(6, grads["w_gate_up"]), keep(7, grads["w_down"]))


def _fused(where: str, x, selected_experts, routing_weights, w_gate, w_up, w_gate_up, w_down,
           swiglu_limit) -> torch.Tensor:
    spec = check_layer(where, _info(where, "x", x),
                       _info(where, "selected_experts", selected_experts),
                       _info(where, "routing_weights", routing_weights),
                       _info(where, "w_gate", w_gate), _info(where, "w_up", w_up),
                       _info(where, "w_gate_up", w_gate_up), _info(where, "w_down", w_down),
                       swiglu_limit)
    _check_alignment(where, x=x, w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down)
    lead = tuple(x.shape[:-1])
    tokens, hidden, top_k = spec.num_tokens, spec.hidden_size, spec.top_k
    out = _FusedMoEFunction.apply(spec, x.reshape(tokens, hidden),
                                  selected_experts.reshape(tokens, top_k),
                                  routing_weights.reshape(tokens, top_k),
                                  w_gate, w_up, w_gate_up, w_down)
    return out.reshape(lead + (hidden,))


def fused_moe(x: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor,
              w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
              swiglu_limit: Optional[float] = None) -> torch.Tensor:
    """The MoE expert layer with split fc1 weights.

    x [..., H] bf16/fp16; selected_experts [..., k] int32/int64 in [0, E); routing_weights
    [..., k] in x's dtype or float32; w_gate, w_up [E, I, H]; w_down [E, H, I] (x's dtype).
    swiglu_limit: None, or L > 0 for g' = min(g, L), u' = clamp(u, -L, L).
    Returns out [..., H]; differentiable in x, routing_weights and every weight.
    """
    return _fused("moejit.torch.fused_moe", x, selected_experts, routing_weights, w_gate, w_up,
                  None, w_down, swiglu_limit)


def fused_moe_merged(x: torch.Tensor, selected_experts: torch.Tensor,
                     routing_weights: torch.Tensor, w_gate_up: torch.Tensor,
                     w_down: torch.Tensor, swiglu_limit: Optional[float] = None) -> torch.Tensor:
    """As fused_moe, with merged fc1 weights w_gate_up [E, 2I, H] (gate rows first)."""
    return _fused("moejit.torch.fused_moe_merged", x, selected_experts, routing_weights, None,
                  None, w_gate_up, w_down, swiglu_limit)


class MoEExperts(nn.Module):
    """The experts of an MoE layer (SwiGLU MLPs) as one fused op. The router stays outside:
    forward(x [..., H], selected_experts [..., k], routing_weights [..., k]) -> [..., H]."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, *,
                 merged: bool = False, swiglu_limit: Optional[float] = None,
                 device=None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        for name, value in (("num_experts", num_experts), ("hidden_size", hidden_size),
                            ("intermediate_size", intermediate_size)):
            if not isinstance(value, int) or value < 1:
                raise errors.InvalidArgumentError(
                    f"MoEExperts: {name} must be a positive int, got {value!r}")
        factory = {"device": device, "dtype": dtype or torch.bfloat16}
        self.num_experts = num_experts
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.merged = merged
        self.swiglu_limit = swiglu_limit
        E, H, I = num_experts, hidden_size, intermediate_size
        if merged:
            self.w_gate_up = nn.Parameter(torch.empty(E, 2 * I, H, **factory))
        else:
            self.w_gate = nn.Parameter(torch.empty(E, I, H, **factory))
            self.w_up = nn.Parameter(torch.empty(E, I, H, **factory))
        self.w_down = nn.Parameter(torch.empty(E, H, I, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's default range, per expert: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        with torch.no_grad():
            fc1_bound = 1.0 / math.sqrt(self.hidden_size)
            for w in ((self.w_gate_up,) if self.merged else (self.w_gate, self.w_up)):
                w.uniform_(-fc1_bound, fc1_bound)
            down_bound = 1.0 / math.sqrt(self.intermediate_size)
            self.w_down.uniform_(-down_bound, down_bound)

    def forward(self, x: torch.Tensor, selected_experts: torch.Tensor,
                routing_weights: torch.Tensor) -> torch.Tensor:
        if self.merged:
            return fused_moe_merged(x, selected_experts, routing_weights, self.w_gate_up,
                                    self.w_down, self.swiglu_limit)
        return fused_moe(x, selected_experts, routing_weights, self.w_gate, self.w_up,
                         self.w_down, self.swiglu_limit)

    def extra_repr(self) -> str:
        limit = f", swiglu_limit={self.swiglu_limit}" if self.swiglu_limit else ""
        return (f"num_experts={self.num_experts}, hidden_size={self.hidden_size}, "
                f"intermediate_size={self.intermediate_size}, "
                f"{'merged' if self.merged else 'split'}{limit}")
