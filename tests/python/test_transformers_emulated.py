"""moejit as transformers' experts backend (moejit.integrations.transformers), tested on the
CPU: every family's model, built from a tiny random config with experts_implementation
"moejit" and "eager", gives the same logits and gradients of every parameter. The library's
launches are replaced by a float32 reference (moejit._op._forward / _backward patched, CPU
tensors accepted as if on the GPU, as test_torch_op_emulated.py does), so everything else is
the real code: the integration, moejit.torch, the custom ops with their fake implementations
and autograd, torch.compile. gpt-oss's extended call (activation="gpt_oss", interleaved,
transposed, biases) is emulated by a float32 autograd reference of that signature where the
installed moejit lacks it. test_transformers_gpu.py repeats the comparisons on the kernels.

Also: register() is idempotent and has no import-time side effects; fallbacks (dtype, device,
activation, sizes, layout, gate) run the eager forward exactly, with one warning per reason;
the op receives the model's own parameter tensors (no copy); EP sentinels, int32 ids, fp32 /
bf16 routing weights and leading shapes.
"""

import logging
import os
import subprocess
import sys

import pytest

from optional_imports import torch_and_transformers

torch, hf_moe = torch_and_transformers()

import torch._dynamo  # noqa: E402
import torch._dynamo.testing  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import moejit.torch as mt  # noqa: E402
from moejit.integrations import transformers as mjt  # noqa: E402

from hf_families import (FAMILIES, build, experts_modules, model_pair, rel,  # noqa: E402
                         run)
from hf_emulation import Emulation, reference_layer  # noqa: E402

BF16 = torch.bfloat16
SWIGLU_FAMILIES = [f for f in FAMILIES if f != "gpt_oss"]
# ‖moejit − eager‖ / ‖eager‖ of a bf16 model's logits: the emulation computes each expert in
# float32 and rounds once, eager rounds after every matmul; a few bf16 ulps over two layers
# (measured 0.8e-2 to 1.5e-2; a wrong layout gives ~1).
LOGITS_TOL = 2e-2
# Logits and every parameter's gradient of a float32 model (measured: <= 1.5e-5).
FP32_TOL = 1e-4
LOG_NAME = "moejit.integrations.transformers"


pytestmark = pytest.mark.usefixtures("fresh_transformers_backend")  # conftest.py
# Fixtures emulated and extended: conftest.py.


# ------------------------------------------------------------------ helpers


def assert_same_training_step(eager, fused, ids, logits_tol, grad_tol):
    le, loss_e, ge = run(eager, ids)
    lf, loss_f, gf = run(fused, ids)
    assert rel(lf, le) < logits_tol, rel(lf, le)
    assert abs(loss_f.item() - loss_e.item()) < logits_tol * abs(loss_e.item())
    assert ge.keys() == gf.keys()
    worst = {}
    for name, g in ge.items():
        assert g is not None and gf[name] is not None, name
        worst[name] = rel(gf[name], g)
    bad = {n: e for n, e in worst.items() if e >= grad_tol}
    assert not bad, bad
    return max(worst.values())


def tokens(batch=2, seq=16, vocab=128, seed=0):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def eager_step_warnings(caplog, emulated, eager, fused, ids):
    """One training step of each model: the fused model's logits and every gradient equal the
    eager model's exactly and the library was not called. Returns the backend's warnings."""
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        le, _, ge = run(eager, ids)
        lf, _, gf = run(fused, ids)
    assert torch.equal(lf, le)
    assert all(torch.equal(gf[n], g) for n, g in ge.items())
    assert emulated.forward_calls == 0
    return [r.getMessage() for r in caplog.records if r.name == LOG_NAME]


# ------------------------------------------------------------------ registration


def test_register_is_idempotent_and_class_wide():
    before = dict(hf_moe.ExpertsInterface._global_mapping)
    mjt.register()
    mjt.register()
    assert hf_moe.ExpertsInterface._global_mapping == before
    assert hf_moe.ALL_EXPERTS_FUNCTIONS["moejit"] is mjt.moejit_experts_forward
    assert hf_moe.ExpertsInterface()["moejit"] is mjt.moejit_experts_forward
    assert list(hf_moe.ALL_EXPERTS_FUNCTIONS.keys()).count("moejit") == 1
    assert mjt.is_registered()


