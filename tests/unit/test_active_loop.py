"""The active-learning loop's study (`spanjudge.eval.distill.active`, driven by bench/active_loop.py): the pool
holds no input of the start's training or of a held-out split, the start's settings are the protocol run's, and
the report is what its rows give (no model runs here; the commands it drives are tested where they live)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanjudge.eval.distill.active import (
    LoopSettings,
    markdown,
    pool_leak,
    selection,
    start_settings,
    summary,
)
from spanjudge.eval.distill.study import StudySettings

REPO = Path(__file__).resolve().parents[2]


def _protocol_run(label: str) -> dict:
    return json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"][label]["settings"]


def test_the_start_is_the_protocol_runs_recipe() -> None:
    start = start_settings(_protocol_run("smollm2-mixed-cut-s42"), "smollm2-mixed-cut-s42")
    assert start.domains == ["wikidata", "ice_hockey", "owid"] and start.train_tables == (0, 25)
    assert start.dev_tables == (70, 80) and start.test_tables == (80, 100) and start.too_long == "cut"
    assert start.student == "smollm2" and start.rank == 16 and start.max_new_tokens == 320
    assert start.import_config.is_file() and start.import_config.parts[-2:] == ("import", "quintd1_gpt4_wikidata.yaml")


@pytest.mark.parametrize(
    ("tables", "found"),
    [
        ((25, 40), None),
        ((20, 30), "overlap the start's training tables (0-24)"),
        ((60, 71), "overlap the dev split (70-79)"),
        ((95, 120), "overlap the test split (80-99)"),
        ((40, 40), "is no range of tables"),
    ],
)
def test_the_pool_holds_no_input_the_start_trained_on_or_a_split_holds(tables: tuple[int, int], found: str | None):
    leak = pool_leak(LoopSettings(pool_tables=tables), StudySettings(label="start"))
    assert leak == found if found is None else found in (leak or "")


def test_selection_reads_what_select_printed(tmp_path: Path) -> None:
    (tmp_path / "ids.txt").write_text("quintd1/owid/zephyr/31/accuracy\t0.9712\nquintd1/owid/llama2/30/accuracy\n")
    assert selection(tmp_path / "ids.txt") == [
        {"id": "quintd1/owid/zephyr/31/accuracy", "uncertainty": 0.9712},
        {"id": "quintd1/owid/llama2/30/accuracy", "uncertainty": None},
    ]


def _entry(arm: str, seed: int, overlap: float, r: float | None) -> dict:
    dev = {"overlap_f1": overlap, "token_f1": 0.2, "count_pearson": r, "token_pearson": 0.1, "parse_rate": 1.0,
           "no_error_outputs": 3}  # fmt: skip
    return {"label": f"{arm}-s{seed}", "arm": arm, "seed": seed, "dev": dev, "human_spans": 40, "human_no_error": 2,
            "train": {"train_loss": 0.5, "eval_loss": 0.6}}  # fmt: skip


def test_the_arms_are_compared_by_their_mean_over_seeds() -> None:
    start = {"overlap_f1": 0.3, "token_f1": 0.2, "count_pearson": 0.25, "token_pearson": 0.05, "parse_rate": 0.9,
             "no_error_outputs": 2}  # fmt: skip
    arms = [_entry("confidence", 1, 0.40, 0.3), _entry("random", 1, 0.30, 0.2),
            _entry("confidence", 2, 0.34, 0.4), _entry("random", 2, 0.32, None)]  # fmt: skip
    found = summary(start, arms)
    assert found["arms"]["confidence"]["overlap_f1"] == {"mean": 0.37, "min": 0.34, "max": 0.4}
    assert found["arms"]["confidence"]["change"]["overlap_f1"] == {"mean": 0.07, "min": 0.04, "max": 0.1}
    assert found["confidence_minus_random"]["overlap_f1"] == pytest.approx(0.06)
    # a seed whose r is undefined leaves its arm's mean undefined, never a mean over the other seeds
    assert found["arms"]["random"]["count_pearson"]["mean"] is None
    assert found["confidence_minus_random"]["count_pearson"] is None


def test_the_committed_report_is_what_its_committed_rows_give() -> None:
    path = REPO / "bench/results/active_loop.json"
    if not path.is_file():
        pytest.skip("no active-loop results committed yet")
    results = json.loads(path.read_text())
    start = {key: value for key, value in results["summary"]["start"].items()}
    assert summary(start, results["arms"]) == results["summary"]
    assert markdown(results) == (REPO / "bench/results/active_loop.md").read_text()


def test_the_driver_stays_a_thin_script_over_the_stage_api() -> None:
    driver = (REPO / "bench" / "active_loop.py").read_text()
    assert len(driver.splitlines()) <= 120 and "from spanjudge.eval.distill.active" in driver
