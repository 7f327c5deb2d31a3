"""The gated layer (moejit::fused_moe_gated behind moejit.torch.fused_moe_merged's activation,
alpha, interleaved, weights_transposed, b_gate_up and b_down), tested on the CPU with the
library's launches replaced by moe_emulation's float32 layer: forward and every gradient
against an independent float64 autograd reference written as transformers' GptOssExperts
computes gpt-oss (gated_reference.py), for duplicate routes, an empty expert, every token on
one expert, T = 1 and T = 0; torch.library.opcheck of the three ops; torch.compile(fullgraph,
dynamic); main_grad with biases; clear errors for bad arguments. test_torch_op_gated_gpu.py
repeats the numerical tests on the real kernels."""

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)

import torch._dynamo  # noqa: E402
import torch._dynamo.testing  # noqa: E402
from torch import nn  # noqa: E402

import moe_emulation  # noqa: E402
import moejit  # noqa: E402
import moejit.torch as mt  # noqa: E402
from compile_steps import assert_one_graph_calling, assert_steps_equal, train_step  # noqa: E402
from dispatch_log import DispatchLog  # noqa: E402
from gated_reference import (BF16, CONFIGS, ROUTINGS, call_kwargs, gated_inputs,  # noqa: E402
                             opcheck_forward_backward, reference_grads, rel, run_merged,
                             unused_experts)

# H != 2I, so a weight in the other layout has the wrong shape instead of a transposed meaning.
H, I, E, K = 32, 8, 4, 2
TOL = 1e-2  # bf16 outputs and gradients vs float64


pytestmark = pytest.mark.usefixtures("emulated_launches")  # conftest.py


def inputs(config, routing_case="mixed", seed=0, **kw):
    return gated_inputs(config, routing_case, E=E, H=H, I=I, K=K, seed=seed, **kw)


run = run_merged  # the public call and its backward


NAMES = ["dx", "d_routing_weights", "dw_gate_up", "dw_down", "db_gate_up", "db_down"]


@pytest.mark.parametrize("routing_case", list(ROUTINGS))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_forward_and_every_gradient_match_the_float64_reference(config, routing_case):
    args = inputs(config, routing_case,
                  seed=10 * list(CONFIGS).index(config) + list(ROUTINGS).index(routing_case))
    x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout = args
    out, grads = run(config, *args)
    ref_out, ref_grads = reference_grads(config, *args)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert rel(out, ref_out) < TOL
    for name, g, r, like in zip(NAMES, grads, ref_grads, (x, rw, w_gate_up, w_down, b_gate_up,
                                                            b_down)):
        if like is None:
            assert g is None and r is None, name
            continue
        assert g.shape == like.shape and g.dtype == like.dtype, name
        assert torch.isfinite(g).all(), name
        assert rel(g, r) < TOL, f"{name}: {rel(g, r)}"
    # Experts without a route get exactly zero weight and bias gradients.
    for e in unused_experts(sel, E):
        for name, g in zip(NAMES[2:], grads[2:]):
            if g is not None:
                assert torch.count_nonzero(g[e]) == 0, f"{name}[{e}]"
    if ROUTINGS[routing_case][0]:
        assert torch.count_nonzero(out) > 0


def test_the_reference_is_sensitive_to_every_option():
    """Sanity of the comparison above: the emulation of a layer with one option flipped is
    far from the reference, so a binding that dropped an option would fail."""
    args = inputs("gpt_oss", seed=11)
    x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout = args
    ref_out, _ = reference_grads("gpt_oss", *args)
    variants = {
        "swiglu": dict(activation="swiglu", interleaved=True, weights_transposed=True),
        "alpha": dict(activation="gpt_oss", alpha=0.3, interleaved=True,
                      weights_transposed=True),
        "gate first": dict(activation="gpt_oss", interleaved=False, weights_transposed=True),
    }
    for name, kw in variants.items():
        out = mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, 7.0, b_gate_up=b_gate_up,
                                  b_down=b_down, **kw)
        assert rel(out, ref_out) > 5 * TOL, name
    out = mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, None, b_gate_up=b_gate_up,
                              b_down=b_down, **call_kwargs("gpt_oss"))
    assert rel(out, ref_out) > 5 * TOL, "no limit"
    out = mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, 7.0, b_gate_up=b_gate_up,
                              b_down=-b_down, **call_kwargs("gpt_oss"))
    assert rel(out, ref_out) > 5 * TOL, "b_down"


