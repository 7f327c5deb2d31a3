#!/usr/bin/env python3
"""Every reference the repository makes to its own design and files resolves: each
"DESIGN.md §N" (in code, comments and docs) names a section heading of docs/DESIGN.md, and each
repository path written in a tracked file (under src/, tests/, docs/ and the rest) exists (a
generated file counts when its .in template exists). Usage: test_doc_refs.py SOURCE_ROOT"""
import os
import re
import subprocess
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
try:
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
except (OSError, subprocess.CalledProcessError):
    print("SKIP: not a git checkout (the tracked files are what is checked)")
    sys.exit(77)
files = [f for f in files if not f.startswith("tests/abi/moejit_0_1/")]  # a frozen old header

with open(os.path.join(root, "docs", "DESIGN.md"), encoding="utf-8") as f:
    sections = set(re.findall(r"^#{2,4} ([0-9]+(?:\.[0-9]+[a-z]?)?)[ .]", f.read(), re.M))
SECTION = re.compile(r"DESIGN\.md §([0-9]+(?:\.[0-9]+[a-z]?)?)")
PATH = re.compile(r"(?<![\w./$-])((?:src|capi|templates|tests|tools|scripts|docs|include|packaging)/"
                  r"[A-Za-z0-9_./-]+\.(?:cpp|hpp|h|cuh|py|md|sh|c|build|map|toml))\b")
bad = []
for name in files:
    try:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        continue
    for lineno, line in enumerate(text.splitlines(), 1):
        for s in SECTION.findall(line):
            if s not in sections:
                bad.append(f"{name}:{lineno}: DESIGN.md §{s} is not a section of docs/DESIGN.md")
        for p in PATH.findall(line):
            p = p.rstrip(".")
            if not (os.path.exists(os.path.join(root, p)) or
                    os.path.exists(os.path.join(root, p + ".in"))):
                bad.append(f"{name}:{lineno}: {p} does not exist")
for b in bad:
    print(b)
print(f"{len(files)} files, {len(sections)} DESIGN.md sections: "
      f"{'all references resolve' if not bad else f'{len(bad)} broken references'}")
sys.exit(1 if bad else 0)
