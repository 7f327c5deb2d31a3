"""Forward passes of one moejit layer on a reference shape, nothing else: a target for ncu.

Usage: PYTHONPATH=python:bench MOEJIT_LIBRARY=... python3 dev/gpu/forward_once.py SHAPE [N]
Runs N (default 2) forwards of SHAPE (moejit_bench's shapes, top-k routing, seed 0), the first
compiling what the layer needs, so ncu can skip the first forward's kernels and measure the
others' (dev/gpu/ring_ncu.sh).
"""

import sys

import torch

from moejit_bench import SHAPES, make_inputs
from moejit_bench.layer import LAYERS


def main() -> int:
    name = sys.argv[1]
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    T, E, H, I, k = SHAPES[name]
    x, sel, rw, weights, _ = make_inputs(T, E, H, I, k, torch.bfloat16, "topk", False, 0)
    with torch.no_grad():
        for _ in range(passes):
            LAYERS["moejit"](x, sel, rw, **weights)
    torch.cuda.synchronize()
    print(f"{name}: {passes} forwards done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
