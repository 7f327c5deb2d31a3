#!/usr/bin/env python3
"""Benchmark moejit's grouped GEMMs against torch._grouped_mm on docs/DESIGN.md §6's shapes.

Standalone: torch for data and the peer, ctypes on the built libmoejit.so (no moejit Python
package). For each shape: fc1 fprop (S=T*k rows, N=2I, K=H), fc2 fprop (N=H, K=I), fc2 dgrad
(B [E,K,N], b_transposed=0), fc2 wgrad (same_mn, C [E,H,I] bf16 like the peer);
routing from a softmax top-k of random logits; CUDA-event timing, median of many repeats after
warm-up (the JIT compile is part of the warm-up), plus a dense 8192^3 bf16 matmul ceiling
measured in the same run. Prints a table of TFLOP/s and ratios last; --json PATH writes it.

  MOEJIT_LIBRARY=build/src/libmoejit.so python3 tools/bench_group_gemm.py [--shapes a,b]
  --tiles 128x128x64_s3,wgmma_128x256x64_s4   sweeps tile configs per GEMM (one context per
  tile, created with the gemm_tile option; "heuristic" in the list: the library's own choice)
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import sys

import torch

def reference_shapes(header=os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_shapes.hpp")):
    """[(name, T, E, H, I, k)] from the C++ tools' table (docs/DESIGN.md §6), one shape a line."""
    with open(header) as f:
        rows = re.findall(r'^\s*\{"([\w.-]+)", (\d+), (\d+), (\d+), (\d+), (\d+)\},\s*$', f.read(), re.M)
    if not rows:
        raise RuntimeError(f"no shapes found in {header}")
    return [(name, *map(int, dims)) for name, *dims in rows]


SHAPES = reference_shapes()

DTYPE_BF16, DTYPE_FP32 = 1, 3


