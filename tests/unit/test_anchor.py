"""Anchoring error locations to character offsets: exact, normalised, fuzzy, or not at all."""

from __future__ import annotations

from spanjudge.inference.contract import ErrorAnnotation, Evaluation, anchor_errors, anchor_evaluation

OUTPUT = "The  Team won on Sunday.\nFans cheered the “late goal” for hours; the team celebrated."


def _error(location: str | None) -> ErrorAnnotation:
    return ErrorAnnotation(location=location, explanation="because", severity=2)


def _anchor(location: str | None) -> ErrorAnnotation:
    return anchor_errors([_error(location)], OUTPUT)[0]


def test_exact_match_gives_exact_offsets() -> None:
    error = _anchor("won on Sunday")
    assert error.anchor == "exact"
    assert OUTPUT[error.start : error.end] == "won on Sunday"


def test_case_and_whitespace_insensitive_match() -> None:
    error = _anchor("the team won")
    assert error.anchor == "normalized"
    assert OUTPUT[error.start : error.end] == "The  Team won"


def test_curly_quotes_and_line_breaks_are_normalised() -> None:
    error = _anchor('Sunday. Fans cheered the "late goal"')
    assert error.anchor == "normalized"
    assert OUTPUT[error.start : error.end] == "Sunday.\nFans cheered the “late goal”"


def test_fuzzy_match_for_a_slightly_misquoted_span() -> None:
    error = _anchor("fans cheerd the late goal for hour")
    assert error.anchor == "fuzzy"
    assert "cheered" in OUTPUT[error.start : error.end]


def test_unanchorable_location_is_kept_and_counted() -> None:
    evaluation = anchor_evaluation(
        Evaluation(errors=[_error("a completely different sentence about rain"), _error(None)], score=40),
        OUTPUT,
    )
    missing, omission = evaluation.errors
    assert (missing.start, missing.end, missing.anchor) == (None, None, None)
    assert missing.location == "a completely different sentence about rain"
    assert omission.location is None and not omission.anchored
    assert evaluation.unanchored_count == 1  # omissions have nothing to anchor


def test_short_locations_never_match_fuzzily() -> None:
    assert _anchor("Tem").anchor is None


def test_repeated_location_takes_the_next_free_occurrence() -> None:
    first, second, third = anchor_errors([_error("team"), _error("team"), _error("team")], OUTPUT)
    assert (first.anchor, OUTPUT[first.start : first.end]) == ("exact", "team")
    # the only exact occurrence is taken, so the second error gets the other place
    assert (second.anchor, OUTPUT[second.start : second.end]) == ("normalized", "Team")
    # with every occurrence taken, the best one is reused rather than dropped
    assert (third.start, third.anchor) == (first.start, "exact")


def test_anchoring_keeps_other_fields() -> None:
    original = ErrorAnnotation(location="Sunday", explanation="wrong day", severity=4, aspect="consistency")
    anchored = anchor_errors([original], OUTPUT)[0]
    assert anchored.model_dump(exclude={"start", "end", "anchor"}) == original.model_dump(
        exclude={"start", "end", "anchor"}
    )