def test_the_04_call_keeps_its_op_and_the_new_options_take_the_gated_op():
    x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, _ = inputs("merged_bias_swiglu", seed=2)
    with DispatchLog() as plain:
        out_plain = mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, 0.75)
    assert any("moejit.fused_moe_merged" in n for n in plain.names), plain.names
    assert not any("fused_moe_gated" in n for n in plain.names)
    with DispatchLog() as gated:
        out_gated = mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, 0.75, b_gate_up=b_gate_up,
                                        b_down=b_down)
    assert any("moejit.fused_moe_gated" in n for n in gated.names), gated.names
    # Without biases, the gated op is the 0.4 layer.
    same, _ = torch.ops.moejit.fused_moe_gated(x, sel, rw, w_gate_up, w_down, None, None, 0.75,
                                               "swiglu", 0.0, False, False)
    assert torch.equal(same, out_plain)
    assert not torch.equal(out_gated, out_plain)


@pytest.mark.parametrize("config", ["gpt_oss", "gpt_oss_merged_alpha"])
def test_opcheck_every_gated_op(config):
    # Every opcheck test with biases; without (None for the optional tensors) the schema and
    # fake-tensor tests only (the others cost 10 s here and cover nothing bias-specific).
    checks = {} if config == "gpt_oss" else {"test_utils": ("test_schema", "test_faketensor")}
    c = CONFIGS[config]
    x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout = inputs(config, seed=3)
    options = (c["limit"] or 0.0, c["activation"], c["alpha"] or 1.702, c["interleaved"],
               c["transposed"])
    saved = opcheck_forward_backward(torch.ops.moejit.fused_moe_gated,
                                     torch.ops.moejit.fused_moe_gated_backward, x, sel, rw,
                                     (w_gate_up, w_down, b_gate_up, b_down), options, dout,
                                     consumes_saved=True,
                                     **checks)
    main = [torch.randn(t.shape) if t is not None else None
            for t in (w_gate_up, w_down, b_gate_up, b_down)]
    torch.library.opcheck(torch.ops.moejit.fused_moe_gated_backward_main_grad,
                          (dout, x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, saved,
                           *options, *main), **checks)


class GptOssBlock(nn.Module):
    """Router + gpt-oss experts (transposed, interleaved, biased, limit 7) + residual."""

    def __init__(self, main_grad=False):
        super().__init__()
        torch.manual_seed(0)
        self.router = nn.Linear(H, E, bias=True, dtype=BF16)
        self.gate_up_proj = nn.Parameter((torch.randn(E, H, 2 * I) * 5 * H ** -0.5).to(BF16))
        self.gate_up_proj_bias = nn.Parameter((torch.randn(E, 2 * I) * 0.5).to(BF16))
        self.down_proj = nn.Parameter((torch.randn(E, I, H) * I ** -0.5).to(BF16))
        self.down_proj_bias = nn.Parameter((torch.randn(E, H) * 0.5).to(BF16))
        self.main_grad = main_grad

    def params(self):
        return (self.gate_up_proj, self.down_proj, self.gate_up_proj_bias, self.down_proj_bias)

    def forward(self, x):
        weights, selected = torch.topk(self.router(x).float(), K, dim=-1)
        weights = torch.softmax(weights, dim=-1)
        main_grads = tuple(p.main_grad for p in self.params()) if self.main_grad else None
        return x + mt.fused_moe_merged(
            x, selected, weights, self.gate_up_proj, self.down_proj, 7.0,
            activation="gpt_oss", alpha=1.702, interleaved=True, weights_transposed=True,
            b_gate_up=self.gate_up_proj_bias, b_down=self.down_proj_bias,
            main_grads=main_grads)


def test_compile_fullgraph_dynamic_equals_eager():
    block = GptOssBlock()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend=counter)
    for tokens in (9, 23):
        x = torch.randn(tokens, H).to(BF16)
        eager = train_step(block, block, x)
        assert_steps_equal(train_step(compiled, block, x), eager, f"T={tokens}")
    assert_one_graph_calling(counter, "moejit.fused_moe_gated")


