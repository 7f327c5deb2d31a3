"""bench/peer_targets.py (the peer target table of issues 18 and 30) on made-up benchmark files: the best peer
across runs, moejit and the dense ceiling from that peer's run, each rule met or not."""

import importlib.util
import json
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peer_targets.py")


@pytest.fixture(scope="module")
def targets():
    spec = importlib.util.spec_from_file_location("peer_targets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def r(fb, fw, saved=100.0, peak=200.0):
    return {"fwd_bwd_tflops": fb, "fwd_tflops": fw, "saved_mb": saved, "peak_mb": peak}


def write(tmp_path, name, routing, dense, results):
    path = tmp_path / name
    path.write_text(json.dumps({"routing": routing, "dense_tflops": dense, "results": [
        {"shape": shape, "impls": impls} for shape, impls in results]}))
    return str(path)


def test_rules_use_the_best_peers_run(tmp_path, targets):
    sonic = write(tmp_path, "s.json", "topk", 800.0, [
        ("a", {"moejit": r(520, 540, 90, 300), "sonicmoe": r(500, 560, 100, 150)}),
        ("b", {"moejit": r(400, 410), "sonicmoe": {"skipped": "not installed"}})])
    quack = write(tmp_path, "q.json", "topk", 700.0, [
        ("a", {"moejit": r(530, 545), "quack": r(300, 320)}),
        ("b", {"moejit": r(402, 411), "quack": r(290, 280)})])
    dup = write(tmp_path, "d.json", "expert0", 800.0, [
        ("a", {"moejit": r(510, 600), "sonicmoe": r(200, 300)})])
    text = targets.table(targets.load([sonic, quack, dup]))
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines()
            if line.startswith("| a") or line.startswith("| b")}
    # a: best peer SonicMoE 500 in s.json -> moejit 520 from s.json, target min(650, 680) = 650
    a = rows[("a", "topk")]
    assert "520 (540)" in a and "| 650 |" in a and "no (0.80×)" in a
    assert "no (0.96× SonicMoE)" in a  # forward 540 < 560
    assert "90 / 100" in a and "300 / 150" in a  # saved met, peak not
    # b: SonicMoE skipped, QuACK best -> moejit 402 from q.json, dense 700: min(377, 595)
    b = rows[("b", "topk")]
    assert "skip" in b and "402 (411)" in b and "| 377 |" in b and "yes (1.07×)" in b
    # duplicate routes: the expert-0 row's moejit (510) against the top-k row's (520)
    assert "a, every route -> expert 0: 510 vs top-k 520: not met (0.98×)" in text
    assert "f+b >= min(1.3 x best peer, 0.85 x dense): 2 of 3 met" in text
    assert "expert 0 >= top-k: 0 of 1 met" in text
    assert "fwd >= 1.05 x best peer's fwd: 2 of 3 met" in text  # b: 411 >= 1.05 x 280; a at expert 0


def test_the_forward_margin(tmp_path, targets):
    """Issue 30's forward rule is 1.05 x the best peer's forward; 1.02x meets 1.0 but not it."""
    run = write(tmp_path, "m.json", "topk", 800.0, [
        ("a", {"moejit": r(500, 510), "sonicmoe": r(500, 500)})])
    rows = targets.load([run])
    line = [ln for ln in targets.table(rows).splitlines() if ln.startswith("| a")][0]
    assert "no (1.02× SonicMoE)" in line
    line = [ln for ln in targets.table(rows, 1.0).splitlines() if ln.startswith("| a")][0]
    assert "yes (1.02× SonicMoE)" in line


def test_a_wrong_peer_is_not_a_best_peer(tmp_path, targets):
    run = write(tmp_path, "w.json", "topk", 800.0, [
        ("a", {"moejit": r(400, 400), "sonicmoe": {"wrong": "out 5e-1"}})])
    text = targets.table(targets.load([run]))
    line = [ln for ln in text.splitlines() if ln.startswith("| a")][0]
    assert "fail (out 5e-1)" in line and line.rstrip().endswith("| – | – | – | – | – |")


def test_ours_judges_a_variant_row(tmp_path, targets):
    """--ours moejit-ring: the variant's numbers are judged (and named), not moejit's."""
    run = write(tmp_path, "v.json", "topk", 800.0, [
        ("a", {"moejit": r(500, 510, 90, 150), "moejit-ring": r(520, 540, 90, 140),
               "sonicmoe": r(500, 500, 100, 150)})])
    rows = targets.load([run])
    line = [ln for ln in targets.table(rows, 1.05, "moejit-ring").splitlines() if ln.startswith("| a")][0]
    assert "520 (540)" in line and "yes (1.08× SonicMoE)" in line and "140 / 150" in line
    assert "moejit-ring" in targets.table(rows, 1.05, "moejit-ring").splitlines()[0]
    line = [ln for ln in targets.table(rows).splitlines() if ln.startswith("| a")][0]
    assert "500 (510)" in line and "no (1.02× SonicMoE)" in line


def test_ours_without_a_timed_peer_comes_from_the_first_run_that_timed_it(tmp_path, targets, capsys):
    """No peer timed: the row shows the variant from the first run that timed it (not moejit's)."""
    first = write(tmp_path, "1.json", "topk", 800.0, [("a", {"moejit": r(500, 510)})])
    second = write(tmp_path, "2.json", "topk", 800.0, [("a", {"moejit": r(501, 511), "moejit-ring": r(520, 540)})])
    line = [ln for ln in targets.table(targets.load([first, second]), 1.05, "moejit-ring").splitlines()
            if ln.startswith("| a")][0]
    assert "520 (540)" in line
    assert targets.main(["--ours"]) == 2 and "peer_targets.py" in capsys.readouterr().out
