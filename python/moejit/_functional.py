"""The functional pieces moejit.torch and moejit.distributed share: the argument checks and
the pre-dispatched experts entry (moejit.torch.experts). Here so that neither of the two
imports the other (moejit.torch reaches moejit.distributed as an attribute; moejit.distributed
needs only these)."""

from __future__ import annotations

from typing import Optional

import torch

from . import _capi, _experts_op, _op, errors  # noqa: F401  (_op, _experts_op register the ops)
from .core import ACTIVATIONS, swiglu_alpha

__all__ = ["experts"]

_ops = torch.ops.moejit


def _require_tensors(where: str, **tensors) -> None:
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise errors.InvalidArgumentError(
                f"{where}: {name} must be a torch.Tensor, got {type(tensor).__name__}")


def _limit(where: str, swiglu_limit) -> float:
    """None -> 0.0 (the ops' "no limit"); the ops check the value itself (as float32)."""
    if swiglu_limit is None:
        return 0.0
    if isinstance(swiglu_limit, bool) or not isinstance(swiglu_limit, (int, float)):
        raise errors.InvalidArgumentError(
            f"{where}: swiglu_limit must be None or a positive float, got {swiglu_limit!r}")
    if not swiglu_limit > 0:  # also NaN
        raise errors.InvalidArgumentError(
            f"{where}: swiglu_limit must be None (no limit) or a finite value > 0, got "
            f"{swiglu_limit!r}")
    return float(swiglu_limit)


def _alpha(where: str, activation: str, alpha) -> float:
    """core.check_activation_alpha without ctypes (torch.compile traces this function); the
    op checks the value again as float32."""
    if activation == "swiglu":
        return swiglu_alpha(alpha, f"{where}: ")
    if alpha is None:
        return _capi.GPT_OSS_ALPHA
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or \
            not (0.0 < alpha <= 3.4e38):  # also NaN
        raise errors.InvalidArgumentError(
            f"{where}: alpha must be None (gpt-oss's {_capi.GPT_OSS_ALPHA}) or a finite value "
            f"> 0, got {alpha!r}")
    return float(alpha)


def _flag(where: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise errors.InvalidArgumentError(f"{where}: {name} must be True or False, got {value!r}")
    return value


def experts(xs: torch.Tensor, expert_offsets: torch.Tensor, w_gate_up: torch.Tensor,
            w_down: torch.Tensor, row_weights: Optional[torch.Tensor] = None,
            swiglu_limit: Optional[float] = None, *, activation: str = "swiglu",
            alpha: Optional[float] = None, interleaved: bool = False,
            weights_transposed: bool = False, b_gate_up: Optional[torch.Tensor] = None,
            b_down: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The experts on rows already grouped by expert (since 0.6; moejit.h's
    moejit_plan_experts_*): no routing, scatter or gather. For expert parallelism (the rows a
    rank received) and for callers that route by themselves.

    xs [R, H] bf16/fp16, the rows of expert e at [expert_offsets[e], expert_offsets[e+1]);
    expert_offsets int32 [E+1] on xs' device, expert_offsets[0] = 0, non-decreasing,
    expert_offsets[E] = R (read on the device only: not checked); row_weights float32 [R] or
    None (1). The weights and keywords are fused_moe_merged's. Returns ys [R, H] with
    ys[r] = w[r]·(h(xs[r]·W1ᵀ + b1)·W2ᵀ + b2), differentiable in xs, row_weights, the weights
    and the biases (torch.ops.moejit.experts, moejit/_experts_op.py).
    """
    where = "moejit.torch.experts"
    _require_tensors(where, xs=xs, expert_offsets=expert_offsets, w_gate_up=w_gate_up,
                     w_down=w_down)
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise errors.InvalidArgumentError(
            f"{where}: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got "
            f"{activation!r}")
    options = (_limit(where, swiglu_limit), activation, _alpha(where, activation, alpha),
               _flag(where, "interleaved", interleaved),
               _flag(where, "weights_transposed", weights_transposed))
    ys, _ = _ops.experts(xs, expert_offsets, row_weights, w_gate_up, w_down, b_gate_up, b_down,
                         *options)
    return ys
