#!/usr/bin/env bash
# Issue 18's table in one device hold (one warm machine, calls straight after each other, each
# started within the machine's 30 s of idle): the regression suite and both peer sets, moejit
# timed beside each peer. How the 0.10.0 table was made (docs/PERF_LOG.md 0.10.0).
#   phase 1  carry .peers/sonic.*: build; SonicMoE's CuTe DSL compile warm-up (all shapes, both
#            routings) in the background, in its own process session on a copy of the tree (the
#            DSL's file cache under /tmp keeps the kernels for later processes); every GPU
#            suite and the GPU Python tests in front (scripts/gpu_release.sh, SKIP_BENCH=1).
#   phase 2  carry .peers/quack.*-aa and .peers/quack.sha256: stash it; wait for the warm-up
#            (WAIT s, default 300; call again if it is not done); SonicMoE and moejit timed.
#            Carrying .peers/quack.*-ab into a second phase-2 call stashes the rest.
#   phase 3  QuACK (compiled in its own process, before timing) and moejit timed.
# JSON and logs land in $OUT: bench_{sonic,quack}_{topk,dup}.json for scripts/peer_targets.py.
# In the 0.10.0 run the phase-1 call stayed open until its 600 s limit although the script was
# done at 271 s: the background warm-up held a descriptor the device call waits on. It now
# closes every inherited descriptor above 2 first; a later call that left such a child (sleep
# 200) returned at once (0.10.0 session, device call 8).
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
t0=$(date +%s); phase=${1:?usage: $0 1|2|3}
elapsed() { echo $(( $(date +%s) - t0 )); }
say() { echo "[$(elapsed) s] $*"; }
shapes=${SHAPES:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,gpt-oss-120b,small-expert-7b,mid-expert-30b,qwen3-30b-a3b-4k,deepseek-v3-4k}
dup_shapes=${DUP_SHAPES:-qwen3-30b-a3b,small-expert-7b}
timed=(--warmup 3 --reps 10 --no-eager)
warm=/tmp/moejit-peer-warm
case $phase in
1)
  bash scripts/gpu_peers.sh stash sonic || exit 1
  out=/tmp/moejit-session; mkdir -p $out; . scripts/gpu_common.sh; say built
  rm -rf $warm && mkdir -p $warm/tree/.peers && cp -r capi scripts meson.build $warm/tree/ &&
    cp .peers/sonic.sha256 $warm/tree/.peers/
  ( cd $warm/tree && setsid nohup bash -c "
      for fd in /proc/self/fd/*; do n=\${fd##*/}; [ \$n -gt 2 ] && eval \"exec \$n>&-\"; done
      export REUSE_BUILD=1 OUT=$warm BENCH_TIMEOUT=1500
      TAG=topk bash scripts/gpu_peers.sh bench sonic --warmup 1 --reps 1 --no-eager --impls sonicmoe --shapes $shapes
      TAG=dup bash scripts/gpu_peers.sh bench sonic --warmup 1 --reps 1 --no-eager --impls sonicmoe --routing expert0 --shapes $dup_shapes
      echo done >$warm/DONE" >$warm/driver.log 2>&1 </dev/null & )
  say "SonicMoE warm-up started"
  REUSE_BUILD=1 SKIP_BENCH=1 bash scripts/gpu_release.sh
  say "suites done"
  ;;
2)
  ls .peers/quack.tar.xz.part-* >/dev/null 2>&1 && bash scripts/gpu_peers.sh stash quack
  while [ ! -f $warm/DONE ] && [ "$(elapsed)" -lt "${WAIT:-300}" ]; do sleep 5; done
  grep -E '^\[' /tmp/moejit-peers-sonic/bench.log 2>/dev/null | grep -v ': {' | tail -2
  [ -f $warm/DONE ] || { say "warm-up not done: call phase 2 again"; exit 0; }
  cp $warm/*.log "${OUT:-out}"/ 2>/dev/null
  REUSE_BUILD=1 BENCH_TIMEOUT=330 TAG=topk bash scripts/gpu_peers.sh bench sonic "${timed[@]}" \
    --impls moejit,sonicmoe --shapes "$shapes"; say "SonicMoE top-k"
  [ "$(elapsed)" -lt 420 ] && REUSE_BUILD=1 BENCH_TIMEOUT=150 TAG=dup bash scripts/gpu_peers.sh bench sonic \
    "${timed[@]}" --impls moejit,sonicmoe --routing expert0 --shapes "$dup_shapes"; say "SonicMoE expert0"
  ;;
3)
  REUSE_BUILD=1 BENCH_TIMEOUT=380 TAG=topk bash scripts/gpu_peers.sh bench quack "${timed[@]}" \
    --impls moejit,quack --shapes "$shapes"; say "QuACK top-k"
  [ "$(elapsed)" -lt 450 ] && REUSE_BUILD=1 BENCH_TIMEOUT=140 TAG=dup bash scripts/gpu_peers.sh bench quack \
    "${timed[@]}" --impls moejit,quack --routing expert0 --shapes "$dup_shapes"; say "QuACK expert0"
  ;;
*) echo "unknown phase '$phase' (1 | 2 | 3)" >&2; exit 2 ;;
esac
say "phase $phase end"
