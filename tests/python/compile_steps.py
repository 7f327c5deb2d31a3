"""One training step of a block, eager or compiled, and the bitwise comparison of two steps:
shared by the torch.compile tests on the CPU (test_torch_op_emulated.py,
test_torch_op_gated_emulated.py) and on the GPU (test_torch_op_gpu.py)."""

import torch
import torch._dynamo


def train_step(fn, block, x, dout=None, dynamic_dims=()):
    """fn(x) (the block or its compiled form) and its backward of dout (ones when None), with
    the block's gradients cleared first: (out, {"x": dx, parameter name: grad}), copies."""
    x = x.detach().clone().requires_grad_()
    for dim in dynamic_dims:
        torch._dynamo.mark_dynamic(x, dim)
    for p in block.parameters():
        p.grad = None
    out = fn(x)
    out.backward(torch.ones_like(out) if dout is None else dout)
    grads = {"x": x.grad}
    grads.update({n: p.grad for n, p in block.named_parameters()})
    return out.detach().clone(), {n: None if g is None else g.clone() for n, g in grads.items()}


def assert_steps_equal(comp, eager, what=""):
    """Two train_step results are bitwise equal, every gradient present."""
    assert torch.equal(comp[0], eager[0]), f"{what} out"
    for name, g in eager[1].items():
        assert g is not None and torch.equal(comp[1][name], g), f"{what} d{name}"


def assert_one_graph_calling(counter, op):
    """The compile counter saw one frame, and its graphs call `op`."""
    assert counter.frame_count == 1
    graph = "\n".join(str(g.graph) for g in counter.graphs)
    assert op in graph
