"""Python objects over the C handles: Context, Plan, warmup(). No framework dependency:
tensors are device pointers (ints) or anything with data_ptr()."""

from __future__ import annotations

import ctypes
import math
import numbers
import sys
from ctypes import byref, c_char_p, c_int, c_size_t, c_uint32, c_void_p
from typing import Callable, Dict, NamedTuple, Optional, Union

from . import _capi, _logging, errors

DType = Union[int, str, object]

_JIT_MODES = {None: _capi.JIT_FROM_ENV, "env": _capi.JIT_FROM_ENV, True: _capi.JIT_ON,
              "on": _capi.JIT_ON, False: _capi.JIT_OFF, "off": _capi.JIT_OFF}
# moejit_switch_t (since 0.6): None / "env" = the MOEJIT_* variable, else the library's default.
_SWITCHES = {None: _capi.SWITCH_FROM_ENV, "env": _capi.SWITCH_FROM_ENV, True: _capi.SWITCH_ON,
             "on": _capi.SWITCH_ON, False: _capi.SWITCH_OFF, "off": _capi.SWITCH_OFF}


def _switch(name: str, value) -> int:
    if isinstance(value, bool) or value is None or value in ("env", "on", "off"):
        return _SWITCHES[value]
    raise errors.InvalidArgumentError(
        f"{name} must be None (the environment, else the default), True/'on' or False/'off', "
        f"got {value!r}")


def _describe(call) -> Dict[str, str]:
    """A moejit_plan_describe-style call (buf, size, required) as {key: value}."""
    need = c_size_t()
    _capi.check(call(None, 0, byref(need)))
    buf = ctypes.create_string_buffer(need.value)
    _capi.check(call(buf, need.value, byref(need)))
    out: Dict[str, str] = {}
    for line in buf.value.decode().splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def library_version() -> str:
    """moejit_version() of the loaded library."""
    return _capi.lib().moejit_version().decode()


def library_version_number() -> int:
    return int(_capi.lib().moejit_version_number())


class NvrtcVersion(NamedTuple):
    """The NVRTC version the library loaded, as (major, minor): compares and prints like a
    plain tuple, (13, 0) >= (12, 8); int() of it is the C ABI's major * 100 + minor."""
    major: int
    minor: int

    def __int__(self) -> int:
        return self.major * 100 + self.minor

    def __repr__(self) -> str:
        return tuple.__repr__(self)


def nvrtc_version_number() -> int:
    """moejit_nvrtc_version(): NVRTC's version as major * 100 + minor (1300 for 13.0), what
    nvrtc_version() returned before 0.10."""
    v = c_int()
    _capi.check(_capi.lib().moejit_nvrtc_version(byref(v)))
    return v.value


def nvrtc_version() -> NvrtcVersion:
    """NVRTC's version as (major, minor), e.g. (13, 0). Since 0.10 (before: the int 1300,
    now nvrtc_version_number() or int(nvrtc_version()))."""
    return NvrtcVersion(*divmod(nvrtc_version_number(), 100))


def _finalizing() -> bool:
    return sys is None or sys.is_finalizing()


