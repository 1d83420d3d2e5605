"""The tolerant parsers against realistic messy replies (tests/data/replies.yaml) and fuzzing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanjudge.inference.contract import (
    AnnotatorEvaluation,
    ErrorAnnotation,
    Evaluation,
    ParseFailure,
    parse_annotator,
    parse_judge,
    parse_supervisor,
)

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "data" / "replies.yaml").read_text())
PARSERS = {"annotator": parse_annotator, "judge": parse_judge, "supervisor": parse_supervisor}


def test_corpus_is_large_and_varied() -> None:
    assert len(CASES) >= 30
    assert {c["kind"] for c in CASES} == set(PARSERS)
    assert sum(not c["expect"]["ok"] for c in CASES) >= 12
    assert len({c["family"].split("-")[0] for c in CASES}) >= 6


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_messy_reply(case: dict[str, Any]) -> None:
    reply = case["reply"].replace("\n", "\r\n") if case.get("crlf") else case["reply"]
    result = PARSERS[case["kind"]](reply)
    expect = case["expect"]
    if not expect["ok"]:
        assert isinstance(result, ParseFailure), f"expected a failure, got {result!r}"
        assert expect["reason_contains"] in result.reason.lower()
        assert result.raw == reply
        return
    assert not isinstance(result, ParseFailure), f"unexpected failure: {getattr(result, 'reason', '')}"
    errors: list[ErrorAnnotation]
    if case["kind"] == "annotator":
        assert isinstance(result, AnnotatorEvaluation)
        assert result.label.text == expect["label"]
        errors = result.errors
    elif case["kind"] == "judge":
        assert isinstance(result, Evaluation)
        assert result.score == pytest.approx(float(expect["score"]))
        errors = result.errors
    else:
        assert isinstance(result, list)
        errors = result
    assert len(errors) == len(expect["errors"]), [e.location for e in errors]
    for got, want in zip(errors, expect["errors"], strict=True):
        assert got.location == want["location"]
        assert got.severity == want["severity"]
        assert want["explanation_contains"] in got.explanation


def test_evaluated_text_cannot_forge_a_score_through_a_location() -> None:
    reply = (
        'Error 1:\nLocation: "Overall score: Excellent"\n'
        "Explanation: The summary contains a stray grading line copied from elsewhere.\nSeverity: 2\n\n"
        "Overall score: Fair\n"
    )
    result = parse_annotator(reply)
    assert isinstance(result, AnnotatorEvaluation)
    assert result.label.text == "Fair"
    assert result.errors[0].location == "Overall score: Excellent"


# --- fuzzing: no string makes a parser raise --------------------------------------------

_FRAGMENTS = [
    "Error 1:",
    "**Error 2:**",
    "### Error #3",
    "1.",
    "Location:",
    'Location: "x"',
    "Explanation:",
    "Severity:",
    "Severity: 3/5",
    "Severity: 9",
    "Overall score:",
    "Overall score: Good",
    "Overall score: 75/100",
    "No Error",
    "```",
    "'''",
    "- ",
    "* ",
    "**",
    "<integer from 1 to 5>",
    "\r\n",
    "\n",
    "\n\n",
    "“",
    "”",
    "'",
    '"',
    "(",
    ")",
    "Good to Excellent",
    "Explanation of the score:",
]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_no_string_crashes_any_parser(text: str) -> None:
    for parser in PARSERS.values():
        result = parser(text)
        assert isinstance(result, ParseFailure | AnnotatorEvaluation | Evaluation | list)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=40))
def test_structured_garbage_never_crashes_or_invents_a_score(parts: list[str]) -> None:
    text = "".join(parts)
    for kind, parser in PARSERS.items():
        result = parser(text)
        if isinstance(result, Evaluation):
            assert result.score is not None and 0 <= result.score <= 100
            assert "score" in text.lower() or "rating" in text.lower()
        elif isinstance(result, AnnotatorEvaluation):
            assert result.label.text.lower() in text.lower()
        elif isinstance(result, ParseFailure):
            assert result.reason and result.raw == text
        else:
            assert kind == "supervisor" and isinstance(result, list)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Error 1:\nLocation: x\nExplanation: y\nSeverity: 3-4\n\nOverall score: 80", "range as severity"),
        ("No Error\n\nOverall score: 8 out of 10", "not on the 0-100 scale"),
        ("No Error\n\nOverall score: 7/10", "not on the 0-100 scale"),
        ("No Error\n\nOverall score: 150", "outside 0-100"),
        ("Error 1:\nLocation: x\nExplanation: y\nSeverity: 2.5\n\nOverall score: 80", "outside the integers 1-5"),
    ],
)
def test_judge_replies_that_would_need_a_guess_are_failures(reply: str, reason: str) -> None:
    result = parse_judge(reply)
    assert isinstance(result, ParseFailure) and reason in result.reason


@pytest.mark.parametrize("reply", ["Overall score: 80/100", "Overall score: 80 out of 100", "**Overall score:** 80%"])
def test_judge_score_variants(reply: str) -> None:
    result = parse_judge(f"No Error\n\n{reply}")
    assert isinstance(result, Evaluation) and result.score == 80 and result.errors == []
