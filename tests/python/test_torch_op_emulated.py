"""The custom ops' integration with PyTorch, tested on the CPU: the library's launches are
replaced by a float32 reference (moe_emulation.py: moejit._op._forward / _backward patched,
and CPU tensors accepted as if they were on the GPU), everything else is the real binding:
the wrappers, the schemas, the fake implementations, register_autograd, the main_grad
autograd.Function. So
torch.library.opcheck, torch.compile(fullgraph=True) with dynamic shapes and the main_grad
path run here without a GPU; test_torch_op_gpu.py repeats what needs the real kernels."""

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)

import torch._dynamo  # noqa: E402
import torch._dynamo.testing  # noqa: E402
from torch import nn  # noqa: E402

import moejit  # noqa: E402
import moejit.torch as mt  # noqa: E402
from compile_steps import (FORWARD_WITH_GRAD_CHECKS, assert_min_cut_compiles,  # noqa: E402
                           assert_one_graph_calling, assert_steps_equal, train_step)
from dispatch_log import DispatchLog  # noqa: E402

H, I, E, K = 32, 16, 4, 2
FULLGRAPH_MAIN_GRAD = True
BF16 = torch.bfloat16


pytestmark = pytest.mark.usefixtures("emulated_launches")  # conftest.py


def layer_inputs(tokens=24, merged=False, rw_dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, H, generator=g).to(BF16)
    sel = torch.rand(tokens, E, generator=g).topk(K, -1).indices
    sel = sel.to(torch.int32 if merged else torch.int64)
    rw = torch.rand(tokens, K, generator=g).to(rw_dtype)
    fc1 = [torch.randn(E, I, H, generator=g) * H ** -0.5 for _ in range(2)]
    weights = ([torch.cat(fc1, 1)] if merged else fc1) + [torch.randn(E, H, I, generator=g)
                                                          * I ** -0.5]
    weights = [w.to(BF16).requires_grad_(requires_grad) for w in weights]
    return x, sel, rw, weights


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
@pytest.mark.parametrize("rw_dtype", [torch.float32, BF16], ids=["rw_fp32", "rw_bf16"])
def test_opcheck_every_op(merged, rw_dtype):
    x, sel, rw, weights = layer_inputs(merged=merged, rw_dtype=rw_dtype)
    fwd = torch.ops.moejit.fused_moe_merged if merged else torch.ops.moejit.fused_moe
    grad_args = (x.clone().requires_grad_(), sel, rw.clone().requires_grad_(),
                 *(w.clone().requires_grad_() for w in weights), 0.75)
    torch.library.opcheck(fwd, grad_args, test_utils=FORWARD_WITH_GRAD_CHECKS)
    assert_min_cut_compiles(fwd, grad_args, torch.randn_like(x))
    torch.library.opcheck(fwd, (x.view(4, 6, H), sel.view(4, 6, K), rw.view(4, 6, K),
                                *weights, 0.0))
    out, saved = fwd(x, sel, rw, *weights, 0.75)
    bwd = (torch.ops.moejit.fused_moe_merged_backward if merged else
           torch.ops.moejit.fused_moe_backward)
    torch.library.opcheck(bwd, (torch.randn_like(out), x, sel, rw, *weights, saved, 0.75))
    main = (torch.ops.moejit.fused_moe_merged_backward_main_grad if merged else
            torch.ops.moejit.fused_moe_backward_main_grad)
    torch.library.opcheck(main, (torch.randn_like(out), x, sel, rw, *weights, saved, 0.75,
                                 *(torch.randn(w.shape) for w in weights)))


class Block(nn.Module):
    def __init__(self, merged=False, main_grad=False):
        super().__init__()
        torch.manual_seed(0)
        self.router = nn.Linear(H, E, bias=False, dtype=BF16)
        self.experts = mt.MoEExperts(E, H, I, merged=merged, swiglu_limit=0.75, dtype=BF16,
                                     accumulate_into_main_grad=main_grad)

    def forward(self, x):
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, selected = probs.topk(K, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return x + self.experts(x, selected, weights)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_compile_fullgraph_equals_eager(merged):
    block = Block(merged)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=counter)
    x = torch.randn(3, 8, H).to(BF16)
    eager = train_step(block, block, x)
    assert_steps_equal(train_step(compiled, block, x), eager)
    assert_one_graph_calling(counter, "moejit.fused_moe")


