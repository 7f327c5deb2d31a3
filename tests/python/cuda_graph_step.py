"""A training step captured in a CUDA graph as torch documents it, for the GPU tests that hold
a replay to eager execution (test_torch_gpu.py, test_fp8_torch_gpu.py)."""

import torch


def capture_step(step, zero_grads, warmups: int = 2):
    """Runs `step` `warmups` times on a side stream (JIT compile, module load, allocator), then
    captures it once; returns (graph, the captured step's output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            zero_grads()
            step()
    torch.cuda.current_stream().wait_stream(side)
    zero_grads()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


class GraphedLayerStep:
    """A layer's training step (forward, then backward of dout) captured on static copies of a
    first batch; replay_matches_eager puts a new batch into them, replays, and asserts every
    output and gradient is finite and bit-equal to the same step run eagerly."""

    def __init__(self, layer, x, sel, rw, dout):
        self.layer = layer
        self.params = list(layer.parameters())
        self.x = x.detach().clone().requires_grad_()
        self.sel = sel.clone()
        self.rw = rw.detach().clone().requires_grad_()
        self.dout = dout.clone()

        def zero_grads():
            for t in [self.x, self.rw] + self.params:
                t.grad = None

        def step():
            out = layer(self.x, self.sel, self.rw)
            out.backward(self.dout)
            return out

        self.graph, self.out = capture_step(step, zero_grads)

    def replay_matches_eager(self, x, sel, rw, dout):
        with torch.no_grad():
            self.x.copy_(x)
            self.sel.copy_(sel)
            self.rw.copy_(rw)
            self.dout.copy_(dout)
        self.graph.replay()
        torch.cuda.synchronize()
        graphed = [t.detach().clone() for t in
                   [self.out, self.x.grad, self.rw.grad] + [p.grad for p in self.params]]
        xe, rwe = x.detach().clone().requires_grad_(), rw.detach().clone().requires_grad_()
        out = self.layer(xe, sel, rwe)
        eager = [out.detach()] + list(torch.autograd.grad(out, [xe, rwe] + self.params, dout))
        names = ["out", "dx", "d_routing_weights"] + [f"d{n}" for n, _ in self.layer.named_parameters()]
        for name, g, e in zip(names, graphed, eager):
            assert torch.isfinite(g.float()).all(), f"{name} from the graph is not finite"
            assert torch.equal(g, e), f"{name}: graph replay differs from eager execution"
