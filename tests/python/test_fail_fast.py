"""Fail fast and say how (issue 28 item 5, the Python parts): a layer built for a device
moejit cannot run on is refused when it is built, naming the device; moejit.torch and
moejit.distributed without PyTorch say which extra to install; a context without a driver
says how to compile without one; nvrtc_version() is (major, minor)."""

import os
import subprocess
import sys

import pytest

import moejit
from moejit import _capi

from conftest import driver_present


def _run_without_torch(statement: str) -> subprocess.CompletedProcess:
    """statement in a fresh interpreter where `import torch` fails as if not installed."""
    code = ("import sys\n"
            "sys.modules['torch'] = None  # import torch raises ImportError\n"
            f"{statement}\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("module, extra", [("moejit.torch", "torch"),
                                           ("moejit.distributed", "torch"),
                                           ("moejit.integrations.transformers", "transformers")])
def test_import_without_torch_names_the_extra(module, extra):
    result = _run_without_torch(f"import {module}")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError:"), result.stderr[-2000:]
    assert f"pip install moejit[{extra}]" in last and "PyTorch" in last, last


def test_package_and_torch_names_without_torch():
    """The package itself imports without torch; its torch names say what to install."""
    result = _run_without_torch(
        "import moejit\n"
        "try:\n"
        "    moejit.MoEExperts\n"
        "except AttributeError as e:\n"
        "    print(e)\n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pip install moejit[torch]" in result.stdout, result.stdout


def test_nvrtc_version_is_a_major_minor_tuple(lib):
    v = moejit.nvrtc_version()
    assert type(v) is moejit.NvrtcVersion and tuple(v) == (v.major, v.minor)
    assert all(type(p) is int for p in v)
    assert int(v) == moejit.nvrtc_version_number()
    assert moejit.NvrtcVersion(12, 8) < moejit.NvrtcVersion(13, 0) == (13, 0)
    assert int(moejit.NvrtcVersion(12, 8)) == 1208 and str(moejit.NvrtcVersion(13, 0)) == "(13, 0)"


def test_context_without_a_driver_hints_compile_only(lib):
    if driver_present():
        pytest.skip("libcuda.so.1 is present on this machine")
    with pytest.raises(moejit.NoDriverError) as info:
        moejit.Context(arch="sm_90a")
    assert info.value.status == _capi.ERROR_NO_DRIVER
    assert "compile_only=True" in info.value.message and "'sm_90a'" in info.value.message
    assert "compile_only=True" in str(info.value)
    with pytest.raises(moejit.NoDriverError) as info:
        moejit.Context()
    assert "compile_only=True" in info.value.message
    # compile-only needs no driver
    with moejit.Context(compile_only=True, arch="sm_90a") as ctx:
        assert ctx.arch == "sm_90a"


def test_no_driver_hint_text():
    from moejit.core import _no_driver_hint
    text = _no_driver_hint("libcuda.so.1 not found", "sm_100a")
    assert text.startswith("libcuda.so.1 not found")
    assert "moejit.Context(compile_only=True, arch='sm_100a')" in text


# ------------------------------------------------------------------ MoEExperts' device

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "mps"])
def test_moe_experts_refuses_a_non_cuda_device(device):
    import moejit.torch as mt
    with pytest.raises(moejit.InvalidArgumentError) as info:
        mt.MoEExperts(4, 64, 32, device=device)
    text = str(info.value)
    assert f"device={device!r}" in text and "CUDA devices only" in text, text
    assert isinstance(info.value, ValueError)


def test_moe_experts_refuses_a_device_that_is_not_one():
    import moejit.torch as mt
    with pytest.raises(moejit.InvalidArgumentError, match="device='gpu0' is not a torch device"):
        mt.MoEExperts(4, 64, 32, device="gpu0")


def test_moe_experts_takes_meta_and_the_default_device():
    """'meta' (deferred initialisation) and None (the default device, moved later) build."""
    import moejit.torch as mt
    layer = mt.MoEExperts(4, 64, 32, device="meta")
    assert layer.w_down.device.type == "meta"
    assert mt.MoEExperts(4, 64, 32).w_down.shape == (4, 64, 32)
