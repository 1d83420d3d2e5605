"""An annotator's fields written on one line are read."""

from __future__ import annotations

from spanjudge.inference.contract.parse import parse_annotator


def test_fields_on_one_line_are_read() -> None:
    reply = (
        'Error 1: Location: "family friendly"; Explanation: data says not family friendly; Severity: 4\n'
        "Overall score: Poor"
    )
    parsed = parse_annotator(reply)
    assert not hasattr(parsed, "reason"), parsed
    [error] = parsed.errors
    assert (error.location, error.explanation, error.severity) == (
        "family friendly",
        "data says not family friendly",
        4,
    )
    piped = parse_annotator('Error 1: Location: "a; b" | Explanation: x; and y | Severity: 2\nOverall score: Fair')
    [error] = piped.errors
    assert (error.location, error.explanation, error.severity) == ("a; b", "x; and y", 2)
