"""Configuration as data (since 0.6): the context options tune, gather, fuse_swiglu and
gemm_tile, their precedence over the MOEJIT_* variables, and what a plan resolves
(Context.describe_plan), on compile-only contexts (no GPU)."""

import ctypes

import pytest

import moejit
from moejit import _capi

SMALL = dict(dtype="bfloat16", hidden_size=256, intermediate_size=128, num_experts=4, top_k=2)
VARIABLES = ("MOEJIT_TUNE", "MOEJIT_GATHER", "MOEJIT_FUSE_SWIGLU", "MOEJIT_GEMM_TILE",
             "MOEJIT_COMPILE", "MOEJIT_STORE_RING")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def describe(**options):
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir="", **options) as ctx:
        return ctx.describe_plan(**SMALL)


def test_the_options_struct_grew_at_its_end():
    fields = [name for name, _ in _capi.ContextOptions._fields_]
    assert fields[-4:] == ["tune", "gather", "fuse_swiglu", "gemm_tile"]
    assert _capi.ContextOptions.tune.offset == 56  # the 0.1-0.5 struct's size (LP64)
    assert ctypes.sizeof(_capi.ContextOptions) == 80
    options = _capi.init_struct(_capi.ContextOptions)
    assert (options.tune, options.gather, options.fuse_swiglu) == (_capi.SWITCH_FROM_ENV,) * 3
    assert options.gemm_tile is None


def test_defaults(lib):
    d = describe()
    assert d["arch"] == "sm_90a"
    assert (d["jit"], d["tune"], d["gather"], d["fuse_swiglu"], d["gemm_tile"]) == \
        ("on", "off", "on", "off", "heuristic")
    assert {d[k + "_from"] for k in ("jit", "tune", "gather", "fuse_swiglu", "gemm_tile")} == \
        {"default"}
    assert all(d["tile_" + role].startswith("wgmma_")
               for role in ("fc1", "fc2", "fc2_dgrad", "fc1_dgrad", "fc2_wgrad", "fc1_wgrad"))


@pytest.mark.parametrize("key,variable,value,result", [
    ("tune", "MOEJIT_TUNE", "1", "on"),
    ("gather", "MOEJIT_GATHER", "0", "off"),
    ("fuse_swiglu", "MOEJIT_FUSE_SWIGLU", "on", "on"),
])
def test_option_beats_environment_beats_default(lib, monkeypatch, key, variable, value, result):
    monkeypatch.setenv(variable, value)
    d = describe()
    assert (d[key], d[key + "_from"]) == (result, "environment")
    for option, want in ((True, "on"), (False, "off"), ("on", "on"), ("off", "off")):
        d = describe(**{key: option})
        assert (d[key], d[key + "_from"]) == (want, "option")
    monkeypatch.delenv(variable)
    assert describe(**{key: "env"})[key + "_from"] == "default"


def test_gemm_tile(lib, monkeypatch):
    tile = "wgmma_128x128x64_s4_g8"
    d = describe(gemm_tile=tile)
    assert (d["gemm_tile"], d["gemm_tile_from"], d["tile_fc2"]) == (tile, "option", tile)
    monkeypatch.setenv("MOEJIT_GEMM_TILE", tile)
    assert describe()["gemm_tile_from"] == "environment"
    d = describe(gemm_tile="", tune=True)
    assert (d["gemm_tile"], d["gemm_tile_from"], d["tune"]) == ("heuristic", "option", "on")
    assert describe(tune=True)["tune"] == "off", "a forced tile turns tuning off"


def test_bad_values(lib, monkeypatch):
    for key in ("tune", "gather", "fuse_swiglu"):
        with pytest.raises(moejit.InvalidArgumentError, match=key):
            describe(**{key: "sometimes"})
        with pytest.raises(moejit.InvalidArgumentError, match=key):
            describe(**{key: 2})
    with pytest.raises(moejit.InvalidArgumentError, match=r"options->gemm_tile"):
        describe(gemm_tile="big")
    with pytest.raises(moejit.InvalidArgumentError, match="gemm_tile"):
        describe(gemm_tile=7)
    # The library names the field for a raw struct too.
    options = _capi.init_struct(_capi.ContextOptions, compile_only=1, arch=b"sm_90a",
                                cache_dir=b"", gather=5)
    handle = ctypes.c_void_p()
    with pytest.raises(moejit.InvalidArgumentError, match=r"options->gather is 5"):
        _capi.check(lib.moejit_context_create(ctypes.byref(options), ctypes.byref(handle)))
    # A bad variable fails even under an option.
    monkeypatch.setenv("MOEJIT_GATHER", "sometimes")
    with pytest.raises(moejit.InvalidArgumentError, match="MOEJIT_GATHER"):
        describe(gather=True)


def test_a_tile_that_cannot_run_is_unsupported(lib):
    with moejit.Context(compile_only=True, arch="sm_90a", cache_dir="",
                        gemm_tile="wgmma_128x256x64_s8_g8") as ctx:
        with pytest.raises(moejit.UnsupportedError, match=r"options->gemm_tile"):
            ctx.describe_plan(**SMALL)


def test_torch_configure_validates(lib):
    torch_ops = pytest.importorskip("moejit.torch")
    with pytest.raises(moejit.InvalidArgumentError, match="gather"):
        torch_ops.configure(gather="maybe")
    with pytest.raises(moejit.InvalidArgumentError, match="gemm_tile"):
        torch_ops.configure(gemm_tile=3)
    torch_ops.configure(gather=False, gemm_tile="")
    assert torch_ops.configuration() == dict(tune=None, gather=False, fuse_swiglu=None,
                                             gemm_tile="")
    torch_ops.configure(**torch_ops.configuration())  # the same options again
    assert torch_ops.configuration()["gather"] is False
    torch_ops.configure()  # back to the environment and the defaults
    assert torch_ops.configuration() == dict(tune=None, gather=None, fuse_swiglu=None,
                                             gemm_tile=None)
