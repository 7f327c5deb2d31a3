#!/usr/bin/env bash
# Issue 18's table in one device hold (one warm machine, calls straight after each other, each
# started within the machine's 30 s of idle): the regression suite and both peer sets, moejit
# timed beside each peer. How the 0.10.0 table was made (docs/PERF_LOG.md 0.10.0).
#   phase 1  carry .peers/sonic.*: build; SonicMoE's CuTe DSL compile warm-up (all shapes, both
#            routings) in the background, in its own process session on a copy of the tree (the
#            DSL's file cache under /tmp keeps the kernels for later processes); every GPU
#            suite and the GPU Python tests in front (dev/gpu/release_suites.sh, SKIP_BENCH=1).
#   phase 2  carry .peers/quack.*-aa and .peers/quack.sha256: stash it; wait for the warm-up
#            (WAIT s, default 240; call again if it is not done); SonicMoE and moejit timed,
#            once per warm machine (FP8_SHAPES: then the FP8 table's run on those shapes,
#            SonicMoE beside moejit's bf16 and FP8 layers and the FP8 peer). Carrying .peers/quack.*-ab into a second phase-2 call
#            stashes the rest (and times SonicMoE if the first call only waited).
#   phase 3  QuACK (compiled in its own process, before timing) and moejit timed.
# JSON and logs land in $OUT: bench_{sonic,quack}_{topk,dup}.json for bench/peer_targets.py.
# In the 0.10.0 run the phase-1 call stayed open until its 600 s limit although the script was
# done at 271 s: the background warm-up held a descriptor the device call waits on. It closes
# every inherited descriptor above 2 first, but the subshell that forked it still held stdout
# until the eighth session (see the warm-up's start below). In the 0.11 fifth session the warm-up
# ended at once with rc 127 (its copy of the tree lacked dev/, python/ and bench/ since dev/gpu
# moved), so phase 2 compiled SonicMoE inside its timed runs and ran out of time; the copy now
# takes them, and phase 1 reports a warm-up that already ended (not yet run on a device).
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
t0=$(date +%s); phase=${1:?usage: $0 1|2|3}
elapsed() { echo $(( $(date +%s) - t0 )); }
say() { echo "[$(elapsed) s] $*"; }
shapes_arg=${SHAPES:+--shapes $SHAPES}  # default: the benchmark's own, every reference shape
dup_shapes=${DUP_SHAPES:-qwen3-30b-a3b,small-expert-7b}
warm=/tmp/moejit-peer-warm
left() { echo $(( 570 - $(elapsed) )); }  # seconds a bench may still take inside the 600 s call
# One timed benchmark process: moejit (and VARIANTS, e.g. moejit-ring: moejit_bench's
# configuration variants, each in its own context) beside PEER (of peer set SET), named TAG, its timeout what
# the call has left less RESERVE seconds (kept for a run after it); the rest: routing and shapes.
timed_bench() {
  local set=$1 peer=$2 tag=$3 reserve=$4; shift 4
  local variants=${VARIANTS:-}; [ "$tag" = fp8 ] && variants=  # the FP8 table's run: no variants
  REUSE_BUILD=1 BENCH_TIMEOUT=$(( $(left) - reserve )) TAG=$tag bash dev/gpu/peers.sh bench "$set" \
    --warmup 3 --reps 10 --no-eager --impls "moejit${variants:+,$variants},$peer" "$@"
}
# The duplicate-route rows (every route to expert 0) when more than MIN seconds are left.
dup_bench() {
  local set=$1 peer=$2 min=$3
  if [ "$(left)" -gt "$min" ]; then
    timed_bench "$set" "$peer" dup 0 --routing expert0 --shapes "$dup_shapes"; say "$peer expert0"
  else say "$peer expert0 skipped: too little of the call left"; fi
}
# Both phases take the configuration dev/gpu/ring_check.sh chose earlier in this hold, if it ran
# (MOEJIT_STORE_RING, MOEJIT_FUSE_SWIGLU): the suites of phase 1 check what phase 2 times.
if [ -f /tmp/moejit-ring/decision.env ]; then
  . /tmp/moejit-ring/decision.env; say "ring_check's choice: $(tr '\n' ' ' </tmp/moejit-ring/decision.env)"