def test_importing_moejit_neither_imports_transformers_nor_registers():
    code = (
        "import sys, moejit, moejit.integrations\n"
        "import moejit.integrations.transformers as mjt\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
        "from transformers.integrations import moe\n"
        "assert 'moejit' not in moe.ALL_EXPERTS_FUNCTIONS, 'registered on import'\n"
        "assert not mjt.is_registered()\n"
        "mjt.register()\n"
        "assert mjt.is_registered()\n"
        "print('ok')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_extended_call_is_detected_from_the_signature(monkeypatch):
    def plain(x, selected_experts, routing_weights, w_gate_up, w_down, swiglu_limit=None, *,
              main_grads=None):
        pass

    def extended(x, selected_experts, routing_weights, w_gate_up, w_down, swiglu_limit=None,
                 *, main_grads=None, activation="swiglu", alpha=None, interleaved=False,
                 weights_transposed=False, b_gate_up=None, b_down=None):
        pass
    for fn, expected in ((plain, False), (extended, True)):
        monkeypatch.setattr(mjt, "_fused_moe_merged", lambda fn=fn: fn)
        mjt.register()
        assert mjt._extended_api is expected
    monkeypatch.undo()
    mjt.register()
    params = __import__("inspect").signature(mt.fused_moe_merged).parameters
    assert mjt._extended_api is ("interleaved" in params)


def test_unregistered_name_is_rejected_by_transformers(monkeypatch):
    """Without register(), transformers refuses the name (so register() is what enables it)."""
    monkeypatch.delitem(hf_moe.ExpertsInterface._global_mapping, "moejit")
    with pytest.raises(ValueError, match="moejit"):
        build("mixtral", "moejit")


# ------------------------------------------------------------------ every family


@pytest.mark.parametrize("family", SWIGLU_FAMILIES)
def test_family_matches_eager_float32(family, monkeypatch):
    """A float32 model (the op's emulation let through in float32): logits and the gradient
    of every parameter agree with eager to float32 rounding, so any layout or mapping error
    shows."""
    emulated = Emulation(monkeypatch, allow_float32=True)
    eager, fused = model_pair(family, dtype=torch.float32, seed=FAMILIES.index(family))
    assert_same_training_step(eager, fused, tokens(seed=11), FP32_TOL, FP32_TOL)
    layers = len(experts_modules(fused))
    assert emulated.forward_calls == layers and emulated.backward_calls == layers
    # the op read the model's own parameters: no copy, no transpose, no .contiguous()
    ptrs = [(m.gate_up_proj.data_ptr(), m.down_proj.data_ptr()) for m in experts_modules(fused)]
    assert emulated.weight_ptrs == ptrs


@pytest.mark.parametrize("family", SWIGLU_FAMILIES)
def test_family_matches_eager_bf16(family, emulated):
    """bf16: logits and loss within bf16 rounding (the gradients of a bf16 model differ by
    more than that between any two implementations; the float32 test checks them)."""
    eager, fused = model_pair(family, seed=FAMILIES.index(family))
    le, loss_e, _ = run(eager, tokens(seed=11))
    lf, loss_f, gf = run(fused, tokens(seed=11))
    assert rel(lf, le) < LOGITS_TOL, rel(lf, le)
    assert abs(loss_f.item() - loss_e.item()) < LOGITS_TOL * abs(loss_e.item())
    assert all(g is not None and torch.isfinite(g).all() for g in gf.values())
    assert emulated.forward_calls == emulated.backward_calls == len(experts_modules(fused))


def test_gpt_oss_matches_eager_through_the_extended_call(extended, monkeypatch):
    Emulation(monkeypatch, allow_float32=True)
    eager, fused = model_pair("gpt_oss", dtype=torch.float32, seed=5)
    assert_same_training_step(eager, fused, tokens(seed=12), FP32_TOL, FP32_TOL)
    mods = experts_modules(fused)
    assert len(extended.calls) == len(mods)
    for call, m in zip(extended.calls, mods):
        assert call["w1"] is m.gate_up_proj and call["w2"] is m.down_proj
        assert call["b1"] is m.gate_up_proj_bias and call["b2"] is m.down_proj_bias
        assert call["activation"] == "gpt_oss" and call["interleaved"]
        assert call["transposed"] and call["alpha"] == pytest.approx(1.702)
        assert call["limit"] == pytest.approx(7.0)


def test_gpt_oss_falls_back_without_the_extended_call(monkeypatch, emulated, caplog):
    monkeypatch.setattr(mjt, "_extended_api", False)
    eager, fused = model_pair("gpt_oss", seed=6)
    records = eager_step_warnings(caplog, emulated, eager, fused, tokens(seed=13))
    assert len(records) == 1 and "interleaved" in records[0]


def test_swapping_gate_and_up_is_caught(monkeypatch):
    """The comparison can fail: the reference with gate and up swapped is far off."""
    Emulation(monkeypatch, swap_gate_up=True, allow_float32=True)
    eager, fused = model_pair("qwen3_moe", dtype=torch.float32, seed=3)
    with pytest.raises(AssertionError):
        assert_same_training_step(eager, fused, tokens(seed=14), FP32_TOL, FP32_TOL)


def test_compiled_model_matches_eager_moejit(emulated):
    eager_moejit = model_pair("qwen3_moe", seed=4)[1]
    ids = tokens(seed=15)
    ref_logits, ref_loss, ref_grads = run(eager_moejit, ids)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(eager_moejit, backend=counter)
    logits, loss, grads = run(compiled, ids, owner=eager_moejit)
    assert torch.equal(logits, ref_logits) and torch.equal(loss, ref_loss)
    for name, g in ref_grads.items():
        assert torch.allclose(grads[name].float(), g.float(), rtol=1e-2, atol=1e-5), name
    graphs = "\n".join(str(g.graph) for g in counter.graphs)
    assert "moejit.fused_moe_merged" in graphs


def test_experts_module_compiles_fullgraph(emulated):
    """The moejit path itself has no graph break (fullgraph=True on one experts module)."""
    model = model_pair("mixtral", seed=8)[1]
    experts = experts_modules(model)[0]
    x = torch.randn(2, 12, 64).to(BF16)
    sel = torch.rand(2, 12, 8).topk(2, -1).indices
    rw = torch.rand(2, 12, 2)
    expected = experts(x.view(-1, 64), sel.view(-1, 2), rw.view(-1, 2))
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(experts, backend=counter, fullgraph=True)
    out = compiled(x.view(-1, 64), sel.view(-1, 2), rw.view(-1, 2))
    assert torch.equal(out, expected) and counter.frame_count == 1


# ------------------------------------------------------------------ the layer's inputs


def experts_layer(seed=0):
    model = model_pair("qwen3_moe", seed=seed)[1]
    return experts_modules(model)[0]


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32, torch.int16])
@pytest.mark.parametrize("rw_dtype", [torch.float32, BF16, torch.float16, torch.float64])
def test_routing_dtypes_and_leading_shape(emulated, index_dtype, rw_dtype):
    experts = experts_layer(seed=9)
    g = torch.Generator().manual_seed(int(rw_dtype.itemsize) * 10 + index_dtype.itemsize)
    x = torch.randn(3, 5, 64, generator=g).to(BF16).requires_grad_()
    sel = torch.rand(3, 5, 8, generator=g).topk(2, -1).indices.to(index_dtype)
    rw = torch.rand(3, 5, 2, generator=g).to(rw_dtype).requires_grad_()
    out = experts(x, sel, rw)
    assert out.shape == x.shape and out.dtype == BF16
    ref = reference_layer(x, sel, rw, experts.gate_up_proj, experts.down_proj)
    assert rel(out.reshape(-1, 64), ref) < 1e-2
    out.float().square().sum().backward()
    assert x.grad.shape == x.shape and rw.grad.dtype == rw_dtype
    assert rw.grad.abs().sum() > 0 and experts.gate_up_proj.grad is not None


