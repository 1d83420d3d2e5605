"""Signals from outside a student's reply (`bench/span_confidence_bounds.py`): each span's own, from the input, the
other seeds and the teacher, and the committed report covering every protocol run with kept dev judgments."""

from __future__ import annotations

import json

from support.scripts import REPO, load_script

OUTPUT = "Boston won 4-3 in overtime at home."


def test_each_span_reads_the_input_the_other_seeds_and_the_teacher() -> None:
    bench = load_script("bench/span_confidence_bounds.py")
    reading = {"spans": [[11, 14], [18, 26]], "span_written": [0.9, 0.4]}  # "4-3", "overtime"
    others = [{"spans": [[12, 13]]}, None, {"spans": [[0, 6]]}]  # one marks "4-3"; one left it unscored
    signals = bench.span_signals(OUTPUT, "Home: Boston  4 - 3  OVERTIME", reading, others, teacher=[(18, 26)])
    assert signals == [
        {"confidence": 0.9, "in_input": 1.0, "other_seeds": 1 / 3, "teacher": 0.0},  # "4-3" not in "4 - 3"
        {"confidence": 0.4, "in_input": 0.0, "other_seeds": 0.0, "teacher": 1.0},  # case and spacing folded
    ]
    alone = bench.span_signals(OUTPUT, "", reading, [], teacher=[])
    assert [s["other_seeds"] for s in alone] == [None, None]  # a recipe with one seed has no other seeds


def test_the_committed_report_covers_every_protocol_run_with_kept_dev_judgments() -> None:
    bench = load_script("bench/span_confidence_bounds.py")
    runs = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]
    kept = {label for label, run in runs.items() if run["settings"].get("protocol")
            if (bench.KEPT / label / "dev").is_dir()}  # fmt: skip
    committed = json.loads((REPO / "bench/results/span_confidence_bounds.json").read_text())
    assert {row["label"] for row in committed["runs"]} == kept
    assert all(0.0 <= row["overlap"] <= 1.0 for row in committed["runs"])
