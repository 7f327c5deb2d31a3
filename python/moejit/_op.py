"""The torch.library custom ops behind moejit.torch.

    torch.ops.moejit.fused_moe(x, selected_experts, routing_weights, w_gate, w_up, w_down,
                               swiglu_limit) -> (out, saved)
    torch.ops.moejit.fused_moe_merged(x, selected_experts, routing_weights, w_gate_up, w_down,
                                      swiglu_limit) -> (out, saved)
    torch.ops.moejit.fused_moe_backward(dout, x, selected_experts, routing_weights, w_gate,
                                        w_up, w_down, saved, swiglu_limit)
        -> (dx, d_routing_weights, dw_gate_and_up, dw_down)
        dw_gate_and_up [2,E,I,H] = (dw_gate, dw_up) in one allocation (since 0.14; before,
        two outputs): the autograd formula hands its halves to w_gate and w_up.
    torch.ops.moejit.fused_moe_merged_backward(dout, x, selected_experts, routing_weights,
                                               w_gate_up, w_down, saved, swiglu_limit)
        -> (dx, d_routing_weights, dw_gate_up, dw_down)
    torch.ops.moejit.fused_moe_backward_main_grad(..., main_grad_gate!, main_grad_up!,
                                                  main_grad_down!) -> (dx, d_routing_weights)
    torch.ops.moejit.fused_moe_merged_backward_main_grad(..., main_grad_gate_up!,
                                                         main_grad_down!) -> (dx, d_routing_weights)

Since 0.5, the gated layer (a gate_up fc1 weight, every 0.5 option):

    torch.ops.moejit.fused_moe_gated(x, selected_experts, routing_weights, w_gate_up, w_down,
                                     b_gate_up?, b_down?, swiglu_limit, activation, alpha,
                                     interleaved, weights_transposed) -> (out, saved)
    torch.ops.moejit.fused_moe_gated_backward(dout, x, selected_experts, routing_weights,
                                              w_gate_up, w_down, b_gate_up?, b_down?, saved,
                                              swiglu_limit, activation, alpha, interleaved,
                                              weights_transposed)
        -> (dx, d_routing_weights, dw_gate_up, dw_down, db_gate_up, db_down)
    torch.ops.moejit.fused_moe_gated_backward_main_grad(..., main_grad_gate_up!,
                                                        main_grad_down!, main_grad_b_gate_up!?,
                                                        main_grad_b_down!?)
        -> (dx, d_routing_weights)

activation is "swiglu" or "gpt_oss"; alpha is gpt_oss's (0.0: 1.702) and must be 0.0 with
swiglu; interleaved: w_gate_up's 2I dim alternates gate i, up i (gpt-oss), else gate first;
weights_transposed: w_gate_up [E, H, 2I] and w_down [E, I, H] (x·W, as gpt-oss stores them),
their gradients likewise. b_gate_up [E, 2I] (fc1's column order) and b_down [E, H] are given
both or neither (None); without biases db_gate_up and db_down are empty ([0]) tensors and the
bias main_grads are None. The weight gradients have the weights' layout and dtype.

x [..., H] (any leading shape, T = its product), selected_experts and routing_weights [..., k];
out has x's shape, dx x's shape and d_routing_weights routing_weights' shape and dtype. `saved`
is a flat uint8 tensor of saved_bytes_bound(T) bytes: what the forward leaves for the backward
(routing index, g and u; a·w is recomputed by the backward). Its size is an affine function of T computed from the layer's
shape alone (an upper bound of moejit_plan_saved_size, which the real op checks), so the fake
(meta) implementation gives it symbolically for a dynamic T, with no device and no plan.

swiglu_limit is a float; 0.0 means no limit. The forward ops carry register_autograd; the
backward ops are not differentiable (no double backward). Since 0.12 every backward op
consumes `saved` (declared mutated: a bf16 layer writes its SwiGLU gradient over the saved g
and u, S·2I elements fewer at the step's peak): a second backward through the same forward
(retain_graph=True) raises PyTorch's "modified by an inplace operation" error, where the
forward must run again. Under torch.compile, a compiled function that returns a forward op's
`saved` output itself (not only `out`) fails in PyTorch's min-cut partitioner (a forward output
that the backward writes); moejit.torch's calls never return it. The _main_grad backward ops add the
float32 weight gradients into the given float32 buffers in place (Megatron's main_grad) and
return no weight gradients.

State (one moejit Context per device, plans keyed by shape, dtypes and a power-of-two bucket
of T) lives inside the implementations, invisible to the tracer. Every launch goes to
torch.cuda.current_stream(); outputs, saved and the workspace come from PyTorch's allocator.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from typing import Dict, Optional, Sequence, Tuple

import torch

from . import _capi, _fp8_weight_cache, errors
from ._validate import LayerSpec, TensorInfo, check_layer
from .core import Context, Plan, _switch, recipe_code

__all__ = ["saved_bytes_bound", "clear_caches", "configure", "OPS"]

_lock = threading.RLock()
_contexts: Dict[int, Context] = {}
_plans: Dict[Tuple, Plan] = {}
# moejit.Context's configuration keywords for the contexts created here (configure()).
_context_options: Dict[str, object] = {}
# Contexts replaced by configure(): kept, never closed, since kernels launched from them may
# still be queued on a stream.
_retired: list = []

# The library reads x and the weights with 16-byte vector loads.
_ALIGNMENT = 16

_ELEMENT_SIZE = {"bfloat16": 2, "float16": 2}

# Op names, for tests and for anyone looking them up.
OPS = ("fused_moe", "fused_moe_merged", "fused_moe_backward", "fused_moe_merged_backward",
       "fused_moe_backward_main_grad", "fused_moe_merged_backward_main_grad",
       "fused_moe_gated", "fused_moe_gated_backward", "fused_moe_gated_backward_main_grad")


def _debug_poison() -> bool:
    # The test hook lives on moejit.torch (tests set moejit.torch._debug_poison = True): fill
    # every output, saved and the workspace with NaN / 0xFF so a test proves the library wrote
    # all of it.
    module = sys.modules.get(__package__ + ".torch")
    return bool(getattr(module, "_debug_poison", False))


@functools.lru_cache(maxsize=None)
def saved_size_terms(hidden_size: int, intermediate_size: int, num_experts: int, top_k: int,
                     element_size: int = 2, experts_entry: bool = False, recipe: str = "bf16"):
    """(bytes per token, constant bytes) of the library's own affine bound of `saved`
    (moejit_saved_size_terms, or moejit_experts_saved_size_terms per row): the layout lives in
    the library alone (src/moe/plan_layout.*), this only asks it."""
    from . import core  # plan_desc: the one place Python fills a moejit_plan_desc_t
    if element_size != 2:
        raise errors.InvalidArgumentError(
            f"element_size must be 2 (bfloat16 or float16 layers), got {element_size}")
    desc = core.plan_desc(dtype="bfloat16",
                          hidden_size=hidden_size, intermediate_size=intermediate_size,
                          num_experts=num_experts, top_k=top_k, recipe=recipe,
                          routing_weights_in_backward=True)  # as the ops' plans (_plan)
    per_unit, constant = ctypes.c_int64(), ctypes.c_int64()
    query = (_capi.lib().moejit_experts_saved_size_terms if experts_entry
             else _capi.lib().moejit_saved_size_terms)
    _capi.check(query(ctypes.byref(desc), ctypes.byref(per_unit), ctypes.byref(constant)))
    return per_unit.value, constant.value


def saved_bytes_bound(num_tokens, hidden_size: int, intermediate_size: int, num_experts: int,
                      top_k: int, element_size: int = 2, recipe: str = "bf16"):
    """Bytes of the `saved` tensor for T tokens: the library's upper bound of
    moejit_plan_saved_size, affine in T (works on SymInts). recipe: "bf16" or "fp8-block"
    (whose saved g, u are e4m3 + scales: about half)."""
    # The terms come from the library, so the layer's dimensions must be plain ints (int() of
    # a SymInt specializes it, as the weights' shapes are in practice); only T stays symbolic.
    per_token, constant = saved_size_terms(int(hidden_size), int(intermediate_size),
                                           int(num_experts), int(top_k), int(element_size),
                                           recipe=recipe)
    return num_tokens * per_token + constant


# ------------------------------------------------------------------ plan cache


def _context(device_index: int) -> Context:
    """One moejit context per CUDA device, alive for the whole process."""
    with _lock:
        context = _contexts.get(device_index)
        if context is None:
            context = Context(device_ordinal=device_index, **_context_options)
            _contexts[device_index] = context
        return context


def _tokens_bucket(tokens: int) -> int:
    # The plan's tile choice may depend on T; powers of two bound the number of plans.
    return 0 if tokens <= 0 else 1 << (tokens - 1).bit_length()


def _plan_key(spec: LayerSpec, device: torch.device, main_grad: bool = False) -> Tuple:
    """Everything of the spec that the plan descriptor holds (every LayerSpec field but T,
    which only picks the bucket, and the device string), the device, T's bucket and main_grad."""
    fields = spec._replace(num_tokens=0, device="")
    return (device.index,) + tuple(fields) + (_tokens_bucket(spec.num_tokens), main_grad)


