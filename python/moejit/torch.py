"""PyTorch binding: fused_moe / fused_moe_merged and MoEExperts, on the torch.library custom
ops torch.ops.moejit.* (moejit/_op.py), so torch.compile (fullgraph, dynamic shapes, CUDA
graphs through mode="reduce-overhead") and torch.library.opcheck see an ordinary op.

    import torch, moejit.torch as mt
    experts = mt.MoEExperts(num_experts=128, hidden_size=2048, intermediate_size=768,
                            device="cuda", dtype=torch.bfloat16)
    weights, selected = torch.softmax(router(x), dim=-1).topk(8, dim=-1)
    out = experts(x, selected, weights / weights.sum(-1, keepdim=True))

Everything is launched on torch.cuda.current_stream(); outputs, the saved buffer and the
workspace come from PyTorch's allocator, and nothing synchronises with the host, so a layer
can be captured in a CUDA graph once it has run eagerly for its shape (the first call JIT
compiles and loads kernels, which cannot happen during capture).

gpt-oss and expert biases (since 0.5): fused_moe_merged takes keyword arguments for the
experts of gpt-oss (and of any model with a gate_up weight and per-expert biases):

    out = mt.fused_moe_merged(x, selected, weights, gate_up_proj, down_proj, 7.0,
                              activation="gpt_oss", alpha=1.702, interleaved=True,
                              weights_transposed=True, b_gate_up=gate_up_proj_bias,
                              b_down=down_proj_bias)

  activation   "swiglu" (default): h = silu(g')·u'; "gpt_oss": h = (u' + 1)·g'·sigmoid(alpha·g')
               where g' = min(g, L), u' = clamp(u, -L, L) with L = swiglu_limit (None: no
               limit); the limit's gradient masks are inclusive (g <= L, -L <= u <= L).
  alpha        gpt_oss only: None means 1.702; a finite value > 0 otherwise; an error with
               "swiglu".
  interleaved  w_gate_up's 2I dim alternates gate and up (gate i at 2i, up i at 2i + 1, as
               gpt-oss stores gate_up_proj); default False: gate first, then up.
  weights_transposed
               w_gate_up [E, H, 2I] and w_down [E, I, H] (x·W, gpt-oss's gate_up_proj and
               down_proj); default False: [E, 2I, H] and [E, H, I]. Gradients keep the layout.
  b_gate_up, b_down
               [E, 2I] (in w_gate_up's gate/up order) and [E, H], x's dtype, both or neither:
               g and u include fc1's bias and out[t] = sum_j w[t,j]·(fc2(h) + b_down[e]).
               Differentiable like the weights.
  main_grads   with biases, four float32 buffers (g_gate_up, g_down, g_b_gate_up, g_b_down).

These calls run the custom op torch.ops.moejit.fused_moe_gated (moejit/_op.py); the 0.4 call
(swiglu, gate first, [E, 2I, H], no biases) keeps torch.ops.moejit.fused_moe_merged. Bad
arguments (an unknown activation, alpha with swiglu or <= 0, one bias without the other, a
shape or dtype that does not fit the layout) raise moejit.InvalidArgumentError naming the
argument and the expected value, before anything launches.

Megatron-style main_grad: MoEExperts(..., accumulate_into_main_grad=True), or
fused_moe(..., main_grads=(g_gate, g_up, g_down)), adds the float32 weight gradients into the
parameters' float32 `main_grad` buffers inside the backward kernels (no bf16 rounding of the
gradient, no extra add) and gives the weights no .grad (None; a dummy, as Megatron's own fused
linear layers return, for a parameter that has the `grad_added_to_main_grad` attribute, which
is then set to True).

FP8 (recipe="fp8-block", Hopper): the layer quantizes its weights on every call; inside
`with fp8_weight_cache():`, around the micro-batches of one optimizer step (the step itself
outside), each layer's weights are quantized once and reused (moejit/_fp8_weight_cache.py).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

try:
    import torch
except ImportError as _e:  # fail at the import, saying how to get it (as
    # ModuleNotFoundError, so pytest.importorskip and `except ImportError` both see a missing module)
    raise ModuleNotFoundError(f"moejit.torch needs PyTorch, which is not importable here ({_e}); "
                      "install it with: pip install moejit[torch]", name="torch") from _e
from torch import nn
from torch.autograd.function import once_differentiable

from . import _capi, _experts_op, _op, errors  # noqa: F401  (_experts_op registers its ops)
from ._op import (_plans, clear_caches, configuration, configure,  # noqa: F401  (_plans: tests)
                  saved_bytes_bound)
# The argument checks and the experts entry live in _functional (moejit.distributed uses them
# too, without importing this module).
from ._functional import (_alpha, _flag, _limit, _require_tensors,  # noqa: F401
                          experts)
from ._fp8_weight_cache import fp8_weight_cache  # noqa: F401
from .core import ACTIVATIONS, recipe_code, swiglu_alpha

__all__ = ["fused_moe", "fused_moe_merged", "MoEExperts", "clear_caches", "configuration",
           "configure",
           "fp8_weight_cache",
           "saved_bytes_bound"]

# Test hook: fill every output, the saved buffer and the workspace with NaN / 0xFF before a
# launch, so a test can prove the library wrote all of it (read by moejit._op).
_debug_poison = False

_ops = torch.ops.moejit


def _require_cuda_device(where: str, device) -> None:
    """Refuses a device moejit's kernels cannot run on, when the layer is built rather than
    at its first forward. None is the default device (as for any nn.Module: the layer may be
    built there and moved later); "meta" is deferred initialisation (.to_empty(device="cuda"))."""
    if device is None:
        return
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise errors.InvalidArgumentError(
            f"{where}: device={device!r} is not a torch device ({e})") from None
    if resolved.type not in ("cuda", "meta"):
        raise errors.InvalidArgumentError(
            f"{where}: device={device!r} is a {resolved.type} device; moejit's kernels run on "
            "CUDA devices only: device='cuda' (or 'meta' to materialise later with "
            ".to_empty(device='cuda'))")


def _megatron_weight_grad(weight: torch.Tensor) -> Optional[torch.Tensor]:
    """What a weight whose gradient went into main_grad gets as .grad: None, or, for a
    parameter with the `grad_added_to_main_grad` attribute (Megatron's DDP with overlapped
    gradient reduction), a dummy that keeps its backward hooks on the main thread, as
    Megatron's own fused linear layers do."""
    if not hasattr(weight, "grad_added_to_main_grad"):
        return None
    weight.grad_added_to_main_grad = True
    if getattr(weight, "zero_out_wgrad", False):
        return torch.zeros(weight.shape, dtype=weight.dtype, device=weight.device)
    return torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)


