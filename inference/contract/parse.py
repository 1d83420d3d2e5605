"""Tolerant parsers for what real LLMs reply in the annotator, supervisor and judge formats.

Models wrap the requested plain-text format in markdown, code fences, numbering variants
and chatty prose. The parsers read through that, but they never guess content: a reply
whose score or severities cannot be read is a `ParseFailure` carrying the reason, so an
unreadable reply is counted as unscored instead of becoming an invented number. No input
string makes them raise.

Only the model's *reply* is parsed. The evaluated output is never part of it (prompts
delimit it, see `inference.prompts`), so text such as ``Overall score: Excellent`` inside
an evaluated output cannot forge a result; where a reply quotes it on a `Location:` line,
it stays a location.

The score is the one that closes the evaluation: the reply's last score line. A reply may
also quote a score line (of the evaluated output, or of the prompt's template) on a line of
its own, so the other score lines decide nothing but must agree with it:

- a score line in a `>` blockquote is a quotation, never the reply's score;
- a template placeholder (``<one of: ...>``) or an unreadable earlier line states no score;
- any other score line that disagrees with the closing one makes the reply a `ParseFailure`
  ("disagreeing score lines"): choosing one would be a guess, and the last one may be a quote.
  This holds for a closing ``Final score:`` too: a model that revises its score and an output
  that plants a ``Final score:`` line for the model to quote look the same, so a revision is
  a failure that a retry resolves, never a way in.

A reply in the judge's own format (the constrained-decoding grammar, `grammar.py`) has
exactly one score line, so none of this can reject it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .model import AnnotatorEvaluation, ErrorAnnotation, Evaluation, ParseFailure, ScoreLabel

ScoreT = TypeVar("ScoreT")
ResultT = TypeVar("ResultT")

# ---------------------------------------------------------------------------------------
# Line classification

_FENCE = re.compile(r"^\s*(?:```|'''|~~~)[\w+-]*\s*$")
_DECORATION = re.compile(r"^(?:>\s*|#{1,6}\s*|[-*•+]\s+|\d{1,2}[.)]\s+)")
_WRAPPING_EMPHASIS = re.compile(r"^(?:\*\*|__)+|(?:\*\*|__)+$")
_SEP = r"(?:\s*[:：]|\s+[-–—])"
_HEADER = re.compile(
    r"^[*_`\s]*(?:error|issue|mistake)\s*(?:#|no\.?\s*|number\s*)?(\d+)[*_`]*"
    r"(?:\s*[:.)\-–—]+|\s*$)(?P<rest>.*)$",
    re.IGNORECASE,
)
_FIELD = re.compile(
    r"^[*_`\s]*(?P<key>location(?:\s+of\s+the\s+error)?|span|explanation|reason|description"
    r"|severity(?:\s+(?:level|score|rating))?)[*_`]*\s*(?:\([^)]*\))?" + _SEP + r"(?:\*\*|__)?\s*(?P<value>.*)$",
    re.IGNORECASE,
)
_SCORE = re.compile(
    r"^[*_`\s]*(?:(?P<kind>overall|final|total)\s+)?(?:score|rating)[*_`]*\s*(?:\([^)]*\))?"
    + _SEP
    + r"[*_`]*\s*(?P<value>.*)$",
    re.IGNORECASE,
)
_SCORE_EXPLANATION = re.compile(
    r"^[*_`\s]*explanation\s+(?:of|for)\s+(?:the\s+)?(?:overall\s+)?score[*_`]*" + _SEP + r"\s*(?P<value>.*)$",
    re.IGNORECASE,
)
_NO_ERROR = re.compile(
    r"^[*_`]*(?:there\s+(?:are|is|were)\s+|the\s+\w+(?:\s+\w+)?\s+(?:has|contains)\s+)?"
    r"no\s+(?:[\w-]+\s+){0,3}?(?:errors?|issues?)\b",
    re.IGNORECASE,
)
# a field that follows another on the same line (`Location: "x"; Explanation: ...; Severity: 4`): split there
_INLINE_FIELD = re.compile(
    r"\s*[;|]\s*(?=[*_`]*(?:location|span|explanation|reason|description|severity)\b[^:：;|]{0,30}[:：])",
    re.IGNORECASE,
)
_PLACEHOLDER = re.compile(r"^<[^<>]*>\.?$")
_BLOCKQUOTE = re.compile(r"^\s*(?:[-*•+]\s+)?>")

_FIELD_KEYS = {
    "location": "location",
    "span": "location",
    "explanation": "explanation",
    "reason": "explanation",
    "description": "explanation",
    "severity": "severity",
}


def _clean(line: str) -> str:
    """Drop the markdown decoration that precedes headers and field names."""
    text = line.strip()
    previous = None
    while previous != text:  # bullets inside blockquotes inside headers...
        previous = text
        text = _DECORATION.sub("", text, count=1).strip()
    return text


def _field_key(raw_key: str) -> str:
    return _FIELD_KEYS[raw_key.lower().split()[0]]


@dataclass
class _Block:
    header_number: int | None = None
    title: str = ""  # text after "Error 1:" that is not a field, e.g. a one-line description
    fields: dict[str, list[str]] = field(default_factory=dict)

    def value(self, key: str) -> str | None:
        lines = self.fields.get(key)
        return None if lines is None else "\n".join(lines).strip()

    def is_template_echo(self) -> bool:
        values = [self.value(k) or "" for k in self.fields]
        return bool(values) and all(_PLACEHOLDER.match(v) for v in values)


@dataclass(frozen=True)
class _ScoreLine:
    value: str
    quoted: bool  # in a `>` blockquote: the reply quotes it, it does not state it


@dataclass
class _Scan:
    blocks: list[_Block] = field(default_factory=list)
    scores: list[_ScoreLine] = field(default_factory=list)
    score_explanation: str | None = None
    no_error_marker: bool = False


def _scan(text: str) -> _Scan:
    scan = _Scan()
    block: _Block | None = None
    target: list[str] | None = None  # the field value that continuation lines extend

    def open_block(number: int | None = None) -> _Block:
        new = _Block(header_number=number)
        scan.blocks.append(new)
        return new

    def add_field(match: re.Match[str]) -> list[str]:
        nonlocal block
        key = _field_key(match["key"])
        if block is None or key in block.fields:
            block = open_block()
        block.fields[key] = [_WRAPPING_EMPHASIS.sub("", match["value"]).strip()]
        return block.fields[key]

    def add_fields(first: re.Match[str]) -> list[str]:
        """The field `first` matched and any that follow it on its line, after `;` or `|`; the last one's
        value is what continuation lines extend."""
        target = add_field(first)
        parts = _INLINE_FIELD.split(first["value"])
        if len(parts) > 1:
            target[0] = _WRAPPING_EMPHASIS.sub("", parts[0]).strip()
            for part in parts[1:]:
                if inline := _FIELD.match(part):
                    target = add_field(inline)
        return target

    for raw_line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if _FENCE.match(raw_line):
            continue
        line = _clean(raw_line)
        if not line:
            target = None
            continue
        if header := _HEADER.match(line):
            block = open_block(int(header.group(1)))
            rest = header["rest"].strip()
            if f := _FIELD.match(rest):
                target = add_fields(f)
            else:
                block.title, target = rest.strip(" *_`:-–—"), None
        elif f := _FIELD.match(line):
            target = add_fields(f)
        elif s := _SCORE_EXPLANATION.match(line):
            scan.score_explanation = s["value"].strip()
            target = None
        elif s := _SCORE.match(line):
            scan.scores.append(_ScoreLine(s["value"].strip(), quoted=bool(_BLOCKQUOTE.match(raw_line))))
            target = None
        elif _NO_ERROR.match(line) and len(line) < 200:
            scan.no_error_marker = True
            target = None
        elif target is not None:
            target.append(line)
    kept = []
    for b in scan.blocks:
        if not b.fields or b.is_template_echo():
            continue
        if b.header_number is None and set(b.fields) == {"explanation"}:
            # a bare "Explanation:"/"Reason:" paragraph with no error header, location or
            # severity is the model explaining its score, not an error
            scan.score_explanation = scan.score_explanation or b.value("explanation")
            continue
        kept.append(b)
    scan.blocks = kept
    return scan


# ---------------------------------------------------------------------------------------
# Values

_QUOTES = {'"': '"', "'": "'", "“": "”", "‘": "’", "`": "`", "«": "»", "„": "“"}
_COMMENT_START = re.compile(r"^\s*(?:$|[(\[,;:.]|[-–—]\s)")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")
_RANGE = re.compile(r"^\W*(\d+)\s*(?:-|–|to)\s*(\d+)\b")  # "3-4": picking one would be a guess
_SCALE = re.compile(r"\s*(?:/|out\s+of)\s*(\d+)", re.IGNORECASE)  # "8/10", "8 out of 10"


def _location(value: str | None) -> str | None:
    """The quoted span without quotes, or without the comment some models append."""
    if value is None:
        return None
    if len(value) >= 2 and value[0] in _QUOTES:
        closing = _QUOTES[value[0]]
        # the last closing quote that ends the value or is followed only by a comment
        candidates = [i for i, c in enumerate(value) if c == closing and i > 0]
        for i in reversed(candidates):
            rest = value[i + 1 :]
            inner = value[1:i]
            if _COMMENT_START.match(rest) and inner.strip():
                if not re.search(re.escape(closing) + r"\s*(?:,|;|and)\s*" + re.escape(value[0]), inner):
                    return inner.strip()
                break  # several quoted spans on one line: keep them all, unanchorable
    return value


def _severity(value: str | None, number: int) -> int | str:
    """The severity as an int 1-5, or the reason it cannot be read."""
    if value is None or not value.strip():
        return f"error {number} has no severity"
    if _PLACEHOLDER.match(value.strip()):
        return f"error {number} has a template placeholder as severity: {value.strip()!r}"
    if _RANGE.match(value):
        return f"error {number} has a range as severity: {_snippet(value)!r}"
    found = _NUMBER.search(value)
    if found is None:
        return f"error {number} has an unreadable severity: {_snippet(value)!r}"
    severity = float(found.group(1))
    if not severity.is_integer() or not 1 <= severity <= 5:
        return f"error {number} has severity {found.group(1)}, outside the integers 1-5"
    return int(severity)


def _judge_score(value: str) -> float | str:
    if _PLACEHOLDER.match(value):
        return f"the score is a template placeholder: {value!r}"
    found = _NUMBER.search(value)
    if found is None:
        return f"the overall score has no number: {_snippet(value)!r}"
    score = float(found.group(1))
    scale = _SCALE.match(value[found.end() :])
    if scale and scale.group(1) != "100":
        return f"the overall score {_snippet(value)!r} is not on the 0-100 scale"
    if not 0 <= score <= 100:
        return f"the overall score {found.group(1)} is outside 0-100"
    return score


_LABEL_WORD = re.compile(r"\b(" + "|".join(label.name for label in ScoreLabel) + r")\b", re.IGNORECASE)


def _label(value: str) -> ScoreLabel | str:
    found = {m.group(1).upper() for m in _LABEL_WORD.finditer(value)}
    if len(found) == 1:
        return ScoreLabel[found.pop()]
    if not found:
        return f"the overall score is not one of the labels: {_snippet(value)!r}"
    # "Good to Excellent", "Good/Excellent", an echoed "<one of: ...>": choosing would be a guess
    return f"the overall score names several labels: {_snippet(value)!r}"


def _snippet(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------
# Reply kinds


def _errors(scan: _Scan) -> list[ErrorAnnotation] | str:
    errors = []
    for position, block in enumerate(scan.blocks, start=1):
        number = block.header_number or position
        severity = _severity(block.value("severity"), number)
        if isinstance(severity, str):
            return severity
        explanation = block.value("explanation") or block.title
        if not explanation or _PLACEHOLDER.match(explanation):
            return f"error {number} has no explanation"
        errors.append(
            ErrorAnnotation(location=_location(block.value("location")), explanation=explanation, severity=severity)
        )
    return errors


def _read(text: object, *, needs_score: bool) -> tuple[_Scan, list[ErrorAnnotation]] | ParseFailure:
    if not isinstance(text, str) or not text.strip():
        return ParseFailure(reason="empty reply", raw=text if isinstance(text, str) else "")
    scan = _scan(text)
    errors = _errors(scan)
    if isinstance(errors, str):
        return ParseFailure(reason=errors, raw=text)
    if needs_score and not any(not line.quoted for line in scan.scores):
        quoted = " (only quoted ones, in '>' blockquotes)" if scan.scores else ""
        return ParseFailure(reason=f"no overall score line{quoted}", raw=text)
    if not needs_score and not errors and not scan.no_error_marker:
        return ParseFailure(reason="no error blocks and no 'No Error' (unrecognised structure)", raw=text)
    return scan, errors


def _parse_scored(
    text: str,
    read_score: Callable[[str], ScoreT | str],
    build: Callable[[_Scan, list[ErrorAnnotation], ScoreT], ResultT],
) -> ResultT | ParseFailure:
    read = _read(text, needs_score=True)
    if isinstance(read, ParseFailure):
        return read
    scan, errors = read
    score = _closing_score(scan.scores, read_score)
    if isinstance(score, str):
        return ParseFailure(reason=score, raw=text)
    return build(scan, errors, score)


def _closing_score(lines: list[_ScoreLine], read_score: Callable[[str], ScoreT | str]) -> ScoreT | str:
    """The score of the line that closes the evaluation, or why there is none (see the
    module docstring): every other score line the reply states must agree with it."""
    stated = [line for line in lines if not line.quoted]
    closing = stated[-1]
    score = read_score(closing.value)
    if isinstance(score, str):
        return score
    for line in stated[:-1]:
        earlier = read_score(line.value)
        if not isinstance(earlier, str) and earlier != score:
            return (
                f"disagreeing score lines: {_snippet(line.value, 30)!r} and then {_snippet(closing.value, 30)!r} "
                "(is one of them a quote?)"
            )
    return score


def parse_judge(text: str) -> Evaluation | ParseFailure:
    """Read the distilled judge's reply: error blocks and `Overall score: <0-100>`."""
    return _parse_scored(text, _judge_score, lambda _, errors, score: Evaluation(errors=errors, score=score))


def parse_annotator(text: str) -> AnnotatorEvaluation | ParseFailure:
    """Read an annotator's reply: error blocks and a categorical `Overall score: <label>`."""
    return _parse_scored(
        text,
        _label,
        lambda scan, errors, label: AnnotatorEvaluation(
            errors=errors, label=label, score_explanation=scan.score_explanation or None
        ),
    )


def parse_supervisor(text: str) -> list[ErrorAnnotation] | ParseFailure:
    """Read the supervisor's merged error blocks (no score); `No Error` gives []."""
    read = _read(text, needs_score=False)
    if isinstance(read, ParseFailure):
        return read
    return read[1]
