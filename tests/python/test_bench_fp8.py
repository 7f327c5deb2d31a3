"""python -m moejit_bench's FP8 parts (issue 31) on the CPU: --impls parsing, the registry's
new names, the table with synthetic results (FP8 ceiling header, ratios, fraction of the FP8
ceiling), the row-wise quantizers against float64, and the scaled_grouped_mm peer's layer
(forward and every gradient) against a float64 reference through an emulation of
torch._scaled_grouped_mm that first runs torch's own meta checks of the real op (dtypes,
row-/column-major operands, scale shapes). The real op needs CUDA sm_89+: its check against
the emulation runs only there and is skipped here with the reason."""

import math

import pytest

torch = pytest.importorskip("torch")

from moejit_bench import layer as bench, peers_fp8  # noqa: E402
from moejit_bench.peers import (eager_loop_layer, grouped_mm_layer,  # noqa: E402
                                routing_all_to_expert0, routing_topk)

E4M3 = torch.float8_e4m3fn
REAL_SCALED_GROUPED_MM = torch._scaled_grouped_mm  # before any test patches it


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# ------------------------------------------------------------------ parsing, registry, table


def test_impls_parse_and_registry():
    args = bench.parse_args(["--impls", "moejit,moejit-fp8,scaled_grouped_mm"])
    assert args.impls == ["moejit", "moejit-fp8", "scaled_grouped_mm"]
    assert set(bench.FP8_IMPLS) == {"moejit-fp8", "moejit-fp8-cached", "scaled_grouped_mm"}
    assert bench.LAYERS["moejit-fp8"] is bench.moejit_fp8_layer
    # the cached row is the same layer, timed inside one fp8_weight_cache() block
    assert bench.LAYERS["moejit-fp8-cached"] is bench.moejit_fp8_layer
    assert type(bench._weight_cache_block("moejit-fp8")).__name__ == "nullcontext"
    assert "moejit-fp8-cached" not in bench.IMPLS
    assert bench.LAYERS["scaled_grouped_mm"] is peers_fp8.scaled_grouped_mm_layer
    assert "moejit-fp8" not in bench.IMPLS  # opt-in: the default run is unchanged
    with pytest.raises(SystemExit):
        bench.parse_args(["--impls", "moejit,fp8-moejit"])


def test_moejit_fp8_layer_passes_the_recipe(monkeypatch):
    import moejit.torch as mt
    seen = []
    monkeypatch.setattr(mt, "fused_moe", lambda *a, **kw: seen.append(("split", kw)) or 1)
    monkeypatch.setattr(mt, "fused_moe_merged", lambda *a, **kw: seen.append(("merged", kw)) or 2)
    assert bench.moejit_fp8_layer(0, 0, 0, w_gate=0, w_up=0, w_down=0) == 1
    assert bench.moejit_fp8_layer(0, 0, 0, w_gate_up=0, w_down=0, swiglu_limit=7.0) == 2
    assert seen == [("split", {"recipe": "fp8-block"}), ("merged", {"recipe": "fp8-block"})]


def synthetic_record():
    def row(fwd_tf, fb_tf, **extra):
        return {"fwd_ms": 1.0, "fwd_tflops": fwd_tf, "fwd_bwd_ms": 3.0, "fwd_bwd_tflops": fb_tf,
                "bwd_tflops": fb_tf, "fwd_bwd_of_dense": fb_tf / 800.0, **extra}
    rec = {"shape": "qwen3-30b-a3b", "T": 1, "E": 1, "H": 1, "I": 1, "k": 1, "impls": {
        "moejit": row(500.0, 400.0),
        "moejit-fp8": row(1000.0, 600.0, fwd_of_fp8_dense=0.5, fwd_bwd_of_fp8_dense=0.3,
                          out_rel_err_vs_bf16=0.031),
        "scaled_grouped_mm": row(400.0, 300.0, fwd_of_fp8_dense=0.2, fwd_bwd_of_fp8_dense=0.15,
                                 out_rel_err_vs_bf16=0.045),
    }}
    bench.fp8_ratios(rec)
    return rec