def _plan(spec: LayerSpec, device: torch.device, main_grad: bool = False) -> Plan:
    bucket = _tokens_bucket(spec.num_tokens)
    key = _plan_key(spec, device, main_grad)
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
                    top_k=spec.top_k, merged=spec.merged and not spec.interleaved,
                    interleaved=spec.interleaved, swiglu_limit=spec.swiglu_limit or None,
                    weight_grad_dtype="float32" if main_grad else spec.dtype,
                    weight_grad_accumulate=main_grad, index_dtype=spec.index_dtype,
                    routing_dtype=spec.routing_dtype, tokens_hint=bucket,
                    activation=spec.activation,
                    activation_alpha=spec.alpha if spec.activation == "gpt_oss" else None,
                    weights_transposed=spec.weights_transposed, has_bias=spec.has_bias,
                    recipe=spec.recipe,
                    # The backward ops always pass the routing weights: saved keeps none (0.14).
                    routing_weights_in_backward=True)
        _plans[key] = plan
        return plan


def configure(*, tune=None, gather=None, fuse_swiglu=None,
              gemm_tile: Optional[str] = None) -> None:
    """The configuration of the contexts the ops use (one per device), as moejit.Context's
    keywords: tune, gather, fuse_swiglu None (the MOEJIT_* variable, else the library's
    default), True or False; gemm_tile a tile name, "" for the heuristic, None for
    $MOEJIT_GEMM_TILE. Validated now; the next op creates its context and plans anew (the
    cached plans are dropped). Call it before training or between steps, never between a
    forward and its backward: the backward must find the plan of its forward."""
    options = dict(tune=tune, gather=gather, fuse_swiglu=fuse_swiglu, gemm_tile=gemm_tile)
    for name in ("tune", "gather", "fuse_swiglu"):
        _switch(name, options[name])
    if gemm_tile is not None and not isinstance(gemm_tile, str):
        raise errors.InvalidArgumentError(f"gemm_tile must be None or a str, got {gemm_tile!r}")
    with _lock:
        _context_options.clear()
        _context_options.update(options)
        _retired.extend(_contexts.values())
        _contexts.clear()
    clear_caches()


