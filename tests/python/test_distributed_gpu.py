"""Expert parallelism (moejit/distributed.py) on two GPUs over NCCL: 2 processes
(torch.multiprocessing spawn, one GPU each, NCCL_NVLS_ENABLE=0: NVLink multicast stays off),
bf16, the default local experts (moejit's pre-dispatched experts entry) and the torch._grouped_mm
baseline, against the single-GPU moejit layer (moejit.torch.fused_moe_merged with the full
expert set) on the same global batch, computed on each rank: the rank's output rows and
input/routing-weight gradients, and the gradients of the rank's local experts.

Cases: softmax top-k routing; every route to one expert of rank 0 (rank 0 receives the
2*T*k rows of both ranks); no route to rank 0's experts (rank 0 receives R = 0 rows); T = 0
on rank 1; a second run of the same inputs is bitwise equal (determinism).

Tolerance: ‖ep − single‖ / ‖single‖ < 1e-2 for every tensor (bf16; the two differ in where
the k routes of a token are rounded to bf16 before their sum), and the baseline within 2e-2.
Every case draws fresh random inputs (the seed is in each failure message).
"""

import os
import random
import socket
from datetime import timedelta

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("expert parallelism over NCCL needs 2 CUDA devices (found "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})",
                allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as tmp  # noqa: E402

from gated_reference import rel  # noqa: E402

if not dist.is_available() or not dist.is_nccl_available():
    pytest.skip("torch.distributed with NCCL is not available", allow_module_level=True)

WORLD = 2
H, I, E_LOCAL, K = 512, 256, 8, 4
E = WORLD * E_LOCAL
BF16 = torch.bfloat16
TOL = 1e-2
BASELINE_TOL = 2e-2
CASES = ("softmax top-k", "all to one expert of rank 0", "rank 0 receives nothing",
         "T=0 on rank 1")


def make_case(name, seed):
    """The global batch, drawn identically on both ranks (CPU generator)."""
    g = torch.Generator().manual_seed(seed)
    tokens = [int(torch.randint(160, 320, (1,), generator=g)) for _ in range(WORLD)]
    if name == "T=0 on rank 1":
        tokens[1] = 0
    total = sum(tokens)
    if name == "all to one expert of rank 0":
        sel = torch.full((total, K), int(torch.randint(0, E_LOCAL, (1,), generator=g)))
        rw = torch.rand(total, K, generator=g) + 0.1
        rw = rw / rw.sum(-1, keepdim=True)
    else:
        logits = torch.randn(total, E, generator=g)
        if name == "rank 0 receives nothing":
            logits[:, :E_LOCAL] = float("-inf")
        rw, sel = torch.softmax(logits, -1).topk(K, -1)
        rw = rw / rw.sum(-1, keepdim=True)
    x = torch.randn(total, H, generator=g).to(BF16)
    dout = torch.randn(total, H, generator=g).to(BF16)
    w_gate_up = (torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).to(BF16)
    w_down = (torch.randn(E, H, I, generator=g) * I ** -0.5).to(BF16)
    return tokens, sel, rw.float(), x, dout, w_gate_up, w_down


def step(fn, leaves, sel, dout):
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    out = fn(leaves[0], sel, leaves[1], leaves[2], leaves[3])
    out.backward(dout)
    torch.cuda.synchronize()
    return [out.detach()] + [t.grad for t in leaves]


def worker(rank, port, seed):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=120),
                            device_id=torch.device("cuda", rank))
    try:
        check_rank(rank, torch.device("cuda", rank), seed)
    finally:
        dist.destroy_process_group()


def check_rank(rank, dev, seed):
    """Every case on this rank (the process group is up; dev is this rank's device)."""
    import moejit.distributed as ep
    import moejit.torch as mt
    for i, name in enumerate(CASES):
        tokens, sel, rw, x, dout, w_gate_up, w_down = (
            t.to(dev) if isinstance(t, torch.Tensor) else t
            for t in make_case(name, seed + i))
        single = step(lambda a, s, r, wgu, wd: mt.fused_moe_merged(a, s, r, wgu, wd),
                      [x, rw, w_gate_up, w_down], sel, dout)
        start = sum(tokens[:rank])
        mine = slice(start, start + tokens[rank])
        local = slice(rank * E_LOCAL, (rank + 1) * E_LOCAL)
        expected = [single[0][mine], single[1][mine], single[2][mine], single[3][local],
                    single[4][local]]
        leaves = [x[mine], rw[mine], w_gate_up[local].contiguous(),
                  w_down[local].contiguous()]
        for impl, fn, tol in (("moejit", ep.expert_parallel_moe, TOL),
                              ("grouped_mm", ep.expert_parallel_grouped_mm, BASELINE_TOL)):
            got = step(fn, leaves, sel[mine], dout[mine])
            for n, a, b in zip(("out", "dx", "d_routing_weights", "dw_gate_up", "dw_down"),
                               got, expected):
                assert a.shape == b.shape and a.dtype == b.dtype, (name, impl, n)
                assert torch.isfinite(a).all(), f"{name} {impl}: rank {rank} {n} not finite"
                err = rel(a, b)
                assert err < tol, (f"{name} ({impl}): rank {rank} {n} rel err {err:.3g} "
                                   f">= {tol} vs the single-GPU layer (seed {seed + i})")
            if impl == "moejit":
                again = step(fn, leaves, sel[mine], dout[mine])
                for a, b in zip(got, again):
                    assert torch.equal(a, b), (f"{name}: rank {rank} not bitwise "
                                               f"reproducible (seed {seed + i})")


def test_two_gpu_expert_parallel_matches_the_single_gpu_layer():
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off (inherited by the workers)
    seed = random.SystemRandom().randrange(1 << 31)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp.spawn(worker, args=(port, seed), nprocs=WORLD, join=True)
