#!/usr/bin/env bash
# The store ring's first run (docs/PERF_LOG.md, the eighth session's entry, item 5), one device
# call: build; the layer bench, moejit alone, every reference shape and the duplicate-route rows,
# with MOEJIT_STORE_RING off, on, and on with MOEJIT_FUSE_SWIGLU=1 (each its own process, the
# switches being read once per process);
# qwen3's kernels with the ring off and on (ring_profile.sh); then the suites that cover the ring (gemm_sm90
# and group_gemm as they are, moe_layer and swiglu with the ring on) side by side in what is
# left of the call (CALL_S, default 590 s). Logs and JSON under $OUT; the table last.
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
t0=$(date +%s); elapsed() { echo $(( $(date +%s) - t0 )); }; say() { echo "[$(elapsed) s] $*"; }
left() { echo $(( ${CALL_S:-590} - $(elapsed) )); }
out=${OUT:-$PWD/out}; mkdir -p "$out"; logs=/tmp/moejit-ring; rm -rf $logs; mkdir -p $logs
trap 'tar czf "$out/ring_logs.tgz" -C $logs . 2>/dev/null' EXIT
. dev/gpu/common.sh; say built
shapes=${SHAPES:-}  # default: every reference shape
dup_shapes=${DUP_SHAPES:-qwen3-30b-a3b,small-expert-7b}
bench() {  # TAG ENV...: both routings, moejit alone, in one process per routing
  local tag=$1; shift
  env "$@" timeout ${TOPK_S:-130} python3 -m moejit_bench --warmup 3 --reps 10 --no-eager --impls moejit \
    ${shapes:+--shapes $shapes} --json "$out/ring_$tag.json" >$logs/bench_$tag.log 2>&1
  echo "bench $tag rc=$?" | tee -a $logs/rcs
  env "$@" timeout 60 python3 -m moejit_bench --warmup 3 --reps 10 --no-eager --impls moejit \
    --routing expert0 --shapes "$dup_shapes" --json "$logs/ring_${tag}_dup.json" >$logs/bench_${tag}_dup.log 2>&1
  echo "bench ${tag} expert0 rc=$?" | tee -a $logs/rcs
  say "bench $tag"
}
# RING_CONFIGS: the runs, in order (off*: the ring off; ring*: on; ringfused: on, SwiGLU fused);
# repeating off and ring (off2, ring2) averages out the machine's drift.
for tag in ${RING_CONFIGS:-off ring ringfused}; do
  case $tag in
    off*) bench $tag MOEJIT_STORE_RING=0 ;;
    ringfused) bench $tag MOEJIT_STORE_RING=1 MOEJIT_FUSE_SWIGLU=1 ;;
    ring*) bench $tag MOEJIT_STORE_RING=1 ;;
  esac
done
# PROFILE_SHAPES (space-separated; default qwen3-30b-a3b; empty: none): each kernel of a step, ring off and on.
if [ -n "${PROFILE_SHAPES-qwen3-30b-a3b}" ]; then
  SHAPES=${PROFILE_SHAPES-qwen3-30b-a3b} PROFILE_OUT=$logs bash dev/gpu/ring_profile.sh | grep -v '^NVIDIA' >$logs/profile_table.txt
  say "profile rc=$?"
fi
suite_s=$(( $(left) - 15 ))
# In what is left, when 60 s or more (peers_session.sh's phase 1 runs them all as well).
if [ "$suite_s" -ge 60 ]; then
say "suites, ${suite_s} s each at most"
( timeout $suite_s $b/tests/test_gpu_gemm_sm90 --report_level=short >$logs/gpu_gemm_sm90.log 2>&1; echo "gemm_sm90 rc=$?" >>$logs/rcs ) &
( timeout $suite_s $b/tests/test_gpu_group_gemm --report_level=short >$logs/gpu_group_gemm.log 2>&1; echo "group_gemm rc=$?" >>$logs/rcs ) &
( export MOEJIT_STORE_RING=1
  timeout $suite_s $b/tests/test_gpu_swiglu --report_level=short >$logs/gpu_swiglu_ring.log 2>&1; echo "swiglu (ring on) rc=$?" >>$logs/rcs
  timeout $(( $(left) - 10 )) $b/tests/test_gpu_moe_layer --report_level=short >$logs/gpu_moe_layer_ring.log 2>&1; echo "moe_layer (ring on) rc=$?" >>$logs/rcs ) &