class _OwnedHandle:
    """An owned C handle: `handle` while open, close() (idempotent, also on garbage collection
    and at `with` exit) calls the C destroy function named by `_destroy`."""

    _destroy = ""  # the moejit_*_destroy function
    _what = ""     # for the "closed" error

    _handle: Optional[int] = None

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise errors.InvalidArgumentError(f"the moejit {self._what} is closed")
        return self._handle

    def close(self) -> None:
        if self._handle is not None and not _finalizing():
            getattr(_capi.lib(), self._destroy)(self._handle)
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Context(_OwnedHandle):
    """A moejit context: one CUDA device (its primary context) or compile-only, and its JIT
    cache. `log` receives (level, message) for warnings and compile logs; None (the default)
    sends them to Python's logging, logger "moejit" (moejit/_logging.py); False drops them.

    The configuration (since 0.6; moejit.h, "configuration") is fixed when the context is
    created: `tune`, `gather` and `fuse_swiglu` are None (their MOEJIT_* environment variable,
    else the library's default), True/'on' or False/'off'; `gemm_tile` forces one grouped-GEMM
    tile (None: $MOEJIT_GEMM_TILE, else the heuristic; "": the heuristic). describe_plan() says
    what a plan would resolve."""

    _destroy, _what = "moejit_context_destroy", "context"

    def __init__(self, *, device_ordinal: int = 0, arch: Optional[str] = None,
                 cache_dir: Optional[str] = None, jit: Union[None, bool, str] = None,
                 compile_only: bool = False,
                 log: Union[None, bool, Callable[[int, str], None]] = None,
                 tune: Union[None, bool, str] = None, gather: Union[None, bool, str] = None,
                 fuse_swiglu: Union[None, bool, str] = None,
                 gemm_tile: Optional[str] = None) -> None:
        self._handle: Optional[int] = None
        if jit not in _JIT_MODES:
            raise errors.InvalidArgumentError(f"jit must be None, 'env', 'on' or 'off', got {jit!r}")
        switches = {name: _switch(name, value) for name, value in
                    (("tune", tune), ("gather", gather), ("fuse_swiglu", fuse_swiglu))}
        if gemm_tile is not None and not isinstance(gemm_tile, str):
            raise errors.InvalidArgumentError(
                f"gemm_tile must be None (the environment, else the heuristic) or a tile name "
                f"('' for the heuristic), got {gemm_tile!r}")
        if not isinstance(device_ordinal, int) or device_ordinal < 0:
            raise errors.InvalidArgumentError(
                f"device_ordinal must be a non-negative int, got {device_ordinal!r}")
        options = _capi.init_struct(_capi.ContextOptions)
        # The library copies the strings; keeping the bytes here is only belt and braces.
        self._keep = [s.encode() if s is not None else None for s in (cache_dir, arch, gemm_tile)]
        options.cache_dir = self._keep[0]
        options.arch = self._keep[1]
        options.gemm_tile = self._keep[2]
        for name, value in switches.items():
            setattr(options, name, value)
        options.device_ordinal = device_ordinal
        options.jit_mode = _JIT_MODES[jit]
        options.compile_only = 1 if compile_only else 0
        if log is None or log is True:
            log = _logging.to_python_logging
        if log is not False and not callable(log):
            raise errors.InvalidArgumentError(
                f"log must be None (Python logging), False (silent) or a callable, got {log!r}")
        self._log_fn = (_capi.moejit_log_fn(_log_trampoline(log)) if log is not False
                        else _capi.moejit_log_fn())
        options.log_fn = self._log_fn
        handle = c_void_p()
        try:
            _capi.check(_capi.lib().moejit_context_create(byref(options), byref(handle)))
        except errors.NoDriverError as e:
            if compile_only:
                raise
            raise errors.NoDriverError(_no_driver_hint(e.message, arch), e.status,
                                       e.status_name) from None
        self._handle = handle.value
        self.device_ordinal = device_ordinal
        self.compile_only = bool(compile_only)

    @property
    def arch(self) -> str:
        out = c_char_p()
        _capi.check(_capi.lib().moejit_context_arch(self.handle, byref(out)))
        return out.value.decode()

    @property
    def cache_dir(self) -> str:
        out = c_char_p()
        _capi.check(_capi.lib().moejit_context_cache_dir(self.handle, byref(out)))
        return (out.value or b"").decode()

    def describe_plan(self, **desc) -> Dict[str, str]:
        """What a plan of `desc` (keyword arguments as for plan_desc()) would resolve on this
        context, without making it (moejit_plan_describe_desc; works compile-only): keys arch,
        jit, tune, gather, fuse_swiglu, gemm_tile (each with a <key>_from: option, environment
        or default) and tile_<role> per grouped GEMM."""
        d = plan_desc(**desc)
        return _describe(lambda buf, size, need: _capi.lib().moejit_plan_describe_desc(
            self.handle, byref(d), buf, size, need))

    def cache_stats(self) -> Dict[str, float]:
        stats = _capi.init_struct(_capi.CacheStats)
        _capi.check(_capi.lib().moejit_context_cache_stats(self.handle, byref(stats)))
        return {name: getattr(stats, name) for name, _ in stats._fields_ if name != "struct_size"}

    def device_errors(self, clear: bool = True) -> int:
        """The context's device error word (moejit_context_device_errors): a mask of
        _capi.DEVICE_ERROR_* bits set by kernels that bounded bad device data (e.g. experts
        offsets) instead of faulting; 0 when none. Synchronises the device; clear zeroes it."""
        errors = c_uint32()
        _capi.check(_capi.lib().moejit_context_device_errors(self.handle, int(bool(clear)), byref(errors)))
        return errors.value

    def __repr__(self) -> str:
        if self._handle is None:
            return "<moejit.Context closed>"
        what = "compile-only" if self.compile_only else f"device {self.device_ordinal}"
        return f"<moejit.Context {what} arch={self.arch}>"


