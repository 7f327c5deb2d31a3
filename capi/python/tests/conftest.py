"""Shared fixtures. The package is imported from this checkout (capi/python) unless
PYTHONPATH already provides one; the library comes from $MOEJIT_LIBRARY (scripts/test.sh sets
it to the build's libmoejit.so)."""

import os
import sys

import pytest

PYTHON_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(os.path.dirname(PYTHON_ROOT))
HEADER = os.path.join(REPO_ROOT, "capi", "moejit.h")

if PYTHON_ROOT not in sys.path:
    sys.path.insert(0, PYTHON_ROOT)

import moejit  # noqa: E402
from moejit import _capi  # noqa: E402


@pytest.fixture(scope="session")
def lib():
    """The loaded library; a missing library fails loudly (with every path tried)."""
    return _capi.load()


@pytest.fixture(scope="session")
def header_text():
    if not os.path.exists(HEADER):
        pytest.skip(f"{HEADER} not found (tests run from an installed package)")
    with open(HEADER) as f:
        return f.read()


@pytest.fixture
def compile_only_context(tmp_path, lib):
    """A compile-only context for sm_90a with a private disk cache."""
    ctx = moejit.Context(compile_only=True, arch="sm_90a", cache_dir=str(tmp_path / "cache"))
    yield ctx
    ctx.close()


def driver_present() -> bool:
    """Whether libcuda.so.1 can be loaded in this process."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False
