#!/usr/bin/env bash
# The consuming backward (consume_saved, 0.12) on one H200, in one call: build; the GPU suites
# that hold it (moe_layer: consuming_backward_matches_the_keeping_one and every layer case;
# bad_input: the field and the size query; plan_launch, gpt_oss) and the GPU Python tests of
# the custom ops (the default path now consumes saved: opcheck, compile, CUDA graphs,
# main_grad, transformers, the retain_graph refusal); then the layer bench (bf16 and FP8
# cached, peak memory) on every reference shape. Logs packed into one archive under $OUT
# (a call returns at most 8 files); the short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
final=${OUT:-$PWD/out}; out=/tmp/moejit-consume; rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/consume_logs.tgz" -C "$out" . ; cp "$out"/bench.txt "$final"/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
. dev/gpu/common.sh
echo "built at $SECONDS s"
pids=()
for group in "moe_layer" "bad_input plan_launch gpt_oss"; do
  ( for t in $group; do timeout 300 $b/tests/test_gpu_$t --report_level=short >"$out/gpu_$t.log" 2>&1; echo "$t rc=$?" >"$out/gpu_$t.rc"; done ) &
  pids+=($!)
done
( timeout 300 python3 -m pytest -q tests/python/test_torch_op_gpu.py tests/python/test_torch_gpu.py \
    tests/python/test_torch_op_gated_gpu.py tests/python/test_transformers_gpu.py >"$out/pytest.log" 2>&1
  echo "pytest rc=$?" >"$out/pytest.rc" ) &
pids+=($!)
wait "${pids[@]}"
for t in moe_layer bad_input plan_launch gpt_oss; do
  echo "== $(cat $out/gpu_$t.rc)"; grep -E "error|failure|test cases|assertions|checks passed|\*\*\*" "$out/gpu_$t.log" | grep -v "caught:" | head -6
done
grep -E "consuming-vs-keeping" "$out/gpu_moe_layer.log" | head -8
echo "== $(cat $out/pytest.rc)"; grep -E "^(FAILED|ERROR) " "$out/pytest.log" | head -12; tail -1 "$out/pytest.log"
echo "suites done at $SECONDS s"
timeout 240 python3 -m moejit_bench --impls moejit,moejit-fp8-cached --warmup 3 --reps 10 --no-eager \
  --json "$out/bench.json" >"$out/bench.txt" 2>"$out/bench.log"; echo "bench rc=$?"
for impl in moejit moejit-fp8-cached; do
  timeout 90 python3 dev/gpu/step_profile.py --impl $impl qwen3-30b-a3b >"$out/profile_$impl.txt" 2>&1
  echo "profile $impl rc=$?"; tail -3 "$out/profile_$impl.txt"
done
echo "all done at $SECONDS s"
cat "$out/bench.txt"
