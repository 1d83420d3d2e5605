"""Anchor error locations to character offsets in the evaluated output.

Models quote spans loosely: different case, collapsed whitespace, curly quotes, a dropped
word. We try, in order, an exact match, a case/whitespace/quote-insensitive match and a
fuzzy alignment, and record which one found the span. A location that none of them finds
keeps start=end=None and is counted (`Evaluation.unanchored_count`), never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from rapidfuzz import fuzz

from .model import AnchorMethod, ErrorAnnotation, Evaluation

FUZZY_MIN_SCORE = 85.0
"""Minimum rapidfuzz partial-ratio (0-100) for a fuzzy anchor; below it we do not guess."""

FUZZY_MIN_LENGTH = 4
"""Very short locations match almost anywhere fuzzily, so they must match exactly."""

_FOLD = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "`": "'", "–": "-", "—": "-"})


def _normalise(text: str) -> tuple[str, list[int]]:
    """Lower-case, fold quotes/dashes and collapse whitespace, keeping an index map.

    `positions[i]` is the offset in `text` of the character that produced normalised
    character i, so a match in the normalised text maps back to original offsets.
    """
    chars: list[str] = []
    positions: list[int] = []
    for index, char in enumerate(text):
        if char.isspace():
            if chars and chars[-1] != " ":
                chars.append(" ")
                positions.append(index)
            continue
        for folded in char.translate(_FOLD).lower():
            chars.append(folded)
            positions.append(index)
    while chars and chars[-1] == " ":
        chars.pop()
        positions.pop()
    return "".join(chars), positions


class _Output:
    """The evaluated output, prepared once for anchoring many locations."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.normalised, self.positions = _normalise(text)
        self.taken: set[tuple[int, int]] = set()

    def _span(self, norm_start: int, norm_end: int) -> tuple[int, int]:
        return self.positions[norm_start], self.positions[norm_end - 1] + 1

    def find(self, location: str) -> tuple[int, int, AnchorMethod] | None:
        """Best occurrence: a free exact one, else a free normalised one, else a reused one.

        "Free" means no earlier error claimed it: two errors quoting the same word usually
        mean two places.
        """
        candidates: list[tuple[int, int, AnchorMethod]] = [
            (s, s + len(location), "exact") for s in _occurrences(self.text, location)
        ]
        needle, _ = _normalise(location.strip())
        if needle:
            candidates += [
                (*self._span(s, s + len(needle)), "normalized") for s in _occurrences(self.normalised, needle)
            ]
        if candidates:
            return next((c for c in candidates if (c[0], c[1]) not in self.taken), candidates[0])
        if FUZZY_MIN_LENGTH <= len(needle) <= len(self.normalised):
            aligned = fuzz.partial_ratio_alignment(needle, self.normalised, score_cutoff=FUZZY_MIN_SCORE)
            if aligned is not None and aligned.dest_end > aligned.dest_start:
                return (*self._span(aligned.dest_start, aligned.dest_end), "fuzzy")
        return None


def _occurrences(haystack: str, needle: str) -> list[int]:
    found, start = [], haystack.find(needle) if needle else -1
    while start != -1:
        found.append(start)
        start = haystack.find(needle, start + 1)
    return found


def anchor_errors(errors: Sequence[ErrorAnnotation], output: str) -> list[ErrorAnnotation]:
    """Return the errors with start/end/anchor set wherever the location is found."""
    prepared = _Output(output)
    anchored = []
    for error in errors:
        found = prepared.find(error.location) if error.location else None
        if found is None:
            anchored.append(error.model_copy(update={"start": None, "end": None, "anchor": None}))
            continue
        start, end, method = found
        prepared.taken.add((start, end))
        anchored.append(error.model_copy(update={"start": start, "end": end, "anchor": method}))
    return anchored


def anchor_evaluation(evaluation: Evaluation, output: str) -> Evaluation:
    return evaluation.model_copy(update={"errors": anchor_errors(evaluation.errors, output)})
