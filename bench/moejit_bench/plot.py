"""The benchmark's results as a picture (python -m moejit_bench --plot FILE.png): per shape and
implementation, forward+backward and forward TFLOP/s as bars with the dense GEMM ceiling of the
same run as a line, and each training step's peak memory. Reads the run's JSON (--json), so a
saved result can be drawn later without a GPU (--from-json FILE).

matplotlib is optional: without it, --plot says so (and how to install it) before anything
runs. No pyplot: a Figure drawn straight to the file, so nothing needs a display."""

from __future__ import annotations

import json
import math
from typing import Dict, List, Optional, Tuple

# (result key, panel title, whether the dense ceiling applies)
PANELS = (("fwd_bwd_tflops", "forward + backward, TFLOP/s", True),
          ("fwd_tflops", "forward, TFLOP/s", True),
          ("peak_mb", "peak memory of a training step, MB", False))
INSTALL_HINT = "pip install matplotlib"


class PlotError(Exception):
    """A result that cannot be drawn, or no matplotlib; the message says why."""


def require_matplotlib():
    """The matplotlib module, or PlotError saying how to get it."""
    try:
        import matplotlib
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as e:
        raise PlotError(f"--plot needs matplotlib, which is not importable here ({e}); install "
                        f"it with: {INSTALL_HINT} (the table and --json need nothing more)"
                        ) from None
    return matplotlib


def load_run(path: str) -> dict:
    """A run written by --json, checked enough to be drawn."""
    try:
        with open(path) as f:
            run = json.load(f)
    except OSError as e:
        raise PlotError(f"--from-json {path}: cannot read it ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise PlotError(f"--from-json {path}: not JSON ({e})") from None
    check_run(run, f"--from-json {path}")
    return run


def check_run(run, where: str) -> None:
    if not isinstance(run, dict) or not isinstance(run.get("results"), list):
        raise PlotError(f"{where}: not a moejit_bench result (a JSON object with a 'results' "
                        "list, as --json writes)")
    for i, rec in enumerate(run["results"]):
        if not isinstance(rec, dict) or not isinstance(rec.get("shape"), str) \
                or not isinstance(rec.get("impls"), dict):
            raise PlotError(f"{where}: results[{i}] has no 'shape' name and 'impls' object")
    dense = run.get("dense_tflops")
    if dense is not None and not _finite(dense):
        raise PlotError(f"{where}: dense_tflops is {dense!r}, not a number")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def series(run: dict) -> Tuple[List[str], List[str], Dict[str, Dict[str, List[Optional[float]]]],
                               Dict[str, List[str]]]:
    """(shapes, impls in first-seen order, {metric: {impl: value per shape, None where it has
    none}}, {impl: note per shape: '' or why there is no bar: skipped, error, WRONG})."""
    shapes = [rec["shape"] for rec in run["results"]]
    impls: List[str] = []
    for rec in run["results"]:
        impls += [name for name in rec["impls"] if name not in impls]
    values = {metric: {impl: [] for impl in impls} for metric, _, _ in PANELS}
    notes = {impl: [] for impl in impls}
    for rec in run["results"]:
        for impl in impls:
            r = rec["impls"].get(impl)
            if not isinstance(r, dict):
                r = {"skipped": "not run"}
            for metric, _, _ in PANELS:
                v = r.get(metric)
                values[metric][impl].append(float(v) if _finite(v) else None)
            note = ""
            if "wrong" in r:
                note = "WRONG"
            elif "error" in r:
                note = "error"
            elif "skipped" in r:
                note = "skipped"
            notes[impl].append(note)
    return shapes, impls, values, notes


def draw(run: dict, path: str, title: Optional[str] = None) -> None:
    """Writes the picture of `run` to `path` (the format from its extension: .png, .svg,
    .pdf)."""
    check_run(run, path)
    require_matplotlib()
    from matplotlib.figure import Figure

    shapes, impls, values, notes = series(run)
    if not shapes or not impls:
        raise PlotError(f"{path}: the result holds no measured shape to draw")
    dense = run.get("dense_tflops")
    width = 0.8 / len(impls)
    fig = Figure(figsize=(max(8.0, 1.4 * len(shapes) * max(1, len(impls)) / 2 + 3), 11),
                 layout="constrained")
    axes = fig.subplots(len(PANELS), 1, sharex=True)
    colors = [f"C{i % 10}" for i in range(len(impls))]
    for ax, (metric, label, ceiling) in zip(axes, PANELS):
        for j, impl in enumerate(impls):
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(shapes))]
            heights = [v if v is not None else 0.0 for v in values[metric][impl]]
            ax.bar(xs, heights, width, label=impl, color=colors[j])
            for x, v, note in zip(xs, values[metric][impl], notes[impl]):
                if v is None and note:  # say why the bar is missing
                    ax.text(x, 0, note, rotation=90, ha="center", va="bottom", fontsize=7,
                            color="red" if note in ("WRONG", "error") else "gray")
        if ceiling and _finite(dense):
            ax.axhline(dense, color="black", linestyle="--", linewidth=1,
                       label=f"dense GEMM ceiling {dense:.0f} TFLOP/s")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    axes[-1].set_xticks(range(len(shapes)))
    axes[-1].set_xticklabels(shapes, rotation=30, ha="right")
    facts = [run.get(k) for k in ("device", "dtype", "layout", "routing")]
    fig.suptitle(title or "moejit_bench: " + ", ".join(str(f) for f in facts if f))
    fig.savefig(path, dpi=120)
