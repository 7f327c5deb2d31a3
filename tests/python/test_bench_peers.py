"""python -m moejit_bench's optional peers (moejit_bench/peers_fast.py) on the CPU: argument parsing, a
missing peer as a skip line while the rest still runs, the correctness gate (a wrong peer is
WRONG and not timed), and the QuACK / SonicMoE wiring against emulations of the two APIs
(the real kernels need an SM90 GPU and the CuTe DSL)."""

import sys
import types

import pytest

torch = pytest.importorskip("torch")

from moejit_bench import layer as bench, peers_fast  # noqa: E402
from moejit_bench.peers import eager_loop_layer, routing_topk  # noqa: E402

DIMS = (24, 4, 16, 8, 2)  # T, E, H, I, k


def cpu_inputs(T, E, H, I, k, dtype, routing, merged, seed):
    """bench.make_inputs on the CPU in float64 (the same tensors and names)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, dtype=torch.float64, generator=g).requires_grad_()
    sel, rw = routing_topk(T, E, k, torch.float64, "cpu", g)
    rw.requires_grad_()

    def weight(*shape, fan_in):
        return (torch.randn(*shape, dtype=torch.float64, generator=g) * fan_in ** -0.5
                ).requires_grad_()

    weights = bench.layer_weights(E, H, I, merged, weight)
    return x, sel, rw, weights, torch.randn(T, H, dtype=torch.float64, generator=g)


@pytest.fixture
def cpu_bench(monkeypatch):
    """bench.run_shape on the CPU: inputs above, moejit played by the eager loop, time_ms a
    counter (its calls are recorded)."""
    calls = []

    def fake_time_ms(fn, warmup, reps):
        fn()
        calls.append(fn)
        return [1.0] * reps

    monkeypatch.setattr(bench, "make_inputs", cpu_inputs)
    monkeypatch.setattr(bench, "time_ms", fake_time_ms)
    monkeypatch.setitem(bench.LAYERS, "moejit", eager_loop_layer)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # the eager loop's probe step
    return calls


def args_for(impls, *extra):
    return bench.parse_args(["--impls", impls, "--warmup", "0", "--reps", "2", *extra])


def fail_import(monkeypatch, *prefixes):
    real = peers_fast._import

    def _import(name):
        if name.split(".")[0] in prefixes:
            raise ImportError(f"No module named '{name}'")
        return real(name)

    monkeypatch.setattr(peers_fast, "_import", _import)


# ---------------------------------------------------------------- arguments

def test_parse_peer_impls_and_sonic_tuned():
    args = bench.parse_args(["--impls", "moejit,sonicmoe,quack"])
    assert args.impls == ["moejit", "sonicmoe", "quack"] and not args.sonic_tuned
    args = bench.parse_args(["--impls", "moejit,sonicmoe,quack", "--sonic-tuned"])
    assert args.sonic_tuned
    assert args.impls == ["moejit", "sonicmoe", "sonicmoe-tuned", "quack"]  # next to sonicmoe
    args = bench.parse_args(["--impls", "moejit", "--sonic-tuned"])
    assert args.impls == ["moejit", "sonicmoe-tuned"]
    args = bench.parse_args(["--impls", "sonicmoe-tuned,quack-tuned", "--sonic-tuned"])
    assert args.impls == ["sonicmoe-tuned", "quack-tuned"]  # not added twice
    assert bench.parse_args([]).impls == list(bench.IMPLS)  # peers are opt-in
    assert bench.PEER_IMPLS == peers_fast.PEER_IMPLS
    with pytest.raises(SystemExit):
        bench.parse_args(["--impls", "sonic"])


# ---------------------------------------------------------------- a missing peer

def test_missing_peer_is_a_skip_line_and_the_rest_runs(monkeypatch, capsys, cpu_bench):
    fail_import(monkeypatch, "sonicmoe", "quack")
    args = args_for("moejit,sonicmoe,eager,quack")
    rec = bench.run_shape("tiny", DIMS, args, torch.float64, dense_tflops=100.0)
    impls = rec["impls"]
    for peer in ("sonicmoe", "quack"):
        assert "ImportError" in impls[peer]["skipped"] and "fwd_ms" not in impls[peer]
        assert args.peer_status[peer].startswith("skipped: ImportError")
    assert impls["moejit"]["fwd_ms"] == 1.0 and impls["eager"]["fwd_bwd_ms"] == 1.0
    err = capsys.readouterr().err
    assert "[tiny] sonicmoe: skipped: ImportError: No module named 'sonicmoe'" in err
    assert "[tiny] quack: skipped: ImportError" in err
    table = bench.format_table([rec], 100.0, args.peer_status)
    assert "peer sonicmoe: skipped: ImportError" in table
    assert "skipped: ImportError" in [ln for ln in table.splitlines() if " quack " in ln][0]


def fake_quack(monkeypatch, version):
    """An importable quack package of that version (no kernels)."""
    fake = types.ModuleType("quack")
    fake.__version__ = version
    monkeypatch.setitem(sys.modules, "quack", fake)
    monkeypatch.setitem(sys.modules, "quack.gemm_interface",
                        types.ModuleType("quack.gemm_interface"))
    monkeypatch.setattr(peers_fast, "_dist_version", lambda dist, module: module.__version__)


def test_status_reports_versions(monkeypatch):
    fake_quack(monkeypatch, "0.6.5")
    assert peers_fast.status(["moejit", "quack"]) == {"quack": "ok: quack-kernels 0.6.5"}
    monkeypatch.setitem(sys.modules, "sonicmoe", None)  # import raises ImportError
    assert peers_fast.status(["sonicmoe"])["sonicmoe"].startswith("skipped: ")


def test_peer_failing_at_run_time_is_skipped(monkeypatch, cpu_bench):
    def prepare(impl, weights, num_experts, limit):
        def layer(x, sel, rw, swiglu_limit=None):
            raise RuntimeError("no kernel image for this device")
        return layer, {}, peers_fast.contextlib.nullcontext()

    monkeypatch.setattr(peers_fast, "prepare", prepare)
    args = args_for("moejit,quack")
    args.peer_status = {"quack": "ok: fake"}
    rec = bench.run_shape("tiny", DIMS, args, torch.float64, 100.0)
    assert rec["impls"]["quack"] == {"skipped": "RuntimeError: no kernel image for this device"}
    assert rec["impls"]["moejit"]["fwd_ms"] == 1.0


# ---------------------------------------------------------------- the correctness gate

def fake_peer(scale):
    """A peer computing scale * the layer (scale 1: right)."""
    def prepare(impl, weights, num_experts, limit):
        params = {k: w.detach().clone().requires_grad_() for k, w in weights.items()}

        def layer(x, sel, rw, swiglu_limit=None, **p):
            return eager_loop_layer(x, sel, rw, swiglu_limit=swiglu_limit, **p) * scale
        return layer, params, peers_fast.contextlib.nullcontext()
    return prepare


def test_wrong_peer_is_reported_and_not_timed(monkeypatch, capsys, cpu_bench):
    monkeypatch.setattr(peers_fast, "prepare", fake_peer(1.05))  # 5% off
    args = args_for("moejit,sonicmoe")
    args.peer_status = {"sonicmoe": "ok: fake"}
    rec = bench.run_shape("tiny", DIMS, args, torch.float64, 100.0)
    r = rec["impls"]["sonicmoe"]
    assert "fwd_ms" not in r and not r["check"]["ok"]
    assert r["check"]["out_rel_err"] == pytest.approx(0.05, rel=1e-6)
    assert r["check"]["reference"] == "moejit"
    assert len(cpu_bench) == 2  # moejit's forward and forward+backward only
    assert "[tiny] sonicmoe: WRONG, not timed" in capsys.readouterr().err
    table = bench.format_table([rec], 100.0, args.peer_status)
    assert "WRONG (not timed): out 5.0e-02" in table
    assert "ratio_fwd_tflops_vs_sonicmoe" not in rec


def test_right_peer_is_checked_then_timed(monkeypatch, cpu_bench):
    monkeypatch.setattr(peers_fast, "prepare", fake_peer(1.0))
    args = args_for("moejit,quack")
    args.peer_status = {"quack": "ok: fake"}
    rec = bench.run_shape("tiny", DIMS, args, torch.float64, 100.0)
    r = rec["impls"]["quack"]
    assert r["check"]["ok"] and r["check"]["out_rel_err"] < 1e-12
    assert r["fwd_ms"] == 1.0 and len(cpu_bench) == 4
    assert rec["ratio_fwd_bwd_tflops_vs_quack"] == pytest.approx(1.0)


def test_gate_catches_a_wrong_dx_and_nan():
    x = torch.randn(4, 3, dtype=torch.float64)
    dout = torch.randn(4, 3, dtype=torch.float64)
    w = torch.randn(3, 3, dtype=torch.float64)
    ref_out = x @ w
    ref_dx = dout @ w.t()

    def right(x, sel, rw, swiglu_limit=None):
        return x @ w

    def wrong_grad(x, sel, rw, swiglu_limit=None):  # right forward, dx scaled by 1.1
        return x.detach() @ w + 1.1 * (x - x.detach()) @ w

    def nan(x, sel, rw, swiglu_limit=None):
        return x @ w * float("nan")

    assert peers_fast.check(right, {}, x, None, None, dout, ref_out, ref_dx, None)["ok"]
    g = peers_fast.check(wrong_grad, {}, x, None, None, dout, ref_out, ref_dx, None)
    assert not g["ok"] and g["out_rel_err"] < 1e-12 and g["dx_rel_err"] == pytest.approx(0.1)
    assert not peers_fast.check(nan, {}, x, None, None, dout, ref_out, ref_dx, None)["ok"]


# ---------------------------------------------------------------- the wiring, emulated APIs

def emulated_quack_gemm(A, B, out=None, cu_seqlens_m=None, cu_seqlens_k=None, A_idx=None,
                        tuned=True, **kwargs):
    """quack.gemm_interface.gemm for the varlen modes the peer uses."""
    assert not kwargs
    if cu_seqlens_m is not None:  # A [total_M or gathered, K], B [L, K, N] -> [total_M, N]
        rows = A.index_select(0, A_idx.long()) if A_idx is not None else A
        assert cu_seqlens_m.dtype == torch.int32 and (A_idx is None or A_idx.dtype == torch.int32)
        assert int(cu_seqlens_m[-1]) == rows.shape[0] and B.shape[0] + 1 == cu_seqlens_m.numel()
        res = torch.cat([rows[int(cu_seqlens_m[e]):int(cu_seqlens_m[e + 1])] @ B[e]
                         for e in range(B.shape[0])])
    else:  # A [M, total_K], B [total_K, N] -> [L, M, N]
        c = cu_seqlens_k
        res = torch.stack([A[:, int(c[e]):int(c[e + 1])] @ B[int(c[e]):int(c[e + 1])]
                           for e in range(c.numel() - 1)])
    emulated_quack_gemm.tuned.append(tuned)
    return res


@pytest.mark.parametrize("merged", [False, True])
@pytest.mark.parametrize("limit", [None, 0.5])
def test_quack_wiring_matches_the_layer(merged, limit):
    emulated_quack_gemm.tuned = []
    x, sel, rw, weights, dout = cpu_inputs(*DIMS, None, "topk", merged, seed=3)
    sel[:, 0] = 0  # expert 0 crowded, expert E-1 maybe empty
    layer, params, scope = peers_fast._prepare_quack(weights, DIMS[1], limit, tuned=False,
                                                     gemm=emulated_quack_gemm)
    with scope:
        out = layer(x, sel, rw, swiglu_limit=limit, **params)
        got = torch.autograd.grad(out, [x, rw, params["w1"], params["w2"]], dout)
    ref = eager_loop_layer(x, sel, rw, swiglu_limit=limit, **weights)
    want = torch.autograd.grad(ref, [x, rw] + list(weights.values()), dout)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(got[0], want[0])  # dx
    torch.testing.assert_close(got[1], want[1])  # d routing weights
    dw1 = want[2] if merged else torch.cat([want[2], want[3]], dim=1)
    torch.testing.assert_close(got[2], dw1)
    torch.testing.assert_close(got[3], want[-1])
    assert emulated_quack_gemm.tuned and not any(emulated_quack_gemm.tuned)


@pytest.mark.parametrize("impl, tuned", [("quack", False), ("quack-tuned", True)])
def test_prepare_builds_both_quack_peers(monkeypatch, impl, tuned):
    """prepare() by name (as run_peer calls it): quack untuned, quack-tuned as VeOmni calls it."""
    emulated_quack_gemm.tuned = []
    module = types.ModuleType("quack.gemm_interface")
    module.gemm = emulated_quack_gemm
    monkeypatch.setattr(peers_fast, "_import", lambda name: module)
    x, sel, rw, weights, dout = cpu_inputs(*DIMS, None, "topk", True, seed=4)
    layer, params, scope = peers_fast.prepare(impl, weights, DIMS[1], None)
    with scope:
        out = layer(x, sel, rw, **params)
    torch.testing.assert_close(out, eager_loop_layer(x, sel, rw, **weights))
    assert emulated_quack_gemm.tuned and set(emulated_quack_gemm.tuned) == {tuned}


def test_quack_peer_refuses_sonics_older_quack(monkeypatch):
    """SonicMoE's set carries quack-kernels 0.3.x with the same keywords: the quack row must not
    quietly time that one as VeOmni's 0.6 backend."""
    fake_quack(monkeypatch, "0.3.11")
    status = peers_fast.status(["quack"])["quack"]
    assert status.startswith("skipped: ") and "0.3.11" in status


