"""Decisions from the judge's own probabilities (issue #49, item 3) and their calibration (item 2), on
hand-made probabilities: the rule, the thresholds a judge applies, the fit on a dev split (never on test),
the refusal to report on the inputs that chose the thresholds, and ECE with its reliability diagram."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.eval.spans.calibration import calibration, calibration_markdown, reliability, reliability_png
from spanjudge.eval.spans.decision_fit import check_held_out, decided_spans, fit_decision_rule, objective
from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.inference.decisions import DecisionRule, FittedOn, decide, decide_reply, effective_rule, stored_rule
from spanjudge.inference.judge_options import JudgeOptions
from spanjudge.inference.judge_setup import decision_rule_for
from spanjudge.inference.probabilities import ErrorProbabilities, ReplyProbabilities


def _reading(p_no_error: float, confidences: list[float]) -> ReplyProbabilities:
    errors = [ErrorProbabilities(confidence=c, expected_severity=2.0, severity_distribution={}) for c in confidences]
    return ReplyProbabilities(
        p_no_error=p_no_error, expected_errors=0.0, errors=errors, expected_score=50.0, score_distribution={}
    )


def test_the_rule_says_no_error_from_p_no_error_and_keeps_spans_by_confidence() -> None:
    rule = DecisionRule(no_error_threshold=0.4, min_confidence=0.5)
    assert decide(0.45, [0.9, 0.9], rule) == ([], True)  # P(no error) ≥ τ₀: nothing kept
    # confidence is cumulative along the reply: 0.9, 0.9·0.5 = 0.45, 0.45·1.0
    assert decide_reply(_reading(0.1, [0.9, 0.5, 1.0]), rule) == ([0], False)
    assert decide(0.1, [0.6, 0.5, 0.2], rule) == ([0, 1], False)  # exactly τ is kept
    assert decide(0.99, [0.3], DecisionRule()) == ([0], False)  # no threshold: the written reply
    assert decide_reply(_reading(0.01, []), DecisionRule(no_error_threshold=0.5)) == ([], True)  # written No Error
    assert DecisionRule(no_error_threshold=0.3).describe() == "'No Error' when P(no error) >= 0.3"


def test_the_judge_applies_the_stored_rule_unless_given_thresholds_or_written(tmp_path: Path) -> None:
    stored = DecisionRule(no_error_threshold=0.3, min_confidence=0.6)
    assert effective_rule(JudgeOptions(), stored) is stored
    assert effective_rule(JudgeOptions(), None) is None
    assert effective_rule(JudgeOptions(written=True), stored) is None
    mixed = effective_rule(JudgeOptions(min_confidence=0.2), stored)
    assert mixed is not None and mixed.thresholds() == {"no_error_threshold": 0.3, "min_confidence": 0.2}
    assert mixed.fitted_on is None  # a value given by hand was not fitted
    with pytest.raises(SpanjudgeError, match="not both"):
        effective_rule(JudgeOptions(written=True, no_error_threshold=0.5), None)
    with pytest.raises(SpanjudgeError, match="a probability, 0 to 1"):
        effective_rule(JudgeOptions(no_error_threshold=1.5), None)

    (tmp_path / "spanjudge.json").write_text(json.dumps({"base_model": "@smollm2", "decisions": stored.model_dump()}))
    assert stored_rule(tmp_path) == stored
    assert stored_rule(tmp_path / "nowhere") is None
    (tmp_path / "spanjudge.json").write_text(json.dumps({"decisions": {"no_error_threshold": "high"}}))
    with pytest.raises(InputError, match=r"spanjudge.json.*no_error_threshold"):
        stored_rule(tmp_path)


def test_a_stored_rule_on_an_engine_that_cannot_read_probabilities_is_said_not_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = DecisionRule(no_error_threshold=0.4, fitted_on=FittedOn(split="dev", data="d", outputs=1, objective="o"))
    (tmp_path / "spanjudge.json").write_text(json.dumps({"decisions": rule.model_dump(mode="json")}))
    served = JudgeOptions(engine="openai", base_url="http://127.0.0.1:9/v1")
    found, skipped = decision_rule_for(served, str(tmp_path))
    assert found is None and skipped is not None
    assert "which the openai engine does not read: its written replies are used" in skipped
    assert decision_rule_for(JudgeOptions(), str(tmp_path)) == (rule, None)  # transformers reads them
    # meta-eval's distilled judge says it too (a served model folder: SmolLM2's files beside the rule)
    from spanjudge.eval.judging.judge_files import DistilledJudge
    from spanjudge.inference.hf_models import convert_gguf
    from spanjudge.inference.shipped_models import smollm2_gguf

    for file in Path(convert_gguf(smollm2_gguf())).iterdir():
        (tmp_path / file.name).symlink_to(file)
    DistilledJudge(str(tmp_path), {"engine": "openai", "base_url": "http://127.0.0.1:9/v1"}).close()
    assert "its written replies are used" in capsys.readouterr().err
    # thresholds given by hand on such an engine are refused, not dropped
    with pytest.raises(SpanjudgeError, match="probabilities are read on the"):
        from spanjudge.inference.judge import Judge

        Judge.from_pretrained(str(tmp_path), served, no_error_threshold=0.5)


def _doc(doc_id: str, output: str, gold: list[tuple[int, int]], table: str) -> SpanDocument:
    spans = tuple(GoldSpan(start, end, "error") for start, end in gold)
    return SpanDocument(doc_id, "toy", "quintd1", {"Data": f"table {table}"}, output, spans, input_id=table)


# Outputs the humans found clean get a high P(no error) but a confident written (wrong) span; erroneous ones a
# low P(no error) and a right span, plus a second, unsure and wrong one: only τ₀ can drop the first kind.
DOCS = [_doc(f"d{k}", "The team won 3 games in 2020.", [] if k % 2 else [(13, 14)], str(k)) for k in range(8)]
CLEAN = {"spans": [[4, 8]], "span_written": [0.8], "p_no_error": 0.45, "errors": 1, "expected_errors": 0.6}
WRONG = {"spans": [[13, 14], [24, 28]], "span_written": [0.7, 0.2], "p_no_error": 0.05, "errors": 2,
         "expected_errors": 1.2}  # fmt: skip
ROWS = {d.id: CLEAN if k % 2 else WRONG for k, d in enumerate(DOCS)}


def test_the_fit_chooses_thresholds_that_beat_the_written_replies_on_dev() -> None:
    fit = fit_decision_rule(DOCS, ROWS, split="dev", data="toy tables 0-7")
    rule = fit.rule
    assert rule.no_error_threshold is not None and 0.05 < rule.no_error_threshold <= 0.45
    assert rule.min_confidence is not None and 0.2 < rule.min_confidence <= 0.7
    assert decided_spans(ROWS, rule) == {d.id: [] if k % 2 else [(13, 14)] for k, d in enumerate(DOCS)}
    fitted = rule.fitted_on
    assert fitted is not None and fitted.split == "dev" and fitted.outputs == 8 and len(fitted.sha1) == 8
    assert fitted.value is not None and fitted.written_value is not None and fitted.value > fitted.written_value
    assert fitted.value == pytest.approx(objective(DOCS, decided_spans(ROWS, rule)), abs=1e-6)
    assert len(fit.tried) == 20 * 10


def test_thresholds_are_never_fitted_on_test_nor_reported_on_the_inputs_that_chose_them() -> None:
    with pytest.raises(InputError, match="not on 'test'"):
        fit_decision_rule(DOCS, ROWS, split="test", data="toy")
    rule = fit_decision_rule(DOCS[:4], ROWS, split="dev", data="toy tables 0-3").rule
    with pytest.raises(InputError, match=r"fitted on toy tables 0-3 \(dev split\).* 4 of 8 outputs"):
        check_held_out(rule, DOCS, "student", "toy tables 0-7")
    check_held_out(rule, DOCS[4:], "student", "toy tables 4-7")  # held-out inputs: no complaint
    check_held_out(DecisionRule(no_error_threshold=0.5), DOCS, "student", "toy")  # given by hand: nothing to check


def test_ece_is_the_weighted_gap_between_predicted_and_observed() -> None:
    # bin [0.8, 0.9): predicted 0.8, observed 0.5 (gap 0.3, 2 of 4); bin [0.2, 0.3): 0.2 vs 0 (gap 0.2, 2 of 4)
    table = reliability([(0.8, 1.0), (0.8, 0.0), (0.2, 0.0), (0.2, 0.0)])
    assert table["ece"] == pytest.approx(0.5 * 0.3 + 0.5 * 0.2)
    assert [(b["low"], b["n"]) for b in table["bins"]] == [(0.2, 2), (0.8, 2)]
    assert reliability([(1.0, 1.0)])["bins"][0]["high"] == 1.0  # 1.0 falls in the last bin
    assert reliability([])["ece"] is None
    counts = reliability([(0.5, 1.0), (2.4, 2.0)], width=1.0)
    assert counts["ece"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.4)


def test_calibration_of_span_confidence_no_error_and_expected_count(tmp_path: Path) -> None:
    found = calibration(DOCS, {**ROWS, "d0": None})  # an unscored output counts in no measure
    spans = found["span_confidence"]
    assert spans["n"] == 4 * 1 + 3 * 2
    # clean outputs: their one span at 0.8 overlaps nothing; erroneous: 0.7 overlaps, 0.2 does not
    assert spans["ece"] == pytest.approx((4 * 0.8 + 3 * 0.3 + 3 * 0.2) / 10)
    no_error = found["no_error"]
    assert no_error["n"] == 7 and no_error["ece"] == pytest.approx((4 * 0.55 + 3 * 0.05) / 7)
    assert found["expected_count"]["ece"] == pytest.approx((4 * 0.6 + 3 * 0.2) / 7)
    # ranking: each overlapping 0.7 above the three 0.2s, below the four 0.8s; P(no error) 0.45 above every 0.05
    assert spans["auc"] == pytest.approx(3 * 3 / (3 * 7)) and no_error["auc"] == 1.0
    assert found["expected_count"]["auc"] is None  # a count ranks nothing here
    lines = calibration_markdown({"student": found})
    row = "| student | 0.470, AUC 0.429 (n=10) | 0.336, AUC 1.000 (n=7) | 0.429 (n=7) |"
    assert any(line.startswith(row) for line in lines)
    png = reliability_png(tmp_path / "calibration.png", found, "student on toy")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_protocols_quintd_splits_are_span_sets_and_test_chooses_no_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spanjudge.app.cli import main as cli_main
    from spanjudge.eval.spans.evaluate import load_span_set

    dev = load_span_set("quintd1:dev", [], None, None, False).docs
    test = load_span_set("quintd1:test", [], None, 5, False).docs
    assert len(dev) == 120 and len(test) == 5  # 10 tables x 3 domains x 4 systems; --max-items keeps the first
    assert {d.input_id.split("/")[0] for d in dev} == {"wikidata", "ice_hockey", "owid"}
    assert {int(d.input_id.split("/")[1]) for d in dev} == set(range(70, 80))
    refused = ["meta-eval", "--spans", "quintd1:test", "--judge", "distilled:nowhere", "--fit-decisions",
               "--out", str(tmp_path / "out")]  # fmt: skip
    assert cli_main(refused) == 2
    assert "chosen on a development split, not on 'test'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before any judge loads


@pytest.mark.parametrize("bad", [True, "0.5"])
def test_a_stored_threshold_that_is_not_a_number_is_one_line(tmp_path: Path, bad: object) -> None:
    (tmp_path / "spanjudge.json").write_text(json.dumps({"decisions": {"no_error_threshold": bad}}))
    with pytest.raises(InputError, match=r"spanjudge\.json: no_error_threshold: Input should be a valid number"):
        stored_rule(tmp_path)
