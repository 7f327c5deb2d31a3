"""Cold start of a new layer shape (issue 28 item 4): where the time of the first forward +
backward goes in a fresh process with an empty cache folder.

For each shape (and, with --one-core, again under `taskset -c 0`) this script starts a fresh
Python process with an empty MOEJIT_CACHE_DIR and prints, from the moment that process was
spawned:

  spawn -> main       interpreter start (python itself, site, this file)
  import torch        and torch.cuda.init() (the CUDA context: torch creates the primary context)
  import moejit       the package and the library (ctypes load)
  context             moejit.Context(...) (device probe, NVRTC and toolkit headers are found lazily)
  plan create         moejit.Plan(...): every kernel of the plan rendered, compiled (NVRTC, in
                      parallel on the cores the process may use), published and loaded
    per kernel        from the library's debug line "moejit: kernel timing ..." (jit_engine.cpp):
                      NVRTC wall and CPU time, store, cuModuleLoadData + cuModuleGetFunction
  buffers             torch allocations and random fills (not the library's cost)
  first forward       the first launch of every forward kernel (synchronised)
  first backward      likewise
  warm forward+bwd    the same again, for comparison (what the first launch costs on top)
  total               spawn -> end of the first backward

Usage (on the GPU machine, the library built; dev/gpu/cold_start.sh does this):
  MOEJIT_LIBRARY=build/capi/libmoejit.so PYTHONPATH=python python3 dev/gpu/cold_start.py \
      [--shapes qwen3-30b-a3b,deepseek-v3] [--tokens 8192] [--one-core] [--json OUT]
Without a GPU, --compile-only --arch sm_90a times moejit.warmup() of the same plans on a
compile-only context instead (no torch, no launches), e.g. to compare 1 core against all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SHAPES = {
    # name: (hidden, moe intermediate, experts, top_k)
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "deepseek-v3": (7168, 2048, 256, 8),
    "small": (512, 256, 8, 2),  # a quick check of the script itself
}

TIMING = re.compile(r"moejit: kernel timing (.*)")


def parse_timing(message: str):
    m = TIMING.search(message)
    if not m:
        return None
    out = {}
    for field in m.group(1).split():
        key, _, value = field.partition("=")
        try:
            out[key] = float(value)
        except ValueError:
            out[key] = value
    return out


# ---------------------------------------------------------------- the measured child process

def child(args) -> None:
    t_main = time.time()
    marks = {"spawn": float(os.environ["COLD_START_SPAWN_T"]), "main": t_main}
    H, I, E, k = SHAPES[args.shape]
    T = args.tokens
    torch = None
    if not args.compile_only:
        import torch  # noqa: F811 (torch only on the GPU path)
        marks["import_torch"] = time.time()
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the primary context, really created
        torch.cuda.synchronize()
        marks["cuda_init"] = time.time()
    import moejit
    marks["import_moejit"] = time.time()

    kernels = []
    messages = []

    def log(level, message):
        t = parse_timing(message)
        if t is not None:
            kernels.append(t)
        elif level >= 2:
            messages.append(message.rstrip())

    ctx = moejit.Context(cache_dir=args.cache_dir, log=log, compile_only=args.compile_only,
                         arch=args.arch)
    marks["context"] = time.time()
    desc = dict(dtype="bf16", hidden_size=H, intermediate_size=I, num_experts=E, top_k=k,
                merged=True, tokens_hint=T)
    result = {"shape": args.shape, "H": H, "I": I, "E": E, "k": k, "T": T,
              "affinity": sorted(os.sched_getaffinity(0)), "compile_only": args.compile_only}
    if args.compile_only:
        result["kernels_in_plan"] = moejit.warmup(ctx, **desc)
        marks["plan"] = time.time()
    else:
        plan = moejit.Plan(ctx, **desc)
        marks["plan"] = time.time()
        dev, bf16 = "cuda", torch.bfloat16
        x = torch.randn(T, H, device=dev, dtype=bf16)
        dout = torch.randn(T, H, device=dev, dtype=bf16)
        w_gate_up = torch.randn(E, 2 * I, H, device=dev, dtype=bf16) * 0.02
        w_down = torch.randn(E, H, I, device=dev, dtype=bf16) * 0.02
        sel = torch.randint(0, E, (T, k), device=dev, dtype=torch.int64)
        rw = torch.rand(T, k, device=dev, dtype=bf16)
        out = torch.empty(T, H, device=dev, dtype=bf16)
        dx = torch.empty_like(x)
        drw = torch.empty_like(rw)
        dw_gate_up = torch.empty_like(w_gate_up)
        dw_down = torch.empty_like(w_down)
        saved_size, workspace_size = plan.saved_size(T), plan.workspace_size(T)
        saved = torch.empty(max(saved_size, 1), device=dev, dtype=torch.uint8)
        workspace = torch.empty(max(workspace_size, 1), device=dev, dtype=torch.uint8)
        torch.cuda.synchronize()
        marks["buffers"] = time.time()

        def forward():
            plan.forward(num_tokens=T, x=x, selected_experts=sel, routing_weights=rw,
                         w_gate_up=w_gate_up, w_down=w_down, out=out, saved=saved,
                         saved_size=saved_size, workspace=workspace, workspace_size=workspace_size)
            torch.cuda.synchronize()

        def backward():
            plan.backward(num_tokens=T, x=x, dout=dout, routing_weights=rw, w_gate_up=w_gate_up,
                          w_down=w_down, saved=saved, saved_size=saved_size, dx=dx,
                          d_routing_weights=drw, dw_gate_up=dw_gate_up, dw_down=dw_down,
                          workspace=workspace, workspace_size=workspace_size)
            torch.cuda.synchronize()

        forward()
        marks["first_forward"] = time.time()
        backward()
        marks["first_backward"] = time.time()
        t = time.time()
        forward()
        result["warm_forward_s"] = time.time() - t
        t = time.time()
        backward()
        result["warm_backward_s"] = time.time() - t
        result["out_finite"] = bool(torch.isfinite(out).all().item())
        plan.close()
    result["cache_stats"] = ctx.cache_stats()
    result["marks"] = marks
    result["kernels"] = kernels
    result["warnings"] = messages
    result["process_cpu_s"] = time.process_time()
    ctx.close()
    with open(args.json, "w") as f:
        json.dump(result, f)


# ---------------------------------------------------------------- the driver and its report

def run_one(shape: str, one_core: bool, args) -> dict:
    cache = tempfile.mkdtemp(prefix="moejit-cold-")
    out = os.path.join(cache, "result.json")
    cmd = (["taskset", "-c", "0"] if one_core else []) + [
        sys.executable, os.path.abspath(__file__), "--child", "--shape", shape,
        "--tokens", str(args.tokens), "--cache-dir", os.path.join(cache, "cache"), "--json", out]
    if args.compile_only:
        cmd += ["--compile-only", "--arch", args.arch]
    env = dict(os.environ)
    env.pop("MOEJIT_COMPILE", None)  # a cold start compiles
    env["COLD_START_SPAWN_T"] = repr(time.time())
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0 or not os.path.exists(out):
        print(proc.stdout[-4000:])
        raise SystemExit(f"cold_start: the measured process for {shape} failed (exit {proc.returncode})")
    with open(out) as f:
        result = json.load(f)
    result["one_core"] = one_core
    shutil.rmtree(cache, ignore_errors=True)
    return result


def makespan(durations, workers: int) -> float:
    """Greedy list scheduling: each free worker takes the next item (Context::kernels' rule)."""
    free = [0.0] * workers
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free)


