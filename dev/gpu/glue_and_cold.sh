#!/usr/bin/env bash
# One H200 call (0.11, fourth session): the FP8 glue kernels' changes checked and measured, and
# the cold start's controls. In order, so the first cold start meets a machine nothing has used:
#   1 build; cold start of two new shapes (fresh process, empty cache); 24 GiB of host memory
#     touched and freed; the same cold start again (if the second is much faster, the first paid
#     for the VM's memory growing on first touch, not for compiling); compile_contention.sh
#     (threads against processes, B2 last);
#   2 the suites that hold the changed kernels (fp8, fp8_layer, swiglu, group_gemm, gpt_oss)
#     and the FP8 PyTorch tests, side by side;
#   3 the FP8 layer bench (five shapes, bf16 and the FP8 peer in the same run) and the step
#     profile of qwen3-30b-a3b (FP8 with the weight cache).
# A short table last; logs in $OUT/glue_logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s); final=${OUT:-$PWD/out}; out=/tmp/moejit-glue; rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/glue_logs.tgz" -C "$out" . 2>/dev/null' EXIT
. dev/gpu/common.sh
say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
say built
cold() { timeout 90 python3 dev/gpu/cold_start.py --shapes qwen3-30b-a3b,deepseek-v3 --tokens 8192 --json "$out/cold_$1.json" >"$out/cold_$1.log" 2>&1; say "cold $1 rc=$?"; }
cold 1
timeout 60 python3 -c "
import numpy as np
a = np.ones((24 << 30) // 8); print('touched', a.nbytes >> 30, 'GiB'); del a" >"$out/touch.log" 2>&1; say "touch rc=$?"
cold 2
b=$b timeout 120 bash dev/gpu/compile_contention.sh 16 >"$out/contention.log" 2>&1; say "contention rc=$?"
suite() { timeout 200 "$b/tests/test_gpu_$1" --report_level=short >"$out/gpu_$1.log" 2>&1; echo "$1 rc=$?" >"$out/gpu_$1.rc"; }
( suite fp8 ) & ( suite fp8_layer; suite swiglu ) & ( suite group_gemm; suite gpt_oss ) &
( timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_fp8_torch_gpu.py >"$out/pytest.log" 2>&1; echo "pytest rc=$?" >"$out/pytest.rc" ) &
wait; say suites
timeout 170 python3 -m moejit_bench --shapes qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,mid-expert-30b,small-expert-7b \
  --impls moejit,moejit-fp8,moejit-fp8-cached,scaled_grouped_mm --quick --json "$out/fp8_bench.json" >"$out/bench.log" 2>&1; say "bench rc=$?"
timeout 45 python3 dev/gpu/step_profile.py --impl moejit-fp8-cached qwen3-30b-a3b >"$out/prof.log" 2>&1; say "profile rc=$?"
cp "$out"/*.json "$final/" 2>/dev/null
# The table.
for n in fp8 fp8_layer swiglu group_gemm gpt_oss; do
  echo "== $(cat "$out/gpu_$n.rc" 2>/dev/null || echo "$n NOTRUN")"; grep -E "failure|error:|test cases|assertions" "$out/gpu_$n.log" | grep -v "caught:" | head -3
done
echo "== $(cat "$out/pytest.rc")"; tail -1 "$out/pytest.log"
for n in 1 2; do echo "== cold $n"; grep -E "^ *(plan create|first forward|first backward|total|shape|==)|NVRTC" "$out/cold_$n.log" | head -20; done
cat "$out/touch.log" "$out/contention.log"
grep -vE "^\[|^Running|^$|Warn|warn" "$out/bench.log" | tail -22 | cut -c1-200
grep -vE "Warn|warn" "$out/prof.log" | tail -28 | cut -c1-110
say total
