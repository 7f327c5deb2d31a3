#!/usr/bin/env python3
"""The peer target table (issues 18 and 30) from python -m moejit_bench --json files (one per
peer set and routing).

    python3 bench/peer_targets.py [--fwd-margin M] [--ours IMPL] bench_sonic.json bench_quack.json bench_sonic_dup.json ...

Each file is one benchmark process: moejit and the peers in it ran on the same inputs, one after
the other, with the dense 8192^3 GEMM measured at its start. SonicMoE and QuACK need different
CuTe DSL versions, so they run in different processes, each with moejit beside it. Per shape and
routing, the best peer is the fastest forward+backward among all files; moejit's number, the
ratio and the dense ceiling come from that peer's file (same run). The rules (README "Speed
targets"):
  f+b    >= min(1.3 x best peer f+b, 0.85 x dense)
  fwd    >= M x best peer's forward (M: --fwd-margin, default 1.05, issue 30's; 1 was issue 18's)
  dup    every route -> expert 0 >= the top-k case of the same shape (moejit, f+b)
  memory moejit's saved and peak MB <= SonicMoE's (allocator deltas, bench.step_memory)
--ours IMPL judges another of the runs' moejit rows instead of "moejit" (e.g. moejit-ring, a
configuration variant timed in the same processes).
Prints a markdown table, then one line per rule with the count met.
"""

from __future__ import annotations

import json
import sys
from typing import Dict, List, Optional, Tuple

PEERS = {"sonicmoe": "SonicMoE", "sonicmoe-tuned": "SonicMoE tuned", "quack": "QuACK",
         "quack-tuned": "QuACK tuned", "grouped_mm": "torch._grouped_mm"}
FUSED = ("sonicmoe", "sonicmoe-tuned", "quack", "quack-tuned")


def load(paths: List[str]):
    """{(shape, routing): [(file, dense, impls)]} in the order given."""
    rows: Dict[Tuple[str, str], List[Tuple[str, float, dict]]] = {}
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        for rec in run["results"]:
            rows.setdefault((rec["shape"], run["routing"]), []).append(
                (path, run["dense_tflops"], rec["impls"]))
    return rows


def timed(r: Optional[dict]) -> bool:
    return bool(r) and isinstance(r.get("fwd_bwd_tflops"), (int, float))


def fmt(r: Optional[dict]) -> str:
    if not r:
        return "–"
    if not timed(r):
        why = r.get("skipped") or r.get("wrong") or r.get("error") or "not timed"
        return "skip" if "skipped" in r else f"fail ({why[:40]})"
    return f"{r['fwd_bwd_tflops']:.0f} ({r['fwd_tflops']:.0f})"


def table(rows, fwd_margin: float = 1.05, ours_impl: str = "moejit") -> str:
    peers_seen = [p for p in PEERS if any(p in impls for runs in rows.values() for _, _, impls in runs)]
    head = (["shape", "routing"] + [PEERS[p] for p in peers_seen] +
            [ours_impl, "target f+b", "f+b met", f"fwd ≥ {fwd_margin:g} × best peer", f"saved MB {ours_impl} / Sonic",
             f"peak MB {ours_impl} / Sonic"])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    counts = {"f+b": [0, 0], "fwd": [0, 0], "dup": [0, 0], "memory": [0, 0]}

    def tally(rule, ok):
        counts[rule][0] += bool(ok)
        counts[rule][1] += 1
        return ok

    chosen = {}  # (shape, routing) -> moejit's result in the row's run
    for (shape, routing), runs in rows.items():
        best = None  # (f+b, fwd, peer, index of its run)
        cells = {}
        for i, (_, _, impls) in enumerate(runs):
            for p in peers_seen:
                r = impls.get(p)
                if r is not None and (p not in cells or timed(r)):
                    cells[p] = r
                if p in FUSED and timed(r) and (best is None or r["fwd_bwd_tflops"] > best[0]):
                    best = (r["fwd_bwd_tflops"], r["fwd_tflops"], p, i)
        # moejit from the best peer's run, else the first run that timed it
        pick = best[3] if best else next((i for i, (_, _, im) in enumerate(runs) if timed(im.get(ours_impl))), 0)
        _, dense, impls = runs[pick]
        ours = chosen[(shape, routing)] = impls.get(ours_impl)
        line = [shape, routing] + [fmt(cells.get(p)) for p in peers_seen] + [fmt(ours)]
        if best and timed(ours):
            target = min(1.3 * best[0], 0.85 * dense)
            ok_fb = tally("f+b", ours["fwd_bwd_tflops"] >= target)
            ok_fwd = tally("fwd", ours["fwd_tflops"] >= fwd_margin * best[1])
            line += [f"{target:.0f}", f"{'yes' if ok_fb else 'no'} ({ours['fwd_bwd_tflops'] / target:.2f}×)",
                     f"{'yes' if ok_fwd else 'no'} ({ours['fwd_tflops'] / best[1]:.2f}× {PEERS[best[2]]})"]
        else:
            line += ["–", "–", "–"]
        # memory: moejit and SonicMoE of the same run (allocator deltas do not vary with timing)
        sonic_run = next((im for _, _, im in runs if timed(im.get("sonicmoe"))), None)
        mine, sonic = (sonic_run.get(ours_impl) or {}, sonic_run["sonicmoe"]) if sonic_run else ({}, {})
        for key in ("saved_mb", "peak_mb"):
            a, b = mine.get(key), sonic.get(key)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                tally("memory", a <= b)
                line.append(f"{a:.0f} / {b:.0f}")
            else:
                line.append("–")
        out.append("| " + " | ".join(line) + " |")
    for (shape, routing), ours in chosen.items():
        topk = chosen.get((shape, "topk"))
        if routing == "topk" or not timed(topk) or not timed(ours):
            continue
        fb, ref = ours["fwd_bwd_tflops"], topk["fwd_bwd_tflops"]
        ok = tally("dup", fb >= ref)
        out.append(f"\n{shape}, every route -> expert 0: {fb:.0f} vs top-k {ref:.0f}: "
                   f"{'met' if ok else 'not met'} ({fb / ref:.2f}×)")
    out.append("")
    names = {"f+b": "f+b >= min(1.3 x best peer, 0.85 x dense)", "fwd": f"fwd >= {fwd_margin:g} x best peer's fwd",
             "dup": "expert 0 >= top-k", "memory": "memory <= SonicMoE (saved and peak, each a check)"}
    for rule, (met, of) in counts.items():
        out.append(f"{names[rule]}: {met} of {of} met")
    return "\n".join(out)


def main(argv: List[str]) -> int:
    margin, ours = 1.05, "moejit"
    while argv[:1] in (["--fwd-margin"], ["--ours"]) and len(argv) >= 2:
        if argv[0] == "--fwd-margin":
            margin = float(argv[1])
        else:
            ours = argv[1]
        argv = argv[2:]
    if not argv or argv[0].startswith("--"):  # no files, or an option without its value
        print(__doc__)
        return 2
    print(table(load(argv), margin, ours))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
