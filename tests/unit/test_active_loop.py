"""The active-learning loop's study (`spanjudge.eval.distill.active`, driven by bench/active_loop.py): the pool
holds no input of the start's training or of a held-out split, the start's settings are the protocol run's, and
the report is what its rows give (no model runs here; the commands it drives are tested where they live)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanjudge.eval.distill.active import (
    LoopSettings,
    arm_difference,
    markdown,
    pool_leak,
    selection,
    start_settings,
    summary,
    verdict,
)
from spanjudge.eval.distill.study import StudySettings
from spanjudge.eval.spans.documents import GoldSpan, SpanDocument

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


# Six inputs of two outputs each; "The score was 3-1 at home." with the humans' span on "3-1" or on nothing
def _docs() -> list[SpanDocument]:
    gold = [(14, 17)], []
    return [SpanDocument(f"t{i}/{k}", "q", "t", {}, "The score was 3-1 at home.",
                         tuple(GoldSpan(s, e, "0") for s, e in gold[k]), input_id=f"t{i}")
            for i in range(6) for k in (0, 1)]  # fmt: skip


def _judged(spans_of: dict[int, list[tuple[int, int]] | None]) -> dict:
    """Judgments of `_docs` in the kept payload's shape: output k of every input gets spans_of[k]."""
    return {"rows": {d.id: {"spans": spans_of[int(d.id[-1])]} for d in _docs()}}


def test_the_arms_differ_on_the_same_input_resamples() -> None:
    right, wrong = _judged({0: [(14, 17)], 1: []}), _judged({0: [(4, 9)], 1: [(0, 3)]})
    same = arm_difference(_docs(), {"confidence": [wrong, wrong], "random": [wrong]}, resamples=200, seed=3)
    # the same judgments on the same resamples: a difference of exactly 0 everywhere, never better
    assert (same["overlap_f1"]["low"], same["overlap_f1"]["high"], same["overlap_f1"]["not_better"]) == (0, 0, 1)
    found = arm_difference(_docs(), {"confidence": [right, right], "random": [wrong, right]}, resamples=200, seed=3)
    # confidence is 1.0 in every resample, random's mean (0 + 1) / 2 = 0.5 in every resample
    assert found["overlap_f1"] == {"low": 0.5, "high": 0.5, "not_better": 0.0, "undefined": 0, "resamples": 200,
                                   "confidence": 0.95}  # fmt: skip
    # wrong marks one span in every output: its count is constant, so its r, and its arm's mean, never exist
    assert found["count_pearson"]["low"] is None and found["count_pearson"]["undefined"] == 200
    unscored = _judged({0: None, 1: None})
    gone = arm_difference(_docs(), {"confidence": [right], "random": [unscored]}, resamples=50, seed=3)
    assert gone["token_f1"]["not_better"] is None and gone["token_f1"]["undefined"] == 50


@pytest.mark.parametrize(
    ("confidence", "random", "interval", "prefers"),
    [
        ((0.30, 0.28, 0.32), (0.20, 0.19, 0.22), (0.02, 0.15), "confidence"),
        ((0.30, 0.21, 0.32), (0.20, 0.19, 0.22), (0.02, 0.15), "neither"),  # the seeds overlap
        ((0.30, 0.28, 0.32), (0.20, 0.19, 0.22), (-0.01, 0.15), "neither"),  # the interval holds 0
        ((0.10, 0.08, 0.12), (0.20, 0.19, 0.22), (-0.15, -0.02), "random"),
        ((None, None, None), (0.20, 0.19, 0.22), (None, None), "undefined"),
    ],
)
def test_an_arm_is_preferred_only_when_interval_and_seeds_agree(confidence, random, interval, prefers) -> None:
    def stats(values: tuple) -> dict:
        return dict(zip(("mean", "min", "max"), values, strict=True))

    assert verdict(stats(confidence), stats(random), {"low": interval[0], "high": interval[1]}) == prefers


def test_the_committed_report_is_what_its_committed_judgments_give() -> None:
    from spanjudge.eval.distill.judgments import archived
    from spanjudge.eval.distill.phases import held_out_documents

    path = REPO / "bench/results/active_loop.json"
    if not path.is_file():
        pytest.skip("no active-loop results committed yet")
    results = json.loads(path.read_text())
    kept, judged = REPO / "bench/results/active_loop_judgments", {}
    for entry in results["arms"]:
        judged.setdefault(entry["arm"], []).append(archived(kept, entry["label"], "dev")["student"])
    start = start_settings(_protocol_run(results["settings"]["start"]), results["settings"]["start"])
    docs, _ = held_out_documents(start, "dev")
    paired = arm_difference(docs, judged, resamples=results["settings"]["resamples"], seed=start.seed)
    assert summary(results["summary"]["start"], results["arms"], paired) == results["summary"]
    assert markdown(results) == (REPO / "bench/results/active_loop.md").read_text()


def test_the_driver_stays_a_thin_script_over_the_stage_api() -> None:
    driver = (REPO / "bench" / "active_loop.py").read_text()
    assert len(driver.splitlines()) <= 120 and "from spanjudge.eval.distill.active" in driver
