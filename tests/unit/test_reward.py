"""The GRPO reward of `spanjudge.integrations.trl` on hand-made judgments: each kind's value, None for an
unscored completion, the errors as TRL's completions table shows them, and the texts of standard and
conversational prompts (the whole loop with TRL's GRPOTrainer: tests/integration/test_integrations.py)."""

from __future__ import annotations

import pytest

from spanjudge.inference.contract import ErrorAnnotation
from spanjudge.inference.judge import JudgedEvaluation
from spanjudge.inference.predictions import PredictedError, Prediction
from spanjudge.inference.probabilities import ErrorProbabilities, ReplyProbabilities
from spanjudge.integrations.trl import _text, check_reward, explained, reward_of, spanjudge_reward


def _prediction(
    score: float | None, severities: list[int], confidences: list[float] | None = None, expected_errors: float = 0.0
) -> Prediction:
    errors = [ErrorAnnotation(location=f"span {s}", explanation=f"wrong {s}", severity=s) for s in severities]
    probabilities = None
    if confidences is not None:
        probabilities = ReplyProbabilities(
            p_no_error=1 - confidences[0] if confidences else 0.9,
            expected_errors=expected_errors,
            errors=[
                ErrorProbabilities(confidence=c, expected_severity=s - 0.5, severity_distribution={})
                for c, s in zip(confidences, severities, strict=True)
            ],
            expected_score=50.0,
            score_distribution={},
        )
    evaluation = JudgedEvaluation(
        errors=errors, score=score, unscored_reason=None if score is not None else "no parseable reply in 1 try",
        probabilities=probabilities,
    )  # fmt: skip
    return Prediction(
        id="0",
        score=score,
        errors=tuple(PredictedError(None, None, e.location, e.severity, e.explanation) for e in errors),
        unscored_reason=evaluation.unscored_reason,
        evaluation=evaluation,
    )


def test_each_reward_kind_on_a_judged_completion() -> None:
    two_errors = _prediction(60, [3, 5], confidences=[0.8, 0.5], expected_errors=1.2)
    assert reward_of(two_errors, "score") == pytest.approx(0.6)
    assert reward_of(two_errors, "errors") == pytest.approx(-(3 + 5) / 5)
    assert reward_of(two_errors, "expected") == pytest.approx(-1.2)  # the judge's expected number of errors
    clean = _prediction(100, [], confidences=[], expected_errors=0.1)
    assert reward_of(clean, "score") == 1.0 and reward_of(clean, "errors") == 0
    assert reward_of(clean, "expected") == pytest.approx(-0.1)  # "No Error", yet P(an error) costs


def test_an_unscored_completion_has_no_reward_never_a_zero() -> None:
    unscored = _prediction(None, [])
    assert all(reward_of(unscored, kind) is None for kind in ("score", "errors", "expected"))
    assert explained(unscored) == "unscored: no parseable reply in 1 try"
    assert reward_of(_prediction(40, [2]), "expected") is None  # scored, but no probabilities were read for it


def test_the_errors_column_names_each_error_and_no_error() -> None:
    assert explained(_prediction(60, [3, 5])) == "severity 3: “span 3” — wrong 3\nseverity 5: “span 5” — wrong 5"
    assert explained(_prediction(100, [])) == "No Error"


def test_standard_and_conversational_prompts_give_their_text() -> None:
    assert _text("Summarize: x", "user") == "Summarize: x"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Summarize: y"}]
    assert _text(chat, "user") == "Summarize: y"
    assert _text([{"role": "assistant", "content": "A summary."}], "assistant") == "A summary."


def test_the_expected_reward_is_refused_for_a_judge_without_its_probabilities() -> None:
    from spanjudge.core.errors import InputError

    check_reward("expected", reads_probabilities=True)
    with pytest.raises(InputError, match="probabilities=True"):
        check_reward("expected", reads_probabilities=False)
    with pytest.raises(InputError, match="reward must be one of score, errors, expected"):
        check_reward("loss", reads_probabilities=True)
    with pytest.raises(InputError, match="probabilities=True"):  # refused before any model loads
        spanjudge_reward("no/such-judge", "qags_xsum", "factual consistency", reward="expected")
