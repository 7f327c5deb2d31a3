"""The FP8 recipe's training curve against bf16 (issue 31 deliver 5): a tiny Hugging Face MoE
(Qwen3-MoE or Mixtral from a random config) trained for a few hundred steps on the same
synthetic data from the same initial weights, once per recipe, and the losses compared.

    MOEJIT_LIBRARY=build/capi/libmoejit.so PYTHONPATH=python python3 dev/fp8_train_curve.py \
        [--steps 300] [--json out.json]          # on a CUDA sm_90a device (an H200)
    PYTHONPATH=python python3 dev/fp8_train_curve.py --dry-run   # CPU: builds, runs one step

How a recipe reaches the model: transformers' experts backend (moejit.integrations.transformers,
experts_implementation="moejit") has no recipe option, so every experts module (gate_up_proj
[E, 2I, H] gate rows first, down_proj [E, H, I]) is replaced by moejit.torch.MoEExperts(E, H, I,
merged=True, recipe=...) holding a copy of its weights; the router stays the model's. Both the
bf16 and the fp8-block runs go through that same swap, so they differ only in the recipe.
"bf16-backend" in --recipes adds a run through the transformers backend itself (no swap).

Data: one fixed random Markov chain over the vocabulary (every token has --branching likely
successors with Dirichlet probabilities), sampled once for all steps from --seed, so the loss
can fall from ln(vocab) towards the chain's entropy (printed). Model: bf16 parameters, AdamW
(lr --lr after a 10-step linear warm-up, weight decay 0.01), gradient norm clipped at 1.

Prints the loss every --log-every steps for every recipe side by side, then each recipe's mean
loss over the last --tail steps and its relative difference from the first recipe's (target:
within --tolerance, 1 %); exit status 1 when a difference exceeds it, 2 on a usage or setup
error. --json writes the configuration, every step's loss, the means and the verdict.

--dry-run (CPU, no moejit library needed): builds the model and its swapped experts modules
(weights copied and compared), then runs one training step per recipe on the CPU (batch <= 2,
seq <= 64), where the
swapped modules compute the same layer with plain torch ops (the eager path) on their own
weights; it checks the script, the model and the swap, not moejit's kernels.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import time
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

RECIPES = ("bf16", "fp8-block", "bf16-backend")


def log(message: str) -> None:
    print(message, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=["qwen3_moe", "mixtral"], default="qwen3_moe")
    p.add_argument("--recipes", default="bf16,fp8-block",
                   help=f"comma-separated, the first is the reference ({', '.join(RECIPES)})")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=256,
                   help="the experts' intermediate size (a multiple of 128 for fp8-block)")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--branching", type=int, default=4,
                   help="likely successors of each token in the Markov chain")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--tail", type=int, default=50, help="steps averaged at the end")
    p.add_argument("--tolerance", type=float, default=0.01,
                   help="largest relative difference of the tail means (default 1 %%)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU: build the model and the swap, one step per recipe (eager path)")
    args = p.parse_args(argv)
    args.recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    bad = [r for r in args.recipes if r not in RECIPES]
    if bad or not args.recipes:
        p.error(f"--recipes {bad or args.recipes}: choose from {', '.join(RECIPES)}")
    if len(set(args.recipes)) != len(args.recipes):
        p.error(f"--recipes {args.recipes}: each recipe once")
    for name in ("steps", "batch", "seq", "hidden", "intermediate", "experts", "top_k",
                 "layers", "heads", "vocab", "branching", "log_every", "tail"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.top_k > args.experts:
        p.error(f"--top-k {args.top_k} exceeds --experts {args.experts}")
    if args.hidden % args.heads:
        p.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    if args.branching > args.vocab:
        p.error(f"--branching {args.branching} exceeds --vocab {args.vocab}")
    if args.dry_run:  # one small step: bf16 on two CPU cores is slow
        args.steps = 1
        args.batch, args.seq = min(args.batch, 2), min(args.seq, 64)
    args.tail = min(args.tail, args.steps)
    return args


# ------------------------------------------------------------------ data


class MarkovChain:
    """A fixed random chain: successors [V, b] and their probabilities [V, b]."""

    def __init__(self, vocab: int, branching: int, generator: torch.Generator):
        scores = torch.rand(vocab, vocab, generator=generator)
        self.successors = scores.topk(branching, dim=1).indices            # b distinct each
        gamma = -torch.log(torch.rand(vocab, branching, generator=generator))  # Dirichlet(1)
        self.probs = gamma / gamma.sum(dim=1, keepdim=True)

    def entropy(self) -> float:
        """Mean per-token entropy (nats) under the chain's stationary use, approximated by the
        uniform average over states: the loss a perfect model approaches."""
        p = self.probs
        return float(-(p * p.log()).sum(dim=1).mean())

    def sample(self, rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
        tokens = torch.empty(rows, length, dtype=torch.int64)
        tokens[:, 0] = torch.randint(0, self.successors.shape[0], (rows,), generator=generator)
        for t in range(1, length):
            prev = tokens[:, t - 1]
            pick = torch.multinomial(self.probs[prev], 1, generator=generator).squeeze(1)
            tokens[:, t] = self.successors[prev, pick]
        return tokens


def make_data(args) -> (torch.Tensor, float):
    """[steps, batch, seq] token ids, the same for every recipe, and the chain's entropy."""
    g = torch.Generator().manual_seed(args.seed + 1)
    chain = MarkovChain(args.vocab, args.branching, g)
    tokens = chain.sample(args.steps * args.batch, args.seq, g)
    return tokens.view(args.steps, args.batch, args.seq), chain.entropy()


