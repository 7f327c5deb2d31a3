"""moejit's transformers backend computes an experts module only when everything the module's
gate reads is proven from the module itself (issue 29 item 1): the gate function (the very
function object transformers or gpt-oss defines), the activation the default gate calls (the
very SiLU classes of ACT2FN["silu"] / ACT2FN["swish"] with their own forward and no hook, or
torch.nn.functional.silu), every flag (a bool that @use_experts_implementation set), gpt-oss's
alpha and limit (finite reals, limit > 0). A config entry is not proof.

Each test builds a tiny random model's experts module (CPU, the launches emulated in float32
as in test_transformers_emulated.py), makes it lie in one way, and checks that the backend
runs the module's own eager forward (bit-equal output, no moejit call) with one warning that
names the reason; the proven cases check that moejit is called and is right."""

import logging
import math
import types

import pytest

from optional_imports import TRANSFORMERS_MISSING, import_or_skip, torch_and_transformers

torch, _ = torch_and_transformers()
ACT2FN, SiLUActivation = import_or_skip("transformers.activations", TRANSFORMERS_MISSING,
                                        "ACT2FN", "SiLUActivation")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from moejit.integrations import transformers as mjt  # noqa: E402

from hf_families import experts_modules, model_pair, rel  # noqa: E402
from hf_emulation import reference_layer  # noqa: E402
from test_transformers_emulated import eager_step_warnings, tokens  # noqa: E402

BF16 = torch.bfloat16
LOG_NAME = "moejit.integrations.transformers"

pytestmark = pytest.mark.usefixtures("fresh_transformers_backend")  # conftest.py
# Fixtures emulated and extended: conftest.py.


def experts_of(family, seed=0, **sizes):
    return experts_modules(model_pair(family, seed=seed, **sizes)[1])[0]


def routed_inputs(experts, seed=0, tokens_=24, hidden=64):
    """hidden: make_config's default hidden size."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens_, hidden, generator=g).to(BF16)
    sel = torch.rand(tokens_, experts.num_experts, generator=g).topk(2, -1).indices
    rw = torch.rand(tokens_, 2, generator=g)
    return x, sel, rw


def assert_refused(experts, caplog, reason_text, calls=None, seed=1):
    """The module's call equals its own eager forward bit for bit, moejit was not called, and
    one warning names the reason."""
    x, sel, rw = routed_inputs(experts, seed)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        out = experts(x, sel, rw)
        out2 = experts(x, sel, rw)  # no second warning
    expected = mjt._eager_forward(experts)(experts, x, sel, rw)
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(out2, expected, rtol=0, atol=0, equal_nan=True)
    records = [r.getMessage() for r in caplog.records if r.name == LOG_NAME]
    assert len(records) == 1, records
    assert reason_text in records[0], records[0]
    if calls is not None:
        assert calls() == 0


# ------------------------------------------------------------------ issue 29 item 1 itself


def test_gelu_tanh_module_with_a_silu_config_runs_its_eager_forward(emulated, caplog):
    """The reported case: the modules call GELU-tanh, the config says silu. The model's logits
    equal eager's exactly (moejit computed them as SiLU before: 0.216 off against 0.083)."""
    eager, fused = model_pair("qwen3_moe", seed=3, hidden_act="gelu_pytorch_tanh")
    fused.config.hidden_act = "silu"
    mods = experts_modules(fused)
    assert all(m.config.hidden_act == "silu" for m in mods)
    assert all(type(m.act_fn).__name__ != "SiLUActivation" for m in mods)
    records = eager_step_warnings(caplog, emulated, eager, fused, tokens(seed=31))
    assert len(records) == 1 and "not provably SiLU" in records[0]
    assert "hidden_act='silu'" in records[0] and "GELUTanh" in records[0]


def test_the_lie_matters(emulated):
    """The check can fail: SiLU (what the config names) is far from the module's GELU-tanh."""
    experts = experts_of("qwen3_moe", seed=4, hidden_act="gelu_pytorch_tanh")
    x, sel, rw = routed_inputs(experts, 2)
    truth = mjt._eager_forward(experts)(experts, x, sel, rw)
    as_silu = reference_layer(x, sel, rw, experts.gate_up_proj, experts.down_proj)
    assert rel(as_silu, truth.float()) > 0.05