def _no_driver_hint(message: str, arch: Optional[str]) -> str:
    """The library's no-driver message with how to go on without a GPU."""
    target = arch or "sm_90a"
    return (f"{message}; without a GPU, compile (and fill the disk cache) with "
            f"moejit.Context(compile_only=True, arch={target!r})")


def _log_trampoline(log: Callable[[int, str], None]):
    def trampoline(level, message, _user):
        try:
            log(int(level), (message or b"").decode("utf-8", "replace"))
        except Exception:  # an exception may not unwind into C
            pass
    return trampoline


ACTIVATIONS = {"swiglu": _capi.ACTIVATION_SWIGLU, "gpt_oss": _capi.ACTIVATION_GPT_OSS}
# moejit_recipe_t (since 0.11): the layer's GEMM number format.
RECIPES = {"bf16": _capi.RECIPE_BF16, "fp8-block": _capi.RECIPE_FP8_BLOCK}


def recipe_code(recipe: str, where: str = "recipe") -> int:
    """moejit_recipe_t of a recipe name; an unknown one is an InvalidArgumentError (a
    ValueError) naming the choices."""
    if not isinstance(recipe, str) or recipe not in RECIPES:
        raise errors.InvalidArgumentError(
            f"{where}: recipe must be one of {', '.join(map(repr, RECIPES))}, got {recipe!r}")
    return RECIPES[recipe]


_WEIGHT_CACHE_MODES = {"none": _capi.WEIGHT_CACHE_NONE, "fill": _capi.WEIGHT_CACHE_FILL,
                       "use": _capi.WEIGHT_CACHE_USE}


def weight_cache_mode_code(mode: str, where: str = "weight_cache_mode") -> int:
    """moejit_weight_cache_mode_t from "none", "fill" or "use"."""
    code = _WEIGHT_CACHE_MODES.get(mode) if isinstance(mode, str) else None
    if code is None:
        raise errors.InvalidArgumentError(
            f"{where} is {mode!r}, expected one of {', '.join(map(repr, _WEIGHT_CACHE_MODES))}")
    return code


_BACKWARD_PARTS = {"down": _capi.BACKWARD_PART_DOWN, "up": _capi.BACKWARD_PART_UP}


def backward_part_code(part: str) -> int:
    """moejit_backward_part_t from "down" or "up"."""
    code = _BACKWARD_PARTS.get(part) if isinstance(part, str) else None
    if code is None:
        raise errors.InvalidArgumentError(
            f"part is {part!r}, expected one of {', '.join(map(repr, _BACKWARD_PARTS))}")
    return code


