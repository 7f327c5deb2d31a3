"""The FP8 recipe through the PyTorch ops on a Hopper GPU:
  - the weight cache (moejit.torch.fp8_weight_cache): the micro-batches of a step inside a block
    give bit for bit what they give outside it, the weights are quantized once (one FILL, every
    other call a USE), and a weight changed in place inside the block is quantized again;
  - a training step of MoEExperts(recipe="fp8-block") captured in a CUDA graph and replayed on
    fresh data equals eager execution bit for bit (no host sync, no stale replay), with and
    without a weight-cache block around the capture (the captured calls use no cache: a replay
    outlives the block).
Every output and gradient is poisoned before the launches (moejit.torch._debug_poison) and must
come back finite."""

import contextlib

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("the FP8 recipe needs an sm_90a (Hopper) device", allow_module_level=True)

import moejit.torch as mt  # noqa: E402
from moejit import _fp8_weight_cache as wc  # noqa: E402
from cuda_graph_step import GraphedLayerStep  # noqa: E402

T, H, I, E, K = 256, 512, 256, 8, 2


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setattr(mt, "_debug_poison", True)


def make(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w_gate_up = (torch.randn(E, 2 * I, H, device="cuda", generator=g) / H ** 0.5).bfloat16()
    w_down = (torch.randn(E, H, I, device="cuda", generator=g) / I ** 0.5).bfloat16()
    return w_gate_up.requires_grad_(), w_down.requires_grad_()


def micro_batch(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, device="cuda", generator=g).bfloat16().requires_grad_()
    logits = torch.randn(T, E, device="cuda", generator=g)
    rw, sel = torch.topk(torch.softmax(logits, -1), K, dim=-1)
    dout = torch.randn(T, H, device="cuda", generator=g).bfloat16()
    return x, sel, rw.requires_grad_(), dout


def step(weights, batches):
    """Forward and backward of each micro-batch: outputs and every gradient, gradients of the
    weights accumulated over the batches as autograd does."""
    w_gate_up, w_down = weights
    w_gate_up.grad = w_down.grad = None
    results = []
    for x, sel, rw, dout in batches:
        x.grad = rw.grad = None
        out = mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, recipe="fp8-block")
        out.backward(dout)
        results += [out.detach().clone(), x.grad.clone(), rw.grad.clone()]
    return results + [w_gate_up.grad.clone(), w_down.grad.clone()]


def test_a_block_changes_no_bit_and_quantizes_once():
    weights = make(0)
    batches = [micro_batch(s) for s in (1, 2, 3)]
    plain = step(weights, batches)
    before = dict(wc.counts)
    with mt.fp8_weight_cache():
        cached = step(weights, batches)
    fills, uses = wc.counts["fill"] - before["fill"], wc.counts["use"] - before["use"]
    assert (fills, uses) == (1, 5), "3 forwards and 3 backwards: one FILL, then USE"
    for a, b in zip(plain, cached):
        assert torch.isfinite(b.float()).all()
        assert torch.equal(a, b)


def test_a_weight_changed_inside_the_block_is_quantized_again():
    weights = make(4)
    batches = [micro_batch(5)]
    with mt.fp8_weight_cache():
        step(weights, batches)
        with torch.no_grad():
            weights[1].mul_(0.5)  # an update inside the block: the version counter moves
        cached = step(weights, batches)
    plain = step(weights, batches)
    for a, b in zip(plain, cached):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cached", [False, True], ids=["plain", "weight_cache"])
def test_cuda_graph_training_step_matches_eager(cached):
    torch.manual_seed(3)
    layer = mt.MoEExperts(E, H, I, merged=True, recipe="fp8-block", device="cuda",
                          dtype=torch.bfloat16)
    block = mt.fp8_weight_cache() if cached else contextlib.nullcontext()
    with block:  # cached: the warm-up FILLs and USEs; the captured calls quantize for themselves
        graphed = GraphedLayerStep(layer, *micro_batch(20))
        for seed in (21, 22):  # fresh data each replay
            graphed.replay_matches_eager(*micro_batch(seed))
