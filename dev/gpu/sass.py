#!/usr/bin/env python3
"""Counts SASS instruction kinds in moejit's cached cubins (cuobjdump -sass), per kernel family.

  python3 dev/gpu/sass.py CACHE_DIR [LIMIT] [NAME_PART]   (e.g. $MOEJIT_CACHE_DIR after a GPU run;
  NAME_PART: only entries whose file name (the kernel name) holds it, e.g. _ga_ for the A-gathering kernels)
Each cache entry is a header + a cubin; the cubin starts at the ELF magic.
"""
import collections
import pathlib
import subprocess
import sys
import tempfile

root = pathlib.Path(sys.argv[1])
LIMIT = int(sys.argv[2]) if len(sys.argv) > 2 else 4  # kernels per family
PART = sys.argv[3].encode() if len(sys.argv) > 3 else b""
kinds = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDSM", "SYNCS", "LDL", "STL")
totals = collections.Counter()
for entry in sorted(root.rglob("*")):
    if not entry.is_file():
        continue
    data = entry.read_bytes()
    at = data.find(b"\x7fELF")
    if at < 0 or b"group_gemm" not in data or PART.decode() not in entry.name:
        continue
    family = "sm90" if b"_sm90" in data else "mma_sync"
    if totals[family + " kernels"] >= LIMIT:
        continue
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(data[at:])
        f.flush()
        sass = subprocess.run(["/usr/local/cuda/bin/cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout
    counts = {k: sum(line.split()[1:2] == [k] or f" {k}." in line or f" {k} " in line for line in sass.splitlines())
              for k in kinds}
    totals[family + " kernels"] += 1
    for k, v in counts.items():
        totals[f"{family} {k}"] += v
for key in sorted(totals):
    print(f"{key:24s} {totals[key]}")