def test_fp8_ratios():
    rec = synthetic_record()
    assert rec["ratio_fwd_tflops_moejit-fp8_vs_moejit"] == pytest.approx(2.0)
    assert rec["ratio_fwd_bwd_tflops_moejit-fp8_vs_moejit"] == pytest.approx(1.5)
    assert rec["ratio_fwd_tflops_moejit-fp8_vs_scaled_grouped_mm"] == pytest.approx(2.5)
    assert rec["ratio_fwd_bwd_tflops_moejit-fp8_vs_scaled_grouped_mm"] == pytest.approx(2.0)
    del rec["impls"]["scaled_grouped_mm"]["fwd_bwd_tflops"]
    rec2 = {"impls": rec["impls"]}
    bench.fp8_ratios(rec2)
    assert "ratio_fwd_bwd_tflops_moejit-fp8_vs_scaled_grouped_mm" not in rec2
    assert "ratio_fwd_tflops_moejit-fp8_vs_scaled_grouped_mm" in rec2


def test_table_with_fp8():
    table = bench.format_table([synthetic_record()], 800.0, None, 1600.0)
    lines = table.splitlines()
    assert lines[0] == "dense 8192^3 GEMM ceiling: 800 TFLOP/s"
    assert lines[1] == ("dense 8192^3 FP8 e4m3 row-wise GEMM ceiling (torch._scaled_mm): "
                        "1600 TFLOP/s")
    assert "moejit-fp8/moejit: fwd 2.00x, f+b 1.50x" in table
    assert "moejit-fp8/scaled_grouped_mm: fwd 2.50x, f+b 2.00x" in table
    assert "moejit-fp8 of FP8 dense: fwd 50.0%, f+b 30.0%" in table
    assert "scaled_grouped_mm of FP8 dense: fwd 20.0%, f+b 15.0%" in table
    assert "moejit-fp8 |out-bf16|/|bf16| 3.1e-02" in table
    rows = [ln for ln in lines if ln.startswith("qwen3-30b-a3b")]
    assert [ln.split()[1] for ln in rows] == ["moejit", "moejit-fp8", "scaled_grouped_mm"]
    # the impl column widens for the longest name: every row's numbers stay under the header's
    header = next(ln for ln in lines if ln.startswith("shape"))
    end = header.index("fwd ms") + len("fwd ms")
    assert all(ln[end - len("1.000"):end] == "1.000" for ln in rows), table


def test_table_without_fp8_is_unchanged():
    rec = synthetic_record()
    for impl in bench.FP8_IMPLS:
        rec["impls"].pop(impl, None)
    rec = {k: v for k, v in rec.items() if not k.startswith("ratio_")}
    table = bench.format_table([rec], 800.0)
    assert "FP8" not in table and "fp8" not in table
    # a saved run without the key (older JSON) prints as before
    assert bench.format_table([rec], 800.0, None, None) == table


# ------------------------------------------------------------------ quantizers vs float64


def test_quantize_rows_against_float64():
    g = torch.Generator().manual_seed(1)
    rows = torch.randn(6, 256, dtype=torch.float64, generator=g)
    rows[0] *= 1e4          # large
    rows[1] *= 1e-4         # small
    rows[2] = 0.0           # all zero
    rows[3, 7] = -3e3       # one outlier
    rows[4, :] = 1.0        # constant
    for dtype in (torch.float32, torch.bfloat16):
        t = rows.to(dtype)
        q, scale = peers_fp8.quantize_rows(t)
        assert q.dtype == E4M3 and q.shape == t.shape and q.is_contiguous()
        assert scale.dtype == torch.float32 and scale.shape == (6,)
        t64 = t.double()
        amax = t64.abs().amax(dim=1)
        nonzero = amax > 0
        expect = torch.where(nonzero, amax / 448.0, torch.full_like(amax, 1e-12 / 448.0))
        assert torch.allclose(scale.double(), expect, rtol=1e-6, atol=0)
        # each row's largest magnitude maps to +-448 (e4m3's largest code)
        codes = q.double()
        assert torch.equal(codes.abs().amax(dim=1)[nonzero], torch.full((5,), 448.0,
                                                                        dtype=torch.float64))
        back = peers_fp8.dequantize_rows(q, scale, torch.float64)
        # e4m3: 3 mantissa bits -> half an ulp is 2^-4 relative for normal codes; below the
        # smallest normal (2^-6) the spacing is 2^-9 of the scale
        bound = 2.0 ** -4 * t64.abs() + 2.0 ** -10 * scale.double().unsqueeze(1) * 1.0001
        assert bool(((back - t64).abs() <= bound).all())
        assert torch.equal(back[2], torch.zeros(256, dtype=torch.float64))
        # per-row scaling: the small row keeps its precision
        assert rel(back[1], t64[1]) < 0.04


