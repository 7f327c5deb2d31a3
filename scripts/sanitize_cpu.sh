#!/usr/bin/env bash
# Builds the CPU test suite with -fsanitize=address,undefined (-fno-sanitize-recover=all: the
# first UB report aborts) into its own folder and runs it: zero sanitizer reports, or it fails.
# Only the targets the `cpu` suite needs are built (no GPU test executables), at -O1.
# usage: scripts/sanitize_cpu.sh [BUILD_DIR]   (default build-san)
# MOEJIT_SANITIZE_SKIP="name ...": cpu tests left out of this pass (and not built), e.g. the
# NVRTC-bound ones (gemm gemm_sm90 routing swiglu warmup_cache: most of their time is NVRTC,
# which is not instrumented) when CI time is short. Default: none, the whole cpu suite.
# Suppressions: scripts/lsan.supp, third-party libraries only (none needed so far).
set -euo pipefail
cd "$(dirname "$0")/.."
san=${1:-build-san}
if [ ! -f "$san/build.ninja" ]; then
    meson setup "$san" --buildtype=plain -Doptimization=1 -Ddebug=true -Db_ndebug=false \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args=-fno-sanitize-recover=all -Dcpp_args=-fno-sanitize-recover=all \
        -Dc_link_args=-fno-sanitize-recover=all -Dcpp_link_args=-fno-sanitize-recover=all >/dev/null
else
    # An existing folder may predate a change of meson.build (the version is in the library's
    # file name): regenerate before the introspection names the targets.
    ninja -C "$san" build.ninja >/dev/null
fi
# The files the cpu suite's tests run or depend on, from Meson's introspection.
plan=$(python3 - "$san" "${MOEJIT_SANITIZE_SKIP:-}" <<'PY'
import json, os, subprocess, sys
b = os.path.abspath(sys.argv[1])
skip = set(sys.argv[2].split())
intro = lambda what: json.loads(subprocess.check_output(['meson', 'introspect', b, what]))
by_id = {t['id']: t for t in intro('--targets')}
out, names = set(), []
for t in intro('--tests'):
    if 'cpu' not in t['suite'] and not any(s.endswith(':cpu') for s in t['suite']):
        continue
    if t['name'] in skip:
        continue
    names.append(t['name'])
    files = [f for d in t.get('depends', []) if d in by_id for f in by_id[d]['filename']]
    files += [c for c in t['cmd'] + (t.get('args') or []) if isinstance(c, str)]
    files = [os.path.normpath(f) for f in files]
    out.update(os.path.relpath(f, b) for f in files if f.startswith(b + '/'))
print(' '.join(names))
print(' '.join(sorted(out)))
PY
)
names=$(echo "$plan" | sed -n 1p)
targets=$(echo "$plan" | sed -n 2p)
start=$(date +%s)
# shellcheck disable=SC2086
ninja -C "$san" $targets
built=$(date +%s)
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}
# LeakSanitizer's exit-time tracer sometimes crashes by itself ("Tracer caught signal 11 ...
# LeakSanitizer has encountered a fatal error": google/sanitizers#1353, no leak report). A test
# that failed only that way runs once more, alone; any other failure, or that one twice, fails.
tracer_crashes() {
    python3 - "$san/meson-logs/testlog.json" <<'PY'
import json, sys
failed, crashed = [], []
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t.get("result") in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"):
        failed.append(t["name"])
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        if ("Tracer caught signal" in out and "LeakSanitizer has encountered a fatal error" in out
                and "ERROR: LeakSanitizer: detected memory leaks" not in out):
            crashed.append(t["name"])
print(" ".join(crashed) if failed and crashed == failed else "")
PY
}
rc=0
# shellcheck disable=SC2086
meson test -C "$san" --no-rebuild --print-errorlogs --num-processes "${MOEJIT_TEST_JOBS:-2}" --suite cpu $names || rc=$?
if [ "$rc" != 0 ]; then
    again=$(tracer_crashes)
    if [ -n "$again" ]; then
        echo "sanitizer pass: only LeakSanitizer's tracer crashed (no report) in: $again; running those once more"
        rc=0
        # shellcheck disable=SC2086
        meson test -C "$san" --no-rebuild --print-errorlogs --num-processes 1 $again || rc=$?
    fi
fi
echo "sanitizer pass: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
exit "$rc"