def configuration() -> Dict[str, object]:
    """The options the last configure() set, as its keywords (configure(**configuration())
    makes the contexts anew with them; all None before any configure())."""
    with _lock:
        options = dict(tune=None, gather=None, fuse_swiglu=None, gemm_tile=None)
        options.update(_context_options)
        return options


def clear_caches() -> None:
    """Drops every cached plan (kernels stay in the contexts' caches)."""
    with _lock:
        plans = list(_plans.values())
        _plans.clear()
    for plan in plans:
        plan.close()


# ------------------------------------------------------------------ checks


def _info(where: str, name: str, tensor) -> Optional[TensorInfo]:
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        raise errors.InvalidArgumentError(
            f"{where}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
    return TensorInfo(tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""),
                      str(tensor.device), tensor.is_contiguous())


def check(where: str, x, selected_experts, routing_weights, w_gate, w_up, w_gate_up, w_down,
          swiglu_limit, *, activation: str = "swiglu", alpha: float = 0.0,
          interleaved: bool = False, weights_transposed: bool = False, b_gate_up=None,
          b_down=None) -> LayerSpec:
    """check_layer over torch tensors (real or fake); a clear InvalidArgumentError otherwise.
    The keyword arguments are the gated op's (fused_moe_gated); their defaults are the 0.4
    layer."""
    return check_layer(where, _info(where, "x", x),
                       _info(where, "selected_experts", selected_experts),
                       _info(where, "routing_weights", routing_weights),
                       _info(where, "w_gate", w_gate), _info(where, "w_up", w_up),
                       _info(where, "w_gate_up", w_gate_up), _info(where, "w_down", w_down),
                       swiglu_limit if swiglu_limit else None, activation=activation,
                       alpha=alpha, interleaved=interleaved,
                       weights_transposed=weights_transposed,
                       b_gate_up=_info(where, "b_gate_up", b_gate_up),
                       b_down=_info(where, "b_down", b_down))


def _bias_names(gated) -> Dict[str, torch.Tensor]:
    """{"b_gate_up": ..., "b_down": ...} for the biases given in the gated keywords."""
    return {n: gated[n] for n in ("b_gate_up", "b_down") if gated.get(n) is not None}


def _check_alignment(where: str, **tensors) -> None:
    for name, tensor in tensors.items():
        if tensor is not None and tensor.numel() and tensor.data_ptr() % _ALIGNMENT:
            raise errors.InvalidArgumentError(
                f"{where}: {name} must start at a {_ALIGNMENT}-byte aligned address (a view "
                f"at an odd offset is not supported); pass a copy (.clone())")