class NkArgs(ctypes.Structure):  # moejit_group_gemm_nk_args_t
    _fields_ = [("struct_size", ctypes.c_size_t), ("dtype", ctypes.c_int), ("c_dtype", ctypes.c_int),
                ("rows", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
                ("num_experts", ctypes.c_int32), ("b_transposed", ctypes.c_int32),
                ("accumulate", ctypes.c_int32), ("a", ctypes.c_void_p), ("b", ctypes.c_void_p),
                ("c", ctypes.c_void_p), ("offsets", ctypes.c_void_p), ("stream", ctypes.c_void_p)]


class MnArgs(ctypes.Structure):  # moejit_group_gemm_mn_args_t
    _fields_ = [("struct_size", ctypes.c_size_t), ("dtype", ctypes.c_int), ("c_dtype", ctypes.c_int),
                ("rows", ctypes.c_int64), ("m", ctypes.c_int64), ("n", ctypes.c_int64),
                ("num_experts", ctypes.c_int32), ("accumulate", ctypes.c_int32),
                ("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p),
                ("offsets", ctypes.c_void_p), ("stream", ctypes.c_void_p)]


class ContextOptions(ctypes.Structure):  # moejit_context_options_t (0.6)
    _fields_ = [("struct_size", ctypes.c_size_t), ("cache_dir", ctypes.c_char_p), ("arch", ctypes.c_char_p),
                ("device_ordinal", ctypes.c_int), ("jit_mode", ctypes.c_int), ("compile_only", ctypes.c_int),
                ("log_fn", ctypes.c_void_p), ("log_user_data", ctypes.c_void_p), ("tune", ctypes.c_int32),
                ("gather", ctypes.c_int32), ("fuse_swiglu", ctypes.c_int32), ("gemm_tile", ctypes.c_char_p)]


class Moejit:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.moejit_last_error.restype = ctypes.c_char_p
        self.lib.moejit_context_create.argtypes = [ctypes.POINTER(ContextOptions), ctypes.POINTER(ctypes.c_void_p)]
        self.lib.moejit_context_options_init_sized.argtypes = [ctypes.POINTER(ContextOptions), ctypes.c_size_t]
        self.lib.moejit_group_gemm_same_nk.argtypes = [ctypes.c_void_p, ctypes.POINTER(NkArgs)]
        self.lib.moejit_group_gemm_same_mn.argtypes = [ctypes.c_void_p, ctypes.POINTER(MnArgs)]
        self.lib.moejit_group_gemm_nk_args_init.argtypes = [ctypes.POINTER(NkArgs)]
        self.lib.moejit_group_gemm_mn_args_init.argtypes = [ctypes.POINTER(MnArgs)]
        self.contexts = {}  # tile ("": the heuristic) -> context: the tile is a context option
        self.use_tile(None)

    def use_tile(self, tile):
        """The context later nk()/mn() calls use: one forcing `tile`, or (None) the heuristic."""
        key = tile or ""
        if key not in self.contexts:
            options = ContextOptions()
            self.check(self.lib.moejit_context_options_init_sized(ctypes.byref(options), ctypes.sizeof(options)),
                       "context_options_init")
            options.gemm_tile = key.encode()
            ctx = ctypes.c_void_p()
            self.check(self.lib.moejit_context_create(ctypes.byref(options), ctypes.byref(ctx)), "context_create")
            self.contexts[key] = ctx
        self.ctx = self.contexts[key]

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"moejit {what}: status {status}: {self.lib.moejit_last_error().decode()}")

    def _args(self, kind, args, a, b, c, offsets):
        """args (NkArgs or MnArgs) at the library's defaults, with what both GEMMs take:
        dtypes, experts, operands, stream."""
        self.check(getattr(self.lib, f"moejit_group_gemm_{kind}_args_init")(ctypes.byref(args)),
                   f"{kind}_args_init")
        args.dtype, args.c_dtype = DTYPE_BF16, DTYPE_BF16 if c.dtype == torch.bfloat16 else DTYPE_FP32
        args.num_experts = offsets.numel() - 1
        args.a, args.b, args.c, args.offsets = a.data_ptr(), b.data_ptr(), c.data_ptr(), offsets.data_ptr()
        args.stream = torch.cuda.current_stream().cuda_stream
        return args

    def _call(self, kind, args):
        run = getattr(self.lib, f"moejit_group_gemm_same_{kind}")
        return lambda: self.check(run(self.ctx, ctypes.byref(args)), f"same_{kind}")

    def nk(self, a, b, c, offsets, b_transposed):
        args = self._args("nk", NkArgs(), a, b, c, offsets)
        args.rows, args.k = a.shape
        args.n = c.shape[1]
        args.b_transposed = int(b_transposed)
        return self._call("nk", args)

    def mn(self, a, b, c, offsets):
        args = self._args("mn", MnArgs(), a, b, c, offsets)
        args.rows, args.m = a.shape
        args.n = b.shape[1]
        return self._call("mn", args)


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def rel_err(out, ref):
    out, ref = out.float(), ref.float()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def routing_offsets(T, E, k, gen):
    logits = torch.randn(T, E, device="cuda", generator=gen)
    selected = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1).indices
    counts = torch.bincount(selected.flatten(), minlength=E)
    offsets = torch.zeros(E + 1, dtype=torch.int32, device="cuda")
    offsets[1:] = torch.cumsum(counts, 0).to(torch.int32)
    return offsets


