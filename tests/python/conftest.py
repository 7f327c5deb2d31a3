"""Shared fixtures. The package is imported from this checkout (python/) unless
PYTHONPATH already provides one; the library comes from $MOEJIT_LIBRARY (scripts/test.sh sets
it to the build's libmoejit.so)."""

import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_ROOT = os.path.join(REPO_ROOT, "python")
BENCH_ROOT = os.path.join(REPO_ROOT, "bench")  # the workshop's benchmark package (moejit_bench)
HEADER = os.path.join(REPO_ROOT, "capi", "moejit.h")

for root in (BENCH_ROOT, PYTHON_ROOT):
    if root not in sys.path:
        sys.path.insert(0, root)

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
def emulated(monkeypatch):
    """The transformers tests' emulation of the library's launches (hf_emulation.Emulation:
    float32 on the CPU, calls counted)."""
    from hf_emulation import Emulation

    return Emulation(monkeypatch)


@pytest.fixture
def extended(monkeypatch):
    """For the transformers tests: the extended call (hf_emulation.ExtendedCall) in place of
    moejit.torch.fused_moe_merged (and registered as supported)."""
    from hf_emulation import ExtendedCall
    from moejit.integrations import transformers as mjt

    call = ExtendedCall()
    monkeypatch.setattr(mjt, "_fused_moe_merged", lambda: call)
    monkeypatch.setattr(mjt, "_extended_api", True)
    return call


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
