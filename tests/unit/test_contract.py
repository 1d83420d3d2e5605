"""The judge's output contract: types, JSON, the text format and its round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from spanjudge.inference.contract import (
    NO_ERROR,
    AnnotatorEvaluation,
    ErrorAnnotation,
    Evaluation,
    ParseFailure,
    ScoreLabel,
    parse_judge,
    parse_supervisor,
    rating_to_score,
    render_errors,
    render_judge,
    round_to_multiple_of_five,
)


def test_json_round_trip_keeps_every_field() -> None:
    evaluation = Evaluation(
        errors=[
            ErrorAnnotation(location="the team", explanation="wrong", severity=3, start=4, end=12, aspect="x"),
            ErrorAnnotation(location=None, explanation="omits the score", severity=5),
        ],
        score=42.5,
    )
    assert Evaluation.from_json(evaluation.to_json()) == evaluation
    assert Evaluation.from_json(Evaluation(score=None).to_json()).score is None


@pytest.mark.parametrize("severity", [0, 6, -1])
def test_severity_outside_1_to_5_is_rejected(severity: int) -> None:
    with pytest.raises(ValidationError):
        ErrorAnnotation(location="x", explanation="y", severity=severity)


@pytest.mark.parametrize("score", [-0.5, 100.01])
def test_score_outside_0_to_100_is_rejected(score: float) -> None:
    with pytest.raises(ValidationError):
        Evaluation(errors=[], score=score)


def test_offsets_must_form_a_span() -> None:
    with pytest.raises(ValidationError):
        ErrorAnnotation(location="x", explanation="y", severity=1, start=3)
    with pytest.raises(ValidationError):
        ErrorAnnotation(location="x", explanation="y", severity=1, start=5, end=2)


@pytest.mark.parametrize("text", ["None", "n/a", "  ", "-", "NONE."])
def test_placeholder_locations_mean_no_location(text: str) -> None:
    assert ErrorAnnotation(location=text, explanation="y", severity=1).location is None


def test_line_breaks_in_values_fold_to_spaces() -> None:
    error = ErrorAnnotation(location="two\nlines", explanation=" first\r\n second ", severity=2)
    assert (error.location, error.explanation) == ("two lines", "first second")


def test_label_scale_and_score_mapping() -> None:
    assert [label.text for label in ScoreLabel] == ["Unacceptable", "Poor", "Fair", "Good", "Excellent"]
    assert [rating_to_score(r) for r in (1, 2, 3, 4, 5)] == [0, 25, 50, 75, 100]
    annotated = AnnotatorEvaluation(errors=[], label=ScoreLabel.FAIR)
    assert annotated.to_evaluation().score == 50


@pytest.mark.parametrize(
    ("score", "binned"), [(0, 0), (2.4, 0), (2.5, 5), (62.5, 65), (87.49, 85), (97.5, 100), (100, 100)]
)
def test_round_to_multiple_of_five(score: float, binned: int) -> None:
    assert round_to_multiple_of_five(score) == binned


def test_render_judge_format_exactly() -> None:
    evaluation = Evaluation(
        errors=[
            ErrorAnnotation(location="on Sunday", explanation="The match was on Saturday.", severity=2),
            ErrorAnnotation(location=None, explanation="The result is missing.", severity=4),
        ],
        score=65,
    )
    assert render_judge(evaluation) == (
        "Error 1:\nLocation: on Sunday\nExplanation: The match was on Saturday.\nSeverity: 2\n\n"
        "Error 2:\nLocation: None\nExplanation: The result is missing.\nSeverity: 4\n\n"
        "Overall score: 65"
    )
    assert render_judge(Evaluation(errors=[], score=100)) == f"{NO_ERROR}\n\nOverall score: 100"


def test_unscored_evaluation_cannot_be_rendered_as_a_target() -> None:
    with pytest.raises(ValueError, match="unscored"):
        render_judge(Evaluation(errors=[], score=None))


# Text a model could really quote or write: anything on one line, including markdown,
# quotes, numbers and header-like words; line breaks fold to spaces by contract.
_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=60
).filter(lambda t: t.strip())
_errors = st.builds(
    ErrorAnnotation,
    location=st.one_of(st.none(), _text),
    explanation=_text,
    severity=st.integers(1, 5),
)
_scores = st.one_of(st.integers(0, 100).map(float), st.floats(0, 100, allow_nan=False))


def _carried_verbatim(error: ErrorAnnotation) -> bool:
    """The domain of the round trip, by design of the parser: a quoted location loses its
    quotes, a value wrapped in markdown bold loses the bold, and `<...>` is read as an
    echoed template placeholder. Everything else must survive unchanged."""
    values = [error.explanation, error.location or "x"]
    if any(v.startswith(("**", "__")) or v.endswith(("**", "__")) for v in values):
        return False
    if error.location and error.location[0] in "\"'“‘`«„":
        return False
    return not (error.explanation.startswith("<") and error.explanation.endswith(">"))


@settings(max_examples=3000, deadline=None)
@given(errors=st.lists(_errors, max_size=9), score=_scores)
def test_parse_of_render_is_identity(errors: list[ErrorAnnotation], score: float) -> None:
    errors = [e for e in errors if _carried_verbatim(e)]
    evaluation = Evaluation(errors=errors, score=score)
    text = render_judge(evaluation)
    assert parse_judge(text) == evaluation
    assert render_judge(parse_judge(text)) == text  # type: ignore[arg-type]
    assert parse_supervisor(render_errors(errors)) == errors


def test_parse_failure_carries_the_raw_reply() -> None:
    failure = parse_judge("I cannot evaluate this.")
    assert isinstance(failure, ParseFailure)
    assert failure.raw == "I cannot evaluate this."
    assert "score" in failure.reason


def test_the_first_block_written_again_word_for_word_is_found_once_its_explanation_ends() -> None:
    from spanjudge.inference.contract.render import first_repeat

    def reply(*blocks: tuple[str, str]) -> str:
        errors = [ErrorAnnotation(location=loc, explanation=why, severity=3) for loc, why in blocks]
        return render_judge(Evaluation(errors=errors, score=40))

    looping = reply(("3 goals", "Two were scored."), ("a draw", "They lost."), ("3 goals", "Two were scored."))
    assert first_repeat(looping) == looping.index("Error 3:")
    assert first_repeat(looping[: looping.rindex("scored.")]) is None  # its explanation not written to the end yet
    assert first_repeat(looping[: looping.rindex("Severity")]) == looping.index("Error 3:")
    assert first_repeat(reply(("3 goals", "Two were scored."), ("3 goals", "It was a draw."))) is None  # same place
    four = reply(("a", "b"), ("c", "d"), ("c", "d"), ("a", "b"))
    assert first_repeat(four) == four.index("Error 3:")  # the first repeat, not the first block repeated
    assert first_repeat(reply()) is None  # "No Error"
