#!/usr/bin/env bash
# The portable wheel as a pip user gets it (CPU is enough): packaging/build_wheel.sh's wheel
# (or the one given) installed into a new venv that sees the system's packages (torch), then
#  - tests/install/check_wheel.py on it (tag, stripped, symbol versions, contents);
#  - python -m moejit.warmup and the moejit-warmup command run the shipped tool;
#  - `import moejit.warmup` leaves moejit.warmup(context, ...) callable;
#  - tests/python/test_nvrtc_rule.py against the installed library and tool: the NVRTC rule, and
#    a cache warmed by the wheel's moejit-warmup is complete for a process that imported torch
#    first, with JIT off.
# Usage: test_wheel.sh [WHEEL]   (PYTHON: the interpreter for the venv, default python3)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
count_entries() { { find "$1" -name '*.cubin' 2>/dev/null || true; } | wc -l; }
wheel=${1:-}
if [[ -z $wheel ]]; then
  wheel=$("$src/packaging/build_wheel.sh" | tail -1)
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moejit-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset MOEJIT_LIBRARY MOEJIT_NVRTC MOEJIT_WARMUP

"$python" "$src/tests/install/check_wheel.py" "$wheel" || fail "check_wheel.py $wheel"
"$python" -m venv --system-site-packages "$tmp/venv"
py=$tmp/venv/bin/python
"$py" -m pip install --disable-pip-version-check --no-deps --force-reinstall "$wheel" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "pip install $wheel"; }
cd "$tmp"  # the installed package, not the checkout's
pkg=$("$py" -c 'import os, moejit; print(os.path.dirname(moejit.__file__))')
[[ $pkg == "$tmp"/venv/* ]] || fail "moejit imported from $pkg, not the venv"

"$py" -m moejit.warmup --version | tee "$tmp/version.txt"
grep -q "NVRTC" "$tmp/version.txt" || fail "python -m moejit.warmup --version"
"$tmp/venv/bin/moejit-warmup" --list-presets >/dev/null || fail "moejit-warmup --list-presets"
set +e; "$py" -m moejit.warmup --no-such-option 2>/dev/null; rc=$?; set -e
[[ $rc == 2 ]] || fail "python -m moejit.warmup --no-such-option: exit $rc, expected the tool's 2"
"$py" - <<'PY' || fail "moejit.warmup callable after import moejit.warmup"
import moejit, moejit.warmup
assert callable(moejit.warmup), moejit.warmup
with moejit.Context(compile_only=True, arch="sm_90a", cache_dir="", jit="off", log=False) as ctx:
    try:
        moejit.warmup(ctx, dtype="bfloat16", hidden_size=256, intermediate_size=128, num_experts=4, top_k=2)
    except moejit.errors.JitDisabledError:
        pass  # reached the library: the call went through
print("moejit.warmup: callable after import moejit.warmup")
PY
# The prebuilt tier (a wheel built with -Dprebuilt_kernels=true): found before compiling, needs
# no NVRTC, and nothing a user does writes into it.
tier=$(ls -d "$pkg"/moejit-kernels/*/ 2>/dev/null | head -1 || true)
if [[ -n $tier ]]; then
  presets=$(sed -n 's/^presets //p' "$tier/STAMP" | tr ',' ' ')
  before=$(cd "$tier" && ls -l --time-style=+%s.%N)
  args=(--arch sm_90a --check --cache-dir "$tmp/user-cache")
  for p in $presets; do args+=(--preset "$p"); done
  # JIT off, an empty user cache and no NVRTC at all: every kernel must come from the tier.
  MOEJIT_NVRTC=/nonexistent/libnvrtc.so.13 "$tmp/venv/bin/moejit-warmup" "${args[@]}" >"$tmp/check.log" 2>&1 ||
    { tail -20 "$tmp/check.log"; fail "moejit-warmup --check against the prebuilt tier (no NVRTC)"; }
  # A tier others can write is not trusted (whoever writes it runs code on the GPU): refused,
  # with a warning, so the same check finds nothing.
  chmod g+w "$tier"
  set +e
  MOEJIT_NVRTC=/nonexistent/libnvrtc.so.13 "$tmp/venv/bin/moejit-warmup" "${args[@]}" --verbose >"$tmp/refused.log" 2>&1
  rc=$?
  set -e
  chmod g-w "$tier"
  [[ $rc != 0 ]] || fail "a group-writable prebuilt tier was used"
  grep -q "prebuilt kernels in .* are not used" "$tmp/refused.log" || { tail -5 "$tmp/refused.log"; fail "no warning for a group-writable tier"; }
  # JIT on with a user cache: tier hits publish nothing; a shape outside the tier compiles into
  # the user cache only.
  "$tmp/venv/bin/moejit-warmup" --arch sm_90a --cache-dir "$tmp/user-cache" --preset "${presets%% *}" \
    >"$tmp/warm.log" 2>&1 || { tail -20 "$tmp/warm.log"; fail "moejit-warmup of a prebuilt preset"; }
  grep "summary:" "$tmp/warm.log"
  user=$(count_entries "$tmp/user-cache")
  [[ $user == 0 ]] || fail "kernels found in the prebuilt tier were published to the user cache ($user)"
  "$tmp/venv/bin/moejit-warmup" --arch sm_90a --cache-dir "$tmp/user-cache" --dtype bf16 --spec 256,128,4,2 \
    >"$tmp/warm.log" 2>&1 || { tail -20 "$tmp/warm.log"; fail "moejit-warmup of a shape outside the tier"; }
  grep "summary:" "$tmp/warm.log"
  after=$(cd "$tier" && ls -l --time-style=+%s.%N)
  [[ $before == "$after" ]] || fail "the prebuilt tier changed"
  user=$(count_entries "$tmp/user-cache")
  [[ $user -gt 0 ]] || fail "a shape outside the tier was not cached in the user cache"
  echo "prebuilt tier: $(ls "$tier" | grep -c cubin) kernels ($presets), found with no NVRTC; $user compiled into the user cache, the tier unchanged"
fi

MOEJIT_LIBRARY=$pkg/libmoejit.so MOEJIT_WARMUP=$pkg/moejit-warmup \
  "$py" -m pytest -q -p no:cacheprovider "$src/tests/python/test_nvrtc_rule.py" || fail "test_nvrtc_rule.py with the wheel"
echo "wheel test: ok ($(basename "$wheel"))"
