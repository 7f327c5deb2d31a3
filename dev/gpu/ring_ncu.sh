#!/usr/bin/env bash
# Why the store ring slows deepseek-v3-4k's gathered fc1 1.4x (docs/PERF_LOG.md, ninth session):
# ncu on the second forward's fc1 GEMMs (gate and up: the first two grouped-GEMM launches of a
# forward), with MOEJIT_STORE_RING=0 and =1: duration, DRAM bytes, L2 hit rate, SM and memory
# throughput, and the warps' stall reasons. SHAPE (default deepseek-v3-4k), reports in $OUT.
# WGRAD=1: instead, the second step's three weight gradients (group_gemm_mn, forward+backward
# passes): why deepseek-v3's ran 4-5 % slower in the ring's process with the same tiles (tenth
# session), with their clocks (sm__cycles_elapsed.avg.per_second) beside the L2 hit rate.
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
build_targets=capi/libmoejit.so . dev/gpu/common.sh
shape=${SHAPE:-deepseek-v3-4k}
# The forward's grouped GEMMs per pass: fc1 gate, fc1 up, fc2 (split fc1, SwiGLU apart); a
# step's weight gradients: fc2's and fc1's two (split fc1).
kernels=group_gemm_nk per_pass=${PER_PASS:-3} count=2 backward=
if [ -n "${WGRAD:-}" ]; then kernels=group_gemm_mn per_pass=${PER_PASS:-3} count=3 backward=--backward; fi
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
metrics=$metrics,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
metrics=$metrics,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,sm__cycles_elapsed.avg.per_second
for r in 0 1; do
  MOEJIT_STORE_RING=$r timeout 240 ncu --kernel-name regex:$kernels --launch-skip "$per_pass" --launch-count $count \
    --metrics "$metrics" --csv python3 dev/gpu/layer_once.py "$shape" 2 $backward >"$out/ncu_ring$r.csv" 2>"$out/ncu_ring$r.log"
  echo "ring=$r rc=$?"
done
python3 - "$out" <<'PY'
import csv, io, sys
out = sys.argv[1]
rows = {}
for r in (0, 1):
    text = open(f"{out}/ncu_ring{r}.csv").read()
    start = text.find('"ID"')
    if start < 0:
        print(f"ring={r}: no ncu table (see ncu_ring{r}.log)")
        continue
    for rec in csv.DictReader(io.StringIO(text[start:])):
        rows.setdefault((rec["ID"], rec["Metric Name"]), {})[r] = f'{rec["Metric Value"]} {rec["Metric Unit"]}'
for (kid, metric), v in sorted(rows.items()):
    print(f"launch {kid}  {metric:70s} off: {v.get(0, '-'):>18s}  ring: {v.get(1, '-'):>18s}")
PY
