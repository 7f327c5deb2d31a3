"""python -m moejit_bench: the MoE layer against its peers on the reference shapes (docs/DESIGN.md §6).

For every shape: moejit.torch vs a torch._grouped_mm layer with autograd vs a per-expert eager
loop, forward and forward+backward, on the same inputs (routing from a softmax top-k of random
logits), timed with CUDA events (median of reps after warm-up), with a dense 8192^3 GEMM
measured in the same run as the practical ceiling. FLOPs: forward 6*S*H*I, backward 12*S*H*I,
S = T*k. The table comes last; --json writes every number, --plot FILE.png draws it
(matplotlib), and --from-json FILE prints and draws a saved run without a GPU.

Optional fused peers (moejit_bench/peers_fast.py, installed separately): sonicmoe (SonicMoE, QuACK GEMMs
at tuned=False; --sonic-tuned adds a sonicmoe-tuned row that autotunes first, minutes per shape)
and quack (VeOmni's QuACK grouped-GEMM backend). A peer that is missing or fails is a skip line
with the reason; each peer is checked against moejit (forward output and dx, relative error
< 2e-2) before it is timed, and one that disagrees is reported WRONG and not timed.

FP8 (issue 31, opt-in via --impls): moejit-fp8 (moejit.torch with recipe="fp8-block": e4m3 with
1x128 / 128x128 block scales) and scaled_grouped_mm (moejit_bench/peers_fp8.py: the layer on
torch._scaled_grouped_mm with row-wise scales, its weight gradients in bf16). With either
selected, an 8192^3 e4m3 torch._scaled_mm (row-wise scales) is measured as the FP8 dense ceiling
beside the bf16 one; each FP8 row records its output's relative difference from the bf16
grouped_mm layer (out_rel_err_vs_bf16), and the table adds moejit-fp8/moejit,
moejit-fp8/scaled_grouped_mm and the FP8 rows' fraction of the FP8 ceiling. moejit-fp8-cached is
moejit-fp8 timed inside moejit.torch.fp8_weight_cache(): the weights quantized once (the first
warm-up call), as across the micro-batches of one optimizer step; moejit-fp8 quantizes them on
every call, as a step without gradient accumulation does.

Configuration variants (opt-in via --impls): moejit-ring and moejit-noring are moejit's layer
with MOEJIT_STORE_RING=1 and =0, moejit-ringfused with the ring and MOEJIT_FUSE_SWIGLU=1 (SwiGLU
in fc1's epilogue), each timed in a context created for it (the variable is read
when a context is created; moejit.torch.configure() drops the contexts before and after), so a
setting is measured against the default and the peers in one process, on the same inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

from moejit import core

from . import plot

try:  # --help works without PyTorch; running the benchmark needs it
    import torch

    from . import peers_fast, peers_fp8
    from .peers import eager_loop_layer, grouped_mm_layer, routing_all_to_expert0, routing_topk
except ImportError as _torch_missing:
    torch = None
    _TORCH_IMPORT_ERROR: Optional[ImportError] = _torch_missing
else:
    _TORCH_IMPORT_ERROR = None

# name: (T, E, H, I, k), docs/DESIGN.md §6 "Reference shapes"
SHAPES = {
    "qwen3-30b-a3b": (16384, 128, 2048, 768, 8),
    "deepseek-v3": (8192, 256, 7168, 2048, 8),
    "mixtral-8x7b": (8192, 8, 4096, 14336, 2),
    "gpt-oss-120b": (8192, 128, 2880, 2880, 4),
    "small-expert-7b": (24576, 128, 1536, 256, 8),
    "mid-expert-30b": (32768, 64, 4096, 1024, 4),
    "qwen3-30b-a3b-4k": (4096, 128, 2048, 768, 8),
    "deepseek-v3-4k": (4096, 256, 7168, 2048, 8),
}
IMPLS = ("moejit", "grouped_mm", "eager")
# Opt-in (--impls): moejit under torch.compile(fullgraph=True), and moejit through a plain
# autograd.Function without the custom-op dispatch (the binding before torch.ops.moejit).
EXTRA_IMPLS = ("moejit-compile", "moejit-direct")
# FP8 (opt-in): moejit's fp8-block recipe and the torch._scaled_grouped_mm row-wise peer.
FP8_IMPLS = ("moejit-fp8", "moejit-fp8-cached", "scaled_grouped_mm")
# Optional peers (moejit_bench/peers_fast.py): skipped with the reason when not installed.
PEER_IMPLS = ("sonicmoe", "sonicmoe-tuned", "quack", "quack-tuned")  # = peers_fast.PEER_IMPLS
# moejit under another configuration (opt-in): the environment it runs its own context with.
VARIANT_IMPLS = {"moejit-ring": {"MOEJIT_STORE_RING": "1"}, "moejit-noring": {"MOEJIT_STORE_RING": "0"},
                 "moejit-ringfused": {"MOEJIT_STORE_RING": "1", "MOEJIT_FUSE_SWIGLU": "1"}}
# The rows whose output a shape's record compares: moejit against grouped_mm, each variant
# against moejit.
OUTPUT_IMPLS = ("moejit", "grouped_mm") + tuple(VARIANT_IMPLS)
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # --dtype -> the torch dtype's name


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def time_ms(fn: Callable[[], object], warmup: int, reps: int) -> List[float]:
    """Per-rep milliseconds between CUDA events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def dense_ceiling(dtype: torch.dtype, warmup: int, reps: int) -> float:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = statistics.median(time_ms(lambda: torch.mm(a, b), warmup, max(reps, 10)))
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def moejit_layer(x, sel, rw, w_gate=None, w_up=None, w_gate_up=None, w_down=None,
                 swiglu_limit=None):
    import moejit.torch as mt
    if w_gate_up is not None:
        return mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, swiglu_limit)
    return mt.fused_moe(x, sel, rw, w_gate, w_up, w_down, swiglu_limit)


