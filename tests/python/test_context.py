"""Contexts without a GPU: compile-only contexts work; a default context reports the missing
driver (or device) as an exception, not a crash."""

import ctypes
import os

import pytest

import moejit
from moejit import _capi
from conftest import driver_present

SMALL = dict(dtype="bfloat16", hidden_size=512, intermediate_size=256, num_experts=8, top_k=2)


def test_compile_only_context(tmp_path, lib):
    cache = tmp_path / "cache"
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir=str(cache)) as ctx:
        assert ctx.arch == "sm_90a"
        # the library version is appended as a sub-folder
        assert ctx.cache_dir.startswith(str(cache))
        assert moejit.library_version() in ctx.cache_dir
        stats = ctx.cache_stats()
        assert set(stats) == {"memory_hits", "disk_hits", "misses", "compiles",
                              "compile_failures", "disk_rejects", "compile_seconds",
                              "disk_load_seconds"}
        assert stats["compiles"] == 0 and stats["misses"] == 0
        assert "compile-only" in repr(ctx)
    with pytest.raises(moejit.InvalidArgumentError, match="closed"):
        ctx.arch  # noqa: B018


def test_compile_only_context_with_memory_cache(lib):
    with moejit.Context(compile_only=True, arch="sm_80", cache_dir="") as ctx:
        assert ctx.arch == "sm_80"
        assert ctx.cache_dir == ""


def test_compile_only_needs_an_arch(lib):
    with pytest.raises(moejit.InvalidArgumentError, match="arch"):
        moejit.Context(compile_only=True, cache_dir="")


def test_python_side_option_checks(lib):
    with pytest.raises(moejit.InvalidArgumentError, match="jit"):
        moejit.Context(compile_only=True, arch="sm_90a", jit="maybe")
    with pytest.raises(moejit.InvalidArgumentError, match="device_ordinal"):
        moejit.Context(device_ordinal=-1)


def test_warmup_on_a_compile_only_context_fills_the_disk_cache(tmp_path, lib):
    cache = tmp_path / "cache"
    messages = []
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir=str(cache),
                        log=lambda level, message: messages.append((level, message))) as ctx:
        kernels = moejit.warmup(ctx, **SMALL)
        assert kernels > 0
        stats = ctx.cache_stats()
        assert stats["compiles"] + stats["disk_hits"] + stats["memory_hits"] >= kernels
        assert stats["compiles"] > 0 and stats["compile_failures"] == 0
        assert stats["compile_seconds"] > 0
    cubins = [f for _, _, files in os.walk(cache) for f in files if f.endswith(".cubin")]
    assert len(cubins) >= stats["compiles"]
    # A second context on the same folder compiles nothing.
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir=str(cache)) as ctx:
        assert moejit.warmup(ctx, **SMALL) == kernels
        stats = ctx.cache_stats()
        assert stats["compiles"] == 0
        assert stats["disk_hits"] > 0


def test_unwritable_cache_degrades_with_a_logged_warning(tmp_path, lib):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    messages = []
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir=str(blocker / "cache"),
                        log=lambda level, message: messages.append((level, message))) as ctx:
        moejit.warmup(ctx, **SMALL)
    warnings = [m for level, m in messages if level >= _capi.LOG_WARNING]
    assert warnings, f"no warning logged; got {messages}"


def test_compile_only_context_does_not_launch(compile_only_context):
    # Valid arguments, but nothing can run on a compile-only context.
    with pytest.raises(moejit.MoejitError) as info:
        _capi.check(_capi.lib().moejit_scatter(compile_only_context.handle, _capi.DTYPE_BF16,
                                               0x10000, 0x20000, 4, 2, 512, 0x30000, None))
    assert "compile" in info.value.message.lower()


def test_default_context_without_a_driver(lib):
    if driver_present():
        pytest.skip("libcuda.so.1 is present on this machine")
    with pytest.raises(moejit.NoDriverError) as info:
        moejit.Context()
    assert info.value.status == _capi.ERROR_NO_DRIVER
    assert info.value.message
    # The raw call leaves the out-pointer NULL and the library usable afterwards.
    handle = ctypes.c_void_p(1234)
    assert lib.moejit_context_create(None, ctypes.byref(handle)) == _capi.ERROR_NO_DRIVER
    assert handle.value is None
    assert moejit.library_version()


def test_default_context_with_a_driver(lib):
    if not driver_present():
        pytest.skip("no libcuda.so.1 on this machine")
    try:
        ctx = moejit.Context()
    except moejit.NoDeviceError as e:  # a driver without a usable device
        assert e.message
        return
    with ctx:
        assert ctx.arch.startswith("sm_")
