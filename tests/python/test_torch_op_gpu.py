"""GPU tests of the torch.library custom ops (moejit/_op.py) and of what training frameworks
need from them: torch.library.opcheck on every op; a model block (router + moejit experts +
residual) under torch.compile(fullgraph=True) against eager moejit (bitwise with the
aot_eager backend, within a stated rounding bound with inductor); mode="reduce-overhead"
(CUDA graphs) against eager on fresh data each step; a dynamic T (varying batch) compiles
once, not every step; Megatron-style main_grad accumulation in float32 against a float64
reference, with interleaved micro-batches; fp32 and bf16 routing weights; bad inputs.

Every test draws fresh random inputs and compares against a reference, so it can fail.
"""

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)

import torch._dynamo  # noqa: E402
import torch._dynamo.testing  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import moejit  # noqa: E402
import moejit.torch as mt  # noqa: E402
from compile_steps import (FORWARD_WITH_GRAD_CHECKS, assert_min_cut_compiles,  # noqa: E402
                           assert_steps_equal, train_step)
from moejit import _op  # noqa: E402
from moejit_bench.peers import routing_topk  # noqa: E402

T, H, I, E, K = 256, 512, 256, 16, 4
LIMIT = 0.75
BF16 = torch.bfloat16
# ‖a − b‖ / ‖b‖ bound for two computations that differ only in the router's fp32 rounding
# (inductor's fused softmax / top-k normalisation vs eager): a few bf16 ulps of the output.
COMPILE_TOL = 1e-2
# vs the float64 reference (as in test_torch_gpu.py).
REF_TOL = 2e-2


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def rel(a, b):
    a, b = a.double(), b.double()
    den = b.norm().item()
    diff = (a - b).norm().item()
    return diff / den if den > 0 else diff


