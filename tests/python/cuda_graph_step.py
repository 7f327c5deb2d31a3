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