def test_dequantize_shapes_3d():
    w = torch.randn(3, 5, 32)
    q, scale = peers_fp8.quantize_rows(w)
    assert scale.shape == (3, 5)
    assert peers_fp8.dequantize_rows(q, scale).shape == (3, 5, 32)
    assert rel(peers_fp8.dequantize_rows(q, scale), w) < 0.04


# ------------------------------------------------------------------ the peer's layer


def emulated_scaled_grouped_mm(calls):
    """torch._scaled_grouped_mm for the 2d-3d case in float64: torch's meta checks of the real
    op on meta tensors of the same shapes, strides and dtypes first."""
    def meta(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    def op(a, b, scale_a, scale_b, offs=None, bias=None, scale_result=None, out_dtype=None,
           use_fast_accum=False):
        shape = REAL_SCALED_GROUPED_MM(meta(a), meta(b), meta(scale_a), meta(scale_b),
                                       offs=meta(offs), out_dtype=out_dtype,
                                       use_fast_accum=use_fast_accum).shape
        assert a.dim() == 2 and b.dim() == 3, "the peer uses the 2d-3d case only"
        calls.append(("scaled", tuple(a.shape), tuple(b.shape)))
        out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64)
        a64 = a.double() * scale_a.double().unsqueeze(1)
        start = 0
        for e, end in enumerate(offs.tolist()):
            b64 = b[e].double() * scale_b[e].double().unsqueeze(0)
            out[start:end] = a64[start:end] @ b64
            start = end
        assert tuple(out.shape) == tuple(shape)
        return out.to(out_dtype or torch.bfloat16)
    return op


@pytest.fixture
def emulated(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "_scaled_grouped_mm", emulated_scaled_grouped_mm(calls))
    real_grouped = torch._grouped_mm

    def grouped(*a, **kw):
        calls.append(("bf16", tuple(a[0].shape), tuple(a[1].shape)))
        return real_grouped(*a, **kw)
    monkeypatch.setattr(torch, "_grouped_mm", grouped)
    return calls


