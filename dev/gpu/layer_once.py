"""Passes of one moejit layer on a reference shape, nothing else: a target for ncu.

Usage: PYTHONPATH=python:bench MOEJIT_LIBRARY=... python3 dev/gpu/layer_once.py SHAPE [N] [--backward]
Runs N (default 2) forwards of SHAPE (moejit_bench's shapes, top-k routing, seed 0), or with
--backward N forward+backward steps, the first compiling what the layer needs, so ncu can skip
the first pass's kernels and measure the others' (dev/gpu/ring_ncu.sh).
"""

import sys

import torch

from moejit_bench import SHAPES, make_inputs
from moejit_bench.layer import LAYERS


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--backward"]
    backward = "--backward" in sys.argv[1:]
    name = args[0]
    passes = int(args[1]) if len(args) > 1 else 2
    T, E, H, I, k = SHAPES[name]
    x, sel, rw, weights, dout = make_inputs(T, E, H, I, k, torch.bfloat16, "topk", False, 0)
    inputs = [x, rw] + list(weights.values())
    for _ in range(passes):
        if backward:
            torch.autograd.grad(LAYERS["moejit"](x, sel, rw, **weights), inputs, dout)
        else:
            with torch.no_grad():
                LAYERS["moejit"](x, sel, rw, **weights)
    torch.cuda.synchronize()
    print(f"{name}: {passes} {'steps' if backward else 'forwards'} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
