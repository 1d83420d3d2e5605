"""A faster judge of one student against the exact one, from the judgments and readings the protocol kept (no
model): bench/drafted_judging.py, and the stated tolerances that a judge which is not the exact one is held to."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.scripts import REPO, load_script

# seed 1 of dev's choice (adapter 70c2f073…), judged on dev by drafted decoding with the stop one reply at a
# time (float32, the exact judge's replies) and four replies together
ALONE, ROWS = "gemma3-mixed-cut-t50-drafted-512tok-stop-s1", "gemma3-mixed-cut-t50-drafted-512tok-rows-stop-s1"
# the 'No Error'-twice student of seed 1, judged on dev in float32 and in bfloat16 (both drafted, with the stop),
# and the 0-24 seed 42 student, the same without the stop, on the AMX host
FLOAT32, BFLOAT16 = "gemma3-mixed-cut-t50-clean2-stop-s1", "gemma3-mixed-cut-t50-clean2-bf16-stop-s1"
FLOAT32_AMX, BFLOAT16_AMX = "gemma3-mixed-cut-located-s42", "gemma3-mixed-cut-drafted-bf16-s42"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/drafted_judging.py")


def recorded(label: str) -> dict[str, Any]:
    rows = json.loads((REPO / "bench/results/drafted_judging.json").read_text())["rows"]
    return next(r for r in rows if r["label"] == label)


def test_the_readings_are_the_protocols_pooled_rows_and_its_fitted_objective(bench) -> None:
    run = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"][ROWS]
    pooled = next(r for r in run["rows"] if (r["judge"], r["split"], r["domain"]) == ("student", "dev", "pooled"))
    read = bench.readings(ROWS, "dev")
    assert read == {
        **{key: pytest.approx(pooled[key]) for key in bench.WRITTEN},
        "objective": run["settings"]["decisions"]["fitted_on"]["value"],
    }
    assert "objective" not in bench.readings(ROWS, "test")  # thresholds are fitted on dev only


def test_replies_written_together_read_as_one_at_a_time(bench) -> None:
    """The rows' judge writes the exact judge's replies: every gap within rounding, nothing outside."""
    row = bench.row(ALONE, ROWS, "dev", "")
    assert (row["same_reply"], row["outside"]) == (120, [])
    assert all(gap["gap"] < 1e-3 for gap in row["readings"].values())


def test_what_reads_further_than_the_tolerances_is_named(bench) -> None:
    """bfloat16 writes replies of its own (67 of 120 the same): its readings move, and a count r that moves by
    more than 0.05 is named; a row recorded before the readings were compared names nothing."""
    row = bench.row(FLOAT32, BFLOAT16, "dev", "")
    assert row["same_reply"] == 67 and row["outside"] == ["count_pearson 0.053 > 0.05"]
    assert row["outside"] == recorded(f"{FLOAT32} / {BFLOAT16} / dev")["outside"]
    within = bench.row(FLOAT32_AMX, BFLOAT16_AMX, "dev", "")  # the other bfloat16 judge reads within them
    assert within["same_reply"] == 54 and within["outside"] == []
    assert max(gap["gap"] for gap in within["readings"].values()) == pytest.approx(0.049, abs=5e-4)
    made = {"gaps": {"p_no_error": {"median": 0.01, "max": 0.06}, "span_written": None}, "readings": {}}
    assert bench.outside(made) == ["p_no_error 0.06 > 0.05"]
    assert bench.outside({"gaps": {}}) == []
    assert bench._outside({"gaps": {}}) == "–" and bench._readings({"gaps": {}}) == "–"