def moejit_fp8_layer(x, sel, rw, w_gate=None, w_up=None, w_gate_up=None, w_down=None,
                     swiglu_limit=None):
    """moejit's layer with the FP8 block-scaled recipe (moejit >= 0.11)."""
    import moejit.torch as mt
    if w_gate_up is not None:
        return mt.fused_moe_merged(x, sel, rw, w_gate_up, w_down, swiglu_limit,
                                   recipe="fp8-block")
    return mt.fused_moe(x, sel, rw, w_gate, w_up, w_down, swiglu_limit, recipe="fp8-block")


def moejit_direct_layer(x, sel, rw, **kwargs):
    import moejit.torch as mt
    return mt._fused_direct(x, sel, rw, **kwargs)


_compiled = {}


def moejit_compile_layer(x, sel, rw, **kwargs):
    if "layer" not in _compiled:
        _compiled["layer"] = torch.compile(moejit_layer, fullgraph=True)
    return _compiled["layer"](x, sel, rw, **kwargs)


LAYERS = ({"moejit": moejit_layer, "grouped_mm": grouped_mm_layer, "eager": eager_loop_layer,
           "moejit-compile": moejit_compile_layer, "moejit-direct": moejit_direct_layer,
           "moejit-fp8": moejit_fp8_layer, "moejit-fp8-cached": moejit_fp8_layer,
           "scaled_grouped_mm": peers_fp8.scaled_grouped_mm_layer,
           **{name: moejit_layer for name in VARIANT_IMPLS}}
          if torch is not None else {})