def plan_desc(*, dtype: DType, hidden_size: int, intermediate_size: int, num_experts: int,
              top_k: int, merged: bool = False, swiglu_limit: Optional[float] = None,
              weight_grad_dtype: Optional[DType] = None, weight_grad_accumulate: bool = False,
              index_dtype: DType = "int64", routing_dtype: Optional[DType] = None,
              tokens_hint: int = 0, interleaved: bool = False, activation: str = "swiglu",
              activation_alpha: Optional[float] = None, weights_transposed: bool = False,
              has_bias: bool = False, recipe: str = "bf16",
              routing_weights_in_backward: bool = False) -> _capi.PlanDesc:
    """A moejit_plan_desc_t. swiglu_limit None means no limit; weight_grad_dtype and
    routing_dtype default to dtype.

    Since 0.5: interleaved (MOEJIT_FC1_INTERLEAVED: fc1 column 2i = gate i, 2i+1 = up i;
    implies a gate_up weight, like merged), activation "swiglu" or "gpt_oss",
    activation_alpha (gpt_oss only; None: 1.702), weights_transposed (W_gate_up [E,H,2I],
    W_down [E,I,H]) and has_bias (b_gate_up [E,2I], b_down [E,H]); the last two need merged or
    interleaved.

    Since 0.14: routing_weights_in_backward (the caller passes routing_weights to every
    backward call, so a bf16 plan's saved keeps no copy of them; moejit_plan_desc_t's field)."""
    for name, value in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size),
                        ("num_experts", num_experts), ("top_k", top_k),
                        ("tokens_hint", tokens_hint)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise errors.InvalidArgumentError(f"{name} must be an int, got {value!r}")
    code = _capi.dtype_code(dtype)
    desc = _capi.init_struct(_capi.PlanDesc)
    desc.dtype = code
    desc.hidden_size = hidden_size
    desc.intermediate_size = intermediate_size
    desc.num_experts = num_experts
    desc.top_k = top_k
    if activation not in ACTIVATIONS:
        raise errors.InvalidArgumentError(
            f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    gate_up = bool(merged) or bool(interleaved)
    if (weights_transposed or has_bias) and not gate_up:
        raise errors.InvalidArgumentError(
            "weights_transposed and has_bias need a gate_up weight (merged=True or "
            "interleaved=True), not the split layout")
    desc.fc1_layout = (_capi.FC1_INTERLEAVED if interleaved else
                       _capi.FC1_MERGED if merged else _capi.FC1_SPLIT)
    desc.activation = ACTIVATIONS[activation]
    desc.activation_alpha = check_activation_alpha(activation, activation_alpha)
    desc.weights_transposed = 1 if weights_transposed else 0
    desc.has_bias = 1 if has_bias else 0
    desc.recipe = recipe_code(recipe)  # since 0.11: "bf16" or "fp8-block" (MOEJIT_RECIPE_*)
    desc.swiglu_limit = check_swiglu_limit(swiglu_limit)
    desc.weight_grad_dtype = _capi.dtype_code(weight_grad_dtype) if weight_grad_dtype is not None \
        else code
    desc.weight_grad_accumulate = 1 if weight_grad_accumulate else 0
    desc.index_dtype = _capi.dtype_code(index_dtype)
    desc.routing_dtype = _capi.dtype_code(routing_dtype) if routing_dtype is not None else code
    desc.tokens_hint = tokens_hint
    desc.routing_weights_in_backward = 1 if routing_weights_in_backward else 0
    return desc


def validate_plan_desc(**desc) -> None:
    """Raises what moejit_plan_create would raise for this descriptor (plan_desc()'s keywords),
    without a context or a device: the library validates it (moejit_saved_size_terms checks a
    descriptor as plan creation does), so a caller can ask before committing to a recipe."""
    d = plan_desc(**desc)
    per_token, constant = ctypes.c_int64(), ctypes.c_int64()
    _capi.check(_capi.lib().moejit_saved_size_terms(byref(d), byref(per_token), byref(constant)))


def check_swiglu_limit(limit: Optional[float]) -> float:
    """None -> 0.0 (no limit); otherwise a finite number > 0."""
    if limit is None:
        return 0.0
    try:
        value = float(limit)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(
            f"swiglu_limit must be None or a positive float, got {limit!r}") from None
    # Judged as the float32 the library receives: 1e-50 would silently mean "no limit".
    if not math.isfinite(value) or ctypes.c_float(value).value <= 0.0 or value > 3.4e38:
        raise errors.InvalidArgumentError(
            f"swiglu_limit must be None (no limit) or a finite value > 0, got {limit!r}")
    return value


def swiglu_alpha(alpha, where: str = "") -> float:
    """alpha with activation "swiglu": None only (-> 0.0). Plain Python (torch.compile traces
    moejit.torch's checks); `where` prefixes the message."""
    if alpha is not None:
        raise errors.InvalidArgumentError(
            f"{where}alpha is only for activation='gpt_oss'; with 'swiglu' it must be None, got "
            f"{alpha!r}")
    return 0.0


def check_activation_alpha(activation: str, alpha: Optional[float]) -> float:
    """The activation's alpha as the library receives it: "swiglu" takes none (None -> 0.0);
    "gpt_oss" takes None (-> 1.702, gpt-oss's) or a finite value > 0 (judged as float32)."""
    if activation == "swiglu":
        return swiglu_alpha(alpha)
    if alpha is None:
        return _capi.GPT_OSS_ALPHA
    # A number only (a string such as "1.7" is a mistake, not an alpha).
    value = float(alpha) if isinstance(alpha, numbers.Real) and not isinstance(alpha, bool) \
        else float("nan")
    if not math.isfinite(value) or ctypes.c_float(value).value <= 0.0 or value > 3.4e38:
        raise errors.InvalidArgumentError(
            f"alpha must be None (gpt-oss's {_capi.GPT_OSS_ALPHA}) or a finite value > 0, got "
            f"{alpha!r}")
    return value


def warmup(context: Context, **desc) -> int:
    """Compiles every kernel of a plan into the cache (works on a compile-only context);
    returns how many kernels the plan needs. Keyword arguments as for plan_desc()."""
    d = plan_desc(**desc)
    kernels = c_int()
    _capi.check(_capi.lib().moejit_plan_warmup(context.handle, byref(d), byref(kernels)))
    return kernels.value


def _launch(fn, handle, cls, buffers: dict, **values) -> None:
    """fn(handle, &args): args of type cls at the library's defaults, with every entry of
    `buffers` as a device pointer (None, an int or a tensor) and `values` as given."""
    args = _capi.init_struct(cls, **{name: _capi.pointer(b) for name, b in buffers.items()},
                             **values)
    _capi.check(fn(handle, byref(args)))


# moejit_backward_args_t's device pointers, as Plan.backward and Plan.backward_part name them.
_BACKWARD_BUFFERS = ("x", "dout", "routing_weights", "w_gate", "w_up", "w_gate_up", "w_down",
                     "saved", "dx", "d_routing_weights", "dw_gate", "dw_up", "dw_gate_up",
                     "dw_down", "workspace", "b_down", "db_gate_up", "db_down", "weight_cache")


def _backward_buffers(arguments: dict) -> dict:
    """The device-pointer arguments of a backward call among its keyword `arguments`."""
    return {name: arguments[name] for name in _BACKWARD_BUFFERS if name in arguments}


class Plan(_OwnedHandle):
    """A compiled MoE layer for one shape (keyword arguments as for plan_desc()). forward()
    and backward() take device pointers (ints) or tensors with data_ptr()."""

    _destroy, _what = "moejit_plan_destroy", "plan"

    def __init__(self, context: Context, **desc) -> None:
        self._handle: Optional[int] = None
        self.context = context  # the plan must not outlive its context
        self.desc = plan_desc(**desc)
        handle = c_void_p()
        _capi.check(_capi.lib().moejit_plan_create(context.handle, byref(self.desc),
                                                   byref(handle)))
        self._handle = handle.value

    @property
    def merged(self) -> bool:
        """Whether fc1 is one gate_up weight (MERGED or INTERLEAVED)."""
        return self.desc.fc1_layout in (_capi.FC1_MERGED, _capi.FC1_INTERLEAVED)

    def describe(self) -> Dict[str, str]:
        """The configuration this plan resolved (moejit_plan_describe), as
        Context.describe_plan() gives it."""
        return _describe(lambda buf, size, need: _capi.lib().moejit_plan_describe(
            self.handle, buf, size, need))

    def _size(self, query, count: int) -> int:
        """A byte count one of the moejit_plan_*_size(plan, count, &out) functions answers."""
        out = c_size_t()
        _capi.check(query(self.handle, count, byref(out)))
        return out.value

    def saved_size(self, num_tokens: int) -> int:
        return self._size(_capi.lib().moejit_plan_saved_size, num_tokens)

    def workspace_size(self, num_tokens: int) -> int:
        return self._size(_capi.lib().moejit_plan_workspace_size, num_tokens)

    def consuming_workspace_size(self, num_tokens: int) -> int:
        """The workspace of a forward and of a backward with consume_saved=True (since 0.12):
        at most workspace_size (a bf16 plan's backward then writes its SwiGLU gradient over
        the saved g and u instead of a region of its own)."""
        return self._size(_capi.lib().moejit_plan_consuming_workspace_size, num_tokens)

    def backward_part_workspace_size(self, num_tokens: int, part: str) -> int:
        """The workspace of one part ("down" or "up") of a bf16 plan's backward in two parts
        (moejit_plan_backward_part_workspace_size; since 0.13)."""
        out = c_size_t()
        _capi.check(_capi.lib().moejit_plan_backward_part_workspace_size(
            self.handle, num_tokens, backward_part_code(part), byref(out)))
        return out.value

    def weight_cache_size(self) -> int:
        """Bytes of an FP8 plan's weight cache (moejit_plan_weight_cache_size; since 0.11): the
        weights quantized in both layouts the GEMMs read. A bf16 plan raises
        UnsupportedError."""
        out = c_size_t()
        _capi.check(_capi.lib().moejit_plan_weight_cache_size(self.handle, byref(out)))
        return out.value

    def cached_workspace_size(self, num_tokens: int) -> int:
        """The workspace of a call with weight_cache_mode "fill" or "use" (smaller than
        workspace_size: the cache holds the weights)."""
        return self._size(_capi.lib().moejit_plan_cached_workspace_size, num_tokens)

    def forward(self, *, num_tokens: int, x, selected_experts, routing_weights, w_down, out,
                saved, saved_size: int, workspace, workspace_size: int, w_gate=None, w_up=None,
                w_gate_up=None, b_gate_up=None, b_down=None, weight_cache=None,
                weight_cache_size: int = 0, weight_cache_mode: str = "none",
                stream: Optional[int] = None) -> None:
        """b_gate_up [E,2I] and b_down [E,H]: the biases of a has_bias plan (since 0.5).
        weight_cache (weight_cache_size() bytes) and weight_cache_mode "none", "fill" or "use":
        an FP8 plan's weight cache (moejit_weight_cache_mode_t; since 0.11)."""
        _launch(_capi.lib().moejit_plan_forward, self.handle, _capi.ForwardArgs,
                dict(x=x, selected_experts=selected_experts, routing_weights=routing_weights,
                     w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down, out=out,
                     saved=saved, workspace=workspace, b_gate_up=b_gate_up, b_down=b_down,
                     weight_cache=weight_cache),
                num_tokens=num_tokens, saved_size=saved_size, workspace_size=workspace_size,
                weight_cache_size=weight_cache_size,
                weight_cache_mode=weight_cache_mode_code(weight_cache_mode), stream=stream)

    def backward(self, *, num_tokens: int, x, dout, routing_weights, w_down, saved,
                 saved_size: int, dx, d_routing_weights, dw_down, workspace, workspace_size: int,
                 w_gate=None, w_up=None, w_gate_up=None, dw_gate=None, dw_up=None,
                 dw_gate_up=None, b_down=None, db_gate_up=None, db_down=None,
                 weight_cache=None, weight_cache_size: int = 0, weight_cache_mode: str = "none",
                 consume_saved: bool = False, stream: Optional[int] = None) -> None:
        """x: the forward's input [T,H] (since 0.2 the saved buffer no longer holds its
        scatter; None only when num_tokens is 0). A has_bias plan (since 0.5) takes b_down
        [E,H] as in forward and writes (or, accumulating, adds into) db_gate_up [E,2I] and
        db_down [E,H] in the weight-gradient dtype. consume_saved (since 0.12): the call may
        write over saved, spent afterwards, and needs consuming_workspace_size bytes."""
        _launch(_capi.lib().moejit_plan_backward, self.handle, _capi.BackwardArgs,
                _backward_buffers(locals()), num_tokens=num_tokens, saved_size=saved_size,
                workspace_size=workspace_size, weight_cache_size=weight_cache_size,
                weight_cache_mode=weight_cache_mode_code(weight_cache_mode),
                consume_saved=int(bool(consume_saved)), stream=stream)

    def backward_part(self, part: str, *, num_tokens: int, saved, saved_size: int, workspace,
                      workspace_size: int, x=None, dout=None, routing_weights=None,
                      w_gate=None, w_up=None, w_gate_up=None, w_down=None, dx=None,
                      d_routing_weights=None, dw_gate=None, dw_up=None, dw_gate_up=None,
                      dw_down=None, b_down=None, db_gate_up=None, db_down=None,
                      stream: Optional[int] = None) -> None:
        """One part of a bf16 plan's consuming backward (moejit_plan_backward_part; since
        0.13): "down" (dout, routing_weights (read when the plan's desc has
        routing_weights_in_backward, since 0.14), w_down, b_down →
        d_routing_weights, dw_down, db_down, and the SwiGLU gradient over saved's g and u),
        then "up" on the same saved (x, fc1's weights → dx, fc1's weight and bias gradients;
        dx's bytes are its scratch until its last kernel). Each needs backward_part_workspace_size(num_tokens, part) bytes."""
        _launch(lambda handle, args: _capi.lib().moejit_plan_backward_part(
                    handle, backward_part_code(part), args),
                self.handle, _capi.BackwardArgs, _backward_buffers(locals()), num_tokens=num_tokens, saved_size=saved_size, workspace_size=workspace_size,
                consume_saved=1, stream=stream)

    # ---- the pre-dispatched experts (since 0.6): rows already grouped by expert

    def experts_saved_size(self, num_rows: int) -> int:
        return self._size(_capi.lib().moejit_plan_experts_saved_size, num_rows)

    def experts_workspace_size(self, num_rows: int) -> int:
        return self._size(_capi.lib().moejit_plan_experts_workspace_size, num_rows)

    def experts_forward(self, *, num_rows: int, xs, expert_offsets, w_down, ys, saved,
                        saved_size: int, workspace, workspace_size: int, row_weights=None,
                        w_gate=None, w_up=None, w_gate_up=None, b_gate_up=None, b_down=None,
                        stream: Optional[int] = None) -> None:
        """xs [R,H] grouped by expert, expert_offsets int32 [E+1] on the device, row_weights
        fp32 [R] or None (1); writes ys [R,H] and saved (moejit_plan_experts_forward)."""
        _launch(_capi.lib().moejit_plan_experts_forward, self.handle, _capi.ExpertsForwardArgs,
                dict(xs=xs, expert_offsets=expert_offsets, row_weights=row_weights,
                     w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down,
                     b_gate_up=b_gate_up, b_down=b_down, ys=ys, saved=saved,
                     workspace=workspace),
                num_rows=num_rows, saved_size=saved_size, workspace_size=workspace_size,
                stream=stream)

    def experts_backward(self, *, num_rows: int, xs, expert_offsets, dys, w_down, saved,
                         saved_size: int, dxs, dw_down, workspace, workspace_size: int,
                         row_weights=None, d_row_weights=None, w_gate=None, w_up=None,
                         w_gate_up=None, dw_gate=None, dw_up=None, dw_gate_up=None,
                         b_down=None, db_gate_up=None, db_down=None,
                         stream: Optional[int] = None) -> None:
        """The backward of experts_forward: dxs [R,H], d_row_weights fp32 [R] (exactly when
        row_weights is given), the weight and bias gradients (moejit_plan_experts_backward)."""
        _launch(_capi.lib().moejit_plan_experts_backward, self.handle, _capi.ExpertsBackwardArgs,
                dict(xs=xs, expert_offsets=expert_offsets, row_weights=row_weights, dys=dys,
                     w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, w_down=w_down,
                     b_down=b_down, saved=saved, dxs=dxs, d_row_weights=d_row_weights,
                     dw_gate=dw_gate, dw_up=dw_up, dw_gate_up=dw_gate_up, dw_down=dw_down,
                     db_gate_up=db_gate_up, db_down=db_down, workspace=workspace),
                num_rows=num_rows, saved_size=saved_size, workspace_size=workspace_size,
                stream=stream)

    def __repr__(self) -> str:
        d = self.desc
        layout = {_capi.FC1_SPLIT: "split", _capi.FC1_MERGED: "merged",
                  _capi.FC1_INTERLEAVED: "interleaved"}.get(d.fc1_layout, str(d.fc1_layout))
        extra = ""
        if d.activation == _capi.ACTIVATION_GPT_OSS:
            extra += f" gpt_oss(alpha={d.activation_alpha:g})"
        if d.weights_transposed:
            extra += " transposed"
        if d.has_bias:
            extra += " bias"
        return (f"<moejit.Plan {_capi.DTYPE_NAMES.get(d.dtype, d.dtype)} H={d.hidden_size} "
                f"I={d.intermediate_size} E={d.num_experts} k={d.top_k} {layout}"
                f"{f' limit={d.swiglu_limit:g}' if d.swiglu_limit > 0 else ''}{extra}>")
