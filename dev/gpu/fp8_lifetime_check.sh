#!/usr/bin/env bash
# The sixth session's first call (one H200): proves the FP8 workspace shared by lifetime (66d01ec)
# and measures the step's peak memory and the profile before this session's changes.
#   1. build; the fp8_layer GPU suite (its float64 layer cases fail on a region overwritten while
#      alive), fp8 and moe_layer side by side;
#   2. python -m moejit_bench: bf16, FP8 and FP8 cached on three shapes (peak and saved MB);
#   3. dev/gpu/step_profile.py: bf16 and FP8 cached on qwen3-30b-a3b (where a step's time goes).
# Logs under $OUT; the short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
. dev/gpu/common.sh
echo "built at $SECONDS s"
for t in fp8_layer fp8 moe_layer; do
  ( timeout 300 $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$t.log" 2>&1; echo "$t rc=$?" >"$out/gpu_$t.rc" ) &
done
wait
for t in fp8_layer fp8 moe_layer; do
  echo "== $(cat $out/gpu_$t.rc)"; grep -E "error|failure|test cases|assertions|\*\*\*" "$out/gpu_$t.log" | grep -v "caught:" | head -6
done
grep -E "^fp8 layer" "$out/gpu_fp8_layer.log" | head -30
echo "suites done at $SECONDS s"
timeout 200 python3 -m moejit_bench --shapes qwen3-30b-a3b,deepseek-v3,mixtral-8x7b \
  --impls moejit,moejit-fp8,moejit-fp8-cached --warmup 3 --reps 10 --no-eager \
  --json "$out/bench.json" >"$out/bench.txt" 2>"$out/bench.log"; echo "bench rc=$?"
for impl in moejit moejit-fp8-cached; do
  timeout 90 python3 dev/gpu/step_profile.py --impl $impl qwen3-30b-a3b >"$out/profile_$impl.txt" 2>&1
  echo "profile $impl rc=$?"
done
echo "all done at $SECONDS s"
tail -4 "$out"/profile_*.txt
cat "$out/bench.txt"
