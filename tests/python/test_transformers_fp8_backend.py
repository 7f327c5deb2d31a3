"""The "moejit_fp8" experts backend (issue 31, the transformers option): the same backend as
"moejit" with recipe="fp8-block" where the FP8 recipe covers the module (bf16, H and I
multiples of 128, plain SwiGLU), else moejit's bf16 recipe with one warning naming why. CPU:
the library call is a recorder (the FP8 numerics are the GPU tests' subject)."""

import logging

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install moejit[torch])")
pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                           "moejit[transformers])")
from transformers.integrations import moe as hf_moe  # noqa: E402

from moejit.integrations import transformers as mjt  # noqa: E402

from hf_families import experts_modules, model_pair  # noqa: E402
from hf_emulation import reference_layer  # noqa: E402

LOG_NAME = "moejit.integrations.transformers"
pytestmark = pytest.mark.usefixtures("fresh_transformers_backend")  # conftest.py


class Recorder:
    """fused_moe_merged's place: records the keyword arguments, computes the float32 layer."""

    def __init__(self):
        self.kwargs = []

    def __call__(self, x, sel, rw, w_gate_up, w_down, swiglu_limit=None, **kwargs):
        self.kwargs.append(kwargs)
        return reference_layer(x, sel, rw, w_gate_up, w_down, limit=swiglu_limit).to(x.dtype)


@pytest.fixture
def recorder(monkeypatch):
    call = Recorder()
    monkeypatch.setattr(mjt, "_fused_moe_merged", lambda: call)
    monkeypatch.setattr(mjt, "_device_supported", lambda t: t.device.type in ("cpu", "cuda"))
    return call


def _experts(hidden, inter, dtype=torch.bfloat16):
    return experts_modules(model_pair("qwen3_moe", dtype=dtype, hidden=hidden, inter=inter)[1])[0]


def _inputs(experts, hidden, dtype=torch.bfloat16, tokens=16):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    sel = torch.rand(tokens, experts.num_experts, generator=g).topk(2, -1).indices
    sel[0] = torch.tensor([1, 1])  # a duplicate route
    return x, sel, torch.rand(tokens, 2, generator=g)


def test_register_adds_both_names():
    assert hf_moe.ALL_EXPERTS_FUNCTIONS.get(mjt.FP8_NAME) is mjt.moejit_fp8_experts_forward
    assert hf_moe.ALL_EXPERTS_FUNCTIONS.get(mjt.NAME) is mjt.moejit_experts_forward
    assert mjt.is_registered()


def test_fp8_name_passes_the_fp8_recipe(recorder, caplog):
    experts = _experts(128, 128)
    x, sel, rw = _inputs(experts, 128)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        out = mjt.moejit_fp8_experts_forward(experts, x, sel, rw)
    assert recorder.kwargs == [{"recipe": "fp8-block"}]
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert not [r for r in caplog.records if r.name == LOG_NAME]


def test_bf16_name_never_passes_a_recipe(recorder):
    experts = _experts(128, 128)
    mjt.moejit_experts_forward(experts, *_inputs(experts, 128))
    assert recorder.kwargs == [{}]


# The reasons are the library's own (the descriptor validated with recipe "fp8-block").
@pytest.mark.parametrize("hidden,inter,dtype,why", [
    (64, 128, torch.bfloat16, "desc->hidden_size is 64"),
    (128, 32, torch.bfloat16, "desc->intermediate_size is 32"),
    (128, 128, torch.float16, "desc->dtype is fp16"),
])
def test_fp8_name_falls_back_to_bf16_loudly(recorder, caplog, hidden, inter, dtype, why):
    experts = _experts(hidden, inter, dtype)
    x, sel, rw = _inputs(experts, hidden, dtype)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        mjt.moejit_fp8_experts_forward(experts, x, sel, rw)
        mjt.moejit_fp8_experts_forward(experts, x, sel, rw)  # no second warning
    assert recorder.kwargs == [{}, {}]  # moejit's bf16 recipe, not the eager forward
    records = [r.getMessage() for r in caplog.records if r.name == LOG_NAME]
    assert len(records) == 1, records
    assert why in records[0] and "bf16 recipe" in records[0], records[0]
