"""One training step of a block, eager or compiled, and the bitwise comparison of two steps:
shared by the torch.compile tests on the CPU (test_torch_op_emulated.py,
test_torch_op_gated_emulated.py) and on the GPU (test_torch_op_gpu.py)."""

import torch
import torch._dynamo

# opcheck's tests for a layer op's forward called with inputs that require grad. Its backward op
# consumes `saved` (writes over it, 0.12), and opcheck's test_aot_dispatch_dynamic compiles a
# function that returns that `saved` output, which PyTorch's min-cut partitioner cannot do for a
# forward output the backward writes ("... was invalid, but is output"). What users compile
# returns `out` only: assert_min_cut_compiles checks that path, besides the test_compile_* tests.
FORWARD_WITH_GRAD_CHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


def assert_min_cut_compiles(op, args, dout):
    """op(*args)[0] (out; the saved output dropped) traced by AOTAutograd with the min-cut
    partitioner (inductor's) and no-op compilers: forward and gradients bitwise eager's. args:
    the op's arguments, the tensors among them that require grad get gradients."""
    from functorch.compile import min_cut_rematerialization_partition, nop
    from torch._functorch.aot_autograd import aot_function

    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]

    def step(fn):
        out = fn(*args)
        return out.detach(), torch.autograd.grad(out, leaves, dout)

    eager = step(lambda *a: op(*a)[0])
    compiled = step(aot_function(lambda *a: op(*a)[0], nop, nop,
                                 partition_fn=min_cut_rematerialization_partition))
    assert torch.equal(compiled[0], eager[0]), "out"
    for i, (c, e) in enumerate(zip(compiled[1], eager[1])):
        assert torch.equal(c, e), f"gradient {i}"


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
