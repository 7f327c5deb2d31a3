"""The torch.library custom ops of the pre-dispatched experts entry (moejit.h,
moejit_plan_experts_*; since 0.6): the experts of a plan on rows already grouped by expert.

    torch.ops.moejit.experts(xs, expert_offsets, row_weights?, w_gate_up, w_down, b_gate_up?,
                             b_down?, swiglu_limit, activation, alpha, interleaved,
                             weights_transposed) -> (ys, saved)
    torch.ops.moejit.experts_backward(dys, xs, expert_offsets, row_weights?, w_gate_up, w_down,
                                      b_gate_up?, b_down?, saved, swiglu_limit, activation,
                                      alpha, interleaved, weights_transposed)
        -> (dxs, d_row_weights, dw_gate_up, dw_down, db_gate_up, db_down)

xs [R, H] (bf16/fp16) with the rows of expert e at [expert_offsets[e], expert_offsets[e+1]),
expert_offsets int32 [E+1] on xs' device (expert_offsets[E] = R; read on the device only),
row_weights float32 [R] or None (every weight 1; d_row_weights is then an empty [0] tensor).
The weights and options are fused_moe_gated's. ys[r] = w[r]·(h(xs[r]·W1ᵀ + b1)·W2ᵀ + b2).
The plan is the layer's plan for top_k = 1 (one route per row), from the same cache.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _op, errors
from ._validate import LayerSpec, TensorInfo, check_layer

__all__ = ["experts_saved_bytes_bound", "OPS"]

OPS = ("experts", "experts_backward")
_W = "torch.ops.moejit."


def experts_saved_bytes_bound(num_rows, intermediate_size: int, element_size: int = 2):
    """Bytes of `saved` for R rows: the library's upper bound of moejit_plan_experts_saved_size,
    affine in R (works on SymInts; moejit_experts_saved_size_terms)."""
    # The experts entry's saved regions depend on I and the dtype only: any valid H, E, k.
    per_row, constant = _op.saved_size_terms(8, int(intermediate_size), 1, 1, int(element_size),
                                             experts_entry=True)
    return num_rows * per_row + constant


def check(where: str, xs, expert_offsets, row_weights, w_gate_up, w_down, swiglu_limit, *,
          activation, alpha, interleaved, weights_transposed, b_gate_up, b_down) -> LayerSpec:
    """The layer's checks for one route per row (R tokens, top_k 1), plus the offsets and row
    weights; a clear InvalidArgumentError otherwise."""
    x = _op._info(where, "xs", xs)
    offsets = _op._info(where, "expert_offsets", expert_offsets)
    if x is None or offsets is None:
        raise errors.InvalidArgumentError(f"{where}: xs and expert_offsets are required")
    if len(x.shape) != 2:
        raise errors.InvalidArgumentError(f"{where}: xs must be [R, H], got shape {list(x.shape)}")
    rows = x.shape[0]
    weights = _op._info(where, "row_weights", row_weights)
    if weights is not None and (weights.shape != (rows,) or weights.dtype != "float32"):
        raise errors.InvalidArgumentError(
            f"{where}: row_weights must be float32 [R={rows}] (or None), got {weights.dtype} "
            f"{list(weights.shape)}")
    # The layer's checks, with the rows as R tokens of one route each (the routing tensors
    # stand in: expert ids are not needed, the offsets hold the grouping).
    sel = TensorInfo((rows, 1), "int32", x.device, True)
    rw = TensorInfo((rows, 1), "float32", x.device, True)
    spec = check_layer(where, x, sel, rw, None, None, _op._info(where, "w_gate_up", w_gate_up),
                           _op._info(where, "w_down", w_down),
                           swiglu_limit if swiglu_limit else None, activation=activation,
                           alpha=alpha, interleaved=interleaved,
                           weights_transposed=weights_transposed,
                           b_gate_up=_op._info(where, "b_gate_up", b_gate_up),
                           b_down=_op._info(where, "b_down", b_down))
    if offsets.shape != (spec.num_experts + 1,) or offsets.dtype != "int32" or \
            offsets.device != x.device or not offsets.contiguous:
        raise errors.InvalidArgumentError(
            f"{where}: expert_offsets must be a contiguous int32 [E+1 = {spec.num_experts + 1}] "
            f"tensor on {x.device}, got {offsets.dtype} {list(offsets.shape)} on {offsets.device}")
    if weights is not None and (weights.device != x.device or not weights.contiguous):
        raise errors.InvalidArgumentError(f"{where}: row_weights must be contiguous, on {x.device}")
    return spec


def _saved_bound(spec: LayerSpec) -> int:
    return experts_saved_bytes_bound(spec.num_tokens, spec.intermediate_size,
                                     _op._ELEMENT_SIZE[spec.dtype])


def _forward(where, xs, offsets, rw, w_gate_up, w_down, swiglu_limit, **gated):
    spec = check(where, xs, offsets, rw, w_gate_up, w_down, swiglu_limit, **gated)
    biases = _op._bias_names(gated)
    _op._check_alignment(where, xs=xs, w_gate_up=w_gate_up, w_down=w_down, **biases)
    device = xs.device
    plan = _op._plan(spec, device)
    rows = spec.num_tokens
    saved_size = _op._within_bound(where, plan.experts_saved_size(rows), _saved_bound(spec),
                                   f"R={rows}", "experts_saved_bytes_bound")
    workspace_size = plan.experts_workspace_size(rows)
    ys = _op._empty(tuple(xs.shape), xs.dtype, device)
    saved = _op._empty_bytes(saved_size, device)
    workspace = _op._empty_bytes(workspace_size, device)
    plan.experts_forward(num_rows=rows, xs=xs, expert_offsets=offsets, row_weights=rw,
                         w_gate_up=w_gate_up, w_down=w_down, b_gate_up=biases.get("b_gate_up"),
                         b_down=biases.get("b_down"), ys=ys, saved=saved, saved_size=saved_size,
                         workspace=workspace, workspace_size=workspace_size,
                         stream=_op._stream(device))
    return ys, saved


def _backward_check(where, dys, xs, offsets, rw, w_gate_up, w_down, saved, swiglu_limit,
                    **gated) -> LayerSpec:
    spec = check(where, xs, offsets, rw, w_gate_up, w_down, swiglu_limit, **gated)
    if not isinstance(dys, torch.Tensor) or tuple(dys.shape) != tuple(xs.shape):
        raise errors.InvalidArgumentError(
            f"{where}: dys must have xs' shape {list(xs.shape)}, got "
            f"{list(getattr(dys, 'shape', ()))}")
    _op._check_like(where, "saved", saved, (_saved_bound(spec),), torch.uint8, saved.device)
    return spec


def _backward(where, dys, xs, offsets, rw, w_gate_up, w_down, saved, swiglu_limit, **gated):
    """(dxs, d_row_weights or None, {name: gradient})."""
    spec = _backward_check(where, dys, xs, offsets, rw, w_gate_up, w_down, saved, swiglu_limit,
                           **gated)
    biases = _op._bias_names(gated)
    _op._check_alignment(where, xs=xs, w_gate_up=w_gate_up, w_down=w_down, saved=saved, **biases)
    device = xs.device
    plan = _op._plan(spec, device)
    rows = spec.num_tokens
    dys = _op._prepare_dout(dys, xs)
    workspace_size = plan.experts_workspace_size(rows)
    dxs = _op._empty(tuple(xs.shape), xs.dtype, device)
    drw = _op._empty((rows,), torch.float32, device) if rw is not None else None
    weights = {"w_gate_up": w_gate_up, "w_down": w_down, **biases}
    grads = {n: _op._empty(tuple(w.shape), w.dtype, device) for n, w in weights.items()}
    workspace = _op._empty_bytes(workspace_size, device)
    plan.experts_backward(num_rows=rows, xs=xs, expert_offsets=offsets, row_weights=rw,
                          dys=dys, w_gate_up=w_gate_up, w_down=w_down,
                          b_down=biases.get("b_down"), saved=saved, saved_size=saved.numel(),
                          dxs=dxs, d_row_weights=drw, dw_gate_up=grads["w_gate_up"],
                          dw_down=grads["w_down"], db_gate_up=grads.get("b_gate_up"),
                          db_down=grads.get("b_down"), workspace=workspace,
                          workspace_size=workspace_size, stream=_op._stream(device))
    return dxs, drw, grads


def _gated(b_gate_up, b_down, activation, alpha, interleaved, weights_transposed):
    return dict(activation=activation, alpha=alpha, interleaved=interleaved,
                weights_transposed=weights_transposed, b_gate_up=b_gate_up, b_down=b_down)


@torch.library.custom_op("moejit::experts", mutates_args=())
def experts(xs: torch.Tensor, expert_offsets: torch.Tensor, row_weights: Optional[torch.Tensor],
            w_gate_up: torch.Tensor, w_down: torch.Tensor, b_gate_up: Optional[torch.Tensor],
            b_down: Optional[torch.Tensor], swiglu_limit: float, activation: str, alpha: float,
            interleaved: bool, weights_transposed: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return _forward(_W + "experts", xs, expert_offsets, row_weights, w_gate_up, w_down,
                         swiglu_limit, **_gated(b_gate_up, b_down, activation, alpha,
                                                interleaved, weights_transposed))


@experts.register_fake
def _(xs, expert_offsets, row_weights, w_gate_up, w_down, b_gate_up, b_down, swiglu_limit,
      activation, alpha, interleaved, weights_transposed):
    spec = check(_W + "experts", xs, expert_offsets, row_weights, w_gate_up, w_down,
                 swiglu_limit, **_gated(b_gate_up, b_down, activation, alpha, interleaved,
                                        weights_transposed))
    return _op._like(xs), xs.new_empty((_saved_bound(spec),), dtype=torch.uint8)


@torch.library.custom_op("moejit::experts_backward", mutates_args=())
def experts_backward(dys: torch.Tensor, xs: torch.Tensor, expert_offsets: torch.Tensor,
                     row_weights: Optional[torch.Tensor], w_gate_up: torch.Tensor,
                     w_down: torch.Tensor, b_gate_up: Optional[torch.Tensor],
                     b_down: Optional[torch.Tensor], saved: torch.Tensor, swiglu_limit: float,
                     activation: str, alpha: float, interleaved: bool, weights_transposed: bool
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                torch.Tensor, torch.Tensor]:
    dxs, drw, g = _backward(_W + "experts_backward", dys, xs, expert_offsets, row_weights,
                                 w_gate_up, w_down, saved, swiglu_limit,
                                 **_gated(b_gate_up, b_down, activation, alpha, interleaved,
                                          weights_transposed))
    def empty(dtype=xs.dtype):  # a schema cannot return None; each output its own tensor
        return xs.new_empty((0,), dtype=dtype)
    return (dxs, drw if drw is not None else empty(torch.float32), g["w_gate_up"], g["w_down"],
            g["b_gate_up"] if "b_gate_up" in g else empty(), g["b_down"] if "b_down" in g else empty())


@experts_backward.register_fake
def _(dys, xs, expert_offsets, row_weights, w_gate_up, w_down, b_gate_up, b_down, saved,
      swiglu_limit, activation, alpha, interleaved, weights_transposed):
    _backward_check(_W + "experts_backward", dys, xs, expert_offsets, row_weights, w_gate_up,
                    w_down, saved, swiglu_limit, **_gated(b_gate_up, b_down, activation, alpha,
                                                          interleaved, weights_transposed))
    def empty(dtype=xs.dtype):
        return xs.new_empty((0,), dtype=dtype)
    return (_op._like(xs), _op._like(row_weights) if row_weights is not None else empty(torch.float32),
            _op._like(w_gate_up), _op._like(w_down),
            _op._like(b_gate_up) if b_gate_up is not None else empty(),
            _op._like(b_down) if b_down is not None else empty())


# The gated ops' autograd (same inputs: xs, expert offsets, row weights or None, the weights,
# the biases, the five options).
experts.register_autograd(_op._gated_backward("experts_backward"),
                          setup_context=_op._setup_context_gated)
