"""Framework-neutral checks of the layer's tensors, run before anything reaches the library.

Tensors are described by TensorInfo (shape, dtype name, device string, contiguity), so the
checks are the same for every framework binding and testable without one.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

from . import errors
from .core import check_swiglu_limit

FLOAT_DTYPES = ("bfloat16", "float16")
INDEX_DTYPES = ("int32", "int64")


class TensorInfo(NamedTuple):
    shape: Tuple[int, ...]
    dtype: str       # "bfloat16", "float16", "float32", "int32", "int64", ...
    device: str      # "cuda:0", "cpu", ...
    contiguous: bool


class LayerSpec(NamedTuple):
    """What one call of the layer implies: everything a plan key and a launch need."""
    num_tokens: int       # T (leading dims of x flattened)
    hidden_size: int      # H
    intermediate_size: int  # I
    num_experts: int      # E
    top_k: int            # k
    dtype: str
    index_dtype: str
    routing_dtype: str
    merged: bool
    swiglu_limit: float   # 0.0: none
    device: str


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _fail(where: str, message: str) -> None:
    raise errors.InvalidArgumentError(f"{where}: {message}")


def check_layer(where: str, x: TensorInfo, selected_experts: TensorInfo,
                routing_weights: TensorInfo, w_gate: Optional[TensorInfo],
                w_up: Optional[TensorInfo], w_gate_up: Optional[TensorInfo],
                w_down: TensorInfo, swiglu_limit=None) -> LayerSpec:
    """Checks every tensor of a layer call; returns the implied LayerSpec. `where` names the
    entry point in messages. Split layout passes w_gate and w_up, merged passes w_gate_up."""
    named = {"x": x, "selected_experts": selected_experts, "routing_weights": routing_weights,
             "w_down": w_down}
    merged = w_gate_up is not None
    if merged:
        if w_gate is not None or w_up is not None:
            _fail(where, "pass either w_gate and w_up (split) or w_gate_up (merged), not both")
        named["w_gate_up"] = w_gate_up
    else:
        if w_gate is None or w_up is None:
            _fail(where, "w_gate and w_up are both required for the split layout")
        named["w_gate"] = w_gate
        named["w_up"] = w_up
    for name, info in named.items():
        if info is None:
            _fail(where, f"{name} is required")

    # Device: one CUDA device for everything.
    if not x.device.startswith("cuda"):
        _fail(where, f"x must be a CUDA tensor, got device {x.device}")
    for name, info in named.items():
        if info.device != x.device:
            _fail(where, f"{name} is on {info.device} but x is on {x.device}; every tensor must "
                         "be on the same CUDA device")

    # Dtypes.
    if x.dtype not in FLOAT_DTYPES:
        _fail(where, f"x must be bfloat16 or float16, got {x.dtype}")
    if selected_experts.dtype not in INDEX_DTYPES:
        _fail(where, f"selected_experts must be int32 or int64, got {selected_experts.dtype}")
    if routing_weights.dtype not in (x.dtype, "float32"):
        _fail(where, f"routing_weights must be {x.dtype} (like x) or float32, got "
                     f"{routing_weights.dtype}")
    for name in ("w_gate", "w_up", "w_gate_up", "w_down"):
        info = named.get(name)
        if info is not None and info.dtype != x.dtype:
            _fail(where, f"{name} must have x's dtype {x.dtype}, got {info.dtype}")

    # Shapes: x [..., H], selected_experts and routing_weights [..., k], weights from E, I, H.
    if len(x.shape) < 2:
        _fail(where, f"x must be [T, H] (or [..., H]), got shape {_fmt(x.shape)}")
    hidden = x.shape[-1]
    lead = tuple(x.shape[:-1])
    if len(selected_experts.shape) != len(x.shape) or tuple(selected_experts.shape[:-1]) != lead:
        _fail(where, f"selected_experts must be {_fmt(lead + ('k',))} to match x "
                     f"{_fmt(x.shape)}, got {_fmt(selected_experts.shape)}")
    top_k = selected_experts.shape[-1]
    if top_k < 1:
        _fail(where, f"top_k (the last dim of selected_experts) must be >= 1, got {top_k}")
    if tuple(routing_weights.shape) != tuple(selected_experts.shape):
        _fail(where, f"routing_weights must have selected_experts' shape "
                     f"{_fmt(selected_experts.shape)}, got {_fmt(routing_weights.shape)}")
    if hidden < 1:
        _fail(where, f"the hidden size (last dim of x) must be >= 1, got {hidden}")

    fc1_name = "w_gate_up" if merged else "w_gate"
    fc1 = named[fc1_name]
    if len(fc1.shape) != 3:
        _fail(where, f"{fc1_name} must be 3-D {'[E, 2I, H]' if merged else '[E, I, H]'}, got "
                     f"shape {_fmt(fc1.shape)}")
    experts, rows, fc1_hidden = fc1.shape
    if merged:
        if rows % 2:
            _fail(where, f"w_gate_up must be [E, 2I, H] (gate rows first) with an even middle "
                         f"dim, got {_fmt(fc1.shape)}")
        intermediate = rows // 2
    else:
        intermediate = rows
    if experts < 1 or intermediate < 1:
        _fail(where, f"{fc1_name} has an empty dimension: {_fmt(fc1.shape)}")
    if fc1_hidden != hidden:
        _fail(where, f"{fc1_name} must be {_fmt((experts, rows, hidden))} (its last dim is the "
                     f"hidden size {hidden} of x), got {_fmt(fc1.shape)}")
    if not merged and tuple(w_up.shape) != tuple(w_gate.shape):
        _fail(where, f"w_up must have w_gate's shape {_fmt(w_gate.shape)} = [E, I, H], got "
                     f"{_fmt(w_up.shape)}")
    expected_down = (experts, hidden, intermediate)
    if tuple(w_down.shape) != expected_down:
        _fail(where, f"w_down must be [E, H, I] = {_fmt(expected_down)}, got "
                     f"{_fmt(w_down.shape)}")

    # Contiguity: the library reads dense row-major memory; copying weights every step
    # behind the caller's back would be a silent cost, so ask for it explicitly.
    for name, info in named.items():
        if not info.contiguous:
            _fail(where, f"{name} must be contiguous (row-major); call .contiguous() on it")

    try:
        limit = check_swiglu_limit(swiglu_limit)
    except errors.InvalidArgumentError as e:
        _fail(where, e.message)
    tokens = 1
    for d in lead:
        tokens *= d
    return LayerSpec(num_tokens=tokens, hidden_size=hidden, intermediate_size=intermediate,
                     num_experts=experts, top_k=top_k, dtype=x.dtype,
                     index_dtype=selected_experts.dtype, routing_dtype=routing_weights.dtype,
                     merged=merged, swiglu_limit=limit, device=x.device)