# ------------------------------------------------------------------ the activation


class SiLUSubclass(SiLUActivation):
    def forward(self, input):
        return F.silu(input) * 2


class SiLUSubclassSameForward(nn.SiLU):
    pass


def _instance_forward(experts):
    act = SiLUActivation()
    act.forward = lambda t: F.silu(t) * 2
    experts.act_fn = act


def _forward_hook(experts):
    act = SiLUActivation()
    act.register_forward_hook(lambda mod, inp, out: out * 2)
    experts.act_fn = act


def _forward_pre_hook(experts):
    act = nn.SiLU()
    act.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
    experts.act_fn = act


def _set(value):
    def lie(experts):
        del experts.act_fn  # a child module; a function cannot replace it in place
        experts.act_fn = value
    return lie


ACTIVATION_LIES = {
    "gelu_tanh": _set(ACT2FN["gelu_pytorch_tanh"]),
    "gelu_function": _set(F.gelu),
    "silu_subclass_own_forward": _set(SiLUSubclass()),
    "silu_subclass_same_forward": _set(SiLUSubclassSameForward()),
    "instance_forward": _instance_forward,
    "forward_hook": _forward_hook,
    "forward_pre_hook": _forward_pre_hook,
    "wrapped_silu": _set(lambda t: F.silu(t)),
}


@pytest.mark.parametrize("lie", sorted(ACTIVATION_LIES))
def test_activation_not_proven_is_refused(lie, emulated, caplog):
    experts = experts_of("mixtral", seed=5)
    ACTIVATION_LIES[lie](experts)
    assert_refused(experts, caplog, "not provably SiLU", lambda: emulated.forward_calls)


def test_silu_class_whose_forward_was_replaced_is_refused(emulated, caplog, monkeypatch):
    """A forward replaced on the class itself (kernelize-style patching): not the class's own
    forward any more."""
    def patched_forward(self, input):
        return F.silu(input) * 2
    monkeypatch.setattr(SiLUActivation, "forward", patched_forward)
    experts = experts_of("olmoe", seed=6)
    experts.act_fn = SiLUActivation()
    assert_refused(experts, caplog, "not provably SiLU", lambda: emulated.forward_calls)


def test_global_forward_hook_is_refused(emulated, caplog):
    handle = nn.modules.module.register_module_forward_hook(lambda mod, inp, out: None)
    try:
        experts = experts_of("olmoe", seed=6)
        assert_refused(experts, caplog, "not provably SiLU", lambda: emulated.forward_calls)
    finally:
        handle.remove()


@pytest.mark.parametrize("act", ["silu", "swish", "functional"])
def test_proven_silu_runs_moejit(act, emulated):
    """Each proven SiLU runs moejit, also when the config names another activation (the
    module is what counts)."""
    experts = experts_of("qwen2_moe", seed=7)
    _set(F.silu if act == "functional" else ACT2FN[act])(experts)
    experts.config.hidden_act = "gelu"
    x, sel, rw = routed_inputs(experts, 3)
    out = experts(x, sel, rw)
    assert emulated.forward_calls == 1
    truth = mjt._eager_forward(experts)(experts, x, sel, rw)
    assert rel(out, truth) < 2e-2


def test_refusal_holds_under_torch_compile(emulated, caplog):
    experts = experts_of("mixtral", seed=8)
    _instance_forward(experts)
    x, sel, rw = routed_inputs(experts, 4)
    expected = mjt._eager_forward(experts)(experts, x, sel, rw)
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        experts(x, sel, rw)  # warns outside the trace
        out = torch.compile(experts, backend="aot_eager")(x, sel, rw)
    assert torch.equal(out, expected) and emulated.forward_calls == 0


# ------------------------------------------------------------------ the gate function


