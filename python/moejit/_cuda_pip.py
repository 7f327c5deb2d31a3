"""NVRTC from the nvidia-cuda-nvrtc pip package, for machines without a CUDA toolkit.

libmoejit follows one NVRTC rule (docs/DESIGN.md §4.8): $MOEJIT_NVRTC, the CUDA toolkits, the
nvidia pip packages beside its own folder (site-packages/nvidia/...), then the soname
libnvrtc.so.<CUDA major>. When none is found (moejit and nvidia installed in different
site-packages), this module loads the pip copy on sys.path with RTLD_GLOBAL, so the rule's last
step, the soname, finds it already loaded. The CUDA headers NVRTC compiles against
(nvidia-cuda-runtime) sit next to it (nvidia/cuNN/include), where the library looks too.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from typing import List, Optional


def nvrtc_paths(cuda_major: int) -> List[str]:
    """libnvrtc.so.<major> in every nvidia/ folder on sys.path, in sys.path order: the CUDA 13
    layout (nvidia/cu13/lib) and the CUDA 12 one (nvidia/cuda_nvrtc/lib)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    name = f"libnvrtc.so.{cuda_major}"
    found = []
    for base in spec.submodule_search_locations:
        for sub in (f"cu{cuda_major}", "cuda_nvrtc"):
            path = os.path.join(base, sub, "lib", name)
            if os.path.isfile(path):
                found.append(path)
    return found


def preload_nvrtc(cuda_major: Optional[int]) -> Optional[str]:
    """Loads the first pip NVRTC for this CUDA major; its path, or None when there is none."""
    if cuda_major is None:
        return None
    for path in nvrtc_paths(cuda_major):
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
        except OSError:
            continue
    return None
