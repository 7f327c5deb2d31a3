#!/usr/bin/env python3
"""Expert parallelism benchmark: moejit.distributed (local experts = moejit's pre-dispatched
experts entry) against the same gemm/combine with torch._grouped_mm local experts, in the
same run, over NCCL on 2 GPUs (one process per GPU); moejit_layer: the local experts through
moejit's whole layer with top_k = 1 instead (what the entry saves).

    MOEJIT_LIBRARY=build/capi/libmoejit.so PYTHONPATH=python:bench python3 bench/bench_ep.py
    torchrun --nproc-per-node 2 bench/bench_ep.py --out ep.json      # the same, via torchrun

Each step is forward + backward of one EP layer (bf16 x and weights, fp32 softmax top-k routing
weights, fixed for the run so the received row counts R are fixed). CUDA events at the stage
boundaries (moejit.distributed's stage_hook) split the step into forward dispatch (route plan,
count exchange with its host sync, row all_to_all), experts, combine, and the backward's
combine (gradient all_to_all to the expert ranks), experts, dispatch (gradients back, per-token
reduction). Times are medians over the timed steps, then the maximum over the ranks (the
slowest rank sets the step). The markdown table is printed last; --out writes JSON.
NCCL_NVLS_ENABLE=0 is set (NVLink multicast stays off).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "capi", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from moejit_bench import SHAPES as LAYER_SHAPES  # noqa: E402  (T, E, H, I, k)

# name: (global experts, hidden, intermediate, top_k, tokens per GPU)
SHAPES = {name: (E, H, I, k, T) for name, (T, E, H, I, k) in LAYER_SHAPES.items()
          if name in ("deepseek-v3", "qwen3-30b-a3b")}
SHAPES["smoke"] = (16, 512, 256, 4, 1024)
IMPLS = ("moejit", "grouped_mm", "moejit_layer")
STAGES = (("fwd dispatch", "dispatch", "experts"), ("fwd experts", "experts", "combine"),
          ("fwd combine", "combine", "end"),
          ("bwd combine", "backward.combine", "backward.experts"),
          ("bwd experts", "backward.experts", "backward.dispatch"),
          ("bwd dispatch", "backward.dispatch", "backward.end"),
          ("fwd+bwd", "dispatch", "backward.end"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="deepseek-v3,qwen3-30b-a3b",
                   help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--impls", default=",".join(IMPLS), help=", ".join(IMPLS))
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--nprocs", type=int, default=2, help="GPUs (without torchrun)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.impls = [s for s in args.impls.split(",") if s]
    for s in args.shapes:
        if s not in SHAPES:
            p.error(f"unknown shape {s!r}; known: {', '.join(SHAPES)}")
    for s in args.impls:
        if s not in IMPLS:
            p.error(f"unknown impl {s!r}; known: {', '.join(IMPLS)}")
    return args


class Events:
    """stage_hook: one CUDA event per stage name, on the current stream."""

    def __init__(self):
        self.events = {}

    def __call__(self, name):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events[name] = event

    def times(self):
        return {label: self.events[a].elapsed_time(self.events[b]) for label, a, b in STAGES}


def bench_shape(name, impls, args, rank, world, dev):
    import moejit.distributed as ep
    experts, hidden, inter, top_k, tokens = SHAPES[name]
    if experts % world:
        raise SystemExit(f"{name}: {experts} experts do not split over {world} ranks")
    e_local = experts // world
    g = torch.Generator(device=dev).manual_seed(args.seed * 1000 + rank)
    logits = torch.randn(tokens, experts, device=dev, generator=g)
    rw, sel = torch.softmax(logits, -1).topk(top_k, -1)
    rw = (rw / rw.sum(-1, keepdim=True)).float()
    x = torch.randn(tokens, hidden, device=dev, generator=g).to(torch.bfloat16)
    dout = torch.randn(tokens, hidden, device=dev, generator=g).to(torch.bfloat16)
    w_gate_up = (torch.randn(e_local, 2 * inter, hidden, device=dev, generator=g)
                 * hidden ** -0.5).to(torch.bfloat16).requires_grad_()
    w_down = (torch.randn(e_local, hidden, inter, device=dev, generator=g)
              * inter ** -0.5).to(torch.bfloat16).requires_grad_()
    # rows this rank's experts receive (for the TFLOP/s column)
    routes = torch.zeros(experts, device=dev, dtype=torch.int64)
    routes.scatter_add_(0, sel.reshape(-1), torch.ones_like(sel.reshape(-1)))
    dist.all_reduce(routes)
    rows = int(routes[rank * e_local:(rank + 1) * e_local].sum())
    results = {}
    outputs = {}
    for impl in impls:
        fn = {"moejit": ep.expert_parallel_moe, "grouped_mm": ep.expert_parallel_grouped_mm,
              "moejit_layer": lambda *a, **kw: ep.expert_parallel_moe(
                  *a, local_experts=ep.moejit_layer_local_experts, **kw)}[impl]
        samples = []
        for it in range(args.warmup + args.iters):
            xl = x.detach().requires_grad_()
            rwl = rw.detach().requires_grad_()
            w_gate_up.grad = w_down.grad = None
            events = Events()
            out = fn(xl, sel, rwl, w_gate_up, w_down, stage_hook=events)
            out.backward(dout)
            torch.cuda.synchronize()
            if it >= args.warmup:
                samples.append(events.times())
            if it == args.warmup + args.iters - 1:
                outputs[impl] = (out.detach(), xl.grad, w_gate_up.grad)
            del out, xl, rwl
        med = {label: statistics.median(s[label] for s in samples) for label, _, _ in STAGES}
        local = torch.tensor([med[label] for label, _, _ in STAGES], device=dev)
        slowest = local.clone()
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rows_max = torch.tensor([rows], device=dev)
        dist.all_reduce(rows_max, op=dist.ReduceOp.MAX)
        ms = dict(zip((label for label, _, _ in STAGES), slowest.tolist()))
        expert_ms = ms["fwd experts"] + ms["bwd experts"]
        # fwd 6*R*H*I, bwd twice that, on the busiest rank's R
        flops = 18 * int(rows_max) * hidden * inter
        results[impl] = {"ms": ms, "rank_ms": dict(zip(ms, local.tolist())),
                         "rows_on_busiest_rank": int(rows_max),
                         "experts_tflops": flops / expert_ms / 1e9 if expert_ms else None}
        torch.cuda.empty_cache()
    agreement = None
    if len(outputs) == 2:
        # a sanity check of the run: the two implementations agree to bf16 rounding
        errs = torch.tensor([(a.double() - b.double()).norm().item()
                             / max(b.double().norm().item(), 1e-30)
                             for a, b in zip(outputs["moejit"], outputs["grouped_mm"])],
                            device=dev)
        dist.all_reduce(errs, op=dist.ReduceOp.MAX)
        agreement = dict(zip(("out", "dx", "dw_gate_up"), errs.tolist()))
    return {"shape": {"experts": experts, "hidden": hidden, "intermediate": inter,
                      "top_k": top_k, "tokens_per_gpu": tokens, "world": world},
            "results": results, "moejit_vs_grouped_mm_rel_diff": agreement}


def table(report):
    labels = [label for label, _, _ in STAGES]
    lines = ["| shape | impl | " + " | ".join(labels) + " | experts TFLOP/s |",
             "|---|---|" + "---|" * (len(labels) + 1)]
    for name, entry in report["shapes"].items():
        for impl, r in entry["results"].items():
            tf = r["experts_tflops"]
            cells = " | ".join(f"{r['ms'][label]:.2f}" for label in labels)
            lines.append(f"| {name} | {impl} | {cells} | "
                         + (f"{tf:.0f} |" if tf else "- |"))
        res = entry["results"]
        if "moejit" in res and "grouped_mm" in res:
            a, b = res["moejit"]["ms"], res["grouped_mm"]["ms"]
            lines.append(f"| {name} | speedup | " + " | ".join(
                f"{b[label] / a[label]:.2f}×" if a[label] else "-" for label in labels) + " | |")
    return "\n".join(lines)


def run(rank, world, args, port=None, local_rank=None):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    torch.cuda.set_device(rank if local_rank is None else local_rank)
    dev = torch.device("cuda", torch.cuda.current_device())
    init = f"tcp://127.0.0.1:{port}" if port else "env://"
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=600), device_id=dev)
    try:
        report = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                  "iters": args.iters, "warmup": args.warmup, "shapes": {}}
        for name in args.shapes:
            entry = bench_shape(name, args.impls, args, rank, world, dev)
            report["shapes"][name] = entry
            if rank == 0:
                diff = entry["moejit_vs_grouped_mm_rel_diff"]
                print(f"{name}: done" + (", moejit vs grouped_mm rel diff " + ", ".join(
                    f"{k} {v:.2e}" for k, v in diff.items()) if diff else ""), flush=True)
        if rank == 0:
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(report, f, indent=2)
            print(f"\n{world} × {report['device']}, torch {torch.__version__}, median of "
                  f"{args.iters} steps after {args.warmup} warm-up, max over ranks, ms\n")
            print(table(report), flush=True)
    finally:
        dist.destroy_process_group()


def _spawned(rank, world, args, port):
    run(rank, world, args, port)


def main(argv=None):
    args = parse_args(argv)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args,
            local_rank=int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
        return
    if torch.cuda.device_count() < args.nprocs:
        raise SystemExit(f"bench_ep.py needs {args.nprocs} CUDA devices, found "
                         f"{torch.cuda.device_count()}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as tmp
    tmp.spawn(_spawned, args=(args.nprocs, args, port), nprocs=args.nprocs, join=True)


if __name__ == "__main__":
    main()