def test_expert_parallel_sentinels_contribute_nothing(emulated):
    experts = experts_layer(seed=10)
    E = experts.num_experts
    g = torch.Generator().manual_seed(5)
    x = torch.randn(16, 64, generator=g).to(BF16).requires_grad_()
    sel = torch.rand(16, E, generator=g).topk(2, -1).indices
    sel[::3, 1] = E            # the EP sentinel (transformers' RouterParallel)
    sel[1::5, 0] = E + 3
    rw = torch.rand(16, 2, generator=g)
    out = experts(x, sel, rw)
    keep = sel < E
    expected = torch.zeros(16, 64)
    for t in range(16):
        for j in range(2):
            if keep[t, j]:
                e = sel[t, j]
                gate, up = (experts.gate_up_proj[e].float() @ x[t].float()).chunk(2)
                expected[t] += rw[t, j] * (experts.down_proj[e].float() @ (F.silu(gate) * up))
    assert rel(out.float(), expected) < 1e-2
    out.float().sum().backward()
    assert torch.isfinite(x.grad.float()).all()


# ------------------------------------------------------------------ fallbacks


def fallback_check(caplog, eager, fused, reason_text, calls_expected=0, emulation=None,
                   ids=None):
    ids = tokens(seed=21) if ids is None else ids
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        le, _, ge = run(eager, ids)
        lf, _, gf = run(fused, ids)
        run(fused, ids)  # a second step warns no more
    assert torch.equal(lf, le)
    for name, g in ge.items():
        assert torch.equal(gf[name], g), name
    records = [r.getMessage() for r in caplog.records if r.name == LOG_NAME]
    assert len(records) == 1, records
    assert reason_text in records[0]
    if emulation is not None:
        assert emulation.forward_calls == calls_expected