def _check_like(where: str, name: str, tensor: torch.Tensor, shape: Sequence[int],
                dtype: torch.dtype, device: torch.device) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise errors.InvalidArgumentError(
            f"{where}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype or tensor.device != device:
        raise errors.InvalidArgumentError(
            f"{where}: {name} must be {dtype} {list(shape)} on {device}, got {tensor.dtype} "
            f"{list(tensor.shape)} on {tensor.device}")
    if not tensor.is_contiguous():
        raise errors.InvalidArgumentError(f"{where}: {name} must be contiguous")


def _saved_bound(spec: LayerSpec) -> int:
    return saved_bytes_bound(spec.num_tokens, spec.hidden_size, spec.intermediate_size,
                             spec.num_experts, spec.top_k, _ELEMENT_SIZE[spec.dtype],
                             recipe=spec.recipe)


def _check_saved(where: str, saved: torch.Tensor, spec: LayerSpec) -> None:
    _check_like(where, "saved", saved, (_saved_bound(spec),), torch.uint8, saved.device)


# ------------------------------------------------------------------ buffers


def _empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if _debug_poison():
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _empty_bytes(size: int, device: torch.device) -> torch.Tensor:
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    if _debug_poison():
        buffer.fill_(0xFF)  # NaN in every float format, -1 in every integer
    return buffer


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def _weight_cache(spec: LayerSpec, plan: Plan, weights: Dict[str, torch.Tensor],
                  device: torch.device, tokens: int):
    """The FP8 weight cache of this call (moejit.torch.fp8_weight_cache) as Plan.forward /
    Plan.backward keywords, and the workspace size that goes with it (a forward's, or a
    backward's that consumes `saved`: the only kind this binding runs)."""
    cache, mode = (None, "none")
    if spec.recipe == "fp8-block":
        cache, mode = _fp8_weight_cache.call_cache(plan, weights, device)
    if mode == "none":
        return {}, plan.consuming_workspace_size(tokens)
    # This call's stream reads (or writes) the buffer: the allocator must not hand it out again
    # at the block's end before that stream is past it.
    cache.record_stream(torch.cuda.current_stream(device))
    return (dict(weight_cache=cache, weight_cache_size=cache.numel(), weight_cache_mode=mode),
            plan.cached_workspace_size(tokens))


# ------------------------------------------------------------------ implementations


def _within_bound(where, needed, bound, size, bound_name):
    """The bound on the saved buffer's bytes the binding allocates (its fake implementation
    gives the same), checked against what the library needs for this size."""
    if needed > bound:
        raise errors.InternalError(
            f"{where}: the library needs {needed} saved bytes for {size}, more than the "
            f"binding's bound {bound} ({bound_name} is out of date with the library's saved "
            "layout)")
    return bound


def _forward(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down, swiglu_limit, recipe="bf16",
             **gated):
    """gated: fused_moe_gated's keywords (activation, alpha, interleaved, weights_transposed,
    b_gate_up, b_down), see check(). recipe: "bf16" or "fp8-block" (the plan's)."""
    spec = _with_recipe(where, check(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down,
                                     swiglu_limit, **gated), recipe)
    _check_alignment(where, x=x, w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down,
                     **_bias_names(gated))
    device = x.device
    plan = _plan(spec, device)
    tokens = spec.num_tokens
    saved_size = _within_bound(where, plan.saved_size(tokens), _saved_bound(spec), f"T={tokens}",
                               "moejit._op.saved_bytes_bound")
    cache, workspace_size = _weight_cache(
        spec, plan, dict(w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down), device,
        tokens)
    out = _empty(tuple(x.shape), x.dtype, device)
    saved = _empty_bytes(saved_size, device)
    workspace = _empty_bytes(workspace_size, device)
    plan.forward(num_tokens=tokens, x=x, selected_experts=sel, routing_weights=rw,
                 w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down,
                 b_gate_up=gated.get("b_gate_up"), b_down=gated.get("b_down"), out=out,
                 saved=saved, saved_size=saved_size, workspace=workspace,
                 workspace_size=workspace_size, stream=_stream(device), **cache)
    return out, saved


def _forward_fake(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down, swiglu_limit,
                  recipe="bf16", **gated):
    spec = _with_recipe(where, check(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down,
                                     swiglu_limit, **gated), recipe)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    saved = x.new_empty((_saved_bound(spec),), dtype=torch.uint8)
    return out, saved


def _recipe_kwargs(recipe: str) -> Dict[str, str]:
    """recipe for _forward / _backward only when it is not the default, so that the bf16 call
    is the one it has always been (test emulations replace those two functions)."""
    return {} if recipe == "bf16" else {"recipe": recipe}


def _with_recipe(where: str, spec: LayerSpec, recipe: str) -> LayerSpec:
    recipe_code(recipe, where)  # an unknown recipe names the choices
    return spec._replace(recipe=recipe)


def _backward_common(where, dout, x, sel, rw, w_gate, w_up, w_gate_up, w_down, saved,
                     swiglu_limit, main_grads=None, recipe="bf16", **gated):
    """The backward ops' checks (real and fake): the layer, dout, saved, and the main_grad
    buffers ({weight or bias name: tensor}, float32 of its shape, contiguous, x's device)."""
    spec = _with_recipe(where, check(where, x, sel, rw, w_gate, w_up, w_gate_up, w_down,
                                     swiglu_limit, **gated), recipe)
    if not isinstance(dout, torch.Tensor) or tuple(dout.shape) != tuple(x.shape):
        raise errors.InvalidArgumentError(
            f"{where}: the output gradient must have x's shape {list(x.shape)}, got "
            f"{list(getattr(dout, 'shape', ()))}")
    _check_saved(where, saved, spec)
    if main_grads is not None:
        weights = {"w_gate": w_gate, "w_up": w_up, "w_gate_up": w_gate_up, "w_down": w_down,
                   **_bias_names(gated)}
        for name, w in weights.items():
            if w is not None:
                _check_like(where, f"main_grad of {name}", main_grads.get(name), w.shape,
                            torch.float32, x.device)
        for name, buffer in main_grads.items():
            if buffer is not None and weights.get(name) is None:
                raise errors.InvalidArgumentError(
                    f"{where}: a main_grad for {name} is given but the layer has no {name}")
    return spec


def _prepare_dout(dout: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # Autograd may hand over an expanded or otherwise strided gradient (e.g. from sum()).
    dout = dout.to(device=x.device, dtype=x.dtype).contiguous()
    if dout.numel() and dout.data_ptr() % _ALIGNMENT:
        dout = dout.clone()
    return dout


def _backward(where, dout, x, sel, rw, w_gate, w_up, w_gate_up, w_down, saved, swiglu_limit,
              main_grads=None, recipe="bf16", **gated):
    """Returns (dx, d_routing_weights, {name: dW}) or, with main_grads {name: fp32 buffer},
    (dx, d_routing_weights, {}) after adding the weight gradients into main_grads. With
    biases (gated b_gate_up and b_down) the dicts also hold "b_gate_up" and "b_down"; with
    split fc1 weights, _FC1_PAIR too (_new_grads).
    Spends `saved` (consume_saved): a caller outside the ops' dispatcher, which bumps the
    version of what an op mutates, bumps it itself (moejit.torch._DirectFunction)."""
    spec = _backward_common(where, dout, x, sel, rw, w_gate, w_up, w_gate_up, w_down, saved,
                            swiglu_limit, main_grads, recipe, **gated)
    biases = _bias_names(gated)
    _check_alignment(where, x=x, w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down,
                     saved=saved, **biases)
    device = x.device
    weights = {"w_gate": w_gate, "w_up": w_up, "w_gate_up": w_gate_up, "w_down": w_down,
               **biases}
    weights = {n: w for n, w in weights.items() if w is not None}
    if main_grads is not None:
        _check_alignment(where, **{f"main_grad_of_{n}": g for n, g in main_grads.items()})
    plan = _plan(spec, device, main_grad=main_grads is not None)
    tokens = spec.num_tokens
    if main_grads is not None:
        # The forward ran on the plain plan; both must lay `saved` out the same way.
        forward_plan = _plan(spec, device)
        if plan.saved_size(tokens) != forward_plan.saved_size(tokens):
            raise errors.InternalError(
                f"{where}: the accumulating plan lays out the saved buffer differently from "
                "the forward's plan (was moejit.torch.configure() called between them?)")
    dout = _prepare_dout(dout, x)
    if spec.recipe == "bf16":
        return _backward_in_parts(plan, tokens, dout, x, rw, weights, biases, saved, main_grads)
    cache, workspace_size = _weight_cache(
        spec, plan, dict(w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down), device,
        tokens)
    dx = _empty(tuple(x.shape), x.dtype, device)
    d_routing = _empty(tuple(rw.shape), rw.dtype, device)
    if main_grads is None:
        grads = _new_grads(weights, list(weights), device)
    else:
        grads = dict(main_grads)
    workspace = _empty_bytes(workspace_size, device)
    plan.backward(num_tokens=tokens, x=x, dout=dout, routing_weights=rw, w_gate=w_gate,
                  w_up=w_up, w_gate_up=w_gate_up, w_down=w_down, saved=saved,
                  saved_size=saved.numel(), dx=dx, d_routing_weights=d_routing,
                  dw_gate=grads.get("w_gate"), dw_up=grads.get("w_up"),
                  dw_gate_up=grads.get("w_gate_up"), dw_down=grads["w_down"],
                  b_down=biases.get("b_down"), db_gate_up=grads.get("b_gate_up"),
                  db_down=grads.get("b_down"), workspace=workspace,
                  workspace_size=workspace_size, consume_saved=True, stream=_stream(device),
                  **cache)
    return dx, d_routing, ({} if main_grads is not None else grads)


_DOWN_WEIGHTS = ("w_down", "b_down")  # the weights whose gradients the DOWN part writes


_FC1_PAIR = "w_gate|w_up"  # _new_grads's key of the [2,E,I,H] allocation behind dw_gate, dw_up


def _new_grads(weights: Dict[str, torch.Tensor], names, device) -> Dict[str, torch.Tensor]:
    """Gradient buffers for weights[names]. Split fc1 weights' two gradients are the halves of
    one allocation, kept under _FC1_PAIR too (0.14): the caching allocator rounds each block up
    to its granule (2 MiB; a remainder of 1 MiB or less is not split off), so two blocks can
    cost 2 MiB more than one (gpt-oss-120b's [E,I,H] = 2025 MiB each). Each half is a contiguous view with the weight's
    strides, so autograd keeps it as the parameter's .grad without a copy; the storage is freed
    when both are."""
    grads = {}
    if "w_gate" in names and "w_up" in names:
        w = weights["w_gate"]  # check() made w_up's shape and dtype w_gate's
        grads[_FC1_PAIR] = _empty((2,) + tuple(w.shape), w.dtype, device)
        grads["w_gate"], grads["w_up"] = grads[_FC1_PAIR].unbind(0)
    for n in names:
        if n not in grads:
            grads[n] = _empty(tuple(weights[n].shape), weights[n].dtype, device)
    return grads


def _backward_in_parts(plan, tokens, dout, x, rw, weights, biases, saved, main_grads):
    """A bf16 backward as moejit_plan_backward_part's two calls (0.13), each part's outputs and
    workspace allocated just before it: DOWN's workspace, d(a·w) [S,I] among it, is back in
    PyTorch's allocator before dx and fc1's weight gradients are allocated, so the step's peak
    holds one or the other (docs/DESIGN.md §2.7)."""
    device = x.device
    stream = _stream(device)

    def new_grads(names):
        if main_grads is not None:
            return {n: main_grads.get(n) for n in names}
        return _new_grads(weights, names, device)

    down_names = [n for n in weights if n in _DOWN_WEIGHTS]
    grads = new_grads(down_names)
    d_routing = _empty(tuple(rw.shape), rw.dtype, device)
    size = plan.backward_part_workspace_size(tokens, "down")
    workspace = _empty_bytes(size, device)
    plan.backward_part("down", num_tokens=tokens, dout=dout, routing_weights=rw,
                       w_down=weights["w_down"], b_down=biases.get("b_down"), saved=saved,
                       saved_size=saved.numel(),
                       d_routing_weights=d_routing, dw_down=grads["w_down"],
                       db_down=grads.get("b_down"), workspace=workspace, workspace_size=size,
                       stream=stream)
    del workspace  # freed on this stream: the UP part's allocations may reuse it at once
    grads.update(new_grads([n for n in weights if n not in _DOWN_WEIGHTS]))
    dx = _empty(tuple(x.shape), x.dtype, device)
    size = plan.backward_part_workspace_size(tokens, "up")
    workspace = _empty_bytes(size, device)
    plan.backward_part("up", num_tokens=tokens, x=x, w_gate=weights.get("w_gate"),
                       w_up=weights.get("w_up"), w_gate_up=weights.get("w_gate_up"),
                       saved=saved, saved_size=saved.numel(), dx=dx, dw_gate=grads.get("w_gate"),
                       dw_up=grads.get("w_up"), dw_gate_up=grads.get("w_gate_up"),
                       db_gate_up=grads.get("b_gate_up"), workspace=workspace,
                       workspace_size=size, stream=stream)
    return dx, d_routing, ({} if main_grads is not None else grads)


def _like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format)


# ------------------------------------------------------------------ registration
# No device_types: the implementation serves every device, so a CPU (or any non-CUDA) tensor
# gets check()'s "must be a CUDA tensor" instead of a dispatcher NotImplementedError.

_W = "torch.ops.moejit."


@torch.library.custom_op("moejit::fused_moe", mutates_args=())
def fused_moe(x: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor,
              w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
              swiglu_limit: float, recipe: str = "bf16") -> Tuple[torch.Tensor, torch.Tensor]:
    return _forward(_W + "fused_moe", x, selected_experts, routing_weights, w_gate, w_up, None,
                    w_down, swiglu_limit, **_recipe_kwargs(recipe))


@fused_moe.register_fake
def _(x, selected_experts, routing_weights, w_gate, w_up, w_down, swiglu_limit, recipe="bf16"):
    return _forward_fake(_W + "fused_moe", x, selected_experts, routing_weights, w_gate, w_up,
                         None, w_down, swiglu_limit, **_recipe_kwargs(recipe))


@torch.library.custom_op("moejit::fused_moe_merged", mutates_args=())
def fused_moe_merged(x: torch.Tensor, selected_experts: torch.Tensor,
                     routing_weights: torch.Tensor, w_gate_up: torch.Tensor,
                     w_down: torch.Tensor, swiglu_limit: float, recipe: str = "bf16"
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _forward(_W + "fused_moe_merged", x, selected_experts, routing_weights, None, None,
                    w_gate_up, w_down, swiglu_limit, **_recipe_kwargs(recipe))


@fused_moe_merged.register_fake
def _(x, selected_experts, routing_weights, w_gate_up, w_down, swiglu_limit, recipe="bf16"):
    return _forward_fake(_W + "fused_moe_merged", x, selected_experts, routing_weights, None,
                         None, w_gate_up, w_down, swiglu_limit, **_recipe_kwargs(recipe))


@torch.library.custom_op("moejit::fused_moe_backward", mutates_args=("saved",))
def fused_moe_backward(dout: torch.Tensor, x: torch.Tensor, selected_experts: torch.Tensor,
                       routing_weights: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                       w_down: torch.Tensor, saved: torch.Tensor, swiglu_limit: float,
                       recipe: str = "bf16"
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, drw, g = _backward(_W + "fused_moe_backward", dout, x, selected_experts,
                           routing_weights, w_gate, w_up, None, w_down, saved, swiglu_limit,
                           **_recipe_kwargs(recipe))
    # dw_gate and dw_up as one [2,E,I,H] output: a custom op's outputs may not alias each other.
    return dx, drw, g[_FC1_PAIR], g["w_down"]


@fused_moe_backward.register_fake
def _(dout, x, selected_experts, routing_weights, w_gate, w_up, w_down, saved, swiglu_limit,
      recipe="bf16"):
    _backward_common(_W + "fused_moe_backward", dout, x, selected_experts, routing_weights,
                     w_gate, w_up, None, w_down, saved, swiglu_limit, **_recipe_kwargs(recipe))
    return (_like(x), _like(routing_weights), w_gate.new_empty((2,) + tuple(w_gate.shape)),
            _like(w_down))


@torch.library.custom_op("moejit::fused_moe_merged_backward", mutates_args=("saved",))
def fused_moe_merged_backward(dout: torch.Tensor, x: torch.Tensor,
                              selected_experts: torch.Tensor, routing_weights: torch.Tensor,
                              w_gate_up: torch.Tensor, w_down: torch.Tensor,
                              saved: torch.Tensor, swiglu_limit: float, recipe: str = "bf16"
                              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                         torch.Tensor]:
    dx, drw, g = _backward(_W + "fused_moe_merged_backward", dout, x, selected_experts,
                           routing_weights, None, None, w_gate_up, w_down, saved, swiglu_limit,
                           **_recipe_kwargs(recipe))
    return dx, drw, g["w_gate_up"], g["w_down"]


@fused_moe_merged_backward.register_fake
def _(dout, x, selected_experts, routing_weights, w_gate_up, w_down, saved, swiglu_limit,
      recipe="bf16"):
    _backward_common(_W + "fused_moe_merged_backward", dout, x, selected_experts,
                     routing_weights, None, None, w_gate_up, w_down, saved, swiglu_limit,
                     recipe=recipe)
    return _like(x), _like(routing_weights), _like(w_gate_up), _like(w_down)


@torch.library.custom_op("moejit::fused_moe_backward_main_grad",
                         mutates_args=("saved", "main_grad_gate", "main_grad_up", "main_grad_down"))
def fused_moe_backward_main_grad(dout: torch.Tensor, x: torch.Tensor,
                                 selected_experts: torch.Tensor, routing_weights: torch.Tensor,
                                 w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
                                 saved: torch.Tensor, swiglu_limit: float,
                                 main_grad_gate: torch.Tensor, main_grad_up: torch.Tensor,
                                 main_grad_down: torch.Tensor
                                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    dx, drw, _ = _backward(_W + "fused_moe_backward_main_grad", dout, x, selected_experts,
                           routing_weights, w_gate, w_up, None, w_down, saved, swiglu_limit,
                           main_grads={"w_gate": main_grad_gate, "w_up": main_grad_up,
                                       "w_down": main_grad_down})
    return dx, drw


@fused_moe_backward_main_grad.register_fake
def _(dout, x, selected_experts, routing_weights, w_gate, w_up, w_down, saved, swiglu_limit,
      main_grad_gate, main_grad_up, main_grad_down):
    _backward_common(_W + "fused_moe_backward_main_grad", dout, x, selected_experts,
                     routing_weights, w_gate, w_up, None, w_down, saved, swiglu_limit,
                     {"w_gate": main_grad_gate, "w_up": main_grad_up, "w_down": main_grad_down})
    return _like(x), _like(routing_weights)


@torch.library.custom_op("moejit::fused_moe_merged_backward_main_grad",
                         mutates_args=("saved", "main_grad_gate_up", "main_grad_down"))
def fused_moe_merged_backward_main_grad(dout: torch.Tensor, x: torch.Tensor,
                                        selected_experts: torch.Tensor,
                                        routing_weights: torch.Tensor, w_gate_up: torch.Tensor,
                                        w_down: torch.Tensor, saved: torch.Tensor,
                                        swiglu_limit: float, main_grad_gate_up: torch.Tensor,
                                        main_grad_down: torch.Tensor
                                        ) -> Tuple[torch.Tensor, torch.Tensor]:
    dx, drw, _ = _backward(_W + "fused_moe_merged_backward_main_grad", dout, x,
                           selected_experts, routing_weights, None, None, w_gate_up, w_down,
                           saved, swiglu_limit,
                           main_grads={"w_gate_up": main_grad_gate_up,
                                       "w_down": main_grad_down})
    return dx, drw


@fused_moe_merged_backward_main_grad.register_fake
def _(dout, x, selected_experts, routing_weights, w_gate_up, w_down, saved, swiglu_limit,
      main_grad_gate_up, main_grad_down):
    _backward_common(_W + "fused_moe_merged_backward_main_grad", dout, x, selected_experts,
                     routing_weights, None, None, w_gate_up, w_down, saved, swiglu_limit,
                     {"w_gate_up": main_grad_gate_up, "w_down": main_grad_down})
    return _like(x), _like(routing_weights)


# ---- the gated layer (since 0.5): gate_up fc1 (merged or interleaved), swiglu or gpt-oss's
# activation, weights as stored for x·W, expert biases.


def _gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved, weights_transposed):
    return dict(activation=activation, alpha=alpha, interleaved=interleaved,
                weights_transposed=weights_transposed, b_gate_up=b_gate_up, b_down=b_down)


def _no_bias_grad(x: torch.Tensor) -> torch.Tensor:
    # The gated backward's bias gradients without biases: empty (a schema cannot return None).
    return x.new_empty((0,))


@torch.library.custom_op("moejit::fused_moe_gated", mutates_args=())
def fused_moe_gated(x: torch.Tensor, selected_experts: torch.Tensor,
                    routing_weights: torch.Tensor, w_gate_up: torch.Tensor,
                    w_down: torch.Tensor, b_gate_up: Optional[torch.Tensor],
                    b_down: Optional[torch.Tensor], swiglu_limit: float, activation: str,
                    alpha: float, interleaved: bool, weights_transposed: bool
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _forward(_W + "fused_moe_gated", x, selected_experts, routing_weights, None, None,
                    w_gate_up, w_down, swiglu_limit,
                    **_gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved,
                                    weights_transposed))


@fused_moe_gated.register_fake
def _(x, selected_experts, routing_weights, w_gate_up, w_down, b_gate_up, b_down, swiglu_limit,
      activation, alpha, interleaved, weights_transposed):
    return _forward_fake(_W + "fused_moe_gated", x, selected_experts, routing_weights, None,
                         None, w_gate_up, w_down, swiglu_limit,
                         **_gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved,
                                         weights_transposed))


@torch.library.custom_op("moejit::fused_moe_gated_backward", mutates_args=("saved",))
def fused_moe_gated_backward(dout: torch.Tensor, x: torch.Tensor,
                             selected_experts: torch.Tensor, routing_weights: torch.Tensor,
                             w_gate_up: torch.Tensor, w_down: torch.Tensor,
                             b_gate_up: Optional[torch.Tensor], b_down: Optional[torch.Tensor],
                             saved: torch.Tensor, swiglu_limit: float, activation: str,
                             alpha: float, interleaved: bool, weights_transposed: bool
                             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                        torch.Tensor, torch.Tensor]:
    dx, drw, g = _backward(_W + "fused_moe_gated_backward", dout, x, selected_experts,
                           routing_weights, None, None, w_gate_up, w_down, saved, swiglu_limit,
                           **_gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved,
                                           weights_transposed))
    if b_gate_up is None:
        return dx, drw, g["w_gate_up"], g["w_down"], _no_bias_grad(x), _no_bias_grad(x)
    return dx, drw, g["w_gate_up"], g["w_down"], g["b_gate_up"], g["b_down"]


@fused_moe_gated_backward.register_fake
def _(dout, x, selected_experts, routing_weights, w_gate_up, w_down, b_gate_up, b_down, saved,
      swiglu_limit, activation, alpha, interleaved, weights_transposed):
    _backward_common(_W + "fused_moe_gated_backward", dout, x, selected_experts,
                     routing_weights, None, None, w_gate_up, w_down, saved, swiglu_limit,
                     **_gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved,
                                     weights_transposed))
    if b_gate_up is None:
        return (_like(x), _like(routing_weights), _like(w_gate_up), _like(w_down),
                _no_bias_grad(x), _no_bias_grad(x))
    return (_like(x), _like(routing_weights), _like(w_gate_up), _like(w_down),
            _like(b_gate_up), _like(b_down))


