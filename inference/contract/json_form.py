"""The judge's output contract as JSON, for servers that constrain replies by a JSON schema only.

Ollama holds a reply to a JSON schema (its `format` field), not to a grammar, so a judge served
there cannot be held to the text contract (`grammar.py`). `judge_json_schema()` is the same
contract as JSON::

    {"errors": [{"location": "...", "explanation": "...", "severity": 1-5}, ...], "score": 0-100}

with at most `max_errors` errors (none for "No Error"), each line at least one character (at
most `line_max_chars` when given), severity and score integers within the contract model's
bounds (read from the pydantic model, as the grammar does). Lines are unbounded by default: a
`maxLength` of 200 becomes 200 nested optional rules in llama.cpp's schema-to-grammar
conversion (which Ollama uses too), and one reply then took 390 s where the text grammar's took
about 7 s (bench/constrained_forms.py, on a machine shared with other runs); a line that runs to
the token limit leaves the reply cut, unparsed and retried, as without constraints.

`json_reply_to_text()` renders such a reply to the text evaluation the judge writes
unconstrained (`render.render_judge`), so everything after the reply — parsing, anchoring,
retries, the stored raw text — is the same on every engine. A reply that is not the JSON form is
returned as it is, and fails to parse like any malformed reply.

Servers enforce schemas to different degrees (llama-cpp-python 0.3.36 ignored an integer's
`minimum`/`maximum`, so the numbers are enums), so the rendered text is still parsed and
validated: a value out of bounds is a parse failure, never clipped.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .grammar import int_bounds
from .model import MAX_ERRORS, ErrorAnnotation, Evaluation
from .render import render_judge


def _integers(low: int, high: int) -> dict[str, Any]:
    # an enum, not minimum/maximum: llama.cpp's schema-to-grammar conversion (which Ollama uses too)
    # ignored the bounds in our measurement (severity 90 under a 1-5 maximum), but holds an enum
    return {"type": "integer", "enum": list(range(low, high + 1))}


def judge_json_schema(*, max_errors: int = MAX_ERRORS, line_max_chars: int | None = None) -> dict[str, Any]:
    """The JSON schema of the judge's replies in JSON form (see the module docstring)."""
    if not 1 <= max_errors <= MAX_ERRORS:
        raise ValueError(f"max_errors must be 1-{MAX_ERRORS}, got {max_errors}")
    severity_low, severity_high = int_bounds(ErrorAnnotation, "severity")
    score_low, score_high = int_bounds(Evaluation, "score")
    line: dict[str, Any] = {"type": "string", "minLength": 1}
    if line_max_chars is not None:
        line["maxLength"] = line_max_chars
    error = {
        "type": "object",
        "properties": {
            "location": line,
            "explanation": line,
            "severity": _integers(severity_low, severity_high),
        },
        "required": ["location", "explanation", "severity"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "errors": {"type": "array", "items": error, "maxItems": max_errors},
            "score": _integers(score_low, score_high),
        },
        "required": ["errors", "score"],
        "additionalProperties": False,
    }


def json_reply_to_text(reply: str) -> str:
    """The text evaluation of a JSON-form reply; any other reply unchanged (it then fails to parse)."""
    try:
        data = json.loads(reply)
        errors = [
            ErrorAnnotation(location=e["location"], explanation=e["explanation"], severity=e["severity"])
            for e in data["errors"]
        ]
        score = data["score"]
        if not isinstance(score, int) or isinstance(score, bool):
            return reply
        return render_judge(Evaluation(errors=errors, score=score))
    except (ValueError, TypeError, KeyError, ValidationError):  # json.JSONDecodeError is a ValueError
        return reply
