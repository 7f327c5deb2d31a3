"""python -m moejit_bench --plot / --from-json (issue 30) on a synthetic result, without a GPU:
the series the picture draws (values, missing bars and why), the table of a saved run, clear
errors for a bad file, the no-matplotlib message (before anything runs), and, where matplotlib
is installed, the picture itself (its text read back from an SVG)."""

import json
import sys

import pytest

from moejit_bench import layer, plot

DENSE = 812.5


def synthetic_run():
    def timed(fb, fw, peak):
        return {"fwd_ms": 1.0, "fwd_bwd_ms": 3.0, "fwd_tflops": fw, "fwd_bwd_tflops": fb,
                "bwd_tflops": fb * 1.1, "fwd_bwd_of_dense": fb / DENSE, "saved_mb": peak / 3,
                "peak_mb": peak, "reps": 5}
    return {
        "device": "NVIDIA H200 (synthetic)", "dtype": "bf16", "layout": "split",
        "routing": "topk", "dense_tflops": DENSE, "peers": {"sonicmoe": "available"},
        "results": [
            {"shape": "qwen3-30b-a3b", "T": 16384, "E": 128, "H": 2048, "I": 768, "k": 8,
             "impls": {"moejit": timed(500.0, 450.0, 3000.0),
                       "grouped_mm": timed(300.0, 320.0, 5000.0),
                       "eager": {"skipped": "one step takes 9.0 s (budget 20 s)"},
                       "sonicmoe": {"wrong": "out rel err 0.5"}}},
            {"shape": "deepseek-v3", "T": 8192, "E": 256, "H": 7168, "I": 2048, "k": 8,
             "impls": {"moejit": timed(600.0, 580.0, 9000.0),
                       "grouped_mm": {"error": "OutOfMemoryError: CUDA out of memory"},
                       "sonicmoe": timed(550.0, 500.0, 8000.0)}},
        ]}


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(synthetic_run()))
    return path


def test_series_holds_every_value_and_why_a_bar_is_missing():
    shapes, impls, values, notes = plot.series(synthetic_run())
    assert shapes == ["qwen3-30b-a3b", "deepseek-v3"]
    assert impls == ["moejit", "grouped_mm", "eager", "sonicmoe"]
    assert values["fwd_bwd_tflops"]["moejit"] == [500.0, 600.0]
    assert values["fwd_tflops"]["sonicmoe"] == [None, 500.0]
    assert values["peak_mb"]["grouped_mm"] == [5000.0, None]
    assert notes["eager"] == ["skipped", "skipped"]  # the second shape did not run it
    assert notes["sonicmoe"] == ["WRONG", ""] and notes["grouped_mm"] == ["", "error"]


def test_from_json_prints_the_table_without_a_gpu(saved, capsys):
    assert layer.main(["--from-json", str(saved)]) == 0
    out = capsys.readouterr().out
    assert f"ceiling: {DENSE:.0f} TFLOP/s" in out
    rows = [line for line in out.splitlines() if line.startswith("qwen3-30b-a3b")]
    assert len(rows) == 4 and "500.0" in rows[0] and "skipped" in rows[2]
    assert "WRONG" in rows[3]


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ("{not json", "not JSON"),
    ('{"runs": []}', "'results' list"),
    ('{"results": [{"impls": {}}]}', "results[0] has no 'shape'"),
    ('{"results": [], "dense_tflops": "fast"}', "dense_tflops is 'fast'"),
])
def test_from_json_refuses_a_bad_file(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    assert layer.main(["--from-json", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--from-json {path}" in err and message in err, err


def _hide_matplotlib(monkeypatch):
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


@pytest.mark.parametrize("from_json", [True, False])
def test_plot_without_matplotlib_says_how_before_running(saved, tmp_path, capsys, monkeypatch,
                                                         from_json):
    _hide_matplotlib(monkeypatch)
    out = tmp_path / "run.png"
    argv = ["--plot", str(out)] + (["--from-json", str(saved)] if from_json else [])
    # without --from-json this would start the benchmark: it must stop first (no GPU here)
    monkeypatch.setattr(layer, "dense_ceiling", lambda *a: pytest.fail("the run started"))
    assert layer.main(argv) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib" in err and "pip install matplotlib" in err, err
    assert not out.exists()
    with pytest.raises(plot.PlotError, match="pip install matplotlib"):
        plot.draw(synthetic_run(), str(out))


def test_plot_of_nothing_is_refused(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (optional)")
    with pytest.raises(plot.PlotError, match="no measured shape"):
        plot.draw({"results": []}, str(tmp_path / "empty.png"))


def test_plot_draws_the_run(saved, tmp_path, capsys):
    matplotlib = pytest.importorskip("matplotlib",
                                     reason="matplotlib is not installed (optional; the "
                                            "no-matplotlib path is tested above)")
    png = tmp_path / "run.png"
    assert layer.main(["--from-json", str(saved), "--plot", str(png)]) == 0
    assert f"wrote {png}" in capsys.readouterr().err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    # the picture's text, read back from an SVG that keeps text as text
    svg = tmp_path / "run.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot.draw(json.loads(saved.read_text()), str(svg))
    text = svg.read_text()
    for expected in ("qwen3-30b-a3b", "deepseek-v3", "moejit", "grouped_mm", "sonicmoe",
                     "dense GEMM ceiling 812 TFLOP/s", "WRONG", "error", "skipped",
                     "peak memory", "forward + backward, TFLOP/s", "NVIDIA H200 (synthetic)"):
        assert expected in text, expected