def report(r: dict) -> None:
    m = r["marks"]
    order = [("main", "spawn -> main (interpreter)"), ("import_torch", "import torch"),
             ("cuda_init", "CUDA init (torch, primary context)"), ("import_moejit", "import moejit"),
             ("context", "moejit context"),
             ("plan", "plan create (compile + store + load)" if not r["compile_only"]
              else "moejit.warmup (compile + store)"),
             ("buffers", "buffers (torch alloc + fill)"), ("first_forward", "first forward (sync)"),
             ("first_backward", "first backward (sync)")]
    cores = "1 core (taskset -c 0)" if r["one_core"] else f"{len(r['affinity'])} cores"
    print(f"\n== {r['shape']}: H={r['H']} I={r['I']} E={r['E']} k={r['k']} T={r['T']}, {cores}"
          f"{', compile-only' if r['compile_only'] else ''}")
    prev = m["spawn"]
    for key, label in order:
        if key in m:
            print(f"  {label:<40} {m[key] - prev:9.3f} s   (at {m[key] - m['spawn']:8.3f} s)")
            prev = m[key]
    if "warm_forward_s" in r:
        first = (m["first_forward"] - m["buffers"]) + (m["first_backward"] - m["first_forward"])
        warm = r["warm_forward_s"] + r["warm_backward_s"]
        print(f"  {'warm forward + backward':<40} {warm:9.3f} s   (first launch costs {first - warm:+.3f} s more)")
    end = m.get("first_backward", m["plan"])
    print(f"  {'total (spawn -> first backward done)':<40} {end - m['spawn']:9.3f} s;"
          f" process CPU {r['process_cpu_s']:.1f} s")
    ks = r["kernels"]
    compiled = [x for x in ks if x.get("from") == "nvrtc"]
    if ks:
        s = lambda key, rows: sum(x.get(key, 0.0) for x in rows)  # noqa: E731
        print(f"  kernels: {len(ks)} resolved, {len(compiled)} compiled; NVRTC wall sum"
              f" {s('compile_wall_s', compiled):.2f} s, CPU sum {s('compile_cpu_s', compiled):.2f} s,"
              f" store sum {s('store_s', ks):.3f} s, module load sum {s('module_load_s', ks):.3f} s")
        print(f"    {'kernel':<72} {'wall s':>8} {'cpu s':>8} {'load s':>8}")
        for x in sorted(ks, key=lambda x: -x.get("compile_wall_s", 0.0)):
            print(f"    {x['name']:<72} {x.get('compile_wall_s', 0):8.3f} {x.get('compile_cpu_s', 0):8.3f}"
                  f" {x.get('module_load_s', 0):8.4f}")
    else:
        print("  (no per-kernel lines: the library predates the 'moejit: kernel timing' debug line)")
    if len(compiled) > 1:
        # Context::kernels hands the plan's sources to min(n, cores) threads in list order; what
        # that order costs against longest-first, from the measured CPU time of each compile.
        cpu = [x.get("compile_cpu_s", 0.0) for x in compiled]
        line = ", ".join(f"{w}: {makespan(cpu, w):.2f} / {makespan(sorted(cpu, reverse=True), w):.2f}"
                         for w in (1, 2, 4, 8, 16))
        print(f"  compile makespan from CPU times, list order / longest first, by cores: {line} s")
    st = r["cache_stats"]
    print(f"  cache: compiles={st['compiles']:.0f} disk_hits={st['disk_hits']:.0f}"
          f" memory_hits={st['memory_hits']:.0f} compile_s={st['compile_seconds']:.2f}")
    if "out_finite" in r:
        print(f"  output finite: {r['out_finite']}")
    for w in r["warnings"]:
        print(f"  warning: {w}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="qwen3-30b-a3b,deepseek-v3")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--one-core", action="store_true", help="also measure under taskset -c 0")
    p.add_argument("--only-one-core", action="store_true", help="measure under taskset -c 0 only")
    p.add_argument("--compile-only", action="store_true", help="no GPU: time moejit.warmup() only")
    p.add_argument("--arch", default=None, help="with --compile-only (e.g. sm_90a)")
    p.add_argument("--json", default=None, help="driver: also write every result here")
    # the measured process
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shape", help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if args.compile_only and not args.arch:
        p.error("--compile-only needs --arch (e.g. sm_90a)")
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            p.error(f"unknown shape {s!r}; known: {', '.join(SHAPES)}")
    modes = [True] if args.only_one_core else ([False, True] if args.one_core else [False])
    results = []
    for shape in shapes:
        for one_core in modes:
            r = run_one(shape, one_core, args)
            report(r)
            results.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