def _relu_gate(self, gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return torch.relu(gate) * up


def test_gate_set_on_the_instance_is_refused(emulated, caplog):
    experts = experts_of("qwen3_moe", seed=9)
    experts._apply_gate = types.MethodType(_relu_gate, experts)
    assert_refused(experts, caplog, "set on the instance", lambda: emulated.forward_calls)


def test_gate_carrying_the_default_name_is_refused(emulated, caplog):
    """A subclass's gate named like transformers' default is not transformers' default."""
    experts = experts_of("qwen3_moe", seed=10)

    def fake(self, gate_up):
        return _relu_gate(self, gate_up)
    fake.__module__ = mjt._DEFAULT_GATE[0]
    fake.__qualname__ = fake.__name__ = mjt._DEFAULT_GATE[1]
    experts.__class__ = type("LyingExperts", (type(experts),), {"_apply_gate": fake})
    assert_refused(experts, caplog, "its own gating function", lambda: emulated.forward_calls)


# ------------------------------------------------------------------ the flags


FLAG_LIES = {
    "has_gate_int": ("has_gate", 1),
    "has_bias_missing": ("has_bias", None),
    "is_transposed_str": ("is_transposed", "no"),
    "is_concatenated_missing": ("is_concatenated", None),
}


@pytest.mark.parametrize("lie", sorted(FLAG_LIES))
def test_flag_not_a_bool_is_refused(lie, emulated, caplog):
    experts = experts_of("deepseek_v3", seed=11)
    flag, value = FLAG_LIES[lie]
    if value is None:
        delattr(experts, flag)
    else:
        setattr(experts, flag, value)
    assert_refused(experts, caplog, f".{flag} is {value!r}", lambda: emulated.forward_calls)


def test_biases_held_without_has_bias_are_refused(emulated, caplog):
    experts = experts_of("qwen3_moe", seed=12)
    experts.down_proj_bias = nn.Parameter(torch.randn(experts.num_experts, 64).to(BF16))
    assert_refused(experts, caplog, "has_bias=False", lambda: emulated.forward_calls)


def test_default_gate_with_interleaved_flag_is_refused(emulated, caplog):
    experts = experts_of("qwen3_moe", seed=13)
    experts.is_concatenated = False
    assert_refused(experts, caplog, "ambiguous", lambda: emulated.forward_calls)


# ------------------------------------------------------------------ gpt-oss's clamped SwiGLU


GPT_OSS_LIES = {
    "alpha_tensor": ("alpha", torch.tensor(1.702), "alpha"),
    "alpha_nan": ("alpha", math.nan, "alpha"),
    "limit_zero": ("limit", 0.0, "limit > 0"),
    "limit_inf": ("limit", math.inf, "limit > 0"),
    "limit_bool": ("limit", True, "limit > 0"),
    "concatenated": ("is_concatenated", True, "is_concatenated=True"),
    "no_has_bias": ("has_bias", False, "has_bias=False"),
}


@pytest.mark.parametrize("lie", sorted(GPT_OSS_LIES))
def test_gpt_oss_not_proven_is_refused(lie, emulated, extended, caplog):
    experts = experts_of("gpt_oss", seed=14)
    attr, value, reason = GPT_OSS_LIES[lie]
    if value is None:
        delattr(experts, attr)
    else:
        setattr(experts, attr, value)
    assert_refused(experts, caplog, reason, lambda: len(extended.calls))


def _refusal(experts):
    x, sel, rw = routed_inputs(experts)
    call = mjt._prepare(experts, x, sel, rw)
    assert len(call) == 2, "not refused"
    return call


def test_missing_attributes_are_refused(extended):
    """A missing act_fn or alpha: refused (the eager forward then raises the module's own
    AttributeError)."""
    experts = experts_of("mixtral", seed=16)
    del experts.act_fn
    reason, message = _refusal(experts)
    assert reason == "activation" and "no act_fn" in message
    experts = experts_of("gpt_oss", seed=16)
    del experts.alpha
    reason, message = _refusal(experts)
    assert reason == "gate_parameters" and "alpha=None" in message
    with pytest.raises(AttributeError, match="alpha"):
        experts(*routed_inputs(experts))


def test_gpt_oss_proven_runs_moejit(emulated, extended):
    experts = experts_of("gpt_oss", seed=15)
    experts.limit = 5  # an int is a real
    x, sel, rw = routed_inputs(experts, 5)
    out = experts(x, sel, rw)
    assert len(extended.calls) == 1
    call = extended.calls[0]
    assert call["activation"] == "gpt_oss" and call["limit"] == 5.0 and call["interleaved"]
    truth = mjt._eager_forward(experts)(experts, x, sel, rw)
    assert rel(out, truth) < 2e-2
