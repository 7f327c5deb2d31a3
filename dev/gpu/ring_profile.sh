#!/usr/bin/env bash
# Which GEMMs the store ring slows (the eighth session's ring_check.sh: forward -9 to -16 % on
# deepseek-v3 and its 4k row, backward -7 % on gpt-oss-120b, +2 to +7 % elsewhere): every
# kernel of one step (dev/gpu/step_profile.py) with MOEJIT_STORE_RING=0 and =1, on SHAPES, one
# process per setting. The kernel lists land in PROFILE_OUT (default $OUT: profile_ring0.txt,
# profile_ring1.txt), the comparison table on stdout.
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
t0=$(date +%s); say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
out=${PROFILE_OUT:-${OUT:-$PWD/out}}; mkdir -p "$out"
build_targets=capi/libmoejit.so . dev/gpu/common.sh; say built
shapes=${SHAPES:-deepseek-v3-4k deepseek-v3 gpt-oss-120b}
smi=
trap '[ -n "$smi" ] && kill $smi 2>/dev/null' EXIT
for r in 0 1; do
  # The GPU's SM clock, power and temperature every 100 ms beside each profile (clocks_ring$r.csv):
  # whether the ring's process runs at lower clocks (tenth session: kernels identical in both
  # processes ran up to 5 % slower in the ring's).
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits \
    -lms 100 >"$out/clocks_ring$r.csv" 2>/dev/null & smi=$!
  # shellcheck disable=SC2086  # shapes is a list
  MOEJIT_STORE_RING=$r timeout ${PROFILE_S:-200} python3 dev/gpu/step_profile.py --impl moejit $shapes \
    >"$out/profile_ring$r.txt" 2>&1
  say "ring=$r rc=$?"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null; smi=
done
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def parse(path):
    shapes, cur = {}, None
    for line in open(path):
        m = re.match(r"== (\S+) moejit: step ([\d.]+) ms", line)
        if m:
            cur = shapes.setdefault(m.group(1), {"step": float(m.group(2)), "k": []})
            continue
        m = re.match(r"\s+([\d.]+) us\s+([\d.]+) us\s+(.*)", line)
        if m and cur is not None:
            cur["k"].append((float(m.group(1)), m.group(3)))
    return shapes
a, b = parse(f"{out}/profile_ring0.txt"), parse(f"{out}/profile_ring1.txt")
for r in (0, 1):  # the samples while the GPU was busy (drawing over 150 W)
    busy = []
    try:
        lines = open(f"{out}/clocks_ring{r}.csv").read().splitlines()
    except OSError:
        lines = []
    for line in lines:  # a sample nvidia-smi could not read ([N/A], cut off) is skipped alone
        try:
            clock, power = (float(v) for v in line.split(",")[1:3])
        except ValueError:
            continue
        if power > 150:
            busy.append((clock, power))
    if busy:
        print(f"ring={r}: {len(busy)} busy samples, SM clock mean {sum(c for c, _ in busy) / len(busy):.0f} MHz "
              f"(min {min(c for c, _ in busy):.0f}), power mean {sum(p for _, p in busy) / len(busy):.0f} W")
for shape in a:
    if shape not in b:
        continue
    print(f"== {shape}: step {a[shape]['step']:.3f} -> {b[shape]['step']:.3f} ms")
    for i, ((t0_, n), (t1, _)) in enumerate(zip(a[shape]["k"], b[shape]["k"])):
        if t0_ >= 20:
            print(f"  {i:2d} {t0_:9.1f} {t1:9.1f} us  {t1 / t0_:6.3f}  {n[:60]}")
PY
