#!/usr/bin/env bash
# A short GPU probe: build only the named test targets in a fresh folder and run each with a
# timeout, logs under $OUT. Usage: dev/gpu/probe.sh "<target> [args...]" ...
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}; mkdir -p "$out"
b=/tmp/moejit-build; export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
[ -f $b/build.ninja ] || meson setup $b --buildtype=release >"$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }
targets=(); for spec in "$@"; do targets+=("tests/${spec%% *}"); done
ninja -C $b "${targets[@]}" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
for spec in "$@"; do
  name=${spec%% *}; log="$out/${name}.log"
  timeout ${PROBE_TIMEOUT:-240} $b/tests/$spec >"$log" 2>&1; rc=$?
  echo "== $spec rc=$rc"; grep -E "error|failure|passed|failed|cache:|warmup|\[" "$log" | grep -v "^\s*$" | head -${PROBE_LINES:-25}
done
