#!/usr/bin/env bash
# Issue 28 item 4: is NVRTC's slowdown on many threads inside one process (a lock, the allocator)
# or in the machine (shared cores, memory)? The same warm-up (one spec, bf16, empty caches) as
#   A  one process on core 0              (the CPU cost of the set, no contention)
#   B  one process on all N cores         (what a plan does today: threads)
#   C  N processes at once, one core each (processes: if each takes about A's time, the
#                                          contention is in the process and workers would win)
#   D  N/2 processes on cores 0, 2, 4, .. (SMT siblings or not)
#   B2 B again, last: if B2 is much faster than B, B paid for something the first many-threaded
#      compile meets once (a VM growing its memory on first touch), not for threads as such
# (The library's compile threads follow the process's affinity mask, so taskset sets them.)
# Prints wall and CPU (user + sys) seconds per process. Needs the build ($b from common.sh or
# WARMUP=path). Usage: bash dev/gpu/compile_contention.sh [N] [SPEC]
set -u
n=${1:-$(nproc)}; spec=${2:-2048,768,128,8}
warmup=${WARMUP:-${b:-/tmp/moejit-build}/tools/moejit-warmup}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
one() {  # one TAG CORES: a warm-up into an empty cache on CORES; prints "TAG wall user sys"
  local TIMEFORMAT="$1 %R %U %S"
  { time taskset -c "$2" "$warmup" --spec "$spec" --arch sm_90a --dtype bf16 --cache-dir "$tmp/$1" >/dev/null 2>&1; } 2>&1
}
many() {  # many TAG COUNT STRIDE: COUNT one-core warm-ups at once (cores 0, STRIDE, ..)
  local i pids=()
  for ((i = 0; i < $2; ++i)); do one "$1.$i" $(( i * $3 )) >"$tmp/$1.$i.t" & pids+=($!); done
  wait "${pids[@]}"
  cat "$tmp/$1".*.t | awk -v t="$1" '{w += $2; c += $3 + $4; if ($2 > m) m = $2}
    END {printf "%s: %d processes, slowest wall %.2f s, mean wall %.2f s, mean CPU %.2f s\n", t, NR, m, w / NR, c / NR}'
}
one A 0 | awk '{printf "A: 1 process, 1 core: wall %.2f s, CPU %.2f s\n", $2, $3 + $4}'
one B "0-$(( n - 1 ))" | awk -v n="$n" '{printf "B: 1 process, %d cores: wall %.2f s, CPU %.2f s\n", n, $2, $3 + $4}'
many C "$n" 1
many D $(( n / 2 )) 2
one B2 "0-$(( n - 1 ))" | awk -v n="$n" '{printf "B2: 1 process, %d cores, again: wall %.2f s, CPU %.2f s\n", n, $2, $3 + $4}'
echo "kernels of one warm-up: $(ls "$tmp"/A/*/*.cubin 2>/dev/null | wc -l)"
