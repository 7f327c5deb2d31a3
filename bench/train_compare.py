#!/usr/bin/env python3
"""End-to-end training check of moejit as transformers' experts backend.

For each model family (built from a small random config, no downloads), trains the same model
(identical seeded init) for N steps of AdamW on one fixed synthetic token stream with each
experts_implementation (eager, grouped_mm, moejit, and sonicmoe where it loads), with or
without torch.compile, and reports per family and backend:

  * max_rel_loss_diff: max over steps of |loss - loss_eager| / |loss_eager|,
  * final_weight_rel_diff: ||W - W_eager|| / ||W_eager|| over all parameters after the run,
  * tokens/s (steps after the warm-up ones, so JIT compilation and torch.compile's first
    traces are not counted),
  * whether every experts module ran the backend (a fallback to eager is reported).

    python bench/train_compare.py                       # 6 families, 200 steps, no compile
    python bench/train_compare.py --steps 50 --families qwen3_moe,mixtral --compile both \\
        --out /tmp/train_compare.json

The table is printed last; --out writes everything (loss curves included) as JSON. Needs a
CUDA GPU, torch and transformers (>= 5); the moejit package from this checkout
(PYTHONPATH=python) or installed, and libmoejit.so ($MOEJIT_LIBRARY or next to it).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "capi", "python", "tests"))   # hf_families
if os.path.join(REPO, "capi", "python") not in sys.path:
    sys.path.insert(1, os.path.join(REPO, "capi", "python"))

from hf_families import FAMILIES, make_config  # noqa: E402

BACKENDS = ("eager", "grouped_mm", "moejit", "sonicmoe")

# Realistic expert counts and top-k per family (the real models' routing), small H and I.
FAMILY_SIZES = {
    "qwen3_moe": dict(experts=128, top_k=8),
    "qwen2_moe": dict(experts=60, top_k=4),
    "mixtral": dict(experts=8, top_k=2),
    "olmoe": dict(experts=64, top_k=8),
    "deepseek_v3": dict(experts=256, top_k=8),
    "gpt_oss": dict(experts=32, top_k=4),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(FAMILIES),
                   help=f"comma-separated, from {','.join(FAMILIES)}")
    p.add_argument("--backends", default="eager,grouped_mm,moejit,sonicmoe",
                   help="comma-separated experts implementations; eager is always run (the "
                        "reference); sonicmoe is skipped where it does not load")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--compile", choices=("off", "on", "both"), default="off",
                   help="torch.compile the model: off, on, or both (each backend twice)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--inter", type=int, default=256, help="the experts' intermediate size")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=5, help="steps not counted in tokens/s")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--device", default="cuda",
                   help="cuda (default); cpu only to try the script itself (moejit falls back "
                        "to eager there)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    args.families = [f for f in args.families.split(",") if f]
    for f in args.families:
        if f not in FAMILIES:
            p.error(f"unknown family {f!r}; one of {', '.join(FAMILIES)}")
    args.backends = [b for b in args.backends.split(",") if b]
    for b in args.backends:
        if b not in BACKENDS:
            p.error(f"unknown backend {b!r}; one of {', '.join(BACKENDS)}")
    if "eager" not in args.backends:
        args.backends.insert(0, "eager")
    if args.steps < 1 or args.hidden % 64 or args.inter % 64:
        p.error("--steps must be >= 1 and --hidden, --inter multiples of 64")
    if args.families and args.device == "cpu" and args.hidden > 256:
        print("note: --device cpu with the default sizes is slow", file=sys.stderr)
    return args


def token_stream(vocab: int, length: int, seed: int):
    """A learnable synthetic stream: a random sparse Markov chain (each token has 4 likely
    successors), fixed by the seed."""
    import torch
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=g)
    choice = torch.randint(0, 4, (length,), generator=g)
    noise = torch.rand(length, generator=g) < 0.1
    random_tokens = torch.randint(0, vocab, (length,), generator=g)
    succ, ch, nz, rnd = (t.tolist() for t in (successors, choice, noise, random_tokens))
    out = [0] * length
    for i in range(1, length):
        out[i] = rnd[i] if nz[i] else succ[out[i - 1]][ch[i]]
    return torch.tensor(out, dtype=torch.long)


def sonicmoe_loads() -> bool:
    try:
        from transformers.integrations.sonicmoe import is_sonicmoe_loadable
        return bool(is_sonicmoe_loadable())
    except Exception:  # noqa: BLE001 (any failure means: not available here)
        return False


class FallbackCounter(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args, family, backend, compiled, stream, dtype, device):
    import torch
    from transformers import AutoModelForCausalLM

    sizes = dict(hidden=args.hidden, inter=args.inter, layers=args.layers, vocab=args.vocab,
                 heads=max(1, args.hidden // 64), **FAMILY_SIZES[family])
    cfg = make_config(family, **sizes)
    torch.manual_seed(args.seed)
    # gpt-oss has no SDPA attention in transformers (its sinks): eager attention there.
    model = AutoModelForCausalLM.from_config(
        cfg, experts_implementation=backend,
        attn_implementation="eager" if family == "gpt_oss" else "sdpa")
    model.to(device=device, dtype=dtype).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    step_fn = torch.compile(model) if compiled else model
    per_step = args.batch * args.seq
    losses = []
    counted_time = 0.0
    _sync(device)
    for step in range(args.steps):
        start = (step * per_step) % (stream.numel() - per_step - 1)
        ids = stream[start:start + per_step].view(args.batch, args.seq).to(device,
                                                                            non_blocking=True)
        t0 = time.perf_counter()
        out = step_fn(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.detach())
        if step >= args.warmup:
            _sync(device)
            counted_time += time.perf_counter() - t0
        elif step == args.warmup - 1:
            _sync(device)
    losses = [float(x) for x in torch.stack(losses).float().cpu()]
    counted = args.steps - min(args.warmup, args.steps)
    weights = {n: p.detach().float().cpu() for n, p in model.named_parameters()}
    del model, opt, step_fn
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return dict(losses=losses, weights=weights,
                tokens_per_s=(counted * per_step / counted_time) if counted_time else None)


def compare(reference, run):
    num = den = 0.0
    for name, w in reference["weights"].items():
        num += (run["weights"][name] - w).double().square().sum().item()
        den += w.double().square().sum().item()
    loss_diff = max(abs(a - b) / abs(b) for a, b in zip(run["losses"], reference["losses"]))
    return dict(max_rel_loss_diff=loss_diff, final_weight_rel_diff=math.sqrt(num / den))


def main(argv=None):
    args = parse_args(argv)
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("train_compare.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    import moejit.integrations.transformers as mjt
    mjt.register()
    counter = FallbackCounter()
    logging.getLogger(mjt.__name__).addHandler(counter)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    backends = list(args.backends)
    if "sonicmoe" in backends and not sonicmoe_loads():
        print("sonicmoe: not loadable here (transformers' is_sonicmoe_loadable() is False); "
              "skipped", flush=True)
        backends.remove("sonicmoe")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    stream = token_stream(args.vocab, max(args.steps * args.batch * args.seq + 1, 1 << 16),
                          args.seed)
    results = {"args": {k: v for k, v in vars(args).items()}, "families": {}}
    rows = []
    t_all = time.perf_counter()
    for family in args.families:
        fam = results["families"].setdefault(family, {})
        for compiled in modes:
            reference = None
            for backend in backends:
                key = backend + ("+compile" if compiled else "")
                counter.messages.clear()
                mjt._warned.clear()  # each run reports its own fallbacks
                t0 = time.perf_counter()
                try:
                    run = train(args, family, backend, compiled, stream, dtype, device)
                except Exception as e:  # noqa: BLE001 (report and go on)
                    print(f"{family} {key}: FAILED: {type(e).__name__}: {e}", flush=True)
                    fam[key] = {"error": f"{type(e).__name__}: {e}"}
                    rows.append((family, key, None, None, None, "FAILED"))
                    continue
                entry = {"losses": run["losses"], "tokens_per_s": run["tokens_per_s"],
                         "seconds": time.perf_counter() - t0,
                         "fallback_warnings": list(counter.messages)}
                if backend == "eager":
                    reference = run
                    entry.update(max_rel_loss_diff=0.0, final_weight_rel_diff=0.0)
                elif reference is not None:
                    entry.update(compare(reference, run))
                fam[key] = entry
                note = "fell back: " + counter.messages[0][:60] if counter.messages else ""
                rows.append((family, key, entry.get("max_rel_loss_diff"),
                             entry.get("final_weight_rel_diff"), run["tokens_per_s"], note))
                print(f"{family:12s} {key:20s} loss {run['losses'][0]:.3f} -> "
                      f"{run['losses'][-1]:.3f}  {entry['seconds']:.1f} s", flush=True)
    results["seconds"] = time.perf_counter() - t_all
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    print()
    print(f"{args.steps} steps, batch {args.batch}x{args.seq}, H={args.hidden}, "
          f"I={args.inter}, {args.layers} layers, {args.dtype}, "
          f"{results['seconds']:.0f} s in all")
    print(f"{'family':12s} {'backend':20s} {'max rel loss diff':>17s} {'final W rel diff':>16s} "
          f"{'tokens/s':>10s}  note")
    for family, key, dl, dw, tps, note in rows:
        def fmt(v, spec):
            return format(v, spec) if v is not None else format("-", ">" + spec.split(".")[0])
        print(f"{family:12s} {key:20s} {fmt(dl, '17.2e')} {fmt(dw, '16.2e')} "
              f"{fmt(tps, '10.0f')}  {note}")
    return results


if __name__ == "__main__":
    main()