def make_inputs(T, E, H, I, k, dtype, routing, merged, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    x = torch.randn(T, H, device=dev, dtype=dtype, generator=g).requires_grad_()
    if routing == "expert0":
        sel, rw = routing_all_to_expert0(T, k, dtype, dev, g)
    else:
        sel, rw = routing_topk(T, E, k, dtype, dev, g)
    rw.requires_grad_()

    def weight(*shape, fan_in):
        w = torch.randn(*shape, device=dev, dtype=dtype, generator=g)
        return w.mul_(fan_in ** -0.5).requires_grad_()

    weights = layer_weights(E, H, I, merged, weight)
    dout = torch.randn(T, H, device=dev, dtype=dtype, generator=g)
    return x, sel, rw, weights, dout


def layer_weights(E, H, I, merged, weight):
    """The layer's weights by name: w_gate_up (merged) or w_gate and w_up, and w_down, each
    drawn by weight(*shape, fan_in=)."""
    weights = {}
    if merged:
        weights["w_gate_up"] = weight(E, 2 * I, H, fan_in=H)
    else:
        weights["w_gate"] = weight(E, I, H, fan_in=H)
        weights["w_up"] = weight(E, I, H, fan_in=H)
    weights["w_down"] = weight(E, H, I, fan_in=I)
    return weights


def bench_impl(name, x, sel, rw, weights, dout, limit, warmup, reps, eager_budget_s,
               layer=None):
    layer = layer or LAYERS[name]
    inputs = [x, rw] + list(weights.values())

    def fwd():
        return layer(x, sel, rw, swiglu_limit=limit, **weights)

    def fwd_bwd():
        return torch.autograd.grad(fwd(), inputs, dout)

    result: Dict[str, object] = {}
    if name == "eager":
        # One probe step decides whether the loop fits the time budget.
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fwd_bwd()
        torch.cuda.synchronize()
        step = time.perf_counter() - t0
        affordable = int(eager_budget_s / (1.5 * step))  # a forward costs about a third
        if affordable < 3:
            result["skipped"] = f"one step takes {step:.1f} s (budget {eager_budget_s:.0f} s)"
            return result
        reps = min(reps, max(2, affordable - warmup))
        warmup = min(warmup, 1)
    result["fwd_ms"] = statistics.median(time_ms(fwd, warmup, reps))
    result["fwd_bwd_ms"] = statistics.median(time_ms(fwd_bwd, warmup, reps))
    result["reps"] = reps
    result.update(step_memory(fwd, inputs, dout))
    return result


def step_memory(fwd, inputs, dout) -> Dict[str, float]:
    """Memory of one training step, measured the same way for every implementation with the
    caching allocator's counters: saved_mb, the bytes the forward keeps for the backward (what
    is allocated once the forward returns, less its output); peak_mb, the step's peak beyond
    what was allocated before it (inputs, weights, dout) and the gradients it returns."""
    if not dout.is_cuda:
        return {}  # the CPU tests of this module: no device counters
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fwd()
    torch.cuda.synchronize()
    saved = torch.cuda.memory_allocated() - base - out.numel() * out.element_size()
    grads = torch.autograd.grad(out, inputs, dout)
    torch.cuda.synchronize()
    grad_bytes = sum(g.numel() * g.element_size() for g in grads if g is not None)
    peak = torch.cuda.max_memory_allocated() - base - grad_bytes
    del out, grads
    return {"saved_mb": saved / 2**20, "peak_mb": peak / 2**20}


def run_shape(name, dims, args, dtype, dense_tflops,
              fp8_dense_tflops: Optional[float] = None) -> Dict[str, object]:
    T, E, H, I, k = dims
    S = T * k
    flops_fwd = 6.0 * S * H * I
    flops_bwd = 12.0 * S * H * I
    record: Dict[str, object] = {"shape": name, "T": T, "E": E, "H": H, "I": I, "k": k,
                                 "impls": {}}
    x, sel, rw, weights, dout = make_inputs(T, E, H, I, k, dtype, args.routing,
                                            args.layout == "merged", args.seed)
    limit = args.swiglu_limit
    outs = {}
    ref = None
    if not hasattr(args, "peer_status"):
        args.peer_status = peers_fast.status(args.impls)
    for impl in args.impls:
        if impl == "eager" and args.no_eager:
            continue
        log(f"[{name}] {impl} ...")
        try:
            if impl in PEER_IMPLS:
                if ref is None:  # moejit's out and dx, the peers' correctness gate
                    ref = peers_fast.reference([(n, LAYERS[n]) for n in ("moejit", "grouped_mm")],
                                               x, sel, rw, weights, dout, limit, log)
                timer = functools.partial(bench_impl, impl, x, sel, rw, dout=dout, limit=limit,
                                          warmup=args.warmup, reps=args.reps,
                                          eager_budget_s=args.eager_budget)
                r = peers_fast.run_peer(impl, args.peer_status, ref, x, sel, rw, weights, dout,
                                        limit, timer)
            else:
                with _weight_cache_block(impl), variant_config(impl):
                    r = bench_impl(impl, x, sel, rw, weights, dout, limit, args.warmup,
                                   args.reps, args.eager_budget)
                    if impl in OUTPUT_IMPLS and "fwd_ms" in r:  # its output, in its configuration
                        with torch.no_grad():
                            outs[impl] = LAYERS[impl](x, sel, rw, swiglu_limit=limit,
                                                      **weights).float()
            if "fwd_ms" in r:
                r["fwd_tflops"] = flops_fwd / (r["fwd_ms"] * 1e-3) / 1e12
                r["fwd_bwd_tflops"] = (flops_fwd + flops_bwd) / (r["fwd_bwd_ms"] * 1e-3) / 1e12
                bwd_ms = r["fwd_bwd_ms"] - r["fwd_ms"]
                r["bwd_tflops"] = flops_bwd / (bwd_ms * 1e-3) / 1e12 if bwd_ms > 0 else None
                r["fwd_bwd_of_dense"] = r["fwd_bwd_tflops"] / dense_tflops
                if impl in FP8_IMPLS and fp8_dense_tflops:
                    r["fwd_of_fp8_dense"] = r["fwd_tflops"] / fp8_dense_tflops
                    r["fwd_bwd_of_fp8_dense"] = r["fwd_bwd_tflops"] / fp8_dense_tflops
                if impl in FP8_IMPLS:
                    r["out_rel_err_vs_bf16"] = fp8_rel_err(LAYERS[impl], x, sel, rw, weights,
                                                           limit)
        except Exception as e:  # report and go on: one failing peer must not hide the rest
            r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        if "skipped" in r and impl in PEER_IMPLS:
            log(f"[{name}] {impl}: skipped: {r['skipped']}")
        elif "wrong" in r:
            log(f"[{name}] {impl}: WRONG, not timed: {r['wrong']}")
        log(f"[{name}] {impl}: {json.dumps(r)}")
        record["impls"][impl] = r
        gc.collect()
        torch.cuda.empty_cache()
    if "moejit" in outs and "grouped_mm" in outs:
        a, b = outs["moejit"], outs["grouped_mm"]
        record["out_rel_diff_vs_grouped_mm"] = ((a - b).norm() / b.norm()).item()
    for impl in VARIANT_IMPLS:  # a configuration variant against the default, same inputs
        if impl in outs and "moejit" in outs:
            a, b = outs[impl], outs["moejit"]
            record[f"out_rel_diff_{impl}_vs_moejit"] = ((a - b).norm() / b.norm()).item()
    impls = record["impls"]
    ours = impls.get("moejit", {})
    for peer in ("grouped_mm", "eager") + PEER_IMPLS:
        theirs = impls.get(peer, {})
        for metric in ("fwd_tflops", "fwd_bwd_tflops"):
            if ours.get(metric) and theirs.get(metric):
                record[f"ratio_{metric}_vs_{peer}"] = ours[metric] / theirs[metric]
    fp8_ratios(record)
    del x, sel, rw, weights, dout, outs, ref
    gc.collect()
    torch.cuda.empty_cache()
    return record


def fp8_rel_err(layer, x, sel, rw, weights, limit) -> Optional[float]:
    """||out - out_bf16|| / ||out_bf16||: an FP8 layer's output against the bf16 grouped_mm
    layer's on the same inputs (not a gate: the FP8 error is expected, its size is reported)."""
    try:
        with torch.no_grad():
            ref = grouped_mm_layer(x, sel, rw, swiglu_limit=limit, **weights).float()
            out = layer(x, sel, rw, swiglu_limit=limit, **weights).float()
            return ((out - ref).norm() / ref.norm()).item()
    except Exception as e:  # the timings stand; only the comparison is missing
        log(f"FP8 output comparison failed: {type(e).__name__}: {e}")
        return None


def _weight_cache_block(impl: str):
    """moejit-fp8-cached runs inside one fp8_weight_cache() block: the weights do not change
    between the timed calls, so only the first quantizes them."""
    if impl != "moejit-fp8-cached":
        return contextlib.nullcontext()
    import moejit.torch as mt
    return mt.fp8_weight_cache()


@contextlib.contextmanager
def variant_config(impl: str):
    """A VARIANT_IMPLS row runs with its variables set, in contexts created for it with the
    caller's configure() options; afterwards the variables are as they were and the next op
    creates its context anew with those options, whatever happened (the variant's contexts are
    retired, as configure() retires any)."""
    overrides = VARIANT_IMPLS.get(impl)
    if not overrides:
        yield
        return
    import moejit.torch as mt
    options = mt.configuration()  # the caller's configure() options (none in this benchmark)
    before = {name: os.environ.get(name) for name in overrides}
    try:
        os.environ.update(overrides)
        mt.configure(**options)  # the next op creates its context, reading the variables set here
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        mt.configure(**options)


# (ratio key suffix, numerator impl, denominator impl), the FP8 ratios of a shape's record
FP8_RATIOS = (("moejit-fp8_vs_moejit", "moejit-fp8", "moejit"),
              ("moejit-fp8_vs_scaled_grouped_mm", "moejit-fp8", "scaled_grouped_mm"),
              ("moejit-fp8-cached_vs_moejit", "moejit-fp8-cached", "moejit"),
              ("moejit-fp8-cached_vs_scaled_grouped_mm", "moejit-fp8-cached", "scaled_grouped_mm"))


def fp8_ratios(record) -> None:
    """record["ratio_<metric>_<key>"] for FP8_RATIOS where both sides were timed."""
    impls = record["impls"]
    for key, num, den in FP8_RATIOS:
        a, b = impls.get(num, {}), impls.get(den, {})
        for metric in ("fwd_tflops", "fwd_bwd_tflops"):
            if a.get(metric) and b.get(metric):
                record[f"ratio_{metric}_{key}"] = a[metric] / b[metric]


def _num(value: Optional[float], fmt: str) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return format(value, fmt)
    width = fmt[:len(fmt) - len(fmt.lstrip("0123456789"))]  # keep the column: "9.1f" -> 9
    return "-".rjust(int(width or 0))


def format_table(records, dense_tflops, peers=None, fp8_dense_tflops=None) -> str:
    # the impl column: 14 wide, wider for a longer name (scaled_grouped_mm)
    iw = max([14] + [len(impl) for rec in records for impl in rec["impls"]])
    header = (f"{'shape':<18} {'impl':<{iw}} {'fwd ms':>9} {'fwd TF/s':>9} {'f+b ms':>9} "
              f"{'f+b TF/s':>9} {'bwd TF/s':>9} {'f+b/dense':>9} {'saved MB':>9} "
              f"{'peak MB':>9}  note")
    lines = [f"dense 8192^3 GEMM ceiling: {_num(dense_tflops, '.0f')} TFLOP/s"]
    if fp8_dense_tflops is not None:
        lines.append(f"dense 8192^3 FP8 e4m3 row-wise GEMM ceiling (torch._scaled_mm): "
                     f"{_num(fp8_dense_tflops, '.0f')} TFLOP/s")
    lines += [f"peer {impl}: {status}" for impl, status in (peers or {}).items()]
    lines += [header, "-" * len(header)]
    for rec in records:
        for impl, r in rec["impls"].items():
            note = r.get("error") or (f"skipped: {r['skipped']}" if "skipped" in r else "")
            if "wrong" in r:
                note = f"WRONG (not timed): {r['wrong']}"
            lines.append(
                f"{rec['shape']:<18} {impl:<{iw}} {_num(r.get('fwd_ms'), '9.3f')} "
                f"{_num(r.get('fwd_tflops'), '9.1f')} {_num(r.get('fwd_bwd_ms'), '9.3f')} "
                f"{_num(r.get('fwd_bwd_tflops'), '9.1f')} {_num(r.get('bwd_tflops'), '9.1f')} "
                f"{_num(r.get('fwd_bwd_of_dense'), '9.1%')} {_num(r.get('saved_mb'), '9.0f')} "
                f"{_num(r.get('peak_mb'), '9.0f')}  {note}".rstrip())
        ratios = []
        for peer in ("grouped_mm", "eager") + PEER_IMPLS:
            fb = rec.get(f"ratio_fwd_bwd_tflops_vs_{peer}")
            fw = rec.get(f"ratio_fwd_tflops_vs_{peer}")
            if fb:
                ratios.append(f"moejit/{peer}: fwd {_num(fw, '.2f')}x, f+b {fb:.2f}x")
        if "out_rel_diff_vs_grouped_mm" in rec:
            ratios.append(f"|out-peer|/|peer| {rec['out_rel_diff_vs_grouped_mm']:.1e}")
        if ratios:
            lines.append(f"{'':<18} {'':<{iw}} " + "; ".join(ratios))
        lines += fp8_table_lines(rec, iw)
    return "\n".join(lines)


def fp8_table_lines(rec, iw: int = 14) -> List[str]:
    """The FP8 ratio line of a shape (nothing when it ran no FP8 row)."""
    parts = []
    for key, num, den in FP8_RATIOS:
        fb = rec.get(f"ratio_fwd_bwd_tflops_{key}")
        if fb:
            fw = rec.get(f"ratio_fwd_tflops_{key}")
            parts.append(f"{num}/{den}: fwd {_num(fw, '.2f')}x, f+b {fb:.2f}x")
    for impl in FP8_IMPLS:
        r = rec["impls"].get(impl, {})
        if r.get("fwd_bwd_of_fp8_dense"):
            parts.append(f"{impl} of FP8 dense: fwd {_num(r.get('fwd_of_fp8_dense'), '.1%')}, "
                         f"f+b {r['fwd_bwd_of_fp8_dense']:.1%}")
        if r.get("out_rel_err_vs_bf16") is not None:
            parts.append(f"{impl} |out-bf16|/|bf16| {r['out_rel_err_vs_bf16']:.1e}")
    return [f"{'':<18} {'':<{iw}} " + "; ".join(parts)] if parts else []


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m moejit_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="",
                   help=f"comma-separated names or substrings (default all: {', '.join(SHAPES)})")
    p.add_argument("--quick", action="store_true", help="fewer repeats (2 warm-up, 5 timed)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up runs (default 5)")
    p.add_argument("--reps", type=int, default=None, help="timed runs, median reported (20)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--layout", choices=["split", "merged"], default="split")
    p.add_argument("--routing", choices=["topk", "expert0"], default="topk",
                   help="softmax top-k of random logits, or every route to expert 0")
    p.add_argument("--swiglu-limit", type=float, default=None)
    p.add_argument("--impls", default=",".join(IMPLS),
                   help="subset of " + ",".join(IMPLS + EXTRA_IMPLS + FP8_IMPLS + PEER_IMPLS +
                                                tuple(VARIANT_IMPLS)))
    p.add_argument("--sonic-tuned", action="store_true",
                   help="also time SonicMoE with QuACK's autotuning (minutes per shape), as "
                        "sonicmoe-tuned")
    p.add_argument("--no-eager", action="store_true", help="skip the per-expert eager loop")
    p.add_argument("--eager-budget", type=float, default=20.0,
                   help="seconds the eager loop may take per shape before it is skipped")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write all results as JSON")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the results (TFLOP/s with the dense ceiling, peak memory) to FILE "
                        "(.png, .svg, .pdf); needs matplotlib")
    p.add_argument("--from-json", metavar="PATH",
                   help="run nothing: print (and with --plot draw) the results a --json run "
                        "saved; needs no GPU and no PyTorch")
    args = p.parse_args(argv)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    args.reps = args.reps if args.reps is not None else (5 if args.quick else 20)
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    known = IMPLS + EXTRA_IMPLS + FP8_IMPLS + PEER_IMPLS + tuple(VARIANT_IMPLS)
    unknown = [i for i in args.impls if i not in known]
    if unknown:
        p.error(f"unknown --impls {unknown}; choose from {known}")
    if args.sonic_tuned and "sonicmoe-tuned" not in args.impls:
        at = args.impls.index("sonicmoe") + 1 if "sonicmoe" in args.impls else len(args.impls)
        args.impls.insert(at, "sonicmoe-tuned")
    wanted = [s.strip() for s in args.shapes.split(",") if s.strip()]
    # An exact name selects that shape; any other word selects the names containing it.
    args.shape_names = [n for n in SHAPES if not wanted or n in wanted or
                        any(w not in SHAPES and w in n for w in wanted)]
    if not args.shape_names:
        p.error(f"--shapes {args.shapes!r} matches none of {', '.join(SHAPES)}")
    return args