def test_dynamic_tokens_compile_at_most_twice():
    block = Block()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=counter)
    for tokens in (8, 12, 30, 5, 64, 17, 40):
        x = torch.randn(tokens, H).to(BF16)
        eager = train_step(block, block, x)
        assert_steps_equal(train_step(compiled, block, x), eager, f"T={tokens}")
    assert counter.frame_count <= 2


def test_marked_dynamic_leading_dims_compile_once():
    block = Block(True)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=counter)
    for batch, seq in ((2, 8), (3, 9), (4, 31)):
        x = torch.randn(batch, seq, H).to(BF16)
        eager = train_step(block, block, x)
        comp = train_step(compiled, block, x, dynamic_dims=(0, 1))
        assert torch.equal(comp[0], eager[0])
    assert counter.frame_count == 1


def test_compile_error_is_clear():
    x, sel, rw, (wg, wu, wd) = layer_inputs()
    f = torch.compile(lambda *a: mt.fused_moe(*a), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="w_down must be contiguous"):
        f(x, sel, rw, wg, wu, wd.transpose(1, 2).contiguous().transpose(1, 2))


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_main_grad_functional_matches_plain_gradients(merged):
    x, sel, rw, weights = layer_inputs(merged=merged, seed=3)
    plain = [w.clone().requires_grad_() for w in weights]
    xa = x.clone().requires_grad_()
    fn = mt.fused_moe_merged if merged else mt.fused_moe
    out = fn(xa, sel, rw, *plain, 0.75)
    out.backward(torch.ones_like(out))
    ws = [w.clone().requires_grad_() for w in weights]
    init = [torch.randn(w.shape) for w in weights]
    main = [g.clone() for g in init]
    xb = x.clone().requires_grad_()
    out2 = fn(xb, sel, rw, *ws, 0.75, main_grads=main)
    out2.backward(torch.ones_like(out2))
    assert torch.equal(out2, out) and torch.equal(xb.grad, xa.grad)
    for w, p, m, g0 in zip(ws, plain, main, init):
        assert w.grad is None
        assert torch.allclose((m - g0).to(BF16).float(), p.grad.float(), rtol=1e-2, atol=1e-3)


def test_module_main_grad_interleaved_and_megatron_flags():
    layer = mt.MoEExperts(E, H, I, dtype=BF16, accumulate_into_main_grad=True)
    for p in layer.parameters():
        p.main_grad = torch.zeros(p.shape)
    a, b = layer_inputs(seed=4), layer_inputs(seed=5)
    out_a = layer(a[0], a[1], a[2])
    out_b = layer(b[0], b[1], b[2])
    out_a.sum().backward()  # main_grad changes between out_b's forward and its backward
    first = [p.main_grad.clone() for p in layer.parameters()]
    out_b.sum().backward()
    for p, f in zip(layer.parameters(), first):
        assert p.grad is None
        assert torch.count_nonzero(f) and not torch.equal(p.main_grad, f)
    for p in layer.parameters():
        p.grad_added_to_main_grad = False
    layer(a[0], a[1], a[2]).sum().backward()
    assert all(p.grad_added_to_main_grad and p.grad is not None for p in layer.parameters())
    del layer.w_down.main_grad
    with pytest.raises(moejit.InvalidArgumentError, match="has no .main_grad"):
        layer(a[0], a[1], a[2]).sum().backward()


def test_main_grad_wrong_dtype_is_a_clear_error():
    x, sel, rw, weights = layer_inputs(seed=6, requires_grad=True)
    out = mt.fused_moe(x, sel, rw, *weights,
                       main_grads=[torch.zeros(w.shape, dtype=BF16) for w in weights])
    with pytest.raises(moejit.InvalidArgumentError, match="main_grad of w_gate must be"):
        out.sum().backward()