@torch.library.custom_op("moejit::fused_moe_gated_backward_main_grad",
                         mutates_args=("saved", "main_grad_gate_up", "main_grad_down",
                                       "main_grad_b_gate_up", "main_grad_b_down"))
def fused_moe_gated_backward_main_grad(
        dout: torch.Tensor, x: torch.Tensor, selected_experts: torch.Tensor,
        routing_weights: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
        b_gate_up: Optional[torch.Tensor], b_down: Optional[torch.Tensor], saved: torch.Tensor,
        swiglu_limit: float, activation: str, alpha: float, interleaved: bool,
        weights_transposed: bool, main_grad_gate_up: torch.Tensor, main_grad_down: torch.Tensor,
        main_grad_b_gate_up: Optional[torch.Tensor], main_grad_b_down: Optional[torch.Tensor]
        ) -> Tuple[torch.Tensor, torch.Tensor]:
    dx, drw, _ = _backward(_W + "fused_moe_gated_backward_main_grad", dout, x,
                           selected_experts, routing_weights, None, None, w_gate_up, w_down,
                           saved, swiglu_limit,
                           main_grads={"w_gate_up": main_grad_gate_up, "w_down": main_grad_down,
                                       "b_gate_up": main_grad_b_gate_up,
                                       "b_down": main_grad_b_down},
                           **_gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved,
                                           weights_transposed))
    return dx, drw