def test_fallback_float32(emulated, caplog):
    eager, fused = model_pair("olmoe", dtype=torch.float32, seed=2)
    fallback_check(caplog, eager, fused, "torch.float32", emulation=emulated)


def test_fallback_cpu_without_emulation(caplog):
    eager, fused = model_pair("mixtral", seed=2)
    fallback_check(caplog, eager, fused, "CUDA devices only")


def test_fallback_activation(emulated, caplog):
    eager, fused = model_pair("qwen2_moe", seed=2, hidden_act="gelu")
    fallback_check(caplog, eager, fused, "'gelu'", emulation=emulated)


def test_fallback_sizes_not_multiples_of_8(emulated, caplog):
    eager, fused = model_pair("mixtral", seed=2, inter=20)
    fallback_check(caplog, eager, fused, "multiples of 8", emulation=emulated)


def test_fallback_non_contiguous_weights(emulated, caplog):
    eager, fused = model_pair("qwen3_moe", seed=2)
    for m in experts_modules(fused):
        w = m.down_proj.detach()
        m.down_proj = nn.Parameter(w.transpose(1, 2).contiguous().transpose(1, 2))
    fallback_check(caplog, eager, fused, "row-major", emulation=emulated)


def test_fallback_reasons_warn_once_each(emulated, caplog):
    fp32 = model_pair("olmoe", dtype=torch.float32, seed=2)[1]
    gelu = model_pair("olmoe", seed=2, hidden_act="gelu")[1]
    ids = tokens(seed=22)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        for _ in range(2):
            run(fp32, ids)
            run(gelu, ids)
    records = [r.getMessage() for r in caplog.records if r.name == LOG_NAME]
    assert len(records) == 2 and "float32" in records[0] and "gelu" in records[1]


def _config():
    from transformers import PretrainedConfig
    cfg = PretrainedConfig()
    cfg._experts_implementation = "moejit"
    cfg.hidden_act = "silu"
    return cfg


def test_fallback_no_gate_and_custom_gate(emulated, caplog):
    """Experts classes other than the families': has_gate=False, and a gate of their own."""

    class FourExperts(nn.Module):
        """The weights both classes below share (4 experts, hidden 8, intermediate 16)."""

        def __init__(self, config):
            super().__init__()
            self.num_experts = 4
            self.gate_up_proj = nn.Parameter(torch.randn(4, 32, 8, dtype=BF16))
            self.down_proj = nn.Parameter(torch.randn(4, 8, 16, dtype=BF16))

    @hf_moe.use_experts_implementation(has_gate=False)
    class UpOnly(FourExperts):
        def __init__(self, config):
            super().__init__(config)
            self.up_proj = nn.Parameter(torch.randn(4, 16, 8, dtype=BF16))

        def forward(self, hidden_states, top_k_index, top_k_weights):
            return hidden_states * 2

    @hf_moe.use_experts_implementation
    class OwnGate(FourExperts):
        def _apply_gate(self, gate_up):
            gate, up = gate_up.chunk(2, dim=-1)
            return torch.relu(gate) * up

        def forward(self, hidden_states, top_k_index, top_k_weights):
            return hidden_states * 3

    x = torch.randn(4, 8, dtype=BF16)
    sel = torch.zeros(4, 2, dtype=torch.long)
    rw = torch.ones(4, 2)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        assert torch.equal(UpOnly(_config())(x, sel, rw), x * 2)
        assert torch.equal(OwnGate(_config())(x, sel, rw), x * 3)
    records = [r.getMessage() for r in caplog.records if r.name == LOG_NAME]
    assert len(records) == 2
    assert "has_gate=False" in records[0] and "its own gating" in records[1]
    assert emulated.forward_calls == 0
