"""moejit-warmup for pip users: `python -m moejit.warmup [options]` (or the `moejit-warmup`
command pip installs) runs the tool shipped in the wheel next to libmoejit.so with the given
options, unchanged: `python -m moejit.warmup --help` lists them (--preset, --spec, --arch,
--cache-dir, --check, ...), and its exit status is the tool's.

The tool and the library follow the same NVRTC rule, so a cache this warms is the one a PyTorch
process finds (README, "NVRTC"). Outside a wheel (a source tree), $MOEJIT_WARMUP names the
tool, else a moejit-warmup executable on PATH is used.

Importing this module leaves `moejit.warmup(context, **desc)` (core.warmup) callable: the
module itself forwards calls to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from typing import List, Optional, Sequence

TOOL = "moejit-warmup"


def _is_executable_elf(path: str) -> bool:
    """A native executable, not a script (pip's moejit-warmup launcher is one, and running it
    would come back here)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF" and os.access(path, os.X_OK)
    except OSError:
        return False


def tool_path() -> Optional[str]:
    """The moejit-warmup executable: $MOEJIT_WARMUP, else the wheel's (next to this file), else
    one on PATH; None when there is none."""
    explicit = os.environ.get("MOEJIT_WARMUP")
    if explicit:
        return explicit
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), TOOL)
    if _is_executable_elf(here):
        return here
    found = shutil.which(TOOL)
    return found if found and _is_executable_elf(found) else None


def run(args: Sequence[str]) -> int:
    """Runs the tool with `args`; its exit status (4 with a message when there is no tool)."""
    path = tool_path()
    if path is None:
        print(f"{TOOL}: not found: this moejit has no shipped tool (a source tree); build it "
              "(ninja -C build tools/moejit-warmup) and set MOEJIT_WARMUP to it", file=sys.stderr)
        return 4
    return subprocess.call([path, *args])


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: the tool replaces this process (signals and the exit status are its own)."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = tool_path()
    if path is None or argv is not None:
        return run(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path, *args])
    return 4  # not reached


class _CallableModule(types.ModuleType):
    """`import moejit.warmup` rebinds the package's `warmup` attribute to this module; calling
    it still warms a plan (moejit.core.warmup), as before the module existed."""

    def __call__(self, context, **desc):
        from .core import warmup
        return warmup(context, **desc)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