def inputs(T, E, H, I, k, merged, routing="topk", empty_experts=0, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    if routing == "expert0":
        sel, rw = routing_all_to_expert0(T, k, torch.float32, "cpu", g)
    else:
        sel, rw = routing_topk(T, E, k, torch.float32, "cpu", g, empty_experts=empty_experts)
    x = (torch.randn(T, H, generator=g) * scale).to(torch.bfloat16)

    def weight(*shape, fan_in):
        return (torch.randn(*shape, generator=g) * fan_in ** -0.5).to(torch.bfloat16)
    weights = bench.layer_weights(E, H, I, merged, weight)
    dout = torch.randn(T, H, generator=g).to(torch.bfloat16)
    return x, sel, rw.to(torch.bfloat16), weights, dout


CASES = {
    "topk-split": dict(T=40, E=4, H=64, I=32, k=2, merged=False),
    "topk-merged": dict(T=40, E=4, H=64, I=32, k=2, merged=True),
    "duplicates-all-to-expert0": dict(T=16, E=4, H=32, I=32, k=3, merged=True,
                                      routing="expert0"),
    "empty-experts": dict(T=24, E=6, H=32, I=16, k=2, merged=False, empty_experts=3),
    "T=1": dict(T=1, E=4, H=32, I=16, k=2, merged=True),
    "large-magnitude": dict(T=32, E=4, H=32, I=16, k=2, merged=False, scale=1e3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_peer_against_float64(emulated, case):
    c = dict(CASES[case])
    merged = c["merged"]
    x, sel, rw, weights, dout = inputs(**c)
    leaves = [x, rw, *weights.values()]
    ours = [t.clone().requires_grad_() for t in leaves]
    out = peers_fp8.scaled_grouped_mm_layer(ours[0], sel, ours[1],
                                            **dict(zip(weights, ours[2:])))
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    grads = torch.autograd.grad(out, ours, dout)

    ref_leaves = [t.double().requires_grad_() for t in leaves]
    ref = eager_loop_layer(ref_leaves[0], sel, ref_leaves[1],
                           **dict(zip(weights, ref_leaves[2:])))
    ref_grads = torch.autograd.grad(ref, ref_leaves, dout.double())

    err = rel(out, ref)
    assert 1e-3 < err < 0.1, f"{case}: forward rel err {err:.3g} (FP8 expected ~3e-2)"
    names = ["x", "routing_weights", *weights]
    for name, got, want in zip(names, grads, ref_grads):
        assert got is not None and got.shape == want.shape, name
        assert torch.isfinite(got.float()).all(), name
        if want.norm() > 0:
            e = rel(got, want)
            assert e < 0.15, f"{case}: d{name} rel err {e:.3g}"
    # which GEMMs ran: fc1 (1 merged / 2 split) + fc2 forward and 2 dgrads in FP8,
    # one bf16 wgrad per weight
    n_fc1 = 1 if merged else 2
    kinds = [kind for kind, _, _ in emulated]
    assert kinds.count("scaled") == n_fc1 + 1 + 2
    assert kinds.count("bf16") == n_fc1 + 1


def test_peer_is_not_bf16(emulated):
    """The peer quantizes: it differs from the bf16 grouped_mm layer by far more than bf16
    rounding, and by about FP8's."""
    x, sel, rw, weights, _ = inputs(T=64, E=4, H=64, I=32, k=2, merged=True, seed=3)
    fp8 = peers_fp8.scaled_grouped_mm_layer(x, sel, rw, **weights)
    bf16 = grouped_mm_layer(x, sel, rw, **weights)
    assert 5e-3 < rel(fp8, bf16) < 0.1


def test_run_shape_fp8_rows(monkeypatch, emulated):
    """bench.run_shape with the FP8 rows on the CPU: moejit played by the bf16 grouped_mm layer,
    moejit-fp8 by the emulated peer; ratios, FP8-ceiling fractions and the error vs bf16."""
    def cpu_inputs(T, E, H, I, k, dtype, routing, merged, seed):
        x, sel, rw, weights, dout = inputs(T, E, H, I, k, merged, seed=seed)
        x.requires_grad_()
        rw.requires_grad_()
        for w in weights.values():
            w.requires_grad_()
        return x, sel, rw, weights, dout

    ms = {"moejit": 2.0, "moejit-fp8": 1.0, "scaled_grouped_mm": 4.0}
    current = {}

    def fake_time_ms(fn, warmup, reps):
        fn()
        return [ms[current["impl"]]] * reps

    real_bench_impl = bench.bench_impl

    def bench_impl(name, *a, **kw):
        current["impl"] = name
        return real_bench_impl(name, *a, **kw)

    monkeypatch.setattr(bench, "make_inputs", cpu_inputs)
    monkeypatch.setattr(bench, "time_ms", fake_time_ms)
    monkeypatch.setattr(bench, "bench_impl", bench_impl)
    monkeypatch.setitem(bench.LAYERS, "moejit", grouped_mm_layer)
    monkeypatch.setitem(bench.LAYERS, "moejit-fp8", peers_fp8.scaled_grouped_mm_layer)
    args = bench.parse_args(["--impls", "moejit,moejit-fp8,scaled_grouped_mm", "--warmup", "0",
                             "--reps", "2", "--layout", "merged"])
    rec = bench.run_shape("tiny", (32, 4, 64, 32, 2), args, torch.bfloat16, 100.0, 200.0)
    impls = rec["impls"]
    assert all("error" not in impls[n] for n in args.impls), impls
    assert rec["ratio_fwd_tflops_moejit-fp8_vs_moejit"] == pytest.approx(2.0)
    assert rec["ratio_fwd_tflops_moejit-fp8_vs_scaled_grouped_mm"] == pytest.approx(4.0)
    fp8 = impls["moejit-fp8"]
    assert fp8["fwd_of_fp8_dense"] == pytest.approx(fp8["fwd_tflops"] / 200.0)
    assert fp8["fwd_bwd_of_fp8_dense"] == pytest.approx(fp8["fwd_bwd_tflops"] / 200.0)
    assert 5e-3 < fp8["out_rel_err_vs_bf16"] < 0.1
    assert "fwd_of_fp8_dense" not in impls["moejit"]
    table = bench.format_table([rec], 100.0, None, 200.0)
    assert "moejit-fp8/moejit: fwd 2.00x" in table


# ------------------------------------------------------------------ the real op (GPU only)


def _real_op_reason():
    if not torch.cuda.is_available():
        return "torch._scaled_grouped_mm needs a CUDA device (none here)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return f"torch._scaled_grouped_mm needs sm_89+ (this device is sm_{major}{minor})"
    return None


@pytest.mark.skipif(_real_op_reason() is not None, reason=str(_real_op_reason()))
def test_real_op_matches_emulation():
    calls = []
    emulate = emulated_scaled_grouped_mm(calls)
    g = torch.Generator().manual_seed(5)
    E, H, N = 4, 256, 128
    counts = [0, 37, 5, 86]  # an empty group, uneven sizes
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    a = torch.randn(sum(counts), H, generator=g).to(torch.bfloat16)
    w = (torch.randn(E, N, H, generator=g) * H ** -0.5).to(torch.bfloat16)
    aq, sa = peers_fp8.quantize_rows(a)
    wq, sw = peers_fp8.quantize_rows(w)
    want = emulate(aq, wq.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16)
    got = peers_fp8._fp8_grouped(aq.cuda(), sa.cuda(), wq.cuda(), sw.cuda(), offs.cuda())
    assert rel(got.cpu(), want) < 1e-2
    assert not math.isnan(got.float().sum().item())


# ------------------------------------------------------------------ dev/fp8_train_curve.py (CPU)


def train_curve():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "dev" / "fp8_train_curve.py"
    spec = importlib.util.spec_from_file_location("fp8_train_curve", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_curve_args():
    tc = train_curve()
    args = tc.parse_args([])
    assert (args.steps, args.lr, args.batch, args.seq, args.hidden, args.intermediate,
            args.experts, args.top_k, args.layers, args.vocab) == \
        (300, 1e-3, 8, 256, 512, 256, 8, 2, 4, 1000)
    assert args.recipes == ["bf16", "fp8-block"] and args.tail == 50
    assert args.intermediate % 128 == 0 and args.hidden % 128 == 0  # fp8-block's shapes
    dry = tc.parse_args(["--dry-run"])
    assert dry.steps == 1 and dry.tail == 1 and dry.seq <= 64
    for bad in (["--recipes", "bf16,fp4"], ["--recipes", "bf16,bf16"], ["--top-k", "9"],
                ["--steps", "0"], ["--hidden", "100"]):
        with pytest.raises(SystemExit):
            tc.parse_args(bad)


def test_train_curve_data_is_fixed_and_learnable():
    tc = train_curve()
    args = tc.parse_args(["--steps", "3", "--batch", "2", "--seq", "32", "--vocab", "50"])
    a, entropy = tc.make_data(args)
    b, _ = tc.make_data(args)
    assert a.shape == (3, 2, 32) and torch.equal(a, b)
    assert 0 <= int(a.min()) and int(a.max()) < 50
    assert 0 < entropy < math.log(4) < math.log(50)  # 4 successors: far below uniform
    g = torch.Generator().manual_seed(0)
    chain = tc.MarkovChain(50, 4, g)
    seq = chain.sample(1, 200, g)[0]
    for prev, nxt in zip(seq[:-1].tolist(), seq[1:].tolist()):
        assert nxt in chain.successors[prev].tolist()


def test_train_curve_eager_stand_in_matches_reference():
    tc = train_curve()
    x, sel, rw, weights, _ = inputs(T=20, E=4, H=32, I=16, k=2, merged=True, seed=7)
    x, rw = x.double(), rw.double()
    w = {k: v.double() for k, v in weights.items()}
    got = tc.eager_experts(x, sel, rw, w["w_gate_up"], w["w_down"])
    want = eager_loop_layer(x, sel, rw, **w)
    assert rel(got, want) < 1e-12


def test_train_curve_swap_keeps_the_model():
    """The swapped experts modules compute what the model's own did (CPU, eager stand-in)."""
    pytest.importorskip("transformers")
    tc = train_curve()
    args = tc.parse_args(["--hidden", "128", "--intermediate", "128", "--layers", "1",
                          "--heads", "2", "--vocab", "64", "--seq", "16", "--experts", "4"])
    model = tc.build_model(args, "bf16")
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits.float()
    assert tc.swap_experts(model, "bf16", "cpu") == 1
    assert isinstance(model.model.layers[0].mlp.experts, tc.RecipeExperts)
    with torch.no_grad():
        after = model(input_ids=ids).logits.float()
    assert rel(after, before) < 2e-2