fi
case $phase in
1)
  bash dev/gpu/peers.sh stash sonic || exit 1
  out=/tmp/moejit-session; mkdir -p $out; . dev/gpu/common.sh; say built
  bash dev/gpu/peers.sh unpack sonic || exit 1  # once, before the parallel warm-up processes
  # STRESS_FIRST=1: the stress suite now, before anything else allocates device memory (else
  # phase 2 runs it).
  if [ -n "${STRESS_FIRST:-}" ]; then
    timeout 150 $b/tests/test_gpu_stress --report_level=short >"${OUT:-out}/gpu_stress.log" 2>&1; say "stress rc=$?"
    touch /tmp/moejit-stress-done; grep -E "error|failure|test cases|assertions|\*\*\*|mismatch|plans" "${OUT:-out}/gpu_stress.log" | head -6
  fi
  rm -rf $warm /tmp/moejit-sonic-timed && mkdir -p $warm/tree/.peers &&
    cp -r dev python bench capi scripts meson.build $warm/tree/ && cp .peers/sonic.sha256 $warm/tree/.peers/ ||
    { echo "could not copy the tree for the warm-up" >&2; exit 1; }
  # The warm-up's logs and JSON are tagged warm_* so the timed runs never overwrite them; DONE
  # holds the benches' exit codes. One process per group of shapes (WARM_GROUPS, space-separated,
  # shapes of a group comma-separated), all at once: one process for every shape compiled four
  # of eight shapes in 580 s (0.12 session), the DSL's compiles being single-threaded. Then the
  # duplicate-route shapes and SonicMoE as shipped (tuned, TUNED_SHAPES) on the same terms. The
  # stress suite runs in phase 2 instead: its device-memory check cannot share the device with
  # processes that allocate.
  groups=${WARM_GROUPS:-qwen3-30b-a3b mixtral-8x7b gpt-oss-120b small-expert-7b mid-expert-30b qwen3-30b-a3b-4k deepseek-v3,deepseek-v3-4k}
  tuned=${TUNED_SHAPES-qwen3-30b-a3b,small-expert-7b}
  # The subshell execs the warm-up: a subshell that forked it instead would wait for it holding
  # this script's stdout, and the device call (or a pipe such as `| tail`) waits for that to
  # close: 0.13's phase-1 call ended 220 s after its script, and a `| tail -60` call of the
  # eighth session ran into its 600 s limit and lost all its output (checked here with a sleep
  # in place of the warm-up: 6.0 s before, 0.005 s after).
  ( cd $warm/tree || exit 1; exec setsid nohup bash -c "
      for fd in /proc/self/fd/*; do n=\${fd##*/}; [ \$n -gt 2 ] && eval \"exec \$n>&-\"; done
      export REUSE_BUILD=1 OUT=$warm BENCH_TIMEOUT=1500
      warm() { local tag=\$1; shift; TAG=\$tag bash dev/gpu/peers.sh bench sonic --warmup 1 --reps 1 --no-eager \"\$@\" >$warm/\$tag.driver.log 2>&1; echo \"\$tag rc=\$?\" >>$warm/RCS; }
      i=0; for g in $groups; do i=\$((i + 1)); warm warm_topk\$i --impls sonicmoe --shapes \$g & done
      warm warm_dup --impls sonicmoe --routing expert0 --shapes $dup_shapes &
      [ -n \"$tuned\" ] && warm warm_tuned --impls sonicmoe-tuned --shapes $tuned &
      wait; cp $warm/RCS $warm/DONE" >$warm/driver.log 2>&1 </dev/null ) >/dev/null 2>&1 </dev/null &
  say "SonicMoE warm-up started"
  REUSE_BUILD=1 SKIP_BENCH=1 SKIP_SUITES=stress bash dev/gpu/release_suites.sh  # ONLY_SUITES, SKIP_PYTEST: see there
  say "suites done (stress: phase 2)"
  # PEAKS=1: moejit alone on every shape, for its memory (its times are not a result: the
  # warm-up shares the machine).
  if [ -n "${PEAKS:-}" ]; then
    ( out=/tmp/moejit-session REUSE_BUILD=1; . dev/gpu/common.sh >/dev/null
      timeout 200 python3 -m moejit_bench --warmup 1 --reps 2 --no-eager --impls moejit $shapes_arg \
        --json "${OUT:-out}/peaks_moejit.json" >"${OUT:-out}/peaks_moejit.log" 2>&1; echo "peaks rc=$?" )
    grep -v '^\[' "${OUT:-out}/peaks_moejit.log" | tail -12
  fi
  # WAIT_WARM=S: wait for the warm-up up to S seconds into the call.
  while [ -n "${WAIT_WARM:-}" ] && [ ! -f $warm/DONE ] && [ "$(elapsed)" -lt "$WAIT_WARM" ]; do sleep 5; done
  say "warm-up processes ended: $(tr '\n' ' ' <$warm/RCS 2>/dev/null)"
  # The warm-up's logs so far, in case this machine is gone before phase 2 (its stdout is not the call's).
  tar czf "${OUT:-out}/warm_logs_phase1.tgz" -C $warm --exclude tree . 2>/dev/null
  ;;
2)
  ls .peers/quack.tar.xz.part-* >/dev/null 2>&1 && bash dev/gpu/peers.sh stash quack
  [ -f /tmp/moejit-sonic-timed ] && { say "SonicMoE already timed on this machine"; exit 0; }
  while [ ! -f $warm/DONE ] && [ "$(elapsed)" -lt "${WAIT:-240}" ]; do sleep 5; done
  say "warm-up processes ended: $(tr '\n' ' ' <$warm/RCS 2>/dev/null)"
  [ -f $warm/DONE ] || { say "warm-up not done: call phase 2 again"; exit 0; }
  say "warm-up done: $(tr '\n' ' ' <$warm/DONE)"; tar czf "${OUT:-out}/warm_logs.tgz" -C $warm --exclude tree . 2>/dev/null
  # The stress suite, left out of phase 1 (device-memory check), now that nothing else allocates.
  if [ ! -f /tmp/moejit-stress-done ]; then
    ( out=/tmp/moejit-session REUSE_BUILD=1; . dev/gpu/common.sh >/dev/null
      timeout 150 $b/tests/test_gpu_stress --report_level=short >"${OUT:-out}/gpu_stress.log" 2>&1; echo "stress rc=$?" )
    touch /tmp/moejit-stress-done; grep -E "error|failure|test cases|assertions|\*\*\*|mismatch|plans" "${OUT:-out}/gpu_stress.log" | head -6
  fi
  timed_bench sonic sonicmoe topk "$([ -n "${FP8_SHAPES:-}" ] && echo 230 || echo 0)" $shapes_arg; say "sonicmoe top-k"
  touch /tmp/moejit-sonic-timed
  # FP8_SHAPES=...: the FP8 table's run (issue 31), SonicMoE beside moejit's bf16 and FP8 layers
  # and the FP8 peer, when more than 150 s are left.
  if [ -n "${FP8_SHAPES:-}" ] && [ "$(left)" -gt 150 ]; then
    timed_bench sonic moejit-fp8,moejit-fp8-cached,scaled_grouped_mm,sonicmoe fp8 60 --shapes "$FP8_SHAPES"
    say "FP8 with SonicMoE"
  fi
  dup_bench sonic sonicmoe 120
  # SonicMoE as shipped (tuned=True: its autotuned configs, compiled in the warm-up) on TUNED_SHAPES.
  tuned=${TUNED_SHAPES-qwen3-30b-a3b,small-expert-7b}
  if [ -n "$tuned" ] && [ "$(left)" -gt 100 ]; then
    timed_bench sonic sonicmoe-tuned tuned 0 --shapes "$tuned"; say "sonicmoe-tuned"
  else say "sonicmoe-tuned skipped"; fi
  # PROFILE=1: the bf16 step's kernels (dev/gpu/step_profile.py) when the call has time left;
  # with RING_PROFILE=1 as well: the same step with MOEJIT_STORE_RING=0 and then =1 (before and after the
  # ring, whatever ring_check.sh chose), each in half of what is left.
  profile_step() {  # FILE SECONDS [VAR=VALUE]
    local file=$1 s=$2; shift 2
    [ "$s" -ge 20 ] || { say "profile $file skipped: ${s} s left"; return; }
    ( out=/tmp/moejit-session REUSE_BUILD=1; . dev/gpu/common.sh >/dev/null
      env "$@" timeout $s python3 dev/gpu/step_profile.py --impl moejit --host qwen3-30b-a3b >"${OUT:-out}/$file" 2>&1 )
    say "profile $file rc=$?"; tail -3 "${OUT:-out}/$file"
  }
  if [ -n "${PROFILE:-}" ] && [ "$(left)" -gt 60 ]; then
    if [ -n "${RING_PROFILE:-}" ]; then
      profile_step profile_bf16_qwen3.txt $(( ($(left) - 20) / 2 )) MOEJIT_STORE_RING=0
      profile_step profile_bf16_qwen3_ring.txt $(( $(left) - 10 )) MOEJIT_STORE_RING=1
    else
      profile_step profile_bf16_qwen3.txt $(( $(left) - 20 ))
    fi
  fi
  ;;
3)
  timed_bench quack quack topk 130 $shapes_arg; say "quack top-k"
  dup_bench quack quack 100
  ;;
*) echo "unknown phase '$phase' (1 | 2 | 3)" >&2; exit 2 ;;
esac
say "phase $phase end"