def layer_inputs(tokens=T, merged=False, rw_dtype=torch.float32, seed=0, lead=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    sel, rw = routing_topk(tokens, E, K, rw_dtype, "cuda", g)
    sel = sel.to(torch.int32 if merged else torch.int64)
    x = torch.randn(tokens, H, device="cuda", generator=g).to(BF16)
    w_gate = torch.randn(E, I, H, device="cuda", generator=g) * H ** -0.5
    w_up = torch.randn(E, I, H, device="cuda", generator=g) * H ** -0.5
    w_down = torch.randn(E, H, I, device="cuda", generator=g) * I ** -0.5
    if merged:
        weights = (torch.cat([w_gate, w_up], 1).to(BF16), w_down.to(BF16))
    else:
        weights = (w_gate.to(BF16), w_up.to(BF16), w_down.to(BF16))
    dout = torch.randn(tokens, H, device="cuda", generator=g).to(BF16)
    if lead is not None:
        x, sel, rw, dout = (t.view(*lead, t.shape[-1]) for t in (x, sel, rw, dout))
    return x, sel, rw, weights, dout


def reference(x, sel, rw, weights, swiglu_limit=None):
    """Float64 per-expert reference (x [T, H])."""
    x, rw = x.double(), rw.double()
    weights = [w.double() for w in weights]
    if len(weights) == 2:
        w_gate, w_up = weights[0][:, :I], weights[0][:, I:]
    else:
        w_gate, w_up = weights[0], weights[1]
    w_down = weights[-1]
    out = torch.zeros_like(x)
    for e in range(E):
        t_idx, j_idx = torch.where(sel == e)
        if t_idx.numel() == 0:
            continue
        xe = x[t_idx]
        g, u = xe @ w_gate[e].t(), xe @ w_up[e].t()
        # The layer keeps g and u in the layer dtype and applies the limit's masks to those
        # values (docs/DESIGN.md §2.2): round here too, or a value within one bf16 ulp of ±L
        # takes the other side of a mask (with L = 0.75, ~5 % of dx).
        g, u = g.to(BF16).double(), u.to(BF16).double()
        if swiglu_limit is not None:
            g, u = g.clamp(max=swiglu_limit), u.clamp(-swiglu_limit, swiglu_limit)
        out = out.index_add(0, t_idx, (F.silu(g) * u * rw[t_idx, j_idx].unsqueeze(1))
                            @ w_down[e].t())
    return out


def reference_grads(x, sel, rw, weights, dout, swiglu_limit=None):
    leaves = [t.detach().double().requires_grad_() for t in (x, rw) + tuple(weights)]
    out = reference(leaves[0], sel, leaves[1], leaves[2:], swiglu_limit)
    return out.detach(), torch.autograd.grad(out, leaves, dout.double())


# ------------------------------------------------------------------ opcheck


@pytest.fixture
def poison():
    # Unwritten bytes of `saved` (alignment padding) would otherwise hold whatever the
    # allocator left there, which opcheck's eager-vs-compiled comparison would see.
    mt._debug_poison = True
    yield
    mt._debug_poison = False


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
@pytest.mark.parametrize("rw_dtype", [torch.float32, BF16], ids=["rw_fp32", "rw_bf16"])
def test_opcheck(poison, merged, rw_dtype):
    x, sel, rw, weights, dout = layer_inputs(T, merged, rw_dtype, seed=1)
    fwd = torch.ops.moejit.fused_moe_merged if merged else torch.ops.moejit.fused_moe
    grad_args = (x.clone().requires_grad_(), sel, rw.clone().requires_grad_(),
                 *(w.clone().requires_grad_() for w in weights), LIMIT)
    torch.library.opcheck(fwd, grad_args, test_utils=FORWARD_WITH_GRAD_CHECKS)
    assert_min_cut_compiles(fwd, grad_args, dout)
    torch.library.opcheck(fwd, (x, sel, rw, *weights, 0.0))
    out, saved = fwd(x, sel, rw, *weights, LIMIT)
    bwd = (torch.ops.moejit.fused_moe_merged_backward if merged else
           torch.ops.moejit.fused_moe_backward)
    torch.library.opcheck(bwd, (dout, x, sel, rw, *weights, saved, LIMIT))
    main = (torch.ops.moejit.fused_moe_merged_backward_main_grad if merged else
            torch.ops.moejit.fused_moe_backward_main_grad)
    main_grads = [torch.randn(w.shape, device="cuda") for w in weights]
    torch.library.opcheck(main, (dout, x, sel, rw, *weights, saved, LIMIT, *main_grads))


def test_opcheck_leading_shape_and_empty(poison):
    x, sel, rw, weights, _ = layer_inputs(4 * 33, lead=(4, 33), seed=2)
    args = (x.clone().requires_grad_(), sel, rw.clone().requires_grad_(),
            *(w.clone().requires_grad_() for w in weights), 0.0)
    torch.library.opcheck(torch.ops.moejit.fused_moe, args, test_utils=FORWARD_WITH_GRAD_CHECKS)
    x, sel, rw, weights, _ = layer_inputs(0, seed=3)
    torch.library.opcheck(torch.ops.moejit.fused_moe, (x, sel, rw, *weights, 0.0))


# ------------------------------------------------------------------ torch.compile


class Block(nn.Module):
    """Router (bf16 linear, fp32 softmax, top-k, renormalised fp32 weights) + moejit experts +
    residual."""

    def __init__(self, merged=False, swiglu_limit=LIMIT, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.router = nn.Linear(H, E, bias=False, device="cuda", dtype=BF16)
        self.experts = mt.MoEExperts(E, H, I, merged=merged, swiglu_limit=swiglu_limit,
                                     device="cuda", dtype=BF16)

    def forward(self, x):
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, selected = probs.topk(K, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return x + self.experts(x, selected, weights)


def block_inputs(shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, H, device="cuda", generator=g).to(BF16)
    dout = torch.randn(*shape, H, device="cuda", generator=g).to(BF16)
    return x, dout


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_compile_fullgraph_aot_eager_is_bitwise_equal_to_eager(merged):
    block = Block(merged)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    x, dout = block_inputs((2, 96), seed=5)
    eager_out, eager_grads = train_step(block, block, x, dout)
    comp_out, comp_grads = train_step(compiled, block, x, dout)
    assert torch.isfinite(eager_out).all()
    assert torch.equal(comp_out, eager_out)
    for name, g in eager_grads.items():
        assert torch.isfinite(g).all(), name
        assert torch.equal(comp_grads[name], g), f"d{name}: compiled differs from eager"


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_compile_fullgraph_inductor_matches_eager(merged):
    block = Block(merged)
    compiled = torch.compile(block, fullgraph=True)
    for seed in (6, 7):
        x, dout = block_inputs((2, 96), seed)
        eager_out, eager_grads = train_step(block, block, x, dout)
        comp_out, comp_grads = train_step(compiled, block, x, dout)
        assert rel(comp_out, eager_out) < COMPILE_TOL
        for name, g in eager_grads.items():
            assert torch.isfinite(comp_grads[name]).all(), name
            assert rel(comp_grads[name], g) < COMPILE_TOL, f"d{name}"


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_compile_reduce_overhead_cuda_graphs(merged):
    from torch._dynamo.utils import counters
    counters.clear()
    block = Block(merged)
    compiled = torch.compile(block, fullgraph=True, mode="reduce-overhead")
    for step in range(5):  # warm-up, record, then replays on fresh data
        x, dout = block_inputs((2, 96), seed=20 + step)
        comp_out, comp_grads = train_step(compiled, block, x, dout)
        eager_out, eager_grads = train_step(block, block, x, dout)
        assert rel(comp_out, eager_out) < COMPILE_TOL, f"step {step}"
        for name, g in eager_grads.items():
            assert torch.isfinite(comp_grads[name]).all(), name
            assert rel(comp_grads[name], g) < COMPILE_TOL, f"step {step}: d{name}"
    skips = dict(counters["inductor"])
    assert not any(k.startswith("cudagraph_skips") and v for k, v in skips.items()), skips


def test_dynamic_tokens_do_not_recompile_every_step():
    block = Block(False)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=counter)
    sizes = [64, 96, 200, 333, 17, 1000, 128, 77]
    for i, tokens in enumerate(sizes):
        x, dout = block_inputs((tokens,), seed=40 + i)
        comp = train_step(compiled, block, x, dout)
        assert_steps_equal(comp, train_step(block, block, x, dout), f"T={tokens}")
    # Automatic dynamic shapes: one static compile, one dynamic recompile, then none.
    assert counter.frame_count <= 2, f"{counter.frame_count} compiles for {len(sizes)} sizes"


def test_dynamic_tokens_marked_dynamic_compile_once_with_inductor():
    block = Block(True)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(block, fullgraph=True, backend=counter)
    for i, tokens in enumerate([64, 96, 333, 1000]):
        x, dout = block_inputs((2, tokens), seed=60 + i)
        comp_out, comp_grads = train_step(compiled, block, x, dout, dynamic_dims=(1,))
        eager_out, eager_grads = train_step(block, block, x, dout)
        assert rel(comp_out, eager_out) < COMPILE_TOL, f"T={tokens}"
        for name, g in eager_grads.items():
            assert rel(comp_grads[name], g) < COMPILE_TOL, f"T={tokens}: d{name}"
    assert counter.frame_count == 1


def test_compile_bad_input_is_a_clear_error():
    x, sel, rw, (wg, wu, wd), _ = layer_inputs(64, seed=8)
    f = torch.compile(lambda *a: mt.fused_moe(*a), fullgraph=True, backend="aot_eager")
    bad = wd.transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(Exception, match="w_down must be contiguous"):
        f(x, sel, rw, wg, wu, bad)


# ------------------------------------------------------------------ training-framework needs


def _layer_fn(merged):
    return mt.fused_moe_merged if merged else mt.fused_moe


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_main_grad_functional_accumulates_fp32(merged):
    x, sel, rw, weights, dout = layer_inputs(T, merged, seed=9)
    weights = [w.clone().requires_grad_() for w in weights]
    init = [torch.randn(w.shape, device="cuda") for w in weights]
    main_grads = [g.clone() for g in init]
    xg = x.clone().requires_grad_()
    rwg = rw.clone().requires_grad_()
    out = _layer_fn(merged)(xg, sel, rwg, *weights, LIMIT, main_grads=main_grads)
    out.backward(dout)
    ref_out, ref_grads = reference_grads(x, sel, rw, weights, dout, LIMIT)
    assert rel(out, ref_out) < REF_TOL
    assert rel(xg.grad, ref_grads[0]) < REF_TOL
    assert rel(rwg.grad, ref_grads[1]) < REF_TOL
    # The plain path's bf16 weight gradients, for comparison.
    plain = [w.detach().clone().requires_grad_() for w in weights]
    _layer_fn(merged)(x, sel, rw, *plain, LIMIT).backward(dout)
    for w, mg, g0, ref, p in zip(weights, main_grads, init, ref_grads[2:], plain):
        assert w.grad is None, "a weight whose gradient went to main_grad has no .grad"
        assert mg.dtype == torch.float32
        added = mg - g0
        assert rel(added, ref) < REF_TOL
        # fp32 accumulation: at least as close to float64 as the bf16 gradient.
        assert rel(added, ref) <= rel(p.grad, ref) * 1.01 + 1e-6


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_module_main_grad_with_interleaved_micro_batches(merged):
    torch.manual_seed(3)
    layer = mt.MoEExperts(E, H, I, merged=merged, swiglu_limit=LIMIT, device="cuda",
                          dtype=BF16, accumulate_into_main_grad=True)
    params = list(layer.parameters())
    init = []
    for p in params:
        p.main_grad = torch.randn(p.shape, device="cuda")
        init.append(p.main_grad.clone())
    # 1F1B-style: two forwards, then both backwards (main_grad changes in between).
    batches = [layer_inputs(T, merged, seed=s)[:3] + (layer_inputs(T, merged, seed=s)[4],)
               for s in (11, 12)]
    outs = [layer(x, sel, rw) for x, sel, rw, _ in batches]
    for out, (_, _, _, dout) in zip(outs, batches):
        out.backward(dout)
    expected = [g.double() for g in init]
    for x, sel, rw, dout in batches:
        _, ref = reference_grads(x, sel, rw, params, dout, LIMIT)
        expected = [e + r for e, r in zip(expected, ref[2:])]
    for p, e, g0 in zip(params, expected, init):
        assert p.grad is None
        assert rel(p.main_grad - g0, e - g0.double()) < REF_TOL


def test_module_main_grad_megatron_dummy_grad_and_missing_buffer():
    layer = mt.MoEExperts(E, H, I, device="cuda", dtype=BF16, accumulate_into_main_grad=True)
    x, sel, rw, _, dout = layer_inputs(64, seed=13)
    for p in layer.parameters():
        p.main_grad = torch.zeros(p.shape, device="cuda")
        p.grad_added_to_main_grad = False
        p.zero_out_wgrad = True
    layer(x, sel, rw).backward(dout)
    for p in layer.parameters():
        assert p.grad_added_to_main_grad is True
        assert p.grad is not None and torch.count_nonzero(p.grad) == 0
        assert torch.count_nonzero(p.main_grad) > 0
    del layer.w_up.main_grad
    with pytest.raises(moejit.InvalidArgumentError, match="main_grad"):
        layer(x, sel, rw).backward(dout)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_main_grad_block_under_compile_fullgraph(merged):
    block = Block(merged)
    block.experts.accumulate_into_main_grad = True
    experts = list(block.experts.parameters())
    compiled = torch.compile(block, fullgraph=True)
    for step, seed in enumerate((70, 71)):
        x, dout = block_inputs((2, 96), seed)
        sums = []
        for fn in (block, compiled):
            for p in experts:
                p.main_grad = torch.zeros(p.shape, device="cuda") if step == 0 else \
                    p.main_grad.zero_()
            out = fn(x)
            out.backward(dout)
            assert all(p.grad is None for p in experts)
            sums.append([p.main_grad.clone() for p in experts])
        for name, e, c in zip(("fc1a", "fc1b", "down"), *sums):
            assert torch.isfinite(c).all() and torch.count_nonzero(c) > 0, name
            assert rel(c, e) < COMPILE_TOL, f"step {step}: main_grad {name}"


def test_bad_main_grad():
    x, sel, rw, weights, dout = layer_inputs(64, seed=14)
    weights = [w.clone().requires_grad_() for w in weights]
    bad = [torch.zeros(w.shape, device="cuda", dtype=BF16) for w in weights]
    out = mt.fused_moe(x, sel, rw, *weights, main_grads=bad)
    with pytest.raises(moejit.InvalidArgumentError, match="main_grad of w_gate must be"):
        out.backward(dout)
    wrong_shape = [torch.zeros(3, device="cuda")] * 3
    out = mt.fused_moe(x, sel, rw, *weights, main_grads=wrong_shape)
    with pytest.raises(moejit.InvalidArgumentError, match="main_grad"):
        out.backward(dout)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_fp32_and_bf16_routing_weights_agree(merged):
    x, sel, rw32, weights, dout = layer_inputs(T, merged, seed=15)
    rw16 = rw32.to(BF16)
    rw32 = rw16.float()  # the same values in both dtypes

    def run(rw):
        leaves = [t.clone().requires_grad_() for t in (x, rw) + tuple(weights)]
        out = _layer_fn(merged)(leaves[0], sel, leaves[1], *leaves[2:], LIMIT)
        out.backward(dout)
        return out.detach(), [t.grad for t in leaves]

    out32, g32 = run(rw32)
    out16, g16 = run(rw16)
    assert g32[1].dtype == torch.float32 and g16[1].dtype == BF16
    # The layer keeps routing weights in fp32 internally: the same forward and gradients.
    assert torch.equal(out32, out16)
    assert torch.equal(g32[0], g16[0])
    for a, b in zip(g32[2:], g16[2:]):
        assert torch.equal(a, b)
    assert rel(g16[1], g32[1]) < 1e-2
    ref_out, ref = reference_grads(x, sel, rw32, weights, dout, LIMIT)
    assert rel(out32, ref_out) < REF_TOL and rel(g32[1], ref[1]) < REF_TOL


def test_any_leading_shape():
    x, sel, rw, weights, dout = layer_inputs(2 * 3 * 40, seed=16)
    flat = mt.fused_moe(x, sel, rw, *weights)
    for lead in [(2, 120), (2, 3, 40), (240, 1)]:
        out = mt.fused_moe(x.view(*lead, H), sel.view(*lead, K), rw.view(*lead, K), *weights)
        assert out.shape == (*lead, H)
        assert torch.equal(out.reshape(-1, H), flat)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_backward_consumes_saved_and_a_second_backward_is_refused(merged):
    """The backward ops write the SwiGLU gradient over the saved g and u (consume_saved, 0.12,
    in a workspace S·2I elements smaller): the gradients still match the float64 reference,
    the saved buffer changed, and a second backward through the same graph (retain_graph) is
    PyTorch's in-place error, never a result computed from spent bytes. A new forward works."""
    x, sel, rw, weights, dout = layer_inputs(T, merged, seed=21)
    leaves = [t.clone().requires_grad_() for t in (x, rw) + tuple(weights)]
    call = mt.fused_moe_merged if merged else mt.fused_moe
    out = call(leaves[0], sel, leaves[1], *leaves[2:], swiglu_limit=LIMIT)
    grads = torch.autograd.grad(out, leaves, dout, retain_graph=True)
    ref_out, ref = reference_grads(x, sel, rw, weights, dout, LIMIT)
    assert rel(out, ref_out) < REF_TOL
    for name, g, r in zip(("dx", "drw", "dw0", "dw1", "dw2"), grads, ref):
        assert rel(g, r) < REF_TOL, name
    with pytest.raises(RuntimeError, match="inplace operation"):
        torch.autograd.grad(out, leaves, dout)
    out2 = call(leaves[0], sel, leaves[1], *leaves[2:], swiglu_limit=LIMIT)
    grads2 = torch.autograd.grad(out2, leaves, dout)
    for g, g2 in zip(grads, grads2):
        assert torch.equal(g, g2)  # deterministic: the same bits from a new forward


def test_consuming_workspace_is_smaller_by_d_gate_up():
    x, sel, rw, weights, _ = layer_inputs(T, True, seed=22)
    plan = _op._plan(_op.check("t", *_args(T, True)), torch.device("cuda", 0))
    keep, spend = plan.workspace_size(T), plan.consuming_workspace_size(T)
    assert spend < keep and keep - spend <= T * K * 2 * I * 2 + 256


def test_step_peak_is_saved_plus_one_scattered_tensor():
    """The backward in two parts (moejit_plan_backward_part, 0.13): DOWN's workspace, d(a·w)
    [S,I] among it, is freed before dx and fc1's weight gradients are allocated, and UP's
    split scratch is dx itself, so the step's peak beyond its inputs and the gradients it
    returns (the benchmark's measure) is saved + one [S,H] region + out. The whole backward's
    workspace (one call) held [S,H] + [S,I] + the split scratch: 6 MiB over the bound here."""
    from moejit_bench.layer import step_memory
    tokens = 2048
    x, sel, rw, weights, dout = layer_inputs(tokens, True, seed=23)
    leaves = [t.clone().requires_grad_() for t in (x, rw) + tuple(weights)]
    memory = step_memory(lambda: mt.fused_moe_merged(leaves[0], sel, leaves[1], *leaves[2:]),
                         leaves, dout)
    S = tokens * K
    bound = memory["saved_mb"] + (S * H * 2 + tokens * H * 2) / 2**20 + 0.5
    assert memory["peak_mb"] <= bound, memory
    # g|u and the scatter index; the routing weights in scattered order are not saved (0.14).
    assert memory["saved_mb"] < (S * 2 * I * 2 + S * 4) / 2**20 + 0.1, memory


def test_split_fc1_gradients_are_halves_of_one_allocation():
    """dw_gate and dw_up of split weights come from one [2,E,I,H] allocation (0.14: one
    allocator block instead of two, each rounded to its granule), and autograd keeps the
    halves as the parameters' .grad without a copy."""
    x, sel, rw, weights, dout = layer_inputs(T, False, seed=24)
    leaves = [t.clone().requires_grad_() for t in (x, rw) + tuple(weights)]
    mt.fused_moe(leaves[0], sel, leaves[1], *leaves[2:]).backward(dout)
    dw_gate, dw_up = leaves[2].grad, leaves[3].grad
    assert dw_gate.is_contiguous() and dw_up.is_contiguous()
    assert dw_gate.untyped_storage().data_ptr() == dw_up.untyped_storage().data_ptr()
    assert dw_up.data_ptr() - dw_gate.data_ptr() == dw_gate.numel() * dw_gate.element_size()
    assert torch.isfinite(dw_gate).all() and torch.isfinite(dw_up).all()


def test_saved_bound_covers_the_library_for_many_token_counts():
    for merged in (False, True):
        for tokens in (0, 1, 3, 255, 257, 4096):
            plan = _op._plan(_op.check("t", *_args(tokens, merged)), torch.device("cuda", 0))
            assert plan.saved_size(tokens) <= mt.saved_bytes_bound(tokens, H, I, E, K), tokens


def _args(tokens, merged):
    x, sel, rw, weights, _ = layer_inputs(tokens, merged, seed=18)
    if merged:
        return x, sel, rw, None, None, weights[0], weights[1], 0.0
    return x, sel, rw, weights[0], weights[1], None, weights[2], 0.0


def test_bad_inputs_real_tensors():
    x, sel, rw, (wg, wu, wd), _ = layer_inputs(64, seed=19)
    _op.clear_caches()
    unaligned = torch.empty(64 * H + 1, dtype=BF16, device="cuda")[1:].view(64, H)
    cases = [
        (lambda: mt.fused_moe(x.cpu(), sel, rw, wg, wu, wd), "x must be a CUDA tensor"),
        (lambda: mt.fused_moe(x, sel.cpu(), rw, wg, wu, wd), "selected_experts is on cpu"),
        (lambda: mt.fused_moe(x, sel, rw, wg.float(), wu, wd), "w_gate must have"),
        (lambda: mt.fused_moe(x, sel, rw, wg, wu, wd[:, :, :128]), "w_down must be"),
        (lambda: mt.fused_moe(unaligned, sel, rw, wg, wu, wd), "aligned"),
        (lambda: torch.ops.moejit.fused_moe(x, sel, rw, wg, wu, wd, -2.0), "swiglu_limit"),
    ]
    for call, message in cases:
        with pytest.raises(moejit.InvalidArgumentError, match=message):
            call()
    assert not mt._plans, "a plan was created before the arguments were checked"
