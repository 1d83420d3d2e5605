"""Reading a student's kept judgments with its repeated error blocks dropped or cut
(`bench/repeated_errors_readings.py`): which blocks each reading keeps, that the kept blocks keep their own spans
and probabilities, and that the committed report covers every protocol run with kept dev judgments."""

from __future__ import annotations

import json

import pytest
from support.scripts import REPO, load_script

from spanjudge.inference.contract import ErrorAnnotation, Evaluation
from spanjudge.inference.contract.render import render_judge

OUTPUT = "The team scored 3 goals at home and 3 goals away, then lost in overtime to a late penalty."
BLOCKS = [("3 goals", "Two were scored."), ("overtime", "It was a draw."), ("3 goals", "Two were scored."),
          ("late penalty", "There was none.")]  # fmt: skip


def errors(*blocks: tuple[str, str]) -> list[ErrorAnnotation]:
    return [ErrorAnnotation(location=loc, explanation=why, severity=3) for loc, why in blocks]


def kept_row(blocks: list[tuple[str, str]]) -> dict:
    """A judgment row as the protocol keeps it: the reply, its anchored spans and its blocks' probabilities."""
    bench = load_script("bench/repeated_errors_readings.py")
    anchored = bench.anchor_errors(errors(*blocks), OUTPUT)
    return {
        "reply": render_judge(Evaluation(errors=errors(*blocks), score=40)),
        "spans": [[e.start, e.end] for e in anchored],
        "errors": len(blocks),
        "unanchored": 0,
        "probabilities": {
            "p_no_error": 0.1,
            "span_written": [0.9, 0.8, 0.7, 0.6],
            "span_location": [[-1.0], [-2.0], [-3.0], [-4.0]],
        },
    }


def test_each_reading_keeps_its_blocks() -> None:
    bench = load_script("bench/repeated_errors_readings.py")
    written = errors(*BLOCKS)
    assert bench.kept_blocks(written, "as written") == [0, 1, 2, 3]
    assert bench.kept_blocks(written, "distinct") == [0, 1, 3]  # the repeat dropped, the block after it kept
    assert bench.kept_blocks(written, "stopped") == [0, 1]  # the errors end before the repeat
    assert bench.kept_blocks(errors(*BLOCKS[:2]), "stopped") == [0, 1]


def test_a_reading_keeps_each_kept_blocks_span_and_probabilities() -> None:
    bench = load_script("bench/repeated_errors_readings.py")
    row = kept_row(BLOCKS)
    first, second = OUTPUT.index("3 goals"), OUTPUT.rindex("3 goals")
    assert row["spans"][0] == [first, first + 7] and row["spans"][2] == [second, second + 7]  # the repeat: elsewhere
    assert bench.read_again(row, OUTPUT, "as written") == (row, 0)
    distinct, dropped = bench.read_again(row, OUTPUT, "distinct")
    assert dropped == 1 and distinct["errors"] == 3
    assert distinct["spans"] == [row["spans"][i] for i in (0, 1, 3)]
    assert distinct["probabilities"]["span_written"] == [0.9, 0.8, 0.6]
    assert distinct["probabilities"]["span_location"] == [[-1.0], [-2.0], [-4.0]]
    stopped, dropped = bench.read_again(row, OUTPUT, "stopped")
    assert dropped == 2 and stopped["spans"] == row["spans"][:2]
    assert stopped["probabilities"]["span_written"] == [0.9, 0.8]
    assert row["probabilities"]["span_written"] == [0.9, 0.8, 0.7, 0.6]  # the kept row itself is left as it was
    unscored = {**row, "spans": None, "reply": row["reply"][:60]}
    assert bench.read_again(unscored, OUTPUT, "distinct") == (unscored, 0)


def test_a_kept_row_whose_reply_does_not_give_its_spans_is_refused() -> None:
    bench = load_script("bench/repeated_errors_readings.py")
    row = kept_row(BLOCKS)
    with pytest.raises(SystemExit, match="does not anchor to its kept spans"):
        bench.read_again({**row, "spans": row["spans"][1:]}, OUTPUT, "distinct")


def test_the_share_written_from_the_first_repeat_on() -> None:
    bench = load_script("bench/repeated_errors_readings.py")
    row = kept_row(BLOCKS)
    looping, total = bench.looping_share({"rows": {"a": row, "b": kept_row(BLOCKS[:2])}})
    reply = row["reply"]
    assert total == len(reply) + len(kept_row(BLOCKS[:2])["reply"])
    assert looping == len(reply) - reply.index("Error 3:")


def test_the_committed_report_covers_every_protocol_run_with_kept_dev_judgments() -> None:
    bench = load_script("bench/repeated_errors_readings.py")
    runs = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]
    kept = [label for label, run in runs.items() if run["settings"].get("protocol")
            if (bench.KEPT / label / "dev").is_dir()]  # fmt: skip
    committed = json.loads((REPO / "bench/results/repeated_errors_readings.json").read_text())
    assert [row["label"] for row in committed["runs"]] == kept
    for row in committed["runs"]:
        assert row["as written"]["dropped"] == 0
        assert row["stopped"]["dropped"] >= row["distinct"]["dropped"]
