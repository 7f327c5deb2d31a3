"""Per-kernel time of one moejit layer step (forward+backward) on the GPU, from torch.profiler.

Usage: PYTHONPATH=python:bench MOEJIT_LIBRARY=... python3 dev/gpu/step_profile.py [--impl IMPL]
       [--host] [--timeline] [shape ...]
IMPL is moejit (default), moejit-fp8 or moejit-fp8-cached (the FP8 layer inside one
fp8_weight_cache() block: the weights quantized once, before the profiled steps).
(Not named profile.py: run as a script, that name would hide the standard library's profile
module, which torch._dynamo imports through cProfile.)
Prints, for each shape, every kernel of one step in launch order with its mean duration over
the profiled steps and the mean idle time of the GPU before it (since the previous kernel ended;
both idle and the step's wall from the steps after the first, which carries the profiler's start-up),
then the kernels' sum against the step's wall time (the gap is launch and host time; the idle
column says where it falls: spread evenly it is launch latency, in one place a wait). It shows where a step's time goes; it is not a benchmark (no peer).
"""

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from moejit_bench import SHAPES, make_inputs
from moejit_bench.layer import LAYERS, _weight_cache_block

STEPS = 3


def short(name: str) -> str:
    return name if len(name) <= 72 else name[:69] + "..."


def profile_shape(name: str, impl: str, host: bool, timeline: bool = False) -> None:
    T, E, H, I, k = SHAPES[name]
    layer = LAYERS[impl]
    x, sel, rw, weights, dout = make_inputs(T, E, H, I, k, torch.bfloat16, "topk", False, 0)
    inputs = [x, rw] + list(weights.values())

    def step():
        return torch.autograd.grad(layer(x, sel, rw, **weights), inputs, dout)

    cache = _weight_cache_block(impl)
    cache.__enter__()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(STEPS + 1)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marks[0].record()
        for i in range(STEPS):
            step()
            marks[i + 1].record()
        torch.cuda.synchronize()
    cache.__exit__(None, None, None)
    # The first profiled step carries the profiler's start-up (its host calls ran slow: a gap of
    # 223-465 µs before fc2's dgrad, averaged over the steps, that two traced steps back to back
    # never showed; docs/PERF_LOG.md 0.13 eighth session): walls and idle times from the others.
    wall_ms = statistics.mean(marks[i].elapsed_time(marks[i + 1]) for i in range(1, STEPS))
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    per_step = len(kernels) // STEPS
    if per_step * STEPS != len(kernels):
        print(f"{name}: {len(kernels)} kernels over {STEPS} steps (uneven); listing all")
        per_step = len(kernels)
    flops = 18.0 * T * k * H * I
    print(f"== {name} {impl}: step {wall_ms:.3f} ms ({flops / wall_ms / 1e9:.0f} TFLOP/s), {per_step} kernels")
    steps = len(kernels) // per_step
    total = idle_total = 0.0
    print(f"  {'kernel':>9}     {'idle before':>11}")
    for i in range(per_step):
        at = [s * per_step + i for s in range(steps)]
        us = statistics.mean(kernels[j].time_range.elapsed_us() for j in at)
        # Steps after the first (see wall_ms).
        idle = [kernels[j].time_range.start - kernels[j - 1].time_range.end for j in at if j >= per_step]
        idle_us = statistics.mean(idle) if idle else 0.0
        total += us
        idle_total += idle_us
        print(f"  {us:9.1f} us  {idle_us:9.1f} us  {short(kernels[at[0]].name)}")
    print(f"  kernels {total / 1e3:.3f} ms, idle between them {idle_total / 1e3:.3f} ms, of {wall_ms:.3f} ms")
    if host:
        host_time(step, layer, (x, sel, rw), weights, inputs, dout, _weight_cache_block(impl))
    if timeline:
        launch_timeline(step)


# The library's C calls as the Python binding makes them, marked in the timeline by name.
_MARKED_CALLS = ("forward", "backward", "backward_part")


def launch_timeline(step) -> None:
    """Two steps' host calls and GPU kernels in time order (µs from the first host event):
    each moejit C call (the binding's Plan methods, wrapped in record_function here only), each
    driver or runtime call the profiler records (launches, allocations, syncs) and each kernel's
    start and end on the GPU. A GPU idle gap shows the host call it waited for."""
    from moejit import core
    originals = {n: getattr(core.Plan, n) for n in _MARKED_CALLS}

    def marked(name, fn):
        def call(self, *args, **kwargs):
            label = f"moejit.{name}" + (f"({args[0]})" if name == "backward_part" else "")
            with torch.profiler.record_function(label):
                return fn(self, *args, **kwargs)
        return call

    for n, fn in originals.items():
        setattr(core.Plan, n, marked(n, fn))
    try:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        # Two steps back to back, as the kernel list's (and a training loop's): a gap that
        # only the second step shows comes from the first step's tail, not from the host.
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            step()
            torch.cuda.synchronize()
    finally:
        for n, fn in originals.items():
            setattr(core.Plan, n, fn)
    rows = []
    for e in prof.events():
        start, end = e.time_range.start, e.time_range.end
        if e.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((start, "gpu", f"{end - start:8.1f}  {short(e.name)}"))
        elif (e.name.startswith(("cu", "moejit.", "aten::empty", "autograd::engine"))
              or "Backward" in e.name):
            rows.append((start, "cpu", f"{end - start:8.1f}  {short(e.name)}"))
    if not rows:
        print("  timeline: the profiler recorded nothing")
        return
    t0 = min(r[0] for r in rows)
    last_gpu_end = None
    print("  timeline (µs from the step's first event; gpu rows: idle before the kernel)")
    for start, side, text in sorted(rows, key=lambda r: r[0]):
        idle = ""
        if side == "gpu":
            if last_gpu_end is not None:
                idle = f"idle {start - last_gpu_end:7.1f}"
            last_gpu_end = start + float(text.split()[0])
        print(f"  {start - t0:9.1f}  {side}  {idle:>12}  {text}")


def host_time(step, layer, args, weights, inputs, dout, cache) -> None:  # cache: a new block
    """Where the host's time of a step goes: forward and backward calls timed on the host
    without synchronising (if a call's host time approaches the GPU's, the GPU waits on it),
    then the torch profiler's CPU-only view, by self time."""
    fwd, bwd = [], []
    with cache:
        torch.cuda.synchronize()
        for _ in range(10):
            t0 = time.perf_counter()
            out = layer(*args, **weights)
            t1 = time.perf_counter()
            torch.autograd.grad(out, inputs, dout)
            t2 = time.perf_counter()
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            torch.cuda.synchronize()  # each step's host time from an idle GPU: no queue to hide in
        print(f"  host, one step from an idle GPU: forward call {statistics.median(fwd):.3f} ms, "
              f"backward call {statistics.median(bwd):.3f} ms (medians of 10)")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", default="moejit",
                        choices=("moejit", "moejit-fp8", "moejit-fp8-cached"))
    parser.add_argument("--host", action="store_true",
                        help="also the host's time per call and its CPU profile (where a gap comes from)")
    parser.add_argument("--timeline", action="store_true",
                        help="also two steps' host calls and kernels in time order (which call a gap waits for)")
    parser.add_argument("shapes", nargs="*", default=["small-expert-7b", "mid-expert-30b"])
    args = parser.parse_args()
    for name in args.shapes:
        profile_shape(name, args.impl, args.host, args.timeline)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
