#!/usr/bin/env bash
# The layer benchmark against one fused peer set (SonicMoE or QuACK), on the device, from the
# pieces bench/peers_pack.sh made (.peers/SET.tar.xz.part-*, .peers/SET.sha256; gitignored,
# carried). A call carries at most 64 MiB, so a set of two pieces takes two calls straight
# after each other (the machine keeps /tmp while it stays warm):
#   bash dev/gpu/peers.sh stash SET                 # keep the carried pieces in /tmp
#   bash dev/gpu/peers.sh unpack SET                # join, check and unpack only (once per machine)
#   bash dev/gpu/peers.sh bench SET [bench args]    # join, check, unpack, build, benchmark
# bench runs `python3 -m moejit_bench [bench args] --json $OUT/bench_SET[_TAG].json` with the
# set's site-packages on PYTHONPATH (TAG=... names the file when one set runs twice). The set
# lands under a path containing /site-packages/: quack >= 0.5 skips its epilogue-closure check
# only there (elsewhere every GEMM raises a ContextVar TypeError).
set -uo pipefail
cd "$(dirname "$0")/../.."
mode=${1:?usage: $0 stash|bench SET [bench args]}; set_name=${2:?missing SET (sonic | quack)}; shift 2
stash=/tmp/moejit-peer-stash/$set_name
carried=$(ls .peers/"$set_name".tar.xz.part-* 2>/dev/null)
if [ "$mode" = stash ]; then
  [ -n "$carried" ] || { echo "no .peers/$set_name.tar.xz.part-* carried" >&2; exit 1; }
  mkdir -p "$stash" && cp $carried "$stash"/ && ls -l "$stash"
  cp .peers/"$set_name".sha256 "$stash.sha256" 2>/dev/null || true  # so a later call may carry no piece
  exit 0
fi
[ "$mode" = bench ] || [ "$mode" = unpack ] || { echo "unknown mode '$mode' (stash | unpack | bench)" >&2; exit 2; }
# Each TAG its own log folder: processes of one set may run side by side (the phase-1 warm-up).
final=${OUT:-$PWD/out}; out=/tmp/moejit-peers-$set_name${TAG:+-$TAG}; rm -rf "$out"; mkdir -p "$out" "$final"
root=/tmp/moejit-peers/$set_name
if [ ! -f "$root/site-packages/moejit-peer-set-$set_name.txt" ]; then  # once per warm machine
  pieces=$( (ls "$stash"/ 2>/dev/null; for f in $carried; do basename "$f"; done) | sort -u)
  want=$(cat .peers/"$set_name".sha256 2>/dev/null || cat "$stash.sha256" 2>/dev/null) ||
    { echo "no .peers/$set_name.sha256 carried or stashed" >&2; exit 1; }
  archive=/tmp/moejit-peers/$set_name.tar.xz; mkdir -p /tmp/moejit-peers
  for p in $pieces; do cat "$stash/$p" 2>/dev/null || cat ".peers/$p"; done >"$archive"
  got=$(sha256sum <"$archive" | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "peer set $set_name: pieces [$pieces] give sha256 $got, want $want (a piece missing?)" >&2; exit 1; }
  rm -rf "$root"; mkdir -p "$root"
  xz -dc "$archive" | tar xf - -C "$root" || exit 1
  rm -rf "$stash" "$stash.sha256" "$archive"
fi
site=$root/site-packages
[ "$mode" = unpack ] && { echo "peer set $set_name unpacked in $root"; exit 0; }
dsl=$(ls -d "$site"/nvidia_cutlass_dsl/python_packages "$site"/nvidia_cutlass_dsl/dsl_packages 2>/dev/null | tr '\n' ':')
. dev/gpu/common.sh
export PYTHONPATH=$PYTHONPATH:$site:${dsl%:}
echo "peer set $set_name: $(tr '\n' ' ' <"$site/moejit-peer-set-$set_name.txt")"
tag=${TAG:+_$TAG}
timeout ${BENCH_TIMEOUT:-540} python3 -m moejit_bench "$@" --json "$final/bench_$set_name$tag.json" \
  >"$out/bench.log" 2>&1
echo "== bench $set_name$tag rc=$?"
cp "$out/bench.log" "$final/bench_$set_name$tag.log"
grep -E "peer |skipped|WRONG|error|Error" "$out/bench.log" | grep -v '^\[.*\] .*: {' | head -20
grep -v '^\[' "$out/bench.log" | tail -40
exit 0