@fused_moe_gated_backward_main_grad.register_fake
def _(dout, x, selected_experts, routing_weights, w_gate_up, w_down, b_gate_up, b_down, saved,
      swiglu_limit, activation, alpha, interleaved, weights_transposed, main_grad_gate_up,
      main_grad_down, main_grad_b_gate_up, main_grad_b_down):
    _backward_common(_W + "fused_moe_gated_backward_main_grad", dout, x, selected_experts,
                     routing_weights, None, None, w_gate_up, w_down, saved, swiglu_limit,
                     {"w_gate_up": main_grad_gate_up, "w_down": main_grad_down,
                      "b_gate_up": main_grad_b_gate_up, "b_down": main_grad_b_down},
                     **_gated_kwargs(b_gate_up, b_down, activation, alpha, interleaved,
                                     weights_transposed))
    return _like(x), _like(routing_weights)


# ------------------------------------------------------------------ autograd


def _no_gradient_for_saved(ctx, saved):
    """`saved` has no gradient, and autograd must not make one: with materialized gradients it
    fills a zero tensor of saved's size for every backward (a full write of the saved bytes,
    2-3 % of a qwen3-30b-a3b step on the H200, docs/PERF_LOG.md 0.9.0). dout is never None:
    the backward runs only through `out`, the one differentiable output."""
    ctx.mark_non_differentiable(saved)
    ctx.set_materialize_grads(False)


