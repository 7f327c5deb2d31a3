"""moejit: JIT code-generating fused Mixture-of-Experts kernels (Python binding of the C ABI).

The C library is found through $MOEJIT_LIBRARY, then libmoejit.so* next to this package,
then the system loader; it is loaded on first use. The PyTorch layer lives in moejit.torch
(imported on demand, only where torch is installed):

    import moejit.torch as mt
    out = mt.fused_moe(x, selected_experts, routing_weights, w_gate, w_up, w_down)
"""

from __future__ import annotations

from . import errors
from ._capi import load as load_library
from .core import (Context, NvrtcVersion, Plan, library_version, library_version_number,
                   nvrtc_version, nvrtc_version_number, plan_desc, warmup)
from .errors import (CacheError, CompileError, CudaError, InternalError, InvalidArgumentError,
                     JitDisabledError, LibraryNotFoundError, MoejitError, NoDeviceError,
                     NoDriverError, OutOfMemoryError, UnsupportedError)

# meson.build's version; the library loaded must report the same (_capi.load checks).
from ._version import __version__

__all__ = [
    "__version__", "library_version", "library_version_number", "nvrtc_version",
    "nvrtc_version_number", "NvrtcVersion",
    "load_library", "Context", "Plan", "plan_desc", "warmup", "errors",
    "MoejitError", "InvalidArgumentError", "UnsupportedError", "OutOfMemoryError",
    "NoDriverError", "NoDeviceError", "CudaError", "CompileError", "JitDisabledError",
    "CacheError", "InternalError", "LibraryNotFoundError",
]

_TORCH_NAMES = ("fused_moe", "fused_moe_merged", "MoEExperts")


def __getattr__(name: str):
    # moejit.torch and its names on demand: importing torch costs seconds and is optional.
    if name == "torch" or name in _TORCH_NAMES:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise AttributeError(
                f"moejit.{name} needs PyTorch, which is not installed ({e}); install it with: "
                "pip install moejit[torch]") from None
        import importlib
        module = importlib.import_module(".torch", __name__)
        return module if name == "torch" else getattr(module, name)
    raise AttributeError(f"module 'moejit' has no attribute {name!r}")