def bench_shape(mj, shape, args, gen):
    name, T, E, H, I, k = shape
    S = T * k
    offsets = routing_offsets(T, E, k, gen)
    offs = offsets[1:].contiguous()  # torch._grouped_mm: cumulative end offsets, int32
    bf16 = torch.bfloat16
    rnd = lambda *s: (torch.randn(*s, device="cuda", generator=gen) * 0.5).to(bf16)
    xs, w1 = rnd(S, H), rnd(E, 2 * I, H)
    h, w2 = rnd(S, I), rnd(E, H, I)
    dy = rnd(S, H)
    gemms = []
    # (label, flops, ours-builder(c), c, torch fn)
    c1 = torch.empty(S, 2 * I, device="cuda", dtype=bf16)
    gemms.append(("fc1 fprop", 2.0 * S * 2 * I * H, lambda: mj.nk(xs, w1, c1, offsets, True), c1,
                  lambda: torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)))
    c2 = torch.empty(S, H, device="cuda", dtype=bf16)
    gemms.append(("fc2 fprop", 2.0 * S * H * I, lambda: mj.nk(h, w2, c2, offsets, True), c2,
                  lambda: torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)))
    c3 = torch.empty(S, I, device="cuda", dtype=bf16)
    gemms.append(("fc2 dgrad", 2.0 * S * H * I, lambda: mj.nk(dy, w2, c3, offsets, False), c3,
                  lambda: torch._grouped_mm(dy, w2, offs=offs)))
    c4 = torch.empty(E, H, I, device="cuda", dtype=bf16)
    gemms.append(("fc2 wgrad", 2.0 * S * H * I, lambda: mj.mn(dy, h, c4, offsets), c4,
                  lambda: torch._grouped_mm(dy.t(), h, offs=offs)))
    rows = []
    for label, flops, build, c, peer in gemms:
        if args.gemms and label not in args.gemms.split(","):
            continue
        row = {"shape": name, "gemm": label, "flops": flops}
        try:
            ref = peer()
            row["torch_ms"] = time_ms(peer, args.warmup, args.reps)
        except Exception as e:  # the peer may not support a layout on this build
            ref, row["torch_ms"] = None, None
            row["torch_error"] = str(e).splitlines()[0][:200]
        best = None
        for tile in args.tiles or [None]:
            tile = None if tile == "heuristic" else tile
            try:
                mj.use_tile(tile)
                fn = build()
                ms = time_ms(fn, args.warmup, args.reps)
                err = rel_err(c, ref) if ref is not None else float("nan")
            except Exception as e:
                print(f"  {name} {label} tile {tile}: {e}", file=sys.stderr)
                continue
            if args.tiles:
                print(f"  {name:18s} {label:10s} {tile or 'heuristic':28s} {flops / ms / 1e9:7.1f} TFLOP/s  err {err:.2e}")
            if best is None or ms < best[0]:
                best = (ms, tile, err)
        mj.use_tile(None)
        if best:
            row["moejit_ms"], row["tile"], row["rel_err_vs_torch"] = best
        rows.append(row)
        del ref
    del xs, w1, h, w2, dy, c1, c2, c3, c4
    torch.cuda.empty_cache()
    return rows


def dense_ceiling(args):
    a = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    ms = time_ms(lambda: a @ b, args.warmup, args.reps)
    return 2.0 * 8192 ** 3 / ms / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("library", nargs="?", default=os.environ.get("MOEJIT_LIBRARY"),
                   help="path of libmoejit.so (default: $MOEJIT_LIBRARY)")
    p.add_argument("--shapes", help="comma-separated subset of shape names")
    p.add_argument("--gemms", help="comma-separated subset, e.g. 'fc1 fprop,fc2 wgrad'")
    p.add_argument("--tiles", help="comma-separated tile configs to sweep (gemm_tile; best kept)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    if not args.library:
        p.error("give the path of libmoejit.so (argument or MOEJIT_LIBRARY)")
    args.tiles = args.tiles.split(",") if args.tiles else None
    torch.cuda.init()
    mj = Moejit(args.library)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    shapes = SHAPES
    if args.shapes:
        wanted = set(args.shapes.split(","))
        shapes = [s for s in SHAPES if s[0] in wanted]
    dense = dense_ceiling(args)
    rows = []
    for shape in shapes:
        rows.extend(bench_shape(mj, shape, args, gen))
    dense_after = dense_ceiling(args)

    print(f"\ndense 8192^3 bf16 matmul: {dense:.0f} TFLOP/s (before), {dense_after:.0f} (after)")
    hdr = f"{'shape':18s} {'gemm':10s} {'moejit':>8s} {'torch':>8s} {'ratio':>6s} {'%dense':>6s} {'err':>8s}  tile"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ours = r["flops"] / r["moejit_ms"] / 1e9 if r.get("moejit_ms") else float("nan")
        peer = r["flops"] / r["torch_ms"] / 1e9 if r.get("torch_ms") else float("nan")
        r["moejit_tflops"], r["torch_tflops"] = ours, peer
        print(f"{r['shape']:18s} {r['gemm']:10s} {ours:8.1f} {peer:8.1f} {ours / peer:6.2f} "
              f"{100 * ours / dense:5.0f}% {r.get('rel_err_vs_torch', float('nan')):8.1e}  "
              f"{r.get('tile') or 'heuristic'}{'  (torch: ' + r['torch_error'] + ')' if 'torch_error' in r else ''}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dense_tflops": [dense, dense_after], "device": torch.cuda.get_device_name(),
                       "results": rows}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
