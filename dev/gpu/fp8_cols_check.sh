#!/usr/bin/env bash
# One H200 call (0.11, fifth session): the fused SwiGLU backward that writes the weight
# gradients' columns itself (fp8_swiglu_backward_quantize per 128-row block), checked and measured:
#   1 build; the suites that hold it (fp8_layer: bit-exact against the five kernels it replaces
#     and the layer against float64; fp8: the weight gradient with pre-quantized operands is the
#     layer's; swiglu, gpt_oss) and the FP8 PyTorch tests, side by side;
#   2 the FP8 layer bench (five shapes, bf16 and the FP8 peer in the same run) and the step
#     profile of qwen3-30b-a3b (FP8 with the weight cache).
# A short table last; logs in $OUT/cols_logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s); final=${OUT:-$PWD/out}; out=/tmp/moejit-cols; rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/cols_logs.tgz" -C "$out" . 2>/dev/null' EXIT
. dev/gpu/common.sh
say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
say built
suite() { timeout "${SUITE_S:-230}" "$b/tests/test_gpu_$1" --report_level=short >"$out/gpu_$1.log" 2>&1; echo "$1 rc=$?" >"$out/gpu_$1.rc"; }
( suite fp8_layer; suite swiglu ) & ( suite fp8 ) & ( suite gpt_oss ) &
( timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_fp8_torch_gpu.py >"$out/pytest.log" 2>&1; echo "pytest rc=$?" >"$out/pytest.rc" ) &
wait; say suites
timeout 170 python3 -m moejit_bench --shapes qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,mid-expert-30b,small-expert-7b \
  --impls moejit,moejit-fp8,moejit-fp8-cached,scaled_grouped_mm --quick --json "$out/fp8_bench.json" >"$out/bench.log" 2>&1; say "bench rc=$?"
timeout 45 python3 dev/gpu/step_profile.py --impl moejit-fp8-cached qwen3-30b-a3b >"$out/prof.log" 2>&1; say "profile rc=$?"
cp "$out"/*.json "$final/" 2>/dev/null
for n in fp8_layer swiglu fp8 gpt_oss; do
  echo "== $(cat "$out/gpu_$n.rc" 2>/dev/null || echo "$n NOTRUN")"; grep -E "failure|error:|test cases|assertions" "$out/gpu_$n.log" | grep -v "caught:" | head -4 | cut -c1-300
done
echo "== $(cat "$out/pytest.rc")"; tail -1 "$out/pytest.log"
grep -vE "^\[|^Running|^$|Warn|warn" "$out/bench.log" | tail -22 | cut -c1-200
grep -vE "Warn|warn" "$out/prof.log" | tail -28 | cut -c1-110
say total