# ------------------------------------------------------------------ model


def make_config(args):
    import transformers
    common = dict(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                  num_attention_heads=args.heads, num_key_value_heads=max(1, args.heads // 2),
                  max_position_embeddings=args.seq, num_experts_per_tok=args.top_k,
                  tie_word_embeddings=False)
    if args.family == "mixtral":
        return transformers.MixtralConfig(intermediate_size=args.intermediate,
                                          num_local_experts=args.experts, **common)
    return transformers.Qwen3MoeConfig(moe_intermediate_size=args.intermediate,
                                       intermediate_size=4 * args.intermediate,
                                       num_experts=args.experts, decoder_sparse_step=1,
                                       mlp_only_layers=[], norm_topk_prob=True,
                                       head_dim=args.hidden // args.heads, **common)


def build_model(args, recipe: str):
    """The model on the CPU in bf16, initialised from --seed (identical for every recipe)."""
    import transformers
    cfg = make_config(args)
    kwargs = {}
    if recipe == "bf16-backend":
        import moejit.integrations.transformers as mit
        mit.register()
        kwargs["experts_implementation"] = mit.NAME
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                          attn_implementation="sdpa", **kwargs)
    return model


def experts_modules(model) -> List[tuple]:
    """(parent, attribute name, module) of every experts module with the merged contract."""
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if hasattr(child, "gate_up_proj") and hasattr(child, "down_proj") and \
                    child.gate_up_proj.dim() == 3:
                found.append((parent, name, child))
    return found


def eager_experts(x, sel, rw, w_gate_up, w_down):
    """The layer (SwiGLU, gate rows first, weight before fc2) with plain torch ops: the dry
    run's CPU stand-in for moejit's kernels."""
    inter = w_gate_up.shape[1] // 2
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = torch.zeros(x.shape, dtype=acc, device=x.device)
    for e in range(w_gate_up.shape[0]):
        t_idx, j_idx = torch.where(sel == e)
        if t_idx.numel() == 0:
            continue
        gu = x[t_idx] @ w_gate_up[e].t()
        a = F.silu(gu[:, :inter]) * gu[:, inter:]
        a = a * rw[t_idx, j_idx].unsqueeze(1).to(a.dtype)
        out = out.index_add(0, t_idx, (a @ w_down[e].t()).to(acc))
    return out.to(x.dtype)


class RecipeExperts(nn.Module):
    """moejit.torch.MoEExperts(merged=True, recipe=...) in place of a transformers experts
    module: the same forward(hidden_states, top_k_index, top_k_weights), built on `device` with
    a copy of the source's weights. On the CPU (--dry-run only: MoEExperts refuses a CPU
    device, so it is made on "meta" and materialised there) it computes the layer with
    eager_experts on the same weights."""

    def __init__(self, source: nn.Module, recipe: str, device: str):
        super().__init__()
        import moejit.torch as mt
        E, two_i, H = source.gate_up_proj.shape
        kwargs = {"merged": True, "dtype": source.gate_up_proj.dtype,
                  "device": device if device != "cpu" else "meta"}
        if "recipe" in inspect.signature(mt.MoEExperts).parameters:
            kwargs["recipe"] = recipe
        elif recipe != "bf16":
            raise RuntimeError(f"moejit.torch.MoEExperts has no recipe= argument: recipe "
                               f"{recipe!r} needs moejit >= 0.11 (issue 31's FP8 layer)")
        self.recipe = recipe
        self.experts = mt.MoEExperts(E, H, two_i // 2, **kwargs)
        if device == "cpu":
            self.experts.to_empty(device="cpu")
        with torch.no_grad():
            self.experts.w_gate_up.copy_(source.gate_up_proj)
            self.experts.w_down.copy_(source.down_proj)

    def forward(self, hidden_states, top_k_index, top_k_weights):
        if hidden_states.is_cuda:
            return self.experts(hidden_states, top_k_index, top_k_weights)
        return eager_experts(hidden_states, top_k_index, top_k_weights,
                             self.experts.w_gate_up, self.experts.w_down)


def swap_experts(model, recipe: str, device: str) -> int:
    """Replaces every experts module by RecipeExperts on `device`; the number replaced."""
    found = experts_modules(model)
    for parent, name, child in found:
        swapped = RecipeExperts(child, recipe, device)
        assert torch.equal(swapped.experts.w_gate_up.cpu(), child.gate_up_proj)
        assert torch.equal(swapped.experts.w_down.cpu(), child.down_proj)
        setattr(parent, name, swapped)
    return len(found)


# ------------------------------------------------------------------ training


def train(args, recipe: str, data: torch.Tensor, device: str) -> Dict[str, object]:
    model = build_model(args, recipe)
    # the same initial weights for every recipe (checked): summed before the swap
    first = sum(p.detach().double().sum().item() for p in model.parameters())
    swapped = 0 if recipe == "bf16-backend" else swap_experts(model, recipe, device)
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    losses: List[torch.Tensor] = []
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(args.steps):
        ids = data[step].to(device, non_blocking=True)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.detach().float())
        if (step + 1) % args.log_every == 0:  # progress, should a time limit cut the run short
            log(f"  {recipe} step {step + 1}: loss {losses[-1].item():.4f}")
    values = torch.stack(losses).cpu().tolist()
    seconds = time.perf_counter() - t0
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    return {"recipe": recipe, "losses": values, "seconds": seconds, "experts_swapped": swapped,
            "first_param_sum": first, "nonfinite_steps": bad[:10],
            "params": sum(p.numel() for p in params)}


def report(args, runs: List[Dict[str, object]], entropy: float) -> Dict[str, object]:
    names = [r["recipe"] for r in runs]
    log("")
    log(f"{'step':>6} " + " ".join(f"{n:>14}" for n in names))
    for step in range(args.steps):
        if (step + 1) % args.log_every == 0 or step == 0 or step == args.steps - 1:
            log(f"{step + 1:>6} " + " ".join(f"{r['losses'][step]:>14.4f}" for r in runs))
    ref = runs[0]
    tail = {r["recipe"]: sum(r["losses"][-args.tail:]) / args.tail for r in runs}
    log(f"\nchain entropy (loss floor) {entropy:.4f}, ln(vocab) {math.log(args.vocab):.4f}")
    verdict = {}
    for r in runs:
        diff = (tail[r["recipe"]] - tail[ref["recipe"]]) / tail[ref["recipe"]]
        ok = r is ref or (math.isfinite(diff) and abs(diff) <= args.tolerance
                          and not r["nonfinite_steps"])
        verdict[r["recipe"]] = {"tail_mean": tail[r["recipe"]], "rel_diff": diff, "ok": ok}
        log(f"{r['recipe']:>14}: mean loss over the last {args.tail} steps "
            f"{tail[r['recipe']]:.4f}" +
            ("" if r is ref else f", vs {ref['recipe']} {diff:+.3%} "
             f"({'within' if ok else 'NOT within'} {args.tolerance:.1%})") +
            f"; {r['seconds']:.1f} s")
    return verdict


def main(argv=None) -> int:
    args = parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        log("fp8_train_curve needs a CUDA device (or --dry-run for the CPU check)")
        return 2
    if args.dry_run and "bf16-backend" in args.recipes:
        log("--dry-run: bf16-backend runs on the CPU as transformers' eager fallback")
    torch.backends.cuda.matmul.allow_tf32 = False
    data, entropy = make_data(args)
    log(f"{args.family}: hidden {args.hidden}, intermediate {args.intermediate}, "
        f"{args.experts} experts top-{args.top_k}, {args.layers} layers, vocab {args.vocab}, "
        f"batch {args.batch} x seq {args.seq}, {args.steps} steps, lr {args.lr}, "
        f"seed {args.seed}, device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}")
    runs, failed = [], {}
    for recipe in args.recipes:
        try:
            run = train(args, recipe, data, device)
        except Exception as e:  # setup or kernel failure: named, the other recipes still run
            failed[recipe] = f"{type(e).__name__}: {e}"
            log(f"{recipe}: FAILED: {failed[recipe]}")
            continue
        log(f"{recipe}: {run['params'] / 1e6:.1f} M parameters, {run['experts_swapped']} "
            f"experts modules swapped, {run['seconds']:.1f} s, first loss "
            f"{run['losses'][0]:.4f}, last {run['losses'][-1]:.4f}")
        runs.append(run)
    status = 2 if failed or not runs else 0
    if len({r["first_param_sum"] for r in runs}) > 1:
        log("initial weights differ between recipes: the comparison is void")
        status = 2
    verdict = report(args, runs, entropy) if runs else {}
    if status == 0 and not args.dry_run and not all(v["ok"] for v in verdict.values()):
        status = 1
    if args.json:
        out = {"args": {k: v for k, v in vars(args).items()}, "entropy": entropy,
               "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__, "runs": runs, "failed": failed,
               "verdict": verdict, "status": status}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        log(f"wrote {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
