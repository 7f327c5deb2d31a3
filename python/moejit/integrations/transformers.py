"""moejit as an experts backend of Hugging Face transformers (>= 5, the ExpertsInterface).

    import moejit.integrations.transformers
    moejit.integrations.transformers.register()
    model = AutoModelForCausalLM.from_config(cfg, experts_implementation="moejit")

register() adds "moejit" and "moejit_fp8" to transformers' ExpertsInterface (idempotent;
nothing happens on import). "moejit_fp8" is the same backend with every GEMM in FP8
(moejit.torch's recipe="fp8-block": bf16 modules, H and I multiples of 128, the plain SwiGLU
layout on sm_90a); a module the FP8 recipe does not cover runs the bf16 "moejit" path, with one
warning naming why. Every experts module decorated with transformers' @use_experts_implementation then
runs its forward and backward through moejit's fused layer (torch.ops.moejit.*, custom ops,
so torch.compile traces them) on the parameters the module already holds: no copy, transpose
or .contiguous() of a weight, ever.

Mapping:
  * Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE, DeepSeek-V3 (its routed experts; the router and the
    shared experts stay in the model), and any experts class with the same contract
    (gate_up_proj [E, 2I, H] gate rows first, down_proj [E, H, I], no bias, silu gate):
    moejit.torch.fused_moe_merged(x, top_k_index, top_k_weights, gate_up_proj, down_proj).
  * gpt-oss (interleaved gate/up columns, transposed weights [E, H, 2I] / [E, I, H], biases,
    alpha 1.702, limit 7): the extended fused_moe_merged(..., activation="gpt_oss", alpha,
    interleaved=True, weights_transposed=True, b_gate_up, b_down), where the installed moejit
    has it (detected from its signature); else the eager forward.

What the module computes is proven from the module itself, never from its config: the gate
function must be the very function transformers (or gpt-oss) defines, the activation the
default gate calls the very ACT2FN["silu"] / ACT2FN["swish"] classes with their own forward and
no hook, or torch.nn.functional.silu; has_gate / has_bias / is_transposed / is_concatenated
bools set by @use_experts_implementation; gpt-oss's alpha and limit finite reals (limit > 0).
Anything moejit cannot compute exactly or cannot prove (another activation, no gate, a custom
gate, a flag that is not a bool, fp32 or
any dtype but bf16/fp16, tensors not on a CUDA device, H or I not a multiple of 8, weights
that are not dense row-major, a layout the installed moejit lacks, ...) runs the module's own
eager forward instead, with one warning per reason on the "moejit.integrations.transformers"
logger. Expert ids outside [0, E) (expert-parallel sentinels) are dropped routes that add
nothing, as in transformers' grouped_mm backend.
"""

from __future__ import annotations

import inspect
import logging
import math
import sys
from typing import Optional, Tuple, Union

try:
    import torch
except ImportError as _e:  # fail at the import, saying how to get it (as
    # ModuleNotFoundError, so pytest.importorskip and `except ImportError` both see a missing module)
    raise ModuleNotFoundError(f"moejit.integrations.transformers needs PyTorch, which is not importable "
                      f"here ({_e}); install it with: pip install moejit[transformers]", name="torch") from _e

__all__ = ["register", "is_registered", "moejit_experts_forward", "moejit_fp8_experts_forward",
           "NAME", "FP8_NAME"]

NAME = "moejit"
FP8_NAME = "moejit_fp8"  # the same backend, recipe="fp8-block"

logger = logging.getLogger(__name__)

# Reasons already warned about (one warning per reason per process).
_warned: set = set()
# Whether the installed moejit.torch.fused_moe_merged takes the extended (0.5) arguments:
# activation, alpha, interleaved, weights_transposed, b_gate_up, b_down. Set by register().
_extended_api: Optional[bool] = None
_EXTENDED_PARAMS = ("activation", "alpha", "interleaved", "weights_transposed", "b_gate_up",
                    "b_down")