wait
fi
for f in $logs/gpu_*.log; do
  echo "== $(basename $f .log)"; grep -E "error|failure|test cases|assertions|\*\*\*" "$f" | grep -v "caught:" | head -5
done
echo "== exit codes"; cat $logs/rcs
cat $logs/profile_table.txt 2>/dev/null
echo "== forward / f+b TFLOP/s per configuration"
python3 - "$out" "$logs" <<'EOF'
import json, sys, glob, os
out, logs = sys.argv[1], sys.argv[2]
tags = ["off", "ring", "ringfused", "off2", "ring2"]
rows = {}
for tag in tags:
    for path in (f"{out}/ring_{tag}.json", f"{logs}/ring_{tag}_dup.json"):
        if not os.path.exists(path):
            continue
        data = json.load(open(path))
        for rec in data["results"]:
            r = rec["impls"].get("moejit", {})
            key = (rec["shape"], data["routing"])
            rows.setdefault(key, {})[tag] = (r.get("fwd_tflops"), r.get("fwd_bwd_tflops"))
fmt = lambda v: "—" if v is None else f"{v:6.1f}"
tags = [t for t in tags if any(t in per for per in rows.values())]
print(f"{'shape':22s} {'routing':8s} " + " ".join(f"{t:>15s}" for t in tags) + "   ring/off fwd, f+b")
for (shape, routing), per in rows.items():
    cells = " ".join(f"{fmt(per.get(t, (None, None))[0])}/{fmt(per.get(t, (None, None))[1])}" for t in tags)
    mean = lambda vs: (sum(v[0] for v in vs) / len(vs), sum(v[1] for v in vs) / len(vs))
    base = [v for v in (per.get("off"), per.get("off2")) if v and all(v)]
    rings = [v for v in (per.get("ring"), per.get("ring2")) if v and all(v)]
    ratio = ""
    if base and rings:
        (bf, bb), (rf, rb) = mean(base), mean(rings)
        ratio = f"   {rf / bf:.3f}, {rb / bb:.3f}"
        per["ring_mean"], per["off_mean"] = (rf, rb), (bf, bb)
    print(f"{shape:22s} {routing:8s} {cells}{ratio}")
import math
def geomean(tag, base):
    pairs = [(per[tag], per[base]) for per in rows.values()
             if per.get(tag) and per.get(base) and all(per[tag]) and all(per[base])]
    if not pairs:
        return None
    g = [math.exp(sum(math.log(a[i] / b[i]) for a, b in pairs) / len(pairs)) for i in (0, 1)]
    print(f"geomean {tag}/{base} over {len(pairs)} rows: forward {g[0]:.3f}, f+b {g[1]:.3f}")
    return g
ring, fused = geomean("ring_mean", "off_mean"), geomean("ringfused", "ring")
# The configuration a later call of this hold (peers_session.sh) runs with, named explicitly
# whatever the library's default: the ring where it is at least as fast as off on average and
# within 2 % on every row; SwiGLU in fc1's epilogue where, with the ring, it wins the forward
# by 1 % or more and keeps f+b.
worst = min((min(p["ring_mean"][i] / p["off_mean"][i] for i in (0, 1))
             for p in rows.values() if "ring_mean" in p), default=0.0)
ring_on = bool(ring) and min(ring) >= 1.0 and worst >= 0.98
print(f"worst row ring/off: {worst:.3f}")
lines = [f"export MOEJIT_STORE_RING={int(ring_on)}"]
if ring_on and fused and fused[0] >= 1.01 and fused[1] >= 0.995:
    lines.append("export MOEJIT_FUSE_SWIGLU=1")
open(f"{logs}/decision.env", "w").write("".join(l + "\n" for l in lines))
print("decision for this hold:", "; ".join(lines))
EOF
say "end"
