"""'No Error' within 10 points of the humans (`bench/no_error_share.py`): the share a rule reads, the constrained fit
that keeps it near the humans' where the plain fit does not, and the committed report covering every protocol run
with kept dev judgments."""

from __future__ import annotations

import json

from support.scripts import REPO, load_script

from spanjudge.eval.spans.decision_fit import decided_spans, objective
from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.inference.decisions import DecisionRule

OUTPUT = "Alpha beta gamma delta."


def documents() -> list[SpanDocument]:
    """Ten outputs, the humans marking none in the first three (a 'No Error' share of 0.3)."""
    return [
        SpanDocument(
            id=f"d{i}",
            dataset="t",
            task_id="t",
            inputs={"Data": "x"},
            output=OUTPUT,
            gold=() if i < 3 else (GoldSpan(0, 5, "Incorrect"),),
        )
        for i in range(10)
    ]


def readings() -> dict:
    """The judge marks "Alpha" everywhere, sure of it, and believes 'No Error' most where the humans marked it:
    saying so anywhere costs the objective, so the plain fit never says it."""
    p_no_error = [0.01, 0.01, 0.01, 0.9, 0.8, 0.7, 0.01, 0.01, 0.01, 0.01]
    rows = {f"d{i}": {"spans": [[0, 5]], "span_written": [0.95], "p_no_error": p, "errors": 1}
            for i, p in enumerate(p_no_error)}  # fmt: skip
    rows["d9"] = None  # unscored: not a 'No Error'
    return rows


def test_the_share_counts_decided_empty_outputs_of_all_asked() -> None:
    bench = load_script("bench/no_error_share.py")
    docs, read = documents(), readings()
    assert bench.human_share(docs) == 0.3
    assert bench.no_error_share(docs, read, DecisionRule()) == 0.0
    assert bench.no_error_share(docs, read, DecisionRule(no_error_threshold=0.75)) == 0.2  # d3, d4; d9 unscored


def test_the_constrained_fit_keeps_the_share_near_the_humans_at_the_objectives_cost() -> None:
    bench = load_script("bench/no_error_share.py")
    docs, read = documents(), readings()
    found = bench.fits(docs, read)
    fit, constrained = found["fit"], found["constrained"]
    assert bench.no_error_share(docs, read, fit) == 0.0  # the plain fit: 30 points from the humans
    share = bench.no_error_share(docs, read, constrained)
    assert abs(share - 0.3) <= bench.MARGIN + 1e-9 and share > 0
    assert objective(docs, decided_spans(read, constrained)) < objective(docs, decided_spans(read, fit))
    row = bench.reading(docs, read, constrained)
    assert row["share"] == share and abs(row["gap"] - abs(share - 0.3)) < 1e-12


def test_the_committed_report_covers_every_protocol_run_with_kept_dev_judgments() -> None:
    bench = load_script("bench/no_error_share.py")
    runs = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]
    kept = {label for label, run in runs.items() if run["settings"].get("protocol")
            if (bench.KEPT / label / "dev").is_dir()}  # fmt: skip
    committed = json.loads((REPO / "bench/results/no_error_share.json").read_text())
    assert {row["label"] for row in committed["runs"]} == kept
    for row in committed["runs"]:
        assert (
            row["constrained"]["dev"]["gap"] <= bench.MARGIN + 1e-9
            or row["constrained"]["thresholds"] == row["fit"]["thresholds"]
        )
        assert row["constrained"]["dev"]["objective"] <= row["fit"]["dev"]["objective"] + 1e-9
