"""ctypes binding of capi/moejit.h: constants, structs, function prototypes, library lookup.

Every struct mirrors its C declaration field by field (C enums are `int`); the tests compare
the layouts with what a C compiler and the library's *_init() functions say. The library is
loaded on first use, so `import moejit` works where libmoejit.so is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, c_char, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint32, c_uint64, c_void_p)
from typing import Dict, List, Optional, Tuple, Type

from . import _cuda_pip, _header, errors
from ._version import __version__ as package_version
from ._version import cuda_major

# ---------------------------------------------------------------- enums (ABI values)

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_UNSUPPORTED = 2
ERROR_OUT_OF_MEMORY = 3
ERROR_NO_DRIVER = 4
ERROR_NO_DEVICE = 5
ERROR_CUDA = 6
ERROR_COMPILE = 7
ERROR_JIT_DISABLED = 8
ERROR_CACHE = 9
ERROR_INTERNAL = 10

DTYPE_BF16 = 1
DTYPE_FP16 = 2
DTYPE_FP32 = 3
DTYPE_INT32 = 4
DTYPE_INT64 = 5

LOG_DEBUG = 0
LOG_INFO = 1
LOG_WARNING = 2
LOG_ERROR = 3

JIT_FROM_ENV = 0
JIT_ON = 1
JIT_OFF = 2

# moejit_switch_t (since 0.6): the context options tune, gather, fuse_swiglu.
SWITCH_FROM_ENV = 0
SWITCH_ON = 1
SWITCH_OFF = 2

FC1_SPLIT = 0
FC1_MERGED = 1
FC1_INTERLEAVED = 2  # since 0.5

ACTIVATION_SWIGLU = 0
ACTIVATION_GPT_OSS = 1  # since 0.5

# moejit_recipe_t (since 0.11): moejit_plan_desc_t.recipe, the GEMMs' number format.
RECIPE_BF16 = 0
RECIPE_FP8_BLOCK = 1

# moejit_weight_cache_mode_t (since 0.11): what an FP8 plan's call does with args->weight_cache.
WEIGHT_CACHE_NONE = 0
WEIGHT_CACHE_FILL = 1
WEIGHT_CACHE_USE = 2

# moejit_device_error_t (since 0.11): bits of the context's device error word.
DEVICE_ERROR_EXPERT_OFFSETS = 1

# moejit_backward_part_t (since 0.13)
BACKWARD_PART_DOWN = 1
BACKWARD_PART_UP = 2

# moejit_plan_desc_t.activation_alpha = 0 means this (gpt-oss's alpha).
GPT_OSS_ALPHA = 1.702

# dtype names as PyTorch / NumPy spell them, and a few aliases.
DTYPE_BY_NAME: Dict[str, int] = {
    "bfloat16": DTYPE_BF16, "bf16": DTYPE_BF16,
    "float16": DTYPE_FP16, "fp16": DTYPE_FP16, "half": DTYPE_FP16,
    "float32": DTYPE_FP32, "fp32": DTYPE_FP32, "float": DTYPE_FP32,
    "int32": DTYPE_INT32, "int": DTYPE_INT32,
    "int64": DTYPE_INT64, "long": DTYPE_INT64,
}
DTYPE_NAMES: Dict[int, str] = {DTYPE_BF16: "bfloat16", DTYPE_FP16: "float16",
                               DTYPE_FP32: "float32", DTYPE_INT32: "int32",
                               DTYPE_INT64: "int64"}


def dtype_code(dtype) -> int:
    """A moejit_dtype_t from a code, a name ("bfloat16", "bf16", ...) or a torch/numpy dtype."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype not in DTYPE_NAMES:
            raise errors.InvalidArgumentError(f"dtype {dtype} is not a moejit_dtype_t value")
        return dtype
    name = str(dtype)
    for prefix in ("torch.", "numpy.", "jax.numpy."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    code = DTYPE_BY_NAME.get(name.lower())
    if code is None:
        raise errors.InvalidArgumentError(
            f"dtype {dtype!r} is not supported (expected one of bfloat16, float16, float32, "
            "int32, int64)")
    return code


# ---------------------------------------------------------------- structs

moejit_log_fn = CFUNCTYPE(None, c_int, c_char_p, c_void_p)


class _Struct(ctypes.Structure):
    """An extensible C argument struct: struct_size is filled in automatically."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "struct_size" not in kwargs:
            self.struct_size = ctypes.sizeof(self)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self._fields_)
        return f"{type(self).__name__}({fields})"


# Every struct's fields come from moejit.h itself (_header.py): the header is their one
# description. tests/python/test_structs.py holds them to a C compiler's offsets.
_LAYOUTS = _header.struct_layouts({"moejit_log_fn": moejit_log_fn})


# Each struct, its C name and the function that initialises it.
STRUCTS: Dict[Type[_Struct], Tuple[str, str]] = {}


def _struct(py_name: str, c_name: str, doc_note: str = "") -> Type[_Struct]:
    """The ctypes class for struct c_name, registered in STRUCTS with its *_init() function."""
    cls = type(py_name, (_Struct,), {"__doc__": f"{c_name}{doc_note}.", "__module__": __name__,
                                     "_fields_": _LAYOUTS[c_name]})
    STRUCTS[cls] = (c_name, c_name[:-len("_t")] + "_init")
    return cls


ContextOptions = _struct("ContextOptions", "moejit_context_options_t")
CacheStats = _struct("CacheStats", "moejit_cache_stats_t")
GroupGemmNkArgs = _struct("GroupGemmNkArgs", "moejit_group_gemm_nk_args_t")
GroupGemmMnArgs = _struct("GroupGemmMnArgs", "moejit_group_gemm_mn_args_t")
SwigluArgs = _struct("SwigluArgs", "moejit_swiglu_args_t")
PlanDesc = _struct("PlanDesc", "moejit_plan_desc_t")
ForwardArgs = _struct("ForwardArgs", "moejit_forward_args_t")
BackwardArgs = _struct("BackwardArgs", "moejit_backward_args_t")
ExpertsForwardArgs = _struct("ExpertsForwardArgs", "moejit_experts_forward_args_t", " (since 0.6)")
ExpertsBackwardArgs = _struct("ExpertsBackwardArgs", "moejit_experts_backward_args_t", " (since 0.6)")


# ---------------------------------------------------------------- function prototypes

status_t = c_int
_P = POINTER

# name -> (restype, argtypes). Handles, device pointers and streams are c_void_p.
PROTOTYPES: Dict[str, Tuple[object, List[object]]] = {
    "moejit_status_string": (c_char_p, [c_int]),
    "moejit_last_error": (c_char_p, []),
    "moejit_version": (c_char_p, []),
    "moejit_version_number": (c_int, []),
    # context
    "moejit_context_options_init": (status_t, [_P(ContextOptions)]),
    "moejit_context_options_init_sized": (status_t, [_P(ContextOptions), c_size_t]),
    "moejit_context_create": (status_t, [_P(ContextOptions), _P(c_void_p)]),
    "moejit_context_destroy": (None, [c_void_p]),
    "moejit_context_arch": (status_t, [c_void_p, _P(c_char_p)]),
    "moejit_context_cache_dir": (status_t, [c_void_p, _P(c_char_p)]),
    "moejit_cache_stats_init": (status_t, [_P(CacheStats)]),
    "moejit_cache_stats_init_sized": (status_t, [_P(CacheStats), c_size_t]),
    "moejit_context_cache_stats": (status_t, [c_void_p, _P(CacheStats)]),
    "moejit_nvrtc_version": (status_t, [_P(c_int)]),
    "moejit_context_device_errors": (status_t, [c_void_p, c_int, _P(c_uint32)]),  # since 0.11
    # configuration (since 0.6)
    "moejit_plan_describe": (status_t, [c_void_p, _P(c_char), c_size_t, _P(c_size_t)]),
    "moejit_plan_describe_desc": (status_t, [c_void_p, _P(PlanDesc), _P(c_char), c_size_t,
                                             _P(c_size_t)]),
    # routing ops
    "moejit_routing_index_workspace_size": (status_t, [c_int64, c_int32, c_int32, _P(c_size_t)]),
    "moejit_routing_index": (status_t, [c_void_p, c_int, c_void_p, c_int64, c_int32, c_int32,
                                        c_void_p, c_void_p, c_void_p, c_void_p, c_size_t,
                                        c_void_p]),
    "moejit_scatter": (status_t, [c_void_p, c_int, c_void_p, c_void_p, c_int64, c_int32,
                                  c_int64, c_void_p, c_void_p]),
    "moejit_gather": (status_t, [c_void_p, c_int, c_void_p, c_void_p, c_void_p, c_int, c_int64,
                                 c_int32, c_int64, c_void_p, c_void_p]),
    "moejit_scatter_weights": (status_t, [c_void_p, c_int, c_void_p, c_void_p, c_int64, c_int32,
                                          c_void_p, c_void_p]),
    "moejit_gather_weights": (status_t, [c_void_p, c_int, c_void_p, c_void_p, c_int64, c_int32,
                                         c_void_p, c_void_p]),
    # grouped GEMMs
    "moejit_group_gemm_nk_args_init": (status_t, [_P(GroupGemmNkArgs)]),
    "moejit_group_gemm_nk_args_init_sized": (status_t, [_P(GroupGemmNkArgs), c_size_t]),
    "moejit_group_gemm_mn_args_init": (status_t, [_P(GroupGemmMnArgs)]),
    "moejit_group_gemm_mn_args_init_sized": (status_t, [_P(GroupGemmMnArgs), c_size_t]),
    "moejit_group_gemm_same_nk": (status_t, [c_void_p, _P(GroupGemmNkArgs)]),
    "moejit_group_gemm_same_mn": (status_t, [c_void_p, _P(GroupGemmMnArgs)]),
    # SwiGLU
    "moejit_swiglu_args_init": (status_t, [_P(SwigluArgs)]),
    "moejit_swiglu_args_init_sized": (status_t, [_P(SwigluArgs), c_size_t]),
    "moejit_swiglu_forward": (status_t, [c_void_p, _P(SwigluArgs)]),
    "moejit_swiglu_backward": (status_t, [c_void_p, _P(SwigluArgs)]),
    # the layer
    "moejit_plan_desc_init": (status_t, [_P(PlanDesc)]),
    "moejit_plan_desc_init_sized": (status_t, [_P(PlanDesc), c_size_t]),
    "moejit_forward_args_init": (status_t, [_P(ForwardArgs)]),
    "moejit_forward_args_init_sized": (status_t, [_P(ForwardArgs), c_size_t]),
    "moejit_backward_args_init": (status_t, [_P(BackwardArgs)]),
    "moejit_backward_args_init_sized": (status_t, [_P(BackwardArgs), c_size_t]),
    "moejit_plan_create": (status_t, [c_void_p, _P(PlanDesc), _P(c_void_p)]),
    "moejit_plan_destroy": (None, [c_void_p]),
    "moejit_plan_warmup": (status_t, [c_void_p, _P(PlanDesc), _P(c_int)]),
    "moejit_plan_saved_size": (status_t, [c_void_p, c_int64, _P(c_size_t)]),
    "moejit_plan_workspace_size": (status_t, [c_void_p, c_int64, _P(c_size_t)]),
    "moejit_plan_forward": (status_t, [c_void_p, _P(ForwardArgs)]),
    "moejit_plan_backward": (status_t, [c_void_p, _P(BackwardArgs)]),
    # the pre-dispatched experts (since 0.6)
    "moejit_experts_forward_args_init_sized": (status_t, [_P(ExpertsForwardArgs), c_size_t]),
    "moejit_experts_backward_args_init_sized": (status_t, [_P(ExpertsBackwardArgs), c_size_t]),
    "moejit_plan_experts_saved_size": (status_t, [c_void_p, c_int64, _P(c_size_t)]),
    # since 0.11
    "moejit_saved_size_terms": (status_t, [_P(PlanDesc), _P(c_int64), _P(c_int64)]),
    "moejit_experts_saved_size_terms": (status_t, [_P(PlanDesc), _P(c_int64), _P(c_int64)]),
    "moejit_plan_experts_workspace_size": (status_t, [c_void_p, c_int64, _P(c_size_t)]),
    "moejit_plan_weight_cache_size": (status_t, [c_void_p, _P(c_size_t)]),
    "moejit_plan_cached_workspace_size": (status_t, [c_void_p, c_int64, _P(c_size_t)]),
    "moejit_plan_consuming_workspace_size": (status_t, [c_void_p, c_int64, _P(c_size_t)]),
    # since 0.13
    "moejit_plan_backward_part_workspace_size": (status_t, [c_void_p, c_int64, c_int, _P(c_size_t)]),
    "moejit_plan_backward_part": (status_t, [c_void_p, c_int, _P(BackwardArgs)]),
    "moejit_plan_experts_forward": (status_t, [c_void_p, _P(ExpertsForwardArgs)]),
    "moejit_plan_experts_backward": (status_t, [c_void_p, _P(ExpertsBackwardArgs)]),
}


# ---------------------------------------------------------------- loading

class Library:
    """The loaded libmoejit with every prototype bound. A symbol the library does not export
    (an older library than this binding) becomes a function that raises when called."""

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self.cdll = cdll
        self.path = path
        self.missing: List[str] = []
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                self.missing.append(name)
                setattr(self, name, _missing_symbol(name, path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def has(self, name: str) -> bool:
        return name not in self.missing


def _missing_symbol(name: str, path: str):
    def call(*_args):
        raise errors.MoejitError(
            f"{name} is not exported by {path}: the library is older than this Python "
            "package (or was built without it)", None, "MissingSymbol")
    call.__name__ = name
    return call


_library: Optional[Library] = None
_library_lock = threading.Lock()


def candidate_paths() -> List[Tuple[str, str]]:
    """(how, path-or-name) in lookup order: $MOEJIT_LIBRARY alone when set; otherwise
    libmoejit.so* next to this package, then the system loader."""
    env = os.environ.get("MOEJIT_LIBRARY")
    if env:
        # An explicit choice is authoritative: silently loading another copy would hide
        # exactly the version mix-up the variable is usually set to avoid.
        return [("$MOEJIT_LIBRARY", env)]
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libmoejit.so*")),
                   key=lambda p: (len(os.path.basename(p)), p))
    candidates = [("next to the package", p) for p in found]
    if not found:
        candidates.append(("next to the package", os.path.join(here, "libmoejit.so*")))
    system = ctypes.util.find_library("moejit")
    names = [system] if system else []
    names += [n for n in ("libmoejit.so.0", "libmoejit.so") if n not in names]
    candidates += [("system loader", n) for n in names]
    return candidates


def load(path: Optional[str] = None) -> Library:
    """Loads libmoejit (once). `path` overrides the lookup. A library whose moejit_version()
    is not this package's version is skipped (and named in the error if nothing else fits)."""
    global _library
    with _library_lock:
        if _library is not None and path is None:
            return _library
        tried = [("argument", path)] if path else candidate_paths()
        failures = []
        for how, candidate in tried:
            if candidate.endswith("*"):
                failures.append(f"  {candidate} ({how}): no such file")
                continue
            try:
                cdll = ctypes.CDLL(candidate)
            except OSError as e:
                failures.append(f"  {candidate} ({how}): {e}")
                continue
            lib = Library(cdll, _resolved_path(cdll, candidate))
            mismatch = _version_mismatch(lib)
            if mismatch:
                failures.append(f"  {lib.path} ({how}): {mismatch}")
                continue
            _find_nvrtc(lib)
            if path is None:
                _library = lib
            return lib
        raise errors.LibraryNotFoundError(
            f"libmoejit.so {package_version} could not be loaded; tried, in order:\n" +
            "\n".join(failures) +
            "\nInstall the package with pip (pip install . at the repository root builds the "
            "library into it), or set MOEJIT_LIBRARY to the path of a libmoejit.so of the same "
            "version (e.g. build/capi/libmoejit.so).")


def _version_mismatch(lib: Library) -> Optional[str]:
    """Why this library does not fit the package, or None: the versions must be equal (the
    ctypes structs and prototypes here describe exactly one moejit.h)."""
    if not lib.has("moejit_version"):
        return f"not a libmoejit (no moejit_version), expected version {package_version}"
    found = lib.moejit_version()
    found = found.decode("utf-8", "replace") if found else "?"
    if found != package_version:
        return f"version {found}, expected {package_version} (this Python package's)"
    return None


def _find_nvrtc(lib: Library) -> None:
    """Where the library's NVRTC rule finds none (no toolkit, no nvidia package beside the
    library), loads the nvidia-cuda-nvrtc pip package's from sys.path, which the rule's last
    step (the soname) then finds. Errors surface at the first compile."""
    version = c_int()
    if lib.has("moejit_nvrtc_version") and lib.moejit_nvrtc_version(ctypes.byref(version)) != SUCCESS:
        _cuda_pip.preload_nvrtc(cuda_major)


def _resolved_path(cdll: ctypes.CDLL, candidate: str) -> str:
    """The file the loader actually mapped (a bare soname says little in error messages)."""
    if "/" in candidate:
        return os.path.realpath(candidate)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/" in line and os.path.basename(line.strip()).startswith(
                        candidate.split(".so")[0] + ".so"):
                    return line[line.index("/"):].strip()
    except OSError:
        pass
    return candidate


