"""python -m moejit_bench's configuration variants (moejit-ring, moejit-noring) on the CPU: each
runs with its variables set and fresh contexts, and the caller's environment and contexts come
back afterwards, also when the run fails."""

import os

import pytest

torch = pytest.importorskip("torch")

import moejit.torch as mt  # noqa: E402
from moejit_bench import layer as bench  # noqa: E402
from moejit_bench.peers import eager_loop_layer  # noqa: E402

from test_bench_peers import DIMS, args_for, cpu_bench  # noqa: E402,F401  (the fixture)


@pytest.fixture
def configures(monkeypatch):
    calls = []
    monkeypatch.setattr(mt, "configure", lambda **kw: calls.append(os.environ.get("MOEJIT_STORE_RING")))
    return calls


def test_variant_keeps_the_callers_options(monkeypatch):
    """configure(tune=...) set by the caller holds in the variant's contexts and after it."""
    calls = []
    options = dict(tune=True, gather=None, fuse_swiglu=None, gemm_tile=None)
    monkeypatch.setattr(mt, "configure", lambda **kw: calls.append(kw))
    monkeypatch.setattr(mt, "configuration", lambda: dict(options))
    with bench.variant_config("moejit-ring"):
        pass
    assert calls == [options] * 2


def test_variants_parse_and_are_moejit():
    args = bench.parse_args(["--impls", "moejit,moejit-ring,moejit-noring"])
    assert args.impls == ["moejit", "moejit-ring", "moejit-noring"]
    assert all(bench.LAYERS[v] is bench.moejit_layer for v in bench.VARIANT_IMPLS)
    assert bench.parse_args([]).impls == list(bench.IMPLS)  # opt-in


@pytest.mark.parametrize("before", [None, "0"])
def test_variant_runs_in_its_environment_and_restores_it(monkeypatch, configures, before):
    if before is None:
        monkeypatch.delenv("MOEJIT_STORE_RING", raising=False)
    else:
        monkeypatch.setenv("MOEJIT_STORE_RING", before)
    with bench.variant_config("moejit-ring"):
        assert os.environ["MOEJIT_STORE_RING"] == "1"
    assert os.environ.get("MOEJIT_STORE_RING") == before
    # configure() ran with the variable set (new contexts read it) and again after it was restored
    assert configures == ["1", before]
    with pytest.raises(RuntimeError), bench.variant_config("moejit-noring"):
        assert os.environ["MOEJIT_STORE_RING"] == "0"
        raise RuntimeError("a failing run")
    assert os.environ.get("MOEJIT_STORE_RING") == before and configures[-1] == before
    with bench.variant_config("moejit"):  # not a variant: nothing changes
        assert os.environ.get("MOEJIT_STORE_RING") == before
    assert len(configures) == 4


def test_run_shape_times_a_variant_in_its_configuration(monkeypatch, configures, cpu_bench):
    seen = {"moejit": [], "moejit-ring": []}

    def layer_seeing(name):
        def layer(*a, **kw):
            seen[name].append(os.environ.get("MOEJIT_STORE_RING"))
            return eager_loop_layer(*a, **kw)
        return layer

    monkeypatch.delenv("MOEJIT_STORE_RING", raising=False)
    for name in seen:
        monkeypatch.setitem(bench.LAYERS, name, layer_seeing(name))
    monkeypatch.setitem(bench.LAYERS, "grouped_mm", eager_loop_layer)
    rec = bench.run_shape("tiny", DIMS, args_for("moejit,grouped_mm,moejit-ring"), torch.float64,
                          dense_tflops=100.0)
    assert rec["out_rel_diff_vs_grouped_mm"] == 0.0  # moejit's output against grouped_mm's, as before
    assert rec["impls"]["moejit-ring"]["fwd_ms"] == 1.0 and rec["impls"]["moejit"]["fwd_ms"] == 1.0
    # Every call of the variant, its timing and the output compared below, ran with the ring on;
    # every call of moejit without.
    assert seen["moejit-ring"] and set(seen["moejit-ring"]) == {"1"}
    assert seen["moejit"] and set(seen["moejit"]) == {None}
    # the variant's output against moejit's on the same inputs (the same math here: equal)
    assert rec["out_rel_diff_moejit-ring_vs_moejit"] == 0.0
    assert os.environ.get("MOEJIT_STORE_RING") is None