def _weight_names(weights: Sequence[torch.Tensor]):
    """The parameter names of the layer's weights, given merged (w_gate_up, w_down) or split
    (w_gate, w_up, w_down)."""
    return ("w_gate_up", "w_down") if len(weights) == 2 else ("w_gate", "w_up", "w_down")


def _fc1_args(weights: Sequence[torch.Tensor]):
    """The implementations' fc1 arguments (w_gate, w_up, w_gate_up) of merged or split weights."""
    return (None, None, weights[0]) if len(weights) == 2 else (weights[0], weights[1], None)


def __getattr__(name: str):
    # moejit.torch.distributed: the expert-parallel layer (moejit/distributed.py), on demand
    # (`from moejit.torch import distributed` works too; torch.py is a module, not a package).
    if name == "distributed":
        import importlib
        return importlib.import_module(".distributed", __package__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _MainGradFunction(torch.autograd.Function):
    """The layer with the weight gradients added into float32 main_grad buffers. The buffers
    are held by ctx (not save_for_backward: with interleaved micro-batches another backward
    adds into them between this forward and its backward). main_grads None: read each
    weight's .main_grad when the backward runs, as Megatron's layers do."""

    @staticmethod
    def forward(ctx, x, selected_experts, routing_weights, swiglu_limit, main_grads, *weights):
        merged = len(weights) == 2
        op = _ops.fused_moe_merged if merged else _ops.fused_moe
        out, saved = op(x, selected_experts, routing_weights, *weights, swiglu_limit)
        ctx.save_for_backward(x, selected_experts, routing_weights, *weights, saved)
        ctx.swiglu_limit = swiglu_limit
        ctx.main_grads = main_grads
        ctx.weights = weights
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        x, sel, rw, *weights, saved = ctx.saved_tensors
        main_grads = ctx.main_grads
        if main_grads is None:
            main_grads = []
            for name, w in zip(_weight_names(weights), ctx.weights):
                grad = getattr(w, "main_grad", None)
                if grad is None:
                    raise errors.InvalidArgumentError(
                        f"moejit: accumulate_into_main_grad is set but the parameter {name} "
                        f"{list(w.shape)} has no .main_grad (a float32 tensor of its shape, "
                        "which Megatron's DDP wrapper allocates)")
                main_grads.append(grad)
        op = (_ops.fused_moe_merged_backward_main_grad if len(weights) == 2 else
              _ops.fused_moe_backward_main_grad)
        dx, drw = op(dout, x, sel, rw, *weights, saved, ctx.swiglu_limit, *main_grads)
        needs = ctx.needs_input_grad
        return ((dx if needs[0] else None), None, (drw if needs[2] else None), None, None,
                *(_megatron_weight_grad(w) for w in ctx.weights))


def _recipe(where: str, recipe, main_grads=None) -> str:
    """The recipe name, checked: InvalidArgumentError (a ValueError) naming the choices."""
    recipe_code(recipe, where)
    if recipe != "bf16" and main_grads is not None:
        raise errors.InvalidArgumentError(
            f"{where}: main_grads (accumulate_into_main_grad) with recipe={recipe!r} is not "
            "supported yet; use recipe='bf16'")
    return recipe


def _fused(where: str, x, selected_experts, routing_weights, weights: Sequence[torch.Tensor],
           swiglu_limit, main_grads, recipe: str = "bf16") -> torch.Tensor:
    limit = _limit(where, swiglu_limit)
    recipe = _recipe(where, recipe, main_grads)
    merged = len(weights) == 2
    if main_grads is not None:
        main_grads = tuple(main_grads)
        if len(main_grads) != len(weights):
            raise errors.InvalidArgumentError(
                f"{where}: main_grads must hold one float32 tensor per weight "
                f"({len(weights)}), got {len(main_grads)}")
        _require_tensors(where, **{f"main_grads[{i}]": g for i, g in enumerate(main_grads)})
    if main_grads is not None:
        return _MainGradFunction.apply(x, selected_experts, routing_weights, limit, main_grads,
                                       *weights)
    op = _ops.fused_moe_merged if merged else _ops.fused_moe
    out, _ = op(x, selected_experts, routing_weights, *weights, limit, recipe)
    return out


def fused_moe(x: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor,
              w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
              swiglu_limit: Optional[float] = None, *,
              main_grads: Optional[Sequence[torch.Tensor]] = None,
              recipe: str = "bf16") -> torch.Tensor:
    """The MoE expert layer with split fc1 weights.

    x [..., H] bf16/fp16 (any leading shape); selected_experts [..., k] int32/int64 in [0, E);
    routing_weights [..., k] in x's dtype or float32; w_gate, w_up [E, I, H]; w_down [E, H, I]
    (x's dtype); all contiguous, on one CUDA device. swiglu_limit: None, or L > 0 for
    g' = min(g, L), u' = clamp(u, -L, L). Returns out [..., H]; differentiable in x,
    routing_weights and every weight.

    main_grads: None, or float32 (g_gate, g_up, g_down) of the weights' shapes: the backward
    adds the weight gradients into them in float32 (Megatron's main_grad) and the weights get
    no gradient. Bad arguments raise moejit.InvalidArgumentError, before anything launches.

    recipe (since 0.11): "bf16" (default) or "fp8-block": the forward and input-gradient GEMMs
    in FP8 e4m3 with block scales (activations 1x128, weights 128x128; sm_90a, bfloat16 x,
    H and I multiples of 128; weight gradients still bf16; the weights are quantized on every
    call). Not with main_grads yet. An unknown recipe is a ValueError naming the choices.
    """
    where = "moejit.torch.fused_moe"
    recipe = _recipe(where, recipe, main_grads)
    _require_tensors(where, x=x, selected_experts=selected_experts,
                     routing_weights=routing_weights, w_gate=w_gate, w_up=w_up, w_down=w_down)
    return _fused(where, x, selected_experts, routing_weights, (w_gate, w_up, w_down),
                  swiglu_limit, main_grads, recipe)


class _GatedMainGradFunction(torch.autograd.Function):
    """fused_moe_gated with the weight (and bias) gradients added into float32 main_grad
    buffers, as _MainGradFunction does for the 0.4 layer. options: the op's (swiglu_limit,
    activation, alpha, interleaved, weights_transposed); main_grads: (g_gate_up, g_down) or,
    with biases, (g_gate_up, g_down, g_b_gate_up, g_b_down)."""

    @staticmethod
    def forward(ctx, x, selected_experts, routing_weights, options, main_grads, w_gate_up,
                w_down, b_gate_up, b_down):
        out, saved = _ops.fused_moe_gated(x, selected_experts, routing_weights, w_gate_up,
                                          w_down, b_gate_up, b_down, *options)
        ctx.save_for_backward(x, selected_experts, routing_weights, w_gate_up, w_down,
                              b_gate_up, b_down, saved)
        ctx.options = options
        ctx.main_grads = main_grads
        ctx.params = (w_gate_up, w_down, b_gate_up, b_down)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, saved = ctx.saved_tensors
        main_grads = tuple(ctx.main_grads)
        if len(main_grads) == 2:
            main_grads += (None, None)
        dx, drw = _ops.fused_moe_gated_backward_main_grad(
            dout, x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, saved, *ctx.options,
            *main_grads)
        needs = ctx.needs_input_grad
        return ((dx if needs[0] else None), None, (drw if needs[2] else None), None, None,
                *(None if p is None else _megatron_weight_grad(p) for p in ctx.params))


def fused_moe_merged(x: torch.Tensor, selected_experts: torch.Tensor,
                     routing_weights: torch.Tensor, w_gate_up: torch.Tensor,
                     w_down: torch.Tensor, swiglu_limit: Optional[float] = None, *,
                     main_grads: Optional[Sequence[torch.Tensor]] = None,
                     activation: str = "swiglu", alpha: Optional[float] = None,
                     interleaved: bool = False, weights_transposed: bool = False,
                     b_gate_up: Optional[torch.Tensor] = None,
                     b_down: Optional[torch.Tensor] = None,
                     recipe: str = "bf16") -> torch.Tensor:
    """As fused_moe, with one fc1 weight w_gate_up [E, 2I, H] (gate rows first) and w_down
    [E, H, I]; main_grads: None or float32 (g_gate_up, g_down).

    Since 0.5 (gpt-oss and expert biases):
      activation: "swiglu" (h = silu(g')·u') or "gpt_oss" (h = (u' + 1)·g'·sigmoid(alpha·g'),
        with g' = min(g, L), u' = clamp(u, -L, L) for L = swiglu_limit, as with swiglu);
      alpha: gpt_oss only, None for 1.702 (gpt-oss's), else a finite value > 0; an error with
        swiglu;
      interleaved: w_gate_up's 2I dim alternates gate and up (gate i at 2i, up i at 2i + 1, as
        gpt-oss stores it) instead of gate first, then up;
      weights_transposed: w_gate_up [E, H, 2I] and w_down [E, I, H] (x·W, gpt-oss's layout);
      b_gate_up [E, 2I] (in w_gate_up's gate/up order) and b_down [E, H], both or neither, in
        x's dtype: g, u include fc1's bias, and out[t] = sum_j w[t,j]·(fc2(h) + b_down[e]).
    The result is differentiable in x, routing_weights, w_gate_up, w_down, b_gate_up and
    b_down; gradients have their tensor's shape and dtype. With biases, main_grads is four
    float32 tensors (g_gate_up, g_down, g_b_gate_up, g_b_down), and the biases, like the
    weights, get no .grad. gpt-oss: activation="gpt_oss", swiglu_limit=7.0, interleaved=True,
    weights_transposed=True and its biases.

    recipe: as fused_moe's; "fp8-block" with the 0.4 layer only (swiglu, gate rows first, no
    weights_transposed, no biases) for now.
    """
    where = "moejit.torch.fused_moe_merged"
    _require_tensors(where, x=x, selected_experts=selected_experts,
                     routing_weights=routing_weights, w_gate_up=w_gate_up, w_down=w_down)
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise errors.InvalidArgumentError(
            f"{where}: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got "
            f"{activation!r}")
    resolved_alpha = _alpha(where, activation, alpha)
    interleaved = _flag(where, "interleaved", interleaved)
    weights_transposed = _flag(where, "weights_transposed", weights_transposed)
    if (b_gate_up is None) != (b_down is None):
        given, missing = ("b_gate_up", "b_down") if b_down is None else ("b_down", "b_gate_up")
        raise errors.InvalidArgumentError(
            f"{where}: {given} is given but {missing} is None: pass both biases (b_gate_up "
            "[E, 2I] and b_down [E, H]) or neither")
    has_bias = b_gate_up is not None
    if has_bias:
        _require_tensors(where, b_gate_up=b_gate_up, b_down=b_down)
    recipe = _recipe(where, recipe, main_grads)
    if activation == "swiglu" and not (interleaved or weights_transposed or has_bias):
        # The 0.4 layer: its own ops, unchanged.
        return _fused(where, x, selected_experts, routing_weights, (w_gate_up, w_down),
                      swiglu_limit, main_grads, recipe)
    if recipe != "bf16":
        raise errors.InvalidArgumentError(
            f"{where}: recipe={recipe!r} supports the swiglu layer with gate rows first, no "
            "weights_transposed and no biases for now; use recipe='bf16' with these options")
    options = (_limit(where, swiglu_limit), activation, resolved_alpha, interleaved,
               weights_transposed)
    if main_grads is not None:
        main_grads = tuple(main_grads)
        expected = 4 if has_bias else 2
        if len(main_grads) != expected:
            what = ("(g_gate_up, g_down, g_b_gate_up, g_b_down) with biases" if has_bias else
                    "(g_gate_up, g_down) without biases")
            raise errors.InvalidArgumentError(
                f"{where}: main_grads must be {expected} float32 tensors {what}, got "
                f"{len(main_grads)}")
        _require_tensors(where, **{f"main_grads[{i}]": g for i, g in enumerate(main_grads)})
        return _GatedMainGradFunction.apply(x, selected_experts, routing_weights, options,
                                            main_grads, w_gate_up, w_down, b_gate_up, b_down)
    out, _ = _ops.fused_moe_gated(x, selected_experts, routing_weights, w_gate_up, w_down,
                                  b_gate_up, b_down, *options)
    return out


class _DirectFunction(torch.autograd.Function):
    """The layer as a plain autograd.Function over the ops' implementations, without the
    dispatcher (the binding before the custom ops); `python -m moejit_bench --impls
    moejit-direct` measures what the op dispatch costs. Not traceable by torch.compile."""

    @staticmethod
    def forward(ctx, x, selected_experts, routing_weights, swiglu_limit, *weights):
        out, saved = _op._forward("moejit.torch", x, selected_experts, routing_weights,
                                  *_fc1_args(weights), weights[-1], swiglu_limit)
        ctx.save_for_backward(x, selected_experts, routing_weights, *weights, saved)
        ctx.swiglu_limit = swiglu_limit
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        x, sel, rw, *weights, saved = ctx.saved_tensors
        dx, drw, grads = _op._backward("moejit.torch", dout, x, sel, rw, *_fc1_args(weights),
                                       weights[-1], saved, ctx.swiglu_limit)
        # The call spent `saved` (0.12). The custom ops' dispatcher bumps its version for them;
        # here nothing does, so a second backward (retain_graph) would read the spent bytes.
        torch.autograd.graph.increment_version(saved)
        return (dx, None, drw, None, *(grads[n] for n in _weight_names(weights)))


def _fused_direct(x, selected_experts, routing_weights, w_gate=None, w_up=None,
                  w_gate_up=None, w_down=None, swiglu_limit=None) -> torch.Tensor:
    weights = (w_gate_up, w_down) if w_gate_up is not None else (w_gate, w_up, w_down)
    return _DirectFunction.apply(x, selected_experts, routing_weights,
                                 _limit("moejit.torch", swiglu_limit), *weights)


class MoEExperts(nn.Module):
    """The experts of an MoE layer (SwiGLU MLPs) as one fused op. The router stays outside:
    forward(x [..., H], selected_experts [..., k], routing_weights [..., k]) -> [..., H].

    accumulate_into_main_grad=True (Megatron-style training): the backward adds float32 weight
    gradients into each parameter's `main_grad` (a float32 tensor of its shape that the
    training framework allocates, e.g. Megatron's DDP wrapper), read when the backward runs;
    the parameters' .grad stays None (or Megatron's dummy when the parameter has the
    `grad_added_to_main_grad` attribute).

    recipe (since 0.11): "bf16" (default) or "fp8-block" (fused_moe's FP8 block-scaled
    recipe); not with accumulate_into_main_grad yet. An unknown recipe is a ValueError."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, *,
                 merged: bool = False, swiglu_limit: Optional[float] = None,
                 accumulate_into_main_grad: bool = False, recipe: str = "bf16",
                 device=None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.recipe = _recipe("MoEExperts", recipe,
                              main_grads=() if accumulate_into_main_grad else None)
        for name, value in (("num_experts", num_experts), ("hidden_size", hidden_size),
                            ("intermediate_size", intermediate_size)):
            if not isinstance(value, int) or value < 1:
                raise errors.InvalidArgumentError(
                    f"MoEExperts: {name} must be a positive int, got {value!r}")
        _require_cuda_device("MoEExperts", device)
        factory = {"device": device, "dtype": dtype or torch.bfloat16}
        self.num_experts = num_experts
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.merged = merged
        self.swiglu_limit = swiglu_limit
        self.accumulate_into_main_grad = bool(accumulate_into_main_grad)
        E, H, I = num_experts, hidden_size, intermediate_size
        if merged:
            self.w_gate_up = nn.Parameter(torch.empty(E, 2 * I, H, **factory))
        else:
            self.w_gate = nn.Parameter(torch.empty(E, I, H, **factory))
            self.w_up = nn.Parameter(torch.empty(E, I, H, **factory))
        self.w_down = nn.Parameter(torch.empty(E, H, I, **factory))
        self.reset_parameters()

    def _weights(self):
        return ((self.w_gate_up, self.w_down) if self.merged else
                (self.w_gate, self.w_up, self.w_down))

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
        where = "MoEExperts"
        weights = self._weights()
        if self.accumulate_into_main_grad:
            _require_tensors(where, x=x, selected_experts=selected_experts,
                             routing_weights=routing_weights)
            return _MainGradFunction.apply(x, selected_experts, routing_weights,
                                           _limit(where, self.swiglu_limit), None, *weights)
        if self.merged:
            return fused_moe_merged(x, selected_experts, routing_weights, *weights,
                                    self.swiglu_limit, recipe=self.recipe)
        return fused_moe(x, selected_experts, routing_weights, *weights, self.swiglu_limit,
                         recipe=self.recipe)

    def extra_repr(self) -> str:
        limit = f", swiglu_limit={self.swiglu_limit}" if self.swiglu_limit else ""
        main = ", accumulate_into_main_grad" if self.accumulate_into_main_grad else ""
        recipe = f", recipe={self.recipe!r}" if self.recipe != "bf16" else ""
        return (f"num_experts={self.num_experts}, hidden_size={self.hidden_size}, "
                f"intermediate_size={self.intermediate_size}, "
                f"{'merged' if self.merged else 'split'}{limit}{main}{recipe}")