def install_fake_sonicmoe(monkeypatch):
    """A sonicmoe package whose moe_general_routing_inputs computes its documented math in
    PyTorch (w1 [2I,H,E], w2 [H,I,E], score applied after fc2), checking the argument contract."""
    from enum import Enum

    seen = {}

    def moe_general_routing_inputs(x, router_scores, token_indices, expert_indices, w1, b1, w2,
                                   b2, E, stream_id, activation_type,
                                   is_inference_mode_enabled=False, concat_layout=False):
        assert b1 is None and b2 is None and E == w2.shape[-1] == w1.shape[-1]
        assert token_indices.dtype == expert_indices.dtype == torch.int32
        assert bool((token_indices[1:] >= token_indices[:-1]).all())  # sorted ascending
        assert activation_type.value == "swiglu" and concat_layout
        seen["gemm"] = fwd.gemm
        inter = w1.shape[0] // 2
        out = torch.zeros_like(x)
        for r in range(router_scores.numel()):
            t, e = int(token_indices[r]), int(expert_indices[r])
            h = w1[:, :, e] @ x[t]
            a = torch.nn.functional.silu(h[:inter]) * h[inter:]
            out = out.index_add(0, torch.tensor([t]), (router_scores[r] * (w2[:, :, e] @ a))[None])
        return out, None

    class ActivationType(Enum):
        SWIGLU = "swiglu"

    pkg = types.ModuleType("sonicmoe")
    pkg.moe_general_routing_inputs = moe_general_routing_inputs
    enums = types.ModuleType("sonicmoe.enums")
    enums.ActivationType = ActivationType
    fwd = types.ModuleType("sonicmoe.functional.forward")
    bwd = types.ModuleType("sonicmoe.functional.backward")

    def gemm(*a, tuned=True, **k):
        return tuned
    fwd.gemm = fwd.gemm_gated = bwd.gemm = bwd.gemm_dgated = gemm
    for name, mod in {"sonicmoe": pkg, "sonicmoe.enums": enums, "sonicmoe.functional":
                      types.ModuleType("sonicmoe.functional"),
                      "sonicmoe.functional.forward": fwd,
                      "sonicmoe.functional.backward": bwd}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: types.SimpleNamespace(cuda_stream=0))
    return seen, fwd, bwd, gemm


