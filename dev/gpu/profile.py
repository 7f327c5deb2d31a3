"""Per-kernel time of one moejit layer step (forward+backward) on the GPU, from torch.profiler.

Usage: PYTHONPATH=python:bench MOEJIT_LIBRARY=... python3 dev/gpu/profile.py [shape ...]
Prints, for each shape, every kernel of one step in launch order with its mean duration over
the profiled steps, then the kernels' sum against the step's wall time (the gap is launch and
host time). It shows where a step's time goes; it is not a benchmark (no peer).
"""

import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from moejit_bench import SHAPES, make_inputs, moejit_layer

STEPS = 3


def short(name: str) -> str:
    return name if len(name) <= 72 else name[:69] + "..."


def profile_shape(name: str) -> None:
    T, E, H, I, k = SHAPES[name]
    x, sel, rw, weights, dout = make_inputs(T, E, H, I, k, torch.bfloat16, "topk", False, 0)
    inputs = [x, rw] + list(weights.values())

    def step():
        return torch.autograd.grad(moejit_layer(x, sel, rw, **weights), inputs, dout)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(STEPS):
            step()
        end.record()
        torch.cuda.synchronize()
    wall_ms = start.elapsed_time(end) / STEPS
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    per_step = len(kernels) // STEPS
    if per_step * STEPS != len(kernels):
        print(f"{name}: {len(kernels)} kernels over {STEPS} steps (uneven); listing all")
        per_step = len(kernels)
    flops = 18.0 * T * k * H * I
    print(f"== {name}: step {wall_ms:.3f} ms ({flops / wall_ms / 1e9:.0f} TFLOP/s), {per_step} kernels")
    total = 0.0
    for i in range(per_step):
        runs = [kernels[s * per_step + i] for s in range(len(kernels) // per_step)]
        us = statistics.mean(e.time_range.elapsed_us() for e in runs)
        total += us
        print(f"  {us:9.1f} us  {short(runs[0].name)}")
    print(f"  kernels {total / 1e3:.3f} ms of {wall_ms:.3f} ms")


def main() -> None:
    for name in sys.argv[1:] or ["small-expert-7b", "mid-expert-30b"]:
        profile_shape(name)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