_FLOAT_DTYPES = (torch.bfloat16, torch.float16)
_INDEX_DTYPES = (torch.int32, torch.int64)
# moejit reads x and the weights with 16-byte vector loads.
_ALIGNMENT_BYTES = 16


def _fused_moe_merged():
    from .. import torch as mt
    return mt.fused_moe_merged


def _detect_extended_api() -> bool:
    try:
        params = inspect.signature(_fused_moe_merged()).parameters
    except (TypeError, ValueError):
        return False
    return all(name in params for name in _EXTENDED_PARAMS)


def _set_extended_api() -> None:
    global _extended_api
    _extended_api = _detect_extended_api()


def register() -> None:
    """Adds experts_implementation="moejit" to transformers (ExpertsInterface's class-wide
    mapping, so every model and every ExpertsInterface instance sees it). Idempotent. Raises
    ImportError with a clear message when transformers (>= 5, with the ExpertsInterface) is
    not installed."""
    try:
        from transformers.integrations import moe as hf_moe
    except ImportError as e:
        raise ImportError(
            "moejit.integrations.transformers.register() needs Hugging Face transformers >= 5 "
            f"(transformers.integrations.moe.ExpertsInterface): {e}") from e
    interface = getattr(hf_moe, "ExpertsInterface", None)
    if interface is None:
        raise ImportError(
            "moejit.integrations.transformers.register(): this transformers has no "
            "ExpertsInterface (transformers.integrations.moe); transformers >= 5 is required")
    _set_extended_api()
    for name, forward in ((NAME, moejit_experts_forward), (FP8_NAME, moejit_fp8_experts_forward)):
        if interface._global_mapping.get(name) is not forward:
            interface.register(name, forward)


def is_registered() -> bool:
    """Whether "moejit" is in transformers' ExpertsInterface (False without transformers)."""
    try:
        from transformers.integrations import moe as hf_moe
    except ImportError:
        return False
    return (hf_moe.ALL_EXPERTS_FUNCTIONS.get(NAME) is moejit_experts_forward
            and hf_moe.ALL_EXPERTS_FUNCTIONS.get(FP8_NAME) is moejit_fp8_experts_forward)


# ------------------------------------------------------------------ helpers (tests patch some)


def _device_supported(tensor: torch.Tensor) -> bool:
    """Where moejit's kernels run: CUDA tensors."""
    return tensor.device.type == "cuda"


def _warn_once(reason: str, message: str, instead: str = "its eager forward") -> None:
    if reason in _warned:
        return
    _warned.add(reason)
    logger.warning("moejit experts backend: %s; this experts module runs %s instead (warned "
                   "once per reason)", message, instead)


def _eager_forward(module: torch.nn.Module):
    """The experts class's own forward (the one @use_experts_implementation wrapped)."""
    for cls in type(module).__mro__:
        forward = cls.__dict__.get("forward")
        if forward is None:
            continue
        original = getattr(forward, "__wrapped__", None)
        if original is not None:
            return original
    raise TypeError(
        f"moejit experts backend: {type(module).__name__} has no forward wrapped by "
        "transformers' @use_experts_implementation, so there is no eager forward to fall back "
        "to")


# ------------------------------------------------------------------ what the module computes
#
# moejit computes the module's experts only when everything the module's gate reads is proven
# from the module itself: the gate function, the activation it calls, every flag. A config
# entry (config.hidden_act) is not proof: a module may hold another activation than its config
# names (issue 29: GELU-tanh computed as SiLU). Anything not proven runs the eager forward.

# The gate functions moejit knows, by (module, qualified name) of the function object.
_DEFAULT_GATE = ("transformers.integrations.moe", "_default_apply_gate")
_GPT_OSS_GATE = ("transformers.models.gpt_oss.modeling_gpt_oss", "GptOssExperts._apply_gate")
# The activation modules that compute exactly torch.nn.functional.silu, by (module, class
# name) with the forward each must still have: transformers' ACT2FN["silu"] (SiLUActivation)
# and ACT2FN["swish"] (torch.nn.SiLU).
_SILU_MODULES = (("transformers.activations", "SiLUActivation"),
                 ("torch.nn.modules.activation", "SiLU"))
