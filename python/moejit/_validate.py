"""Framework-neutral checks of the layer's tensors, run before anything reaches the library.

Tensors are described by TensorInfo (shape, dtype name, device string, contiguity), so the
checks are the same for every framework binding and testable without one.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

from . import errors
from .core import ACTIVATIONS, check_activation_alpha, check_swiglu_limit

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
    merged: bool          # one gate_up weight (merged or interleaved fc1)
    swiglu_limit: float   # 0.0: none
    device: str
    # since 0.5 (the defaults are the 0.4 layer)
    activation: str = "swiglu"      # "swiglu" or "gpt_oss"
    alpha: float = 0.0              # gpt_oss's alpha (resolved: 1.702 when not given); swiglu: 0
    interleaved: bool = False       # fc1 column 2i = gate i, 2i+1 = up i
    weights_transposed: bool = False  # w_gate_up [E, H, 2I], w_down [E, I, H]
    has_bias: bool = False          # b_gate_up [E, 2I], b_down [E, H]
    recipe: str = "bf16"            # since 0.11: "bf16" or "fp8-block" (set by moejit._op)


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _fail(where: str, message: str) -> None:
    raise errors.InvalidArgumentError(f"{where}: {message}")


def check_layer(where: str, x: TensorInfo, selected_experts: TensorInfo,
                routing_weights: TensorInfo, w_gate: Optional[TensorInfo],
                w_up: Optional[TensorInfo], w_gate_up: Optional[TensorInfo],
                w_down: TensorInfo, swiglu_limit=None, *, activation: str = "swiglu",
                alpha=None, interleaved: bool = False, weights_transposed: bool = False,
                b_gate_up: Optional[TensorInfo] = None,
                b_down: Optional[TensorInfo] = None) -> LayerSpec:
    """Checks every tensor of a layer call; returns the implied LayerSpec. `where` names the
    entry point in messages. Split layout passes w_gate and w_up, merged passes w_gate_up.

    Since 0.5: activation "swiglu" or "gpt_oss"; alpha (gpt_oss only: None or 0 -> 1.702,
    else > 0); interleaved (w_gate_up's 2I dim alternates gate, up); weights_transposed
    (w_gate_up [E, H, 2I], w_down [E, I, H]); b_gate_up [E, 2I] and b_down [E, H], both or
    neither. The last three need w_gate_up."""
    named = {"x": x, "selected_experts": selected_experts, "routing_weights": routing_weights,
             "w_down": w_down}
    merged = w_gate_up is not None
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        _fail(where, f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got "
                     f"{activation!r}")
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha == 0:
        alpha = None  # 0 is the ops' (and moejit_plan_desc_t's) "not given"
    try:
        alpha = check_activation_alpha(activation, alpha)
    except errors.InvalidArgumentError as e:
        _fail(where, e.message)
    interleaved, weights_transposed = bool(interleaved), bool(weights_transposed)
    if (b_gate_up is None) != (b_down is None):
        given, missing = ("b_gate_up", "b_down") if b_down is None else ("b_down", "b_gate_up")
        _fail(where, f"{given} is given but {missing} is not: pass both biases (b_gate_up "
                     "[E, 2I] and b_down [E, H]) or neither")
    has_bias = b_gate_up is not None
    if not merged and (interleaved or weights_transposed or has_bias):
        what = [n for n, on in (("interleaved", interleaved),
                                ("weights_transposed", weights_transposed),
                                ("biases", has_bias)) if on]
        _fail(where, f"{' and '.join(what)} need the gate_up weight w_gate_up, not the split "
                     "w_gate and w_up")
    if has_bias:
        named["b_gate_up"] = b_gate_up
        named["b_down"] = b_down
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
    for name in ("w_gate", "w_up", "w_gate_up", "w_down", "b_gate_up", "b_down"):
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
    fc1_form = ("[E, H, 2I]" if weights_transposed else "[E, 2I, H]") if merged else "[E, I, H]"
    if len(fc1.shape) != 3:
        _fail(where, f"{fc1_name} must be 3-D {fc1_form}, got shape {_fmt(fc1.shape)}")
    if weights_transposed:
        experts, fc1_hidden, rows = fc1.shape
    else:
        experts, rows, fc1_hidden = fc1.shape
    if merged:
        if rows % 2:
            order = "gate, up interleaved" if interleaved else "gate first, then up"
            _fail(where, f"w_gate_up must be {fc1_form} ({order}) with an even "
                         f"{'last' if weights_transposed else 'middle'} dim (2I), got "
                         f"{_fmt(fc1.shape)}")
        intermediate = rows // 2
    else:
        intermediate = rows
    if experts < 1 or intermediate < 1:
        _fail(where, f"{fc1_name} has an empty dimension: {_fmt(fc1.shape)}")
    if fc1_hidden != hidden:
        expected = (experts, hidden, rows) if weights_transposed else (experts, rows, hidden)
        _fail(where, f"{fc1_name} must be {fc1_form} = {_fmt(expected)} (H is the hidden size "
                     f"{hidden} of x), got {_fmt(fc1.shape)}")
    if not merged and tuple(w_up.shape) != tuple(w_gate.shape):
        _fail(where, f"w_up must have w_gate's shape {_fmt(w_gate.shape)} = [E, I, H], got "
                     f"{_fmt(w_up.shape)}")
    if weights_transposed:
        expected_down, down_form = (experts, intermediate, hidden), "[E, I, H]"
    else:
        expected_down, down_form = (experts, hidden, intermediate), "[E, H, I]"
    if tuple(w_down.shape) != expected_down:
        _fail(where, f"w_down must be {down_form} = {_fmt(expected_down)}"
                     f"{' (weights_transposed)' if weights_transposed else ''}, got "
                     f"{_fmt(w_down.shape)}")
    if has_bias:
        for name, expected, form in (("b_gate_up", (experts, 2 * intermediate), "[E, 2I]"),
                                     ("b_down", (experts, hidden), "[E, H]")):
            if tuple(named[name].shape) != expected:
                _fail(where, f"{name} must be {form} = {_fmt(expected)}, got "
                             f"{_fmt(named[name].shape)}")

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
                     merged=merged, swiglu_limit=limit, device=x.device,
                     activation=activation, alpha=alpha, interleaved=interleaved,
                     weights_transposed=weights_transposed, has_bias=has_bias)
