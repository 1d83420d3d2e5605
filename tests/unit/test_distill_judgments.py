"""The distillation study's judgments as data (issue #49, items 1-3): a run's kept judgments recompute its rows
without a model, the student's decisions are fitted on its dev judgments only and applied to its test
judgments, and the calibration of its probabilities joins its rows, the recipes and the report. The
judgments here are hand-made, on the real quintd-1 outputs and human spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spanjudge.core.errors import InputError
from spanjudge.eval.distill.judgments import STUDENT_READ, archive, archived, readings, restorable, rule_for_split
from spanjudge.eval.distill.phases import held_out_documents, judge_identity
from spanjudge.eval.distill.recompute import from_judgments
from spanjudge.eval.distill.report import markdown, recipes, write_results
from spanjudge.eval.distill.study import StudySettings
from spanjudge.eval.spans.calibration import MEASURES
from spanjudge.eval.spans.decision_fit import decided_spans, fit_decision_rule
from spanjudge.eval.spans.metrics import mark_numbers
from spanjudge.inference.probabilities import READING

REPO = Path(__file__).resolve().parents[2]
ARGS = StudySettings(label="toy-s1", recipe="toy", eval_domains=["wikidata"], dev_tables=(70, 72),
                     test_tables=(80, 82), resamples=20)  # fmt: skip


def _payload(docs: list[Any]) -> dict[str, Any]:
    """Judgments as the study keeps them: every number marked, each mark less sure than the one before, and a
    P(no error) that is high where the output has few numbers; the last output unscored."""
    rows = {}
    for index, doc in enumerate(docs):
        spans = [list(span) for span in mark_numbers(doc.output)]
        confidence = [round(0.9**k, 6) for k in range(1, len(spans) + 1)]
        rows[doc.id] = {
            "spans": None if index == len(docs) - 1 else spans,
            "errors": len(spans),
            "score": 50,
            "attempts": 1,
            "reply": "...",
            "unscored_reason": None,
            "truncated": None,
            "probabilities": {
                "p_no_error": round(1 / (1 + len(spans)), 6),
                "expected_errors": sum(confidence),
                "expected_score": 50.0,
                "span_written": confidence,
            },
        }
    return {"wall_s": 10.0, "evaluations_per_s": 1.0, "retries": 0, "rows": rows}


@pytest.fixture
def kept_run(tmp_path: Path) -> tuple[Path, Path]:
    """A results file holding one protocol run (settings of a committed run, stale rows) and its kept judgments
    of both splits."""
    committed = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]["smollm2-mixed-s42"]
    settings = {**committed["settings"], "label": ARGS.label, "recipe": ARGS.recipe, "eval_domains": ["wikidata"],
                "dev_tables": [70, 72], "test_tables": [80, 82], "resamples": 20}  # fmt: skip
    stale = [r for r in committed["rows"] if r["judge"] == "student" and r["domain"] == "wikidata"]  # both splits
    results = tmp_path / "distill_quintd"
    results.with_suffix(".json").write_text(json.dumps({"runs": {ARGS.label: {"settings": settings, "rows": stale}}}))
    kept = tmp_path / "distill_judgments"
    for split in ("dev", "test"):
        docs, _ = held_out_documents(ARGS, split)
        archive(kept, ARGS.label, split, STUDENT_READ, _payload(docs))
    return results, kept


def test_a_runs_rows_recompute_from_its_kept_judgments_with_decisions_fitted_on_dev(
    kept_run: tuple[Path, Path],
) -> None:
    results, kept = kept_run
    done = from_judgments(results, kept, results.parent / "works", [], lambda message: None)
    assert done == ["toy-s1 (dev)", "toy-s1 (test)"]
    data = json.loads(results.with_suffix(".json").read_text())
    run = data["runs"][ARGS.label]
    rows = {(r["split"], r["judge"]): r for r in run["rows"] if r["domain"] == "wikidata"}
    assert set(rows) == {(split, judge) for split in ("dev", "test") for judge in
                         ("student", "student·expected", "student·decided", "teacher", "number_baseline")}  # fmt: skip
    # the thresholds are the ones the dev judgments choose, and the test rows apply them to the test judgments
    dev_docs, _ = held_out_documents(ARGS, "dev")
    rule = fit_decision_rule(dev_docs, readings(archived(kept, ARGS.label, "dev")[STUDENT_READ]), split="dev",
                             data="quintd-1 dev tables 70-71 of wikidata").rule  # fmt: skip
    stored = run["settings"]["decisions"]
    assert (stored["no_error_threshold"], stored["min_confidence"]) == (rule.no_error_threshold, rule.min_confidence)
    assert stored["fitted_on"]["split"] == "dev" and "sha1" not in stored["fitted_on"]
    test_docs, _ = held_out_documents(ARGS, "test")
    decided = decided_spans(readings(archived(kept, ARGS.label, "test")[STUDENT_READ]), rule)
    says_no_error = sum(1 for d in test_docs if decided[d.id] == [])
    assert rows[("test", "student·decided")]["no_error_outputs"] == says_no_error
    # the calibration of the student's probabilities, in its written rows, the recipes and the report
    assert set(rows[("test", "student")]["calibration"]) == set(MEASURES)
    assert rows[("test", "student")]["calibration"]["no_error"]["n"] == len(test_docs) - 1  # one unscored
    entries = [e for e in recipes(data["runs"]) if e["recipe"] == "toy" and e["domain"] == "wikidata"]
    assert {e["split"] for e in entries if "calibration" in e} == {"dev", "test"}
    # and how well its span confidence ranks, beside the ECE
    found = rows[("test", "student")]["calibration"]["span_confidence"]
    assert all("span_confidence_auc" in e for e in entries) and "auc" in found
    assert {e["recipe"] for e in recipes(data["runs"])} == {"toy", "toy+expected", "toy+decided"}
    report = results.with_suffix(".md").read_text()
    assert report == markdown(data["runs"]) and "### Calibration of the student's probabilities" in report
    assert "Decisions (`student·decided`): " in report
    assert (results.parent / "distill_calibration" / "toy-s1-test.png").read_bytes()[:4] == b"\x89PNG"
    # recomputed again: the same rows
    before = results.with_suffix(".json").read_text()
    from_judgments(results, kept, results.parent / "works", [ARGS.label], lambda message: None)
    assert results.with_suffix(".json").read_text() == before


def test_decisions_are_reported_only_on_inputs_that_did_not_choose_them(kept_run: tuple[Path, Path]) -> None:
    results, kept = kept_run
    dev_docs, _ = held_out_documents(ARGS, "dev")
    dev = readings(archived(kept, ARGS.label, "dev")[STUDENT_READ])
    rule = fit_decision_rule(dev_docs, dev, split="dev", data="dev").rule
    rule_for_split(rule, held_out_documents(ARGS, "test")[0], "test", ARGS.label)  # held out: fine
    with pytest.raises(InputError, match="shares inputs with 8 of 8 outputs of the test split"):
        rule_for_split(rule, dev_docs, "test", ARGS.label)
    with pytest.raises(InputError, match="not on 'test'"):
        fit_decision_rule(dev_docs, dev, split="test", data="test")
    chosen_on_test = rule.model_copy(update={"fitted_on": rule.fitted_on.model_copy(update={"split": "test"})})
    with pytest.raises(InputError, match="fitted on the test split are reported on no split"):
        rule_for_split(chosen_on_test, dev_docs, "dev", ARGS.label)
    # a run without kept dev judgments has no decided rows on test, and its written rows still recompute
    (kept / ARGS.label / "dev" / f"{STUDENT_READ}.json.gz").unlink()
    from_judgments(results, kept, results.parent / "works", [ARGS.label], lambda message: None)
    judges = {
        (r["split"], r["judge"])
        for r in json.loads(results.with_suffix(".json").read_text())["runs"][ARGS.label]["rows"]
    }
    assert ("test", "student") in judges and ("test", "student·decided") not in judges


def test_the_committed_rows_are_what_the_committed_judgments_give(tmp_path: Path) -> None:
    """Every protocol run whose judgments are kept recomputes to its committed rows, without a model (γ left out
    here: about 0.3 s an output and judge)."""
    kept = REPO / "bench/results/distill_judgments"
    committed = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]
    labels = sorted(path.name for path in kept.iterdir() if path.is_dir())
    assert labels, "no run keeps its judgments"
    without_gamma = {
        label: {
            **committed[label],
            "rows": [{k: v for k, v in row.items() if not k.startswith("gamma")} for row in committed[label]["rows"]],
        }
        for label in labels
    }
    results = tmp_path / "distill_quintd"
    results.with_suffix(".json").write_text(json.dumps({"runs": without_gamma}))
    done = from_judgments(results, kept, tmp_path / "works", labels, lambda message: None)
    assert len(done) == sum(len({row["split"] for row in committed[label]["rows"]}) for label in labels)
    again = json.loads(results.with_suffix(".json").read_text())["runs"]
    for label in labels:
        assert again[label]["rows"] == without_gamma[label]["rows"]
        assert again[label]["settings"]["decisions"] == committed[label]["settings"]["decisions"]


def test_a_split_judged_again_keeps_dev_before_test(tmp_path: Path) -> None:
    """A run whose dev rows are written again after its test rows (a new machine: the student trained again, dev
    restored) keeps dev's rows first, as when the splits ran in order: the record, and what its kept judgments
    recompute to, do not depend on the order the splits were judged in."""
    label = "gemma3-mixed-cut-t50-drafted-512tok-rows-stop-s1"
    run = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"][label]
    assert [row["split"] for row in run["rows"]] == sorted((row["split"] for row in run["rows"]), key="test".__eq__)
    results = tmp_path / "distill_quintd"
    results.with_suffix(".json").write_text(json.dumps({"runs": {label: run}}))
    dev = [row for row in run["rows"] if row["split"] == "dev"]
    write_results(results, dev, {**run["settings"], "judge_wall_s": {}})
    again = json.loads(results.with_suffix(".json").read_text())["runs"][label]
    assert again["rows"] == run["rows"]
    assert {"test", "dev"} == {row["split"] for row in again["rows"]}


def test_a_new_machine_restores_only_the_same_judges_kept_judgments(tmp_path: Path) -> None:
    """runs/ goes with the machine; the judgments a run kept are restored for a judge with the same identity (the
    untrained base in every run, or a retrained student whose adapter is the same), from whichever run kept them,
    and never for another judge or from judgments kept before identities were recorded."""
    docs, _ = held_out_documents(ARGS)
    payload = _payload(docs)
    base = {"judge": "base+grammar", "engine": "llamacpp", "student": "gemma3", "judging": "k", "adapter_sha256": None}
    archive(tmp_path, "gemma-s1", "test", "base+grammar", payload)  # kept before identities: never restored
    assert restorable(tmp_path, "test", "base+grammar", base) is None
    kept = archive(tmp_path, "gemma-s42", "test", "base+grammar", {**payload, "identity": base})
    assert restorable(tmp_path, "test", "base+grammar", base) == (kept, {**payload, "identity": base})
    assert restorable(tmp_path, "dev", "base+grammar", base) is None  # another split
    for other in ({"student": "smollm2"}, {"judging": "other tables"}, {"engine": "transformers"}):
        assert restorable(tmp_path, "test", "base+grammar", {**base, **other}) is None
    student = {**base, "judge": "student+probabilities", "engine": "transformers", "adapter_sha256": "a" * 64}
    archive(tmp_path, "gemma-s42", "test", "student+probabilities", {**payload, "identity": student})
    assert restorable(tmp_path, "test", "student+probabilities", student) is not None
    assert restorable(tmp_path, "test", "student+probabilities", {**student, "adapter_sha256": "b" * 64}) is None


def test_a_reading_made_before_the_reader_read_the_locations_is_not_restored(tmp_path: Path) -> None:
    """A student's probability judgments kept before the reader read each span's location tokens (an identity
    without `reading`) are judged again, not restored without them; the base's and a sampled judge's are not
    readings and keep their identities."""
    docs, _ = held_out_documents(ARGS)
    now = judge_identity("student+probabilities", "transformers", "gemma3", "k", "a" * 64)
    assert now["reading"] == READING
    before = {key: value for key, value in now.items() if key != "reading"}
    archive(tmp_path, "gemma-s42", "dev", "student+probabilities", {**_payload(docs), "identity": before})
    assert restorable(tmp_path, "dev", "student+probabilities", now) is None
    archive(tmp_path, "gemma-s1", "dev", "student+probabilities", {**_payload(docs), "identity": now})
    assert restorable(tmp_path, "dev", "student+probabilities", now) is not None
    for name in ("base+grammar", "student+consensus3"):
        assert "reading" not in judge_identity(name, "llamacpp", "gemma3", "k", None)