def _setup_context(ctx, inputs, output):
    x, sel, rw, *weights, swiglu_limit, recipe = inputs
    _, saved = output
    ctx.save_for_backward(x, sel, rw, *weights, saved)
    ctx.swiglu_limit = swiglu_limit
    ctx.recipe = recipe
    _no_gradient_for_saved(ctx, saved)


def _fused_moe_backward(ctx, dout, _dsaved):
    x, sel, rw, w_gate, w_up, w_down, saved = ctx.saved_tensors
    dx, drw, dw_gate_and_up, dw_down = torch.ops.moejit.fused_moe_backward(
        dout, x, sel, rw, w_gate, w_up, w_down, saved, ctx.swiglu_limit, ctx.recipe)
    dw_gate, dw_up = dw_gate_and_up[0], dw_gate_and_up[1]
    need_gate, need_up = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
    # One frozen: the other's .grad must not keep the whole block alive (the copy holds three
    # [E,I,H] tensors for a moment; the op cannot see needs_input_grad to allocate one).
    if need_gate != need_up:
        dw_gate = dw_gate.clone() if need_gate else None
        dw_up = dw_up.clone() if need_up else None
    return dx, None, drw, dw_gate, dw_up, dw_down, None, None


def _fused_moe_merged_backward(ctx, dout, _dsaved):
    x, sel, rw, w_gate_up, w_down, saved = ctx.saved_tensors
    dx, drw, dw_gate_up, dw_down = torch.ops.moejit.fused_moe_merged_backward(
        dout, x, sel, rw, w_gate_up, w_down, saved, ctx.swiglu_limit, ctx.recipe)
    return dx, None, drw, dw_gate_up, dw_down, None, None


