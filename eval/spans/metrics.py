"""Span metrics: a judge's error spans against gold ones, on character offsets into one output
text, half-open [start, end). Three views, each summed over documents (micro): exact spans,
overlapping mistakes (the RotoWire shared-task protocol) and tokens; plus the trivial
mark-every-number baseline and `evaluate_spans`, which applies them to a span set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .documents import Span, SpanDocument


@dataclass(frozen=True)
class PRF:
    """Counts and the scores derived from them.

    Zero denominators give 0.0 (sklearn's zero_division=0): a judge that marks nothing has
    precision 0, and a document without gold spans has recall 0. Per-document values are
    therefore not meant to be averaged; sum the counts with `micro_total` and read the
    scores off the total.
    """

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


def micro_total(parts: Iterable[PRF]) -> PRF:
    """Sum the counts over documents (micro average)."""
    tp = fp = fn = 0
    for part in parts:
        tp, fp, fn = tp + part.tp, fp + part.fp, fn + part.fn
    return PRF(tp, fp, fn)


def check_spans(spans: Sequence[Span], what: str) -> list[Span]:
    checked = []
    for span in spans:
        start, end = int(span[0]), int(span[1])
        if start < 0 or end <= start:
            raise ValueError(f"{what} span {tuple(span)} is not a non-empty half-open [start, end) range")
        checked.append((start, end))
    return checked


def exact_matches(predicted: Sequence[Span], gold: Sequence[Span]) -> list[bool]:
    """For each gold span (in the given order): was an identical unused prediction found."""
    unused: dict[Span, int] = {}
    for span in predicted:
        unused[span] = unused.get(span, 0) + 1
    matched = []
    for span in gold:
        hit = unused.get(span, 0) > 0
        if hit:
            unused[span] -= 1
        matched.append(hit)
    return matched


def overlap_matches(predicted: Sequence[Span], gold: Sequence[Span]) -> list[bool]:
    """RotoWire protocol: gold spans left to right; each takes the first unused overlapping prediction.

    From the shared task's evaluate.py: "Once a submitted mistake has recalled a GSML mistake,
    the submitted mistake is consumed". Returns, per gold span in the given order, matched.
    """
    remaining = sorted(predicted)
    matched = [False] * len(gold)
    for g_index in sorted(range(len(gold)), key=lambda i: gold[i]):
        g_start, g_end = gold[g_index]
        for p_index, (p_start, p_end) in enumerate(remaining):
            if p_start < g_end and g_start < p_end:
                del remaining[p_index]
                matched[g_index] = True
                break
    return matched


def from_matches(matched: Sequence[bool], n_predicted: int) -> PRF:
    tp = sum(matched)
    return PRF(tp=tp, fp=n_predicted - tp, fn=len(matched) - tp)


def exact_span_prf(predicted: Sequence[Span], gold: Sequence[Span]) -> PRF:
    """A prediction counts iff it equals a gold span not matched yet (one-to-one)."""
    pred, gold_ = check_spans(predicted, "predicted"), check_spans(gold, "gold")
    return from_matches(exact_matches(pred, gold_), len(pred))


def overlap_span_prf(predicted: Sequence[Span], gold: Sequence[Span]) -> PRF:
    """Mistake-level P/R of the RotoWire shared task (Thomson & Reiter 2021, evaluate.py).

    Gold spans, sorted by start, each consume the first (by start) unused predicted span
    that overlaps them by at least one character. tp = gold spans matched; recall = tp /
    gold, precision = tp / predictions, as evaluate.py divides the same matched count by
    both totals.
    """
    pred, gold_ = check_spans(predicted, "predicted"), check_spans(gold, "gold")
    return from_matches(overlap_matches(pred, gold_), len(pred))


def token_spans(text: str) -> list[Span]:
    """Character ranges of the whitespace-separated tokens of `text`, in order."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _marked_tokens(spans: Sequence[Span], tokens: Sequence[Span]) -> set[int]:
    return {i for i, (t_start, t_end) in enumerate(tokens) for s, e in spans if s < t_end and t_start < e}


def token_prf(predicted: Sequence[Span], gold: Sequence[Span], text: str) -> PRF:
    """Token-level P/R: a whitespace token is marked if any of its characters lies in a span.

    This is the positional token view of the RotoWire evaluation (tokens marked by the gold
    and by the submission) carried over to character spans of any text.
    """
    pred, gold_ = check_spans(predicted, "predicted"), check_spans(gold, "gold")
    tokens = token_spans(text)
    p_tokens, g_tokens = _marked_tokens(pred, tokens), _marked_tokens(gold_, tokens)
    tp = len(p_tokens & g_tokens)
    return PRF(tp=tp, fp=len(p_tokens) - tp, fn=len(g_tokens) - tp)


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def snap_to_words(spans: Sequence[Span], text: str) -> list[Span]:
    """Each span grown to whole words and trimmed of surrounding whitespace (factgenie's
    word-boundary snapping): a span that starts or ends inside a word takes the whole word.
    Spans left empty are dropped; spans that snap to the same range are kept once."""
    snapped: list[Span] = []
    for start, end in check_spans(spans, "snapped"):
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start == end:
            continue
        while start > 0 and _word_char(text[start - 1]) and _word_char(text[start]):
            start -= 1
        while end < len(text) and _word_char(text[end]) and _word_char(text[end - 1]):
            end += 1
        if (start, end) not in snapped:
            snapped.append((start, end))
    return snapped


# -- baseline and evaluation ----------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def mark_numbers(text: str) -> list[Span]:
    """Trivial baseline: every number (digits, with inner . or , groups) is an error.

    Numbers are the largest RotoWire error type, so this floor shows what a judge must beat.
    """
    return [(m.start(), m.end()) for m in _NUMBER.finditer(text)]


def evaluate_spans(docs: Sequence[SpanDocument], predictions: Mapping[str, Sequence[Span] | None]) -> dict[str, Any]:
    """Micro exact / overlap / token P/R/F1 over the scored documents, plus per-category recall.

    A document whose prediction is None (the judge produced no evaluation) or that is absent
    from `predictions` is unscored: counted, and left out of every total — not treated as
    "no errors", which would reward silence with free precision. Per-category recall is the
    share of gold spans of each category matched in the exact and the overlap matching.
    `gold_dropped` sums the loaders' unplaceable gold spans over the scored documents.
    """
    exact, overlap, token = [], [], []
    by_category: dict[str, dict[str, int]] = {}
    unscored = missing = dropped = 0
    for doc in docs:
        if doc.id not in predictions:
            missing += 1
            continue
        predicted = predictions[doc.id]
        if predicted is None:
            unscored += 1
            continue
        dropped += doc.dropped_gold
        pred = check_spans(predicted, f"{doc.id}: predicted")
        gold = doc.gold_spans
        exact_hits, overlap_hits = exact_matches(pred, gold), overlap_matches(pred, gold)
        exact.append(from_matches(exact_hits, len(pred)))
        overlap.append(from_matches(overlap_hits, len(pred)))
        token.append(token_prf(pred, gold, doc.output))
        for span, e_hit, o_hit in zip(doc.gold, exact_hits, overlap_hits, strict=True):
            tally = by_category.setdefault(span.category, {"gold": 0, "exact": 0, "overlap": 0})
            tally["gold"] += 1
            tally["exact"] += int(e_hit)
            tally["overlap"] += int(o_hit)
    return {
        "documents": len(docs),
        "scored": len(exact),
        "unscored": unscored,
        "missing": missing,
        "gold_dropped": dropped,
        "exact": micro_total(exact).as_dict(),
        "overlap": micro_total(overlap).as_dict(),
        "token": micro_total(token).as_dict(),
        "per_category_recall": {
            category: {
                "gold": t["gold"],
                "exact": t["exact"] / t["gold"],
                "overlap": t["overlap"] / t["gold"],
            }
            for category, t in sorted(by_category.items())
        },
    }
