"""The package version, kept in one place: meson.build's project(version:). A wheel carries it
in _build_info.py (written by the build); run from the source tree, it is read from
meson.build."""

from __future__ import annotations

import os
import re
from typing import Optional


def _from_meson_build() -> str:
    # python/moejit/_version.py -> the repository root
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(root, "meson.build")) as f:
            m = re.search(r"^project\([^)]*?version\s*:\s*'([^']+)'", f.read(), re.S | re.M)
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


try:
    from ._build_info import CUDA_MAJOR as _cuda_major
    from ._build_info import VERSION as __version__
    cuda_major: Optional[int] = _cuda_major
except ImportError:  # the source tree (PYTHONPATH=python): no build stamped it
    __version__ = _from_meson_build()
    cuda_major = None