# The gated ops' autograd, shared with the experts op (_experts_op.py): inputs (x, the routing
# index (selected experts or expert offsets), the routing weights (the experts op's may be
# None), w_gate_up, w_down, b_gate_up, b_down, swiglu_limit, activation, alpha, interleaved,
# weights_transposed); outputs (out, saved).
def _setup_context_gated(ctx, inputs, output):
    (x, index, rw, w_gate_up, w_down, b_gate_up, b_down, swiglu_limit, activation, alpha,
     interleaved, weights_transposed) = inputs
    _, saved = output
    ctx.save_for_backward(x, index, rw, w_gate_up, w_down, b_gate_up, b_down, saved)
    ctx.options = (swiglu_limit, activation, alpha, interleaved, weights_transposed)
    _no_gradient_for_saved(ctx, saved)


def _gated_backward(backward_op: str):
    """The autograd backward through torch.ops.moejit.<backward_op>: no gradient for the
    index and the options, nor for routing weights or biases not given."""
    def backward(ctx, dout, _dsaved):
        x, index, rw, w_gate_up, w_down, b_gate_up, b_down, saved = ctx.saved_tensors
        dx, drw, dw_gate_up, dw_down, db_gate_up, db_down = getattr(torch.ops.moejit, backward_op)(
            dout, x, index, rw, w_gate_up, w_down, b_gate_up, b_down, saved, *ctx.options)
        if rw is None:
            drw = None
        if b_gate_up is None:
            db_gate_up = db_down = None
        return (dx, None, drw, dw_gate_up, dw_down, db_gate_up, db_down, None, None, None, None,
                None)
    return backward


_fused_moe_gated_backward = _gated_backward("fused_moe_gated_backward")


fused_moe.register_autograd(_fused_moe_backward, setup_context=_setup_context)
fused_moe_merged.register_autograd(_fused_moe_merged_backward, setup_context=_setup_context)
fused_moe_gated.register_autograd(_fused_moe_gated_backward, setup_context=_setup_context_gated)