def from_json(args) -> int:
    """--from-json: the saved run's table, and its picture with --plot."""
    try:
        run = plot.load_run(args.from_json)
    except plot.PlotError as e:
        log(str(e))
        return 2
    print(format_table(run["results"], run.get("dense_tflops"), run.get("peers"),
                       run.get("fp8_dense_tflops")))
    return draw_plot(run, args.plot) if args.plot else 0


def draw_plot(run, path) -> int:
    try:
        plot.draw(run, path)
    except plot.PlotError as e:
        log(str(e))
        return 2
    log(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.plot:  # before anything runs: a long run must not end without its picture
        try:
            plot.require_matplotlib()
        except plot.PlotError as e:
            log(str(e))
            return 2
    if args.from_json:
        return from_json(args)
    if torch is None:
        log(f"moejit_bench needs PyTorch, which could not be imported ({_TORCH_IMPORT_ERROR})")
        return 2
    if not torch.cuda.is_available():
        log("moejit_bench needs a CUDA device (torch.cuda.is_available() is False)")
        return 2
    dtype = getattr(torch, DTYPES[args.dtype])
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.cuda.get_device_name()
    try:
        version = core.library_version()
    except Exception as e:  # the peers still run; moejit rows will show the error
        version = f"unavailable ({type(e).__name__})"
    log(f"device {device}, torch {torch.__version__}, moejit {version}, "
        f"{args.dtype}, {args.layout}, routing {args.routing}, warmup {args.warmup}, "
        f"reps {args.reps}")
    args.peer_status = peers_fast.status(args.impls)
    for impl, status in args.peer_status.items():
        log(f"peer {impl}: {status}")
    dense = dense_ceiling(dtype, args.warmup, args.reps)
    log(f"dense 8192^3 {args.dtype} GEMM: {dense:.1f} TFLOP/s")
    fp8_dense = None
    if any(impl in FP8_IMPLS for impl in args.impls):
        try:
            fp8_dense = peers_fp8.fp8_dense_ceiling(time_ms, args.warmup, args.reps)
            log(f"dense 8192^3 FP8 e4m3 row-wise GEMM: {fp8_dense:.1f} TFLOP/s")
        except Exception as e:  # the FP8 rows still run; their fraction of it is left out
            log(f"FP8 dense ceiling unavailable: {type(e).__name__}: {e}")
    run = {"device": device, "torch": torch.__version__, "moejit": version, "dtype": args.dtype,
           "layout": args.layout, "routing": args.routing, "swiglu_limit": args.swiglu_limit,
           "warmup": args.warmup, "reps": args.reps, "dense_tflops": dense,
           "fp8_dense_tflops": fp8_dense,
           "peers": args.peer_status, "results": []}
    records = run["results"]
    for name in args.shape_names:
        records.append(run_shape(name, SHAPES[name], args, dtype, dense, fp8_dense))
        if args.json:  # after every shape: a run cut short by a time limit keeps what it measured
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(run, f, indent=2)
            os.replace(tmp, args.json)
    print(format_table(records, dense, args.peer_status, fp8_dense))
    return draw_plot(run, args.plot) if args.plot else 0


if __name__ == "__main__":
    sys.exit(main())
