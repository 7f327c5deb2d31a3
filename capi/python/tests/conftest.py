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
def emulated_launches(monkeypatch):
    """The library's launches replaced by moe_emulation's float32 layer, and torch._dynamo
    reset before and after (the emulated torch.ops tests use it on every test)."""
    import torch._dynamo

    import moe_emulation

    moe_emulation.install(monkeypatch)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def fresh_transformers_backend(monkeypatch):
    """moejit's transformers backend registered with no warning given yet, and torch._dynamo
    reset before and after (the transformers tests use it on every test)."""
    import torch._dynamo
    from moejit.integrations import transformers as mjt

    monkeypatch.setattr(mjt, "_warned", set())
    mjt.register()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


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
