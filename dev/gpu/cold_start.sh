#!/usr/bin/env bash
# Issue 28 item 4: the cold start of a new shape (fresh process, empty cache folder) for
# qwen3-30b-a3b and deepseek-v3 at T=8192, on all cores and under taskset -c 0: interpreter,
# torch/CUDA init, import, context, plan creation (per kernel: NVRTC wall and CPU, module load),
# first forward, first backward, total. dev/gpu/cold_start.py says what each line means.
# usage: [TOKENS=8192] [SHAPES=qwen3-30b-a3b,deepseek-v3] dev/gpu/cold_start.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
. dev/gpu/common.sh  # builds (or reuses) $b; MOEJIT_LIBRARY, PYTHONPATH
nproc; python3 -c "import torch; print('torch', torch.__version__)"
timeout 560 python3 dev/gpu/cold_start.py --shapes "${SHAPES:-qwen3-30b-a3b,deepseek-v3}" \
    --tokens "${TOKENS:-8192}" --one-core --json "$out/cold_start.json" 2>&1 | tee "$out/cold_start.log"
exit "${PIPESTATUS[0]}"