# The hook dictionaries nn.Module.__call__ consults on an instance.
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
               "_backward_pre_hooks")
# The flags transformers' @use_experts_implementation sets on every instance; each must be
# there as a bool.
_FLAGS = ("has_gate", "has_bias", "is_transposed", "is_concatenated")

_gate_cache: dict = {}


@torch._dynamo.assume_constant_result
def _defined_as(fn, where: Tuple[str, str]) -> bool:
    """Whether fn is the function object `where` names (module attribute path), not a
    replacement that merely carries the name. Evaluated outside torch.compile's tracing."""
    if getattr(fn, "__module__", None) != where[0] or getattr(fn, "__qualname__", None) != where[1]:
        return False
    mod = sys.modules.get(where[0])
    obj = mod
    for part in where[1].split("."):
        obj = getattr(obj, part, None) if not isinstance(obj, type) else obj.__dict__.get(part)
    return obj is fn


@torch._dynamo.assume_constant_result
def _class_gate(cls: type) -> str:
    """The experts class's gating function: "default" (transformers' own, gate, up =
    chunk(2) and act_fn(gate) * up), "gpt_oss" (gpt-oss's own), or the name of a function
    moejit does not know. Evaluated once per class, outside torch.compile's tracing (a constant
    in the graph)."""
    kind = _gate_cache.get(cls)
    if kind is None:
        gate = getattr(cls, "_apply_gate", None)
        if _defined_as(gate, _DEFAULT_GATE):
            kind = "default"
        elif _defined_as(gate, _GPT_OSS_GATE):
            kind = "gpt_oss"
        else:
            kind = getattr(gate, "__qualname__", None) or repr(gate)
            if kind in ("default", "gpt_oss"):
                kind = repr(gate)
        _gate_cache[cls] = kind
    return kind


def _hooked(module: torch.nn.Module) -> bool:
    """Whether calling the module runs a hook (its own or a global one) around its forward."""
    from torch.nn.modules import module as nn_module
    if any(getattr(module, name, None) for name in _HOOK_DICTS):
        return True
    return bool(nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks)


def _silu_module(act) -> bool:
    """Whether act is exactly one of _SILU_MODULES: that very class (no subclass), its forward
    the class's own (not replaced on the class or the instance), no hook."""
    cls = type(act)
    for module_name, class_name in _SILU_MODULES:
        known = getattr(sys.modules.get(module_name), class_name, None)
        if known is None or cls is not known:
            continue
        if not _defined_as(cls.__dict__.get("forward"), (cls.__module__,
                                                          f"{class_name}.forward")):
            return False
        if "forward" in act.__dict__ or "__call__" in act.__dict__:
            return False
        return not _hooked(act)
    return False


def _activation_is_silu(module: torch.nn.Module) -> Optional[str]:
    """None when the module's act_fn provably computes torch.nn.functional.silu, else why
    not."""
    act = getattr(module, "act_fn", None)
    if act is torch.nn.functional.silu:
        return None
    if isinstance(act, torch.nn.Module) and _silu_module(act):
        return None
    config = getattr(module, "config", None)
    named = getattr(config, "hidden_act", None)
    what = "no act_fn" if act is None else f"the activation {act!r}"
    return (f"{type(module).__name__} calls {what} (config.hidden_act={named!r}), which is not "
            "provably SiLU; moejit's SwiGLU needs act_fn to be transformers' ACT2FN['silu'] / "
            "ACT2FN['swish'] (unchanged, no hook) or torch.nn.functional.silu")


def _module_flags(module: torch.nn.Module) -> Union[dict, Tuple[str, str]]:
    """{flag: bool} of _FLAGS, or (reason, message) when one is missing or not a bool."""
    flags = {}
    for flag in _FLAGS:
        value = getattr(module, flag, None)
        if type(value) is not bool:
            return ("flags", f"{type(module).__name__}.{flag} is {value!r}, not a bool that "
                             "transformers' @use_experts_implementation sets; moejit cannot "
                             "tell the experts' layout")
        flags[flag] = value
    return flags