def test_main_grad_with_biases_matches_plain_gradients_also_compiled():
    block = GptOssBlock()
    x = torch.randn(19, H).to(BF16)
    _, plain = train_step(block, block, x)
    block.main_grad = True
    init = [torch.randn(p.shape) for p in block.params()]
    for p, g0 in zip(block.params(), init):
        p.main_grad = g0.clone()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    for fn in (block, compiled):
        out, grads = train_step(fn, block, x)
        names = ("gate_up_proj", "down_proj", "gate_up_proj_bias", "down_proj_bias")
        for name, p, g0 in zip(names, block.params(), init):
            assert grads[name] is None, f"{name} has a .grad with main_grads"
            added = p.main_grad - g0
            assert rel(added, plain[name]) < TOL, name
            p.main_grad.copy_(g0)
        assert torch.equal(grads["x"], plain["x"])
        assert rel(grads["router.weight"], plain["router.weight"]) < TOL


def test_main_grads_count_and_dtype_errors():
    x, sel, rw, w_gate_up, w_down, b_gate_up, b_down, dout = inputs("gpt_oss", seed=4)
    kw = call_kwargs("gpt_oss")
    two = [torch.zeros(w.shape) for w in (w_gate_up, w_down)]
    four = two + [torch.zeros(b.shape) for b in (b_gate_up, b_down)]
    with pytest.raises(moejit.InvalidArgumentError, match=r"main_grads must be 4 float32"):
        mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, 7.0, b_gate_up=b_gate_up,
                            b_down=b_down, main_grads=two, **kw)
    with pytest.raises(moejit.InvalidArgumentError, match=r"main_grads must be 2 float32"):
        mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, 7.0, main_grads=four, **kw)
    bad = four[:2] + [torch.zeros(b_gate_up.shape, dtype=BF16), four[3]]
    out = mt.fused_moe_merged(x.clone().requires_grad_(), sel, rw, w_gate_up, w_down, 7.0,
                              b_gate_up=b_gate_up, b_down=b_down, main_grads=bad, **kw)
    with pytest.raises(moejit.InvalidArgumentError, match="main_grad of b_gate_up must be"):
        out.backward(dout)


