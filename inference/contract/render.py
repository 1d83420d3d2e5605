"""Render evaluations to the plain-text formats the models read and write.

The judge format (the distilled model's completion, thesis §3.4) is:

    Error 1:
    Location: <span of the output, or None>
    Explanation: <why>
    Severity: <1-5>

    Error 2:
    ...

    Overall score: <0-100>

with `No Error` in place of the blocks when there are none. `parse.parse_judge` reads it
back: parse(render(e)) == e for every Evaluation whose offsets are unset.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal

from .model import ErrorAnnotation, Evaluation

NO_ERROR = "No Error"
# The pieces of the judge format, shared by the renderer and the grammar (`grammar.py`), so
# that what constrained decoding allows cannot drift from what training renders.
ERROR_HEADER = "Error {number}:"
LOCATION_FIELD = "Location: "
EXPLANATION_FIELD = "Explanation: "
SEVERITY_FIELD = "Severity: "
SCORE_FIELD = "Overall score: "
NO_LOCATION = "None"
LINE_BREAK = "\n"
BLOCK_SEPARATOR = "\n\n"


def format_score(score: float) -> str:
    """75.0 -> '75'; other floats in plain decimal notation, exact enough to parse back."""
    score = float(score)
    return str(int(score)) if score.is_integer() else format(Decimal(repr(score)), "f")


def render_errors(errors: Sequence[ErrorAnnotation]) -> str:
    """The error blocks alone (supervisor format); `No Error` for an empty list."""
    if not errors:
        return NO_ERROR
    blocks = [
        LINE_BREAK.join(
            (
                ERROR_HEADER.format(number=i),
                LOCATION_FIELD + (e.location if e.location is not None else NO_LOCATION),
                EXPLANATION_FIELD + e.explanation,
                SEVERITY_FIELD + str(e.severity),
            )
        )
        for i, e in enumerate(errors, start=1)
    ]
    return BLOCK_SEPARATOR.join(blocks)


def render_judge(evaluation: Evaluation) -> str:
    """The distilled judge's completion text for `evaluation` (which must be scored)."""
    if evaluation.score is None:
        raise ValueError("an unscored evaluation has no judge-format rendering")
    return render_errors(evaluation.errors) + BLOCK_SEPARATOR + SCORE_FIELD + format_score(evaluation.score)


# a block's location and explanation lines as `render_errors` writes them, the explanation's line ended
_WRITTEN_BLOCK = re.compile(
    "^" + re.escape(ERROR_HEADER.format(number=0)).replace("0", r"\d+") + re.escape(LINE_BREAK)
    + re.escape(LOCATION_FIELD) + "(.*)" + re.escape(LINE_BREAK) + re.escape(EXPLANATION_FIELD) + "(.*)"
    + re.escape(LINE_BREAK),
    re.MULTILINE,
)  # fmt: skip


def first_repeat(text: str) -> int | None:
    """Where a judge-format reply first writes an error block again word for word (its location and explanation,
    the explanation's line ended): the offset of that block's `Error N:` header; None while no block repeats.
    Greedy decoding's loop: a small judge writes one error again until its tokens run out."""
    seen: set[tuple[str, str]] = set()
    for match in _WRITTEN_BLOCK.finditer(text):
        block = (match.group(1), match.group(2))
        if block in seen:
            return match.start()
        seen.add(block)
    return None
