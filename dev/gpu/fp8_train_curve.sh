#!/usr/bin/env bash
# Issue 31 deliver 5 on an H200 in one call: the FP8 recipe's training curve against bf16
# (dev/fp8_train_curve.py: tiny Qwen3-MoE, 300 steps per recipe, same seed and data). Builds
# only the library (reusing /tmp/moejit-build when an earlier pass made it), then runs the
# script under a time limit (it should take < 90 s: the kernels' NVRTC compiles plus ~2 x 300
# small steps). Logs and fp8_train_curve.json under $OUT. Exit status: the script's (0 within
# the 1 % target, 1 beyond it, 2 setup failure), 124 past the limit.
# usage: [LIMIT=180] [ARGS="--family mixtral"] dev/gpu/fp8_train_curve.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
build_dir=${FP8_TRAIN_BUILD:-/tmp/moejit-build} build_targets="capi/libmoejit.so"
# shellcheck source=dev/gpu/common.sh
. dev/gpu/common.sh  # builds (or reuses) $b; MOEJIT_LIBRARY, PYTHONPATH
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
start=$(date +%s)
# shellcheck disable=SC2086  # ARGS is a list of options
timeout "${LIMIT:-180}" python3 dev/fp8_train_curve.py --json "$out/fp8_train_curve.json" ${ARGS:-} \
    2>&1 | tee "$out/fp8_train_curve.log"
rc=${PIPESTATUS[0]}
echo "fp8_train_curve rc=$rc in $(( $(date +%s) - start )) s"
exit "$rc"