def lib() -> Library:
    return load()


# ---------------------------------------------------------------- helpers

def last_error() -> str:
    message = lib().moejit_last_error()
    return message.decode("utf-8", "replace") if message else ""


def status_string(status: int) -> str:
    return lib().moejit_status_string(int(status)).decode("utf-8", "replace")


def check(status: int) -> None:
    """Raises the status's exception (with moejit_last_error()) unless status is SUCCESS."""
    if status != SUCCESS:
        raise errors.error_for_status(status, last_error(), status_string(status))


_prototypes: Dict[type, _Struct] = {}


def init_struct(cls: Type[_Struct], **fields) -> _Struct:
    """A struct initialised by the library's *_init() function (its defaults), with `fields`
    applied. The first call per type checks that the library and this binding agree on the
    struct's size, which catches a header/library mismatch before any launch."""
    proto = _prototypes.get(cls)
    if proto is None:
        proto = c_init_struct(cls)
        _prototypes[cls] = proto
    value = cls.from_buffer_copy(proto)
    for name, v in fields.items():
        setattr(value, name, v)
    return value


def c_init_struct(cls: Type[_Struct]) -> _Struct:
    """Runs the C *_init() on a zeroed buffer larger than the Python struct (so a library that
    knows a bigger struct cannot write out of bounds), then checks struct_size."""
    c_name, init_name = STRUCTS[cls]
    size = ctypes.sizeof(cls)
    buffer = (ctypes.c_char * (size + 512))()
    # The sized init (moejit.h: *_init is a macro passing the caller's sizeof) writes no more
    # than this binding's struct, and says whether the library accepts its size.
    check(getattr(lib(), init_name + "_sized")(ctypes.cast(buffer, POINTER(cls)), size))
    written = c_size_t.from_buffer(buffer).value
    if written != size:
        raise errors.InternalError(
            f"{c_name}: the library ({lib().path}) says struct_size = {written}, this binding "
            f"has {size} bytes; the Python package and the library do not match")
    return cls.from_buffer_copy(buffer)


def pointer(value) -> Optional[int]:
    """A device pointer from None, an int, or an object with data_ptr() (a torch tensor)."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    data_ptr = getattr(value, "data_ptr", None)
    if data_ptr is not None:
        return int(data_ptr())
    raise errors.InvalidArgumentError(f"expected a device pointer (int) or a tensor, got "
                                      f"{type(value).__name__}")