def _bad_calls():
    x, sel, rw, wgu, wd, bgu, bd, _ = inputs("gpt_oss", seed=5)  # transposed layout
    gpt = call_kwargs("gpt_oss")
    f = mt.fused_moe_merged
    merged_wgu = wgu.transpose(1, 2).contiguous()  # [E, 2I, H]
    merged_wd = wd.transpose(1, 2).contiguous()    # [E, H, I]
    return {
        "activation": (lambda: f(x, sel, rw, merged_wgu, merged_wd, activation="relu"),
                       "activation must be one of 'swiglu', 'gpt_oss', got 'relu'"),
        "alpha with swiglu": (lambda: f(x, sel, rw, merged_wgu, merged_wd, alpha=1.702),
                              "alpha is only for activation='gpt_oss'"),
        "negative alpha": (lambda: f(x, sel, rw, merged_wgu, merged_wd, activation="gpt_oss",
                                     alpha=-1.0), "alpha must be None"),
        "zero alpha": (lambda: f(x, sel, rw, merged_wgu, merged_wd, activation="gpt_oss",
                                 alpha=0.0), "alpha must be None"),
        "nan alpha": (lambda: f(x, sel, rw, merged_wgu, merged_wd, activation="gpt_oss",
                                alpha=float("nan")), "alpha must be None"),
        "string alpha": (lambda: f(x, sel, rw, merged_wgu, merged_wd, activation="gpt_oss",
                                   alpha="1.7"), "alpha must be None"),
        "b_gate_up alone": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu, **gpt),
                            "b_gate_up is given but b_down is None"),
        "b_down alone": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_down=bd, **gpt),
                         "b_down is given but b_gate_up is None"),
        "b_gate_up shape": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu[:, :I].contiguous(),
                                      b_down=bd, **gpt),
                            r"b_gate_up must be \[E, 2I\] = \[4, 16\], got \[4, 8\]"),
        "b_down shape": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu,
                                   b_down=bd[:, :8].contiguous(), **gpt),
                         r"b_down must be \[E, H\] = \[4, 32\], got \[4, 8\]"),
        "b_down experts": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu, b_down=bd[:3],
                                     **gpt), r"b_down must be \[E, H\]"),
        "bias dtype": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu.float(), b_down=bd,
                                 **gpt), "b_gate_up must have x's dtype bfloat16, got float32"),
        "bias not contiguous": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu,
                                          b_down=bd.t().contiguous().t(), **gpt),
                                "b_down must be contiguous"),
        "bias not a tensor": (lambda: f(x, sel, rw, wgu, wd, 7.0, b_gate_up=bgu,
                                        b_down=[0.0], **gpt), "b_down must be a torch.Tensor"),
        "untransposed w_gate_up": (lambda: f(x, sel, rw, merged_wgu, wd, 7.0, b_gate_up=bgu,
                                             b_down=bd, **gpt),
                                   r"w_gate_up must be \[E, H, 2I\]"),
        "untransposed w_down": (lambda: f(x, sel, rw, wgu, merged_wd, 7.0, b_gate_up=bgu,
                                          b_down=bd, **gpt),
                                r"w_down must be \[E, I, H\] = \[4, 8, 32\] "
                                r"\(weights_transposed\), got \[4, 32, 8\]"),
        "transposed w_down, plain layout": (lambda: f(x, sel, rw, merged_wgu, wd, b_gate_up=bgu,
                                                      b_down=bd),
                                            r"w_down must be \[E, H, I\] = \[4, 32, 8\]"),
        "odd 2I": (lambda: f(x, sel, rw, wgu[:, :, :15].contiguous(), wd, 7.0, **gpt),
                   r"even last dim \(2I\)"),
        "flag type": (lambda: f(x, sel, rw, wgu, wd, 7.0, activation="gpt_oss", interleaved=1,
                                weights_transposed=True), "interleaved must be True or False"),
        "limit": (lambda: f(x, sel, rw, wgu, wd, -7.0, **gpt), "swiglu_limit"),
        "op: alpha with swiglu": (lambda: torch.ops.moejit.fused_moe_gated(
            x, sel, rw, merged_wgu, merged_wd, None, None, 0.0, "swiglu", 1.0, False, False),
            "alpha is only for activation='gpt_oss'"),
        "op: activation": (lambda: torch.ops.moejit.fused_moe_gated(
            x, sel, rw, merged_wgu, merged_wd, None, None, 0.0, "gelu", 0.0, False, False),
            "activation must be one of"),
        "op: one bias": (lambda: torch.ops.moejit.fused_moe_gated(
            x, sel, rw, wgu, wd, bgu, None, 7.0, "gpt_oss", 1.702, True, True),
            "b_gate_up is given but b_down is not"),
    }


BAD = ["activation", "alpha with swiglu", "negative alpha", "zero alpha", "nan alpha",
       "string alpha", "b_gate_up alone", "b_down alone", "b_gate_up shape", "b_down shape",
       "b_down experts", "bias dtype", "bias not contiguous", "bias not a tensor",
       "untransposed w_gate_up", "untransposed w_down", "transposed w_down, plain layout",
       "odd 2I", "flag type", "limit", "op: alpha with swiglu", "op: activation",
       "op: one bias"]


def test_bad_arguments_give_clear_errors_before_any_launch(monkeypatch):
    calls = []
    real = moe_emulation.fake_forward

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(mt._op, "_forward", counting)
    cases = _bad_calls()
    assert sorted(cases) == sorted(BAD)
    for name in BAD:
        call, message = cases[name]
        with pytest.raises(moejit.InvalidArgumentError, match=message):
            call()
    # The checks in _forward (check()) run before its launch; the public ones before the op.
    public = [n for n in BAD if not n.startswith("op:") and n not in (
        "b_gate_up shape", "b_down shape", "b_down experts", "bias dtype", "bias not contiguous",
        "untransposed w_gate_up", "untransposed w_down", "transposed w_down, plain layout",
        "odd 2I")]
    calls.clear()
    for name in public:
        with pytest.raises(moejit.InvalidArgumentError):
            cases[name][0]()
    assert not calls, "the op ran although the public function's checks failed"