def test_main_grad_module_under_compile():
    """The main_grad path under torch.compile (a graph break is allowed, a wrong result
    is not)."""
    block = Block(main_grad=True)
    for p in block.experts.parameters():
        p.main_grad = torch.zeros(p.shape)
    x = torch.randn(16, H).to(BF16)
    eager = block(x)
    eager.sum().backward()
    expected = [p.main_grad.clone() for p in block.experts.parameters()]
    for p in block.experts.parameters():
        p.main_grad.zero_()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=FULLGRAPH_MAIN_GRAD)
    out = compiled(x)
    out.sum().backward()
    assert torch.equal(out, eager)
    for p, e in zip(block.experts.parameters(), expected):
        assert torch.equal(p.main_grad, e)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_direct_path_equals_the_op_path(merged):
    """mt._fused_direct (a plain autograd.Function over the same implementations, for the
    benchmark) gives what the custom op gives, gradients included."""
    x, sel, rw, weights = layer_inputs(merged=merged, seed=7)
    names = ("w_gate_up", "w_down") if merged else ("w_gate", "w_up", "w_down")
    results = []
    for path in ("op", "direct"):
        leaves = [t.clone().requires_grad_() for t in [x, rw] + weights]
        kwargs = dict(zip(names, leaves[2:]))
        if path == "op":
            fn = mt.fused_moe_merged if merged else mt.fused_moe
            out = fn(leaves[0], sel, leaves[1], *leaves[2:], swiglu_limit=0.75)
        else:
            out = mt._fused_direct(leaves[0], sel, leaves[1], swiglu_limit=0.75, **kwargs)
        out.backward(torch.ones_like(out))
        results.append([out.detach()] + [t.grad for t in leaves])
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("path", ["op", "direct"])
def test_a_second_backward_through_one_graph_is_refused(path):
    """Both paths spend `saved` in the backward (0.12): a second backward through the same graph
    (retain_graph) is PyTorch's in-place error, never a result from spent bytes. The op path
    gets the version bump from the dispatcher (mutates_args), the direct one bumps it itself."""
    x, sel, rw, weights = layer_inputs(seed=8)
    leaves = [t.clone().requires_grad_() for t in [x, rw] + weights]
    if path == "op":
        out = mt.fused_moe(leaves[0], sel, leaves[1], *leaves[2:], swiglu_limit=0.75)
    else:
        out = mt._fused_direct(leaves[0], sel, leaves[1], swiglu_limit=0.75,
                               **dict(zip(("w_gate", "w_up", "w_down"), leaves[2:])))
    out.backward(torch.ones_like(out), retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace operation"):
        out.backward(torch.ones_like(out))


def test_bench_accepts_the_compile_and_direct_paths():
    from moejit_bench import layer as bench
    args = bench.parse_args(["--quick", "--impls", "moejit,moejit-compile,moejit-direct"])
    assert args.impls == ["moejit", "moejit-compile", "moejit-direct"]
    assert set(args.impls) <= set(bench.LAYERS)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_backward_makes_no_gradient_for_saved(merged):
    """`saved` has no gradient: autograd must not materialize one (a zero tensor of saved's
    size filled on every backward, 2-3 % of a step on the GPU). Every op of the backward is
    recorded at the dispatcher; none may create or fill a tensor of saved's shape."""
    x, sel, rw, weights = layer_inputs(merged=merged, requires_grad=True)
    x.requires_grad_()
    fwd = torch.ops.moejit.fused_moe_merged if merged else torch.ops.moejit.fused_moe
    out, saved = fwd(x, sel, rw, *weights, 0.75)
    assert not saved.requires_grad
    with DispatchLog() as log:
        out.backward(torch.randn_like(out))
    made = [name for name, shapes in log.calls if tuple(saved.shape) in shapes]
    assert made == [], f"the backward made tensors of saved's shape {tuple(saved.shape)}: {made}"
    assert x.grad is not None and all(w.grad is not None for w in weights)


def test_split_fc1_gradients_share_a_block_unless_one_is_frozen():
    """The split backward op returns dw_gate and dw_up as one [2,E,I,H] tensor (0.14); autograd
    gets its halves, views of one block, when both weights train, and a copy of the one that
    does when the other is frozen (its half must not keep the whole block alive)."""
    x, sel, rw, (wg, wu, wd) = layer_inputs(requires_grad=False)
    dout = torch.randn(x.shape).to(BF16)
    both = [w.clone().requires_grad_() for w in (wg, wu, wd)]
    mt.fused_moe(x, sel, rw, *both).backward(dout)
    gate, up = both[0].grad, both[1].grad
    assert gate.untyped_storage().data_ptr() == up.untyped_storage().data_ptr()
    assert gate.is_contiguous() and up.is_contiguous()
    frozen_gate = [wg.clone(), wu.clone().requires_grad_(), wd.clone().requires_grad_()]
    mt.fused_moe(x, sel, rw, *frozen_gate).backward(dout)
    alone = frozen_gate[1].grad
    assert frozen_gate[0].grad is None
    assert alone.untyped_storage().nbytes() == alone.numel() * alone.element_size()
    assert torch.equal(alone, up)