@pytest.mark.parametrize("impl", ["sonicmoe", "sonicmoe-tuned"])
def test_sonic_wiring_matches_the_layer(monkeypatch, impl):
    seen, fwd, bwd, gemm = install_fake_sonicmoe(monkeypatch)
    x, sel, rw, weights, dout = cpu_inputs(*DIMS, None, "topk", False, seed=5)
    layer, params, scope = peers_fast.prepare(impl, weights, DIMS[1], None)
    w1, w2 = params["w1"], params["w2"]
    assert w1.shape == (2 * DIMS[3], DIMS[2], DIMS[1]) and w2.shape == (DIMS[2], DIMS[3], DIMS[1])
    with scope:
        out = layer(x, sel, rw, **params)
        (dx,) = torch.autograd.grad(out, [x], dout)
    ref = eager_loop_layer(x, sel, rw, **weights)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(dx, torch.autograd.grad(ref, [x], dout)[0])
    assert seen["gemm"]() is (impl == "sonicmoe-tuned")  # untuned: tuned=False while in scope
    assert fwd.gemm is gemm and bwd.gemm_dgated is gemm  # restored after
    with pytest.raises(peers_fast.PeerUnavailable):
        peers_fast.prepare(impl, weights, DIMS[1], 7.0)  # no SwiGLU limit in SonicMoE
