"""The GRPO reward of `spanjudge.integrations.trl` on hand-made judgments: each kind's value, None for an
unscored completion, the errors as TRL's completions table shows them, and the texts of standard and
conversational prompts (the whole loop with TRL's GRPOTrainer: tests/integration/test_integrations.py)."""

from __future__ import annotations

import json

import pytest

from spanjudge.inference.contract import ErrorAnnotation
from spanjudge.inference.judged import JudgedEvaluation
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
    assert _text("Summarize: x", "user") == ("Summarize: x", None)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Summarize: y"}]
    assert _text(chat, "user") == ("Summarize: y", None)
    assert _text([{"role": "assistant", "content": "A summary."}], "assistant") == ("A summary.", None)


def test_the_expected_reward_is_refused_for_a_judge_without_its_probabilities() -> None:
    from spanjudge.core.errors import InputError

    check_reward("expected", reads_probabilities=True)
    with pytest.raises(InputError, match="probabilities=True"):
        check_reward("expected", reads_probabilities=False)
    with pytest.raises(InputError, match="reward must be one of score, errors, expected"):
        check_reward("loss", reads_probabilities=True)
    with pytest.raises(InputError, match="probabilities=True"):  # refused before any model loads
        spanjudge_reward("no/such-judge", "qags_xsum", "factual consistency", reward="expected")


def test_one_odd_completion_is_left_unscored_and_the_batch_is_judged(serve) -> None:
    """An empty prompt, a conversation without a user turn, a completion that is None, a number or has no text,
    and a None in the input column: each gets None and its reason; the rest of the batch is judged."""
    from support.standin import Reply

    from spanjudge.core.errors import InputError
    from spanjudge.inference.judge import Judge

    stand_in, url = serve([Reply(text="Error 1:\nLocation: hat\nExplanation: The article says mat.\nSeverity: 3"
                                 "\n\nOverall score: 40")])  # fmt: skip
    judge = Judge.from_pretrained("stand-in-judge", engine="openai", base_url=url, served_model="judge", retries=0)
    reward = spanjudge_reward(judge, "qags_xsum", "factual consistency")
    logged: dict[str, list] = {}
    prompts = [
        "The cat sat on the mat.",
        "",
        [{"role": "system", "content": "Be brief."}],
        "The cat sat on the mat.",
        "The cat sat on the mat.",
        [{"role": "user", "content": [{"type": "text", "text": "The dog sat on the mat."}]}],
        "The cat sat on the mat.",
    ]
    completions = [
        "A cat sat on a hat.",
        "A cat sat on a hat.",
        "A cat sat on a hat.",
        None,
        7,
        [{"role": "assistant", "content": [{"type": "text", "text": "A dog sat on a hat."}]}],
        [{"role": "assistant", "content": None}],
    ]
    rewards = reward(prompts, completions, log_extra=lambda name, values: logged.setdefault(name, values))
    assert rewards == [0.4, None, None, None, None, 0.4, None]
    reasons = logged["spanjudge errors"]
    assert reasons[1] == "unscored: an empty prompt: nothing to judge the completion against"
    assert reasons[2] == "unscored: no user message in the prompt"
    assert reasons[3] == "unscored: a completion that is neither text nor a list of messages (NoneType)"
    assert reasons[4] == "unscored: a completion that is neither text nor a list of messages (int)"
    assert reasons[6] == "unscored: the assistant message's content is None"
    assert stand_in.hits == 2

    by_column = spanjudge_reward(judge, "qags_xsum", "factual consistency", input_column="article")
    rewards = by_column(["p", "p"], ["A cat.", "A cat."], article=[None, "The cat sat on the mat."])
    assert rewards == [None, 0.4] and "None" not in json.dumps(stand_in.bodies[-1])
    with pytest.raises(InputError, match="the reward got 2 prompts for 1 completions: one each"):
        reward(["a", "b"], ["x"])
    with pytest.raises(InputError, match="the dataset column 'article' has 1 values for 2 completions"):
        by_column(["a", "b"], ["x", "y"], article=["only one"])