def _finite_real(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _gate_kind(module: torch.nn.Module, flags: dict) -> Union[str, Tuple[str, str]]:
    """"swiglu", "gpt_oss", or (reason, message) when moejit does not compute this gate."""
    name = type(module).__name__
    if not flags["has_gate"]:
        return ("no_gate", f"{name} has no gate (has_gate=False: act(up) experts); moejit "
                           "computes gated (SwiGLU) experts only")
    if "_apply_gate" in module.__dict__:
        return ("custom_gate", f"{name} has a gating function of its own set on the instance, "
                               "which moejit does not know")
    gate = _class_gate(type(module))
    if gate == "gpt_oss":
        alpha, limit = getattr(module, "alpha", None), getattr(module, "limit", None)
        if not (_finite_real(alpha) and _finite_real(limit) and limit > 0):
            return ("gate_parameters", f"{name} has gpt-oss's gate but alpha={alpha!r}, "
                                       f"limit={limit!r}; moejit needs a finite real alpha "
                                       "and a finite real limit > 0")
        if flags["is_concatenated"]:
            return ("layout", f"{name} has gpt-oss's gate, which reads gate and up "
                              "interleaved, but is_concatenated=True; the layout is ambiguous")
        return "gpt_oss"
    if gate != "default":
        return ("custom_gate", f"{name} has its own gating function ({gate}), which moejit "
                               "does not know")
    why = _activation_is_silu(module)
    if why is not None:
        return ("activation", why)
    return "swiglu"


def _aligned(tensor: torch.Tensor) -> bool:
    # The allocator's base pointers are aligned; a view's storage offset may not be. Under
    # torch.compile the offset is not traceable: the op checks the address when it runs and
    # raises a clear error for a misaligned one.
    if torch.compiler.is_compiling():
        return True
    return (tensor.storage_offset() * tensor.element_size()) % _ALIGNMENT_BYTES == 0


def _prepare(module, hidden_states, top_k_index, top_k_weights):
    """(kind, x, sel, rw, weight kwargs) for a moejit call, or (reason, message)."""
    flags = _module_flags(module)
    if isinstance(flags, tuple):
        return flags
    kind = _gate_kind(module, flags)
    if isinstance(kind, tuple):
        return kind
    transposed = flags["is_transposed"]
    interleaved = not flags["is_concatenated"]
    has_bias = flags["has_bias"]
    name = type(module).__name__
    if not has_bias and any(getattr(module, b, None) is not None
                            for b in ("gate_up_proj_bias", "down_proj_bias")):
        return ("flags", f"{name} holds expert biases but has_bias=False; whether its forward "
                         "adds them is not provable")
    needs_extended = kind == "gpt_oss" or transposed or interleaved or has_bias
    if needs_extended and _extended_api is None:
        _set_extended_api()  # registered by hand, without register()
    if needs_extended and not _extended_api:
        return ("layout", f"{name} needs "
                f"{'the gpt-oss activation, ' if kind == 'gpt_oss' else ''}"
                f"{'interleaved gate/up, ' if interleaved else ''}"
                f"{'transposed weights, ' if transposed else ''}"
                f"{'expert biases, ' if has_bias else ''}"
                "which the installed moejit.torch.fused_moe_merged does not take (moejit >= 0.5 "
                "with activation=, interleaved=, weights_transposed=, b_gate_up=, b_down=)")
    if kind == "swiglu" and interleaved:
        return ("layout", f"{name} stores gate and up interleaved with a SwiGLU gate that "
                          "splits them in halves; the layout is ambiguous")
    w1 = getattr(module, "gate_up_proj", None)
    w2 = getattr(module, "down_proj", None)
    if not isinstance(w1, torch.Tensor) or not isinstance(w2, torch.Tensor):
        return ("weights", f"{name} has no gate_up_proj / down_proj tensors")
    b1 = getattr(module, "gate_up_proj_bias", None) if has_bias else None
    b2 = getattr(module, "down_proj_bias", None) if has_bias else None
    if has_bias and (not isinstance(b1, torch.Tensor) or not isinstance(b2, torch.Tensor)):
        return ("weights", f"{name} has has_bias=True but no gate_up_proj_bias / down_proj_bias")

    x = hidden_states
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        return ("shape", f"{name} got hidden_states that are not a [..., H] tensor")
    sel, rw = top_k_index, top_k_weights
    if not isinstance(sel, torch.Tensor) or not isinstance(rw, torch.Tensor) or sel.dim() < 1:
        return ("shape", f"{name} got routing that is not [..., k] tensors")
    tensors = [x, w1, w2] + ([b1, b2] if has_bias else [])
    if not all(_device_supported(t) for t in tensors + [sel, rw]):
        return ("device", f"{name} runs on {x.device} (weights on {w1.device}); moejit's "
                          "kernels run on CUDA devices only")
    if x.dtype not in _FLOAT_DTYPES:
        return ("dtype", f"{name} gets {x.dtype} hidden states; moejit computes bfloat16 and "
                         "float16")
    if any(t.dtype != x.dtype for t in tensors):
        return ("dtype", f"{name}'s weights ({w1.dtype}) and hidden states ({x.dtype}) differ "
                         "in dtype (autocast?); moejit needs one dtype and copies no weight")
    if w1.dim() != 3 or w2.dim() != 3:
        return ("shape", f"{name}'s expert weights are not 3-D")
    hidden = x.shape[-1]
    experts = w1.shape[0]
    if hidden < 1:
        return ("shape", f"{name} got hidden states of shape {list(x.shape)}")
    if transposed:
        h1, two_i = w1.shape[1], w1.shape[2]
        inter, h2 = w2.shape[1], w2.shape[2]
    else:
        two_i, h1 = w1.shape[1], w1.shape[2]
        h2, inter = w2.shape[1], w2.shape[2]
    if (h1 != hidden or h2 != hidden or two_i != 2 * inter or w2.shape[0] != experts
            or getattr(module, "num_experts", experts) != experts):
        return ("shape", f"{name}'s weights gate_up_proj {list(w1.shape)}, down_proj "
                         f"{list(w2.shape)} do not match hidden size {hidden}")
    if has_bias and (tuple(b1.shape) != (experts, 2 * inter)
                     or tuple(b2.shape) != (experts, hidden)):
        return ("shape", f"{name}'s biases {list(b1.shape)}, {list(b2.shape)} are not "
                         f"[E, 2I] = [{experts}, {2 * inter}] and [E, H] = [{experts}, {hidden}]")
    if hidden % 8 or inter % 8:
        return ("alignment", f"{name} has H={hidden}, I={inter}; moejit needs both to be "
                             "multiples of 8")
    if not all(t.is_contiguous() and _aligned(t) for t in tensors[1:]):
        return ("weights", f"{name}'s expert weights are not dense row-major 16-byte aligned "
                           "tensors (a transposed or offset view?); moejit copies no weight")

    # Routing: [..., k] with x's leading dims (flattened here), ids int32/int64 (others are
    # widened), weights in x's dtype or float32 (others go to float32).
    k = sel.shape[-1]
    if tuple(rw.shape) != tuple(sel.shape) or sel.numel() != (x.numel() // hidden) * k:
        return ("shape", f"{name} got top_k_index {list(sel.shape)} and top_k_weights "
                         f"{list(rw.shape)} for hidden states {list(x.shape)}")
    if sel.dtype not in _INDEX_DTYPES:
        if sel.dtype.is_floating_point or sel.dtype == torch.bool:
            return ("routing", f"{name} got top_k_index of dtype {sel.dtype}")
        sel = sel.to(torch.int64)
    if rw.dtype != x.dtype and rw.dtype != torch.float32:
        if not rw.dtype.is_floating_point:
            return ("routing", f"{name} got top_k_weights of dtype {rw.dtype}")
        rw = rw.to(torch.float32)
    x = x.reshape(-1, hidden)
    if not x.is_contiguous():
        x = x.contiguous()
    if not _aligned(x):
        x = x.clone()
    sel = sel.reshape(-1, k)
    if not sel.is_contiguous():
        sel = sel.contiguous()
    rw = rw.reshape(-1, k)
    if not rw.is_contiguous():
        rw = rw.contiguous()
    weights = {"w_gate_up": w1, "w_down": w2}
    if needs_extended:
        weights.update(activation=kind, interleaved=interleaved, weights_transposed=transposed,
                       b_gate_up=b1, b_down=b2)
        if kind == "gpt_oss":
            weights.update(alpha=float(module.alpha), swiglu_limit=float(module.limit))
    return kind, x, sel, rw, weights


def _fp8_refusal(kind: str, x: torch.Tensor, weights: dict) -> Optional[str]:
    """Why the FP8 recipe cannot take a call _prepare accepted (None: it can). The binding's own
    scope first (its FP8 path is the plain SwiGLU op), then the library's word on the layer's
    descriptor with recipe "fp8-block" (dtype, H and I; core.validate_plan_desc), then the
    device's arch."""
    if kind != "swiglu" or len(weights) != 2:
        return "the FP8 recipe computes plain SwiGLU experts (no gpt-oss activation, biases, " \
               "interleaved or transposed weights)"
    from moejit import core, errors  # the package, loaded by now
    w_down = weights["w_down"]
    try:
        core.validate_plan_desc(dtype=str(x.dtype).replace("torch.", ""), hidden_size=int(x.shape[-1]),
                                intermediate_size=int(w_down.shape[-1]),
                                num_experts=int(w_down.shape[0]), top_k=1, merged=True,
                                recipe="fp8-block")
    except errors.MoejitError as e:
        return str(e).splitlines()[0]
    if x.is_cuda and torch.cuda.get_device_capability(x.device) != (9, 0):
        major, minor = torch.cuda.get_device_capability(x.device)
        return f"the FP8 recipe runs on sm_90a (Hopper) devices; {x.device} is sm_{major}{minor}"
    return None


def moejit_fp8_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor,
                               top_k_index: Optional[torch.Tensor] = None,
                               top_k_weights: Optional[torch.Tensor] = None,
                               **kwargs) -> torch.Tensor:
    """The "moejit_fp8" entry: as "moejit", with recipe="fp8-block" where the recipe covers the
    module; otherwise the bf16 "moejit" path, with one warning per reason."""
    return moejit_experts_forward(self, hidden_states, top_k_index, top_k_weights,
                                  _recipe="fp8-block", **kwargs)


def moejit_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor,
                           top_k_index: Optional[torch.Tensor] = None,
                           top_k_weights: Optional[torch.Tensor] = None,
                           _recipe: str = "bf16", **kwargs) -> torch.Tensor:
    """The "moejit" entry of transformers' ExpertsInterface: an experts module's forward
    (hidden_states [..., H], top_k_index [..., k], top_k_weights [..., k]) -> [..., H]."""
    # gpt-oss names its routing arguments router_indices / routing_weights.
    if top_k_index is None:
        top_k_index = kwargs.pop("router_indices", None)
    if top_k_weights is None:
        top_k_weights = kwargs.pop("routing_weights", None)
    if kwargs:
        raise TypeError(f"moejit experts backend: unexpected arguments {sorted(kwargs)}")
    call = _prepare(self, hidden_states, top_k_index, top_k_weights)
    if len(call) == 2:
        _warn_once(*call)
        return _eager_forward(self)(self, hidden_states, top_k_index, top_k_weights)
    kind, x, sel, rw, weights = call
    if _recipe != "bf16":
        why = _fp8_refusal(kind, x, weights)
        if why is None:
            weights = dict(weights, recipe=_recipe)
        else:
            _warn_once("fp8: " + why, f"{type(self).__name__}: {why}", "moejit's bf16 recipe")
    out = _fused_moe_merged()(x, sel, rw, **weights)
    return out.view(hidden_states.shape)
