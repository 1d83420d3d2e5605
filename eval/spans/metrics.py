"""Span metrics: a judge's error spans against gold ones, on character offsets into one output
text, half-open [start, end). Four views, each summed over documents (micro), each named by its
matching rule (`MATCHING`): exact spans, overlapping mistakes (the RotoWire shared-task protocol),
tokens, and MPP (match with partial overlap and partial credit, Perrella et al. 2026); plus the
trivial mark-every-number baseline and `evaluate_spans`, which applies them to a span set.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from spanjudge.eval.spans.documents import Span, SpanDocument

# Each variant's matching rule, as the tables name it
MATCHING = {
    "exact": "exact: a predicted span counts iff it equals a gold span not matched yet (one to one)",
    "overlap": "overlap: RotoWire's rule; gold spans left to right each take the first unused predicted span "
    "that overlaps them by a character (one to one); a match counts 1",
    "token": "token: whitespace tokens, an error token when a span covers any of its characters",
    "mpp": "mpp: match with partial overlap and partial credit (Perrella et al. 2026, arXiv 2603.19921), micro: "
    "the one-to-one matching that maximises the pairs' overlap F (Hungarian); a matched predicted span earns "
    "overlap / its length toward precision, a matched gold span overlap / its length toward recall",
}


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


@dataclass(frozen=True)
class PartialPRF:
    """MPP's credits: partial true positives toward precision and toward recall, over the predicted and the gold
    spans they are shares of. As the authors' code divides them: precision 1.0 when nothing is predicted and
    recall 1.0 when nothing is gold (so a judge that marks nothing where nothing is wrong is perfect, and one that
    marks nothing elsewhere has recall 0, F1 0)."""

    tp_precision: float
    tp_recall: float
    predicted: int
    gold: int

    @property
    def precision(self) -> float:
        return self.tp_precision / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.tp_recall / self.gold if self.gold else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def __add__(self, other: PartialPRF) -> PartialPRF:
        return PartialPRF(
            self.tp_precision + other.tp_precision,
            self.tp_recall + other.tp_recall,
            self.predicted + other.predicted,
            self.gold + other.gold,
        )

    def as_dict(self) -> dict[str, float | int]:
        return {
            "tp_precision": self.tp_precision,
            "tp_recall": self.tp_recall,
            "predicted": self.predicted,
            "gold": self.gold,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


def mpp(predicted: Sequence[Span], gold: Sequence[Span]) -> PartialPRF:
    """MPP on one document: the one-to-one matching of predicted and gold spans that maximises the sum of each
    pair's overlap F, 2·overlap / (|predicted| + |gold|) (the Hungarian algorithm, as the authors' code finds
    it); each matched pair that overlaps adds overlap / |predicted| to precision's credit and overlap / |gold|
    to recall's. Severities and categories are not compared (severity penalty 0)."""
    pred, gold_ = check_spans(predicted, "predicted"), check_spans(gold, "gold")
    tp_precision = tp_recall = 0.0
    if pred and gold_:
        starts, ends = np.array(pred).T
        g_starts, g_ends = np.array(gold_).T
        overlap = np.clip(np.minimum(ends[:, None], g_ends) - np.maximum(starts[:, None], g_starts), 0, None)
        lengths, g_lengths = ends - starts, g_ends - g_starts
        rows, columns = linear_sum_assignment(2 * overlap / (lengths[:, None] + g_lengths), maximize=True)
        for i, j in zip(rows, columns, strict=True):
            if overlap[i, j] > 0:
                tp_precision += overlap[i, j] / lengths[i]
                tp_recall += overlap[i, j] / g_lengths[j]
    return PartialPRF(float(tp_precision), float(tp_recall), len(pred), len(gold_))


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
    The first unused overlapping prediction (in sorted order) is found in O(log n) with a tree of the
    unused predictions' largest end, so a document with many spans costs (gold + predicted) · log.
    """
    remaining = sorted(predicted)
    starts = [start for start, _ in remaining]
    ends = _MaxTree([end for _, end in remaining])
    matched = [False] * len(gold)
    for g_index in sorted(range(len(gold)), key=lambda i: gold[i]):
        g_start, g_end = gold[g_index]
        # candidates start before the gold span ends; the first of them still unused that ends after it starts
        found = ends.first_above(bisect.bisect_left(starts, g_end), g_start)
        if found is not None:
            ends.remove(found)
            matched[g_index] = True
    return matched


class _MaxTree:
    """The largest value of each range of a list, with removal: `first_above(limit, value)` is the first
    index below `limit` whose value exceeds `value`."""

    def __init__(self, values: Sequence[int]) -> None:
        self.size = 1
        while self.size < max(1, len(values)):
            self.size *= 2
        self.tree = [-1] * (2 * self.size)
        self.tree[self.size : self.size + len(values)] = values
        for node in range(self.size - 1, 0, -1):
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])

    def remove(self, index: int) -> None:
        node = self.size + index
        self.tree[node] = -1
        while node > 1:
            node //= 2
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])

    def first_above(self, limit: int, value: int) -> int | None:
        return self._first(1, 0, self.size, limit, value)

    def _first(self, node: int, low: int, high: int, limit: int, value: int) -> int | None:
        if low >= limit or self.tree[node] <= value:
            return None
        if high - low == 1:
            return low
        middle = (low + high) // 2
        left = self._first(2 * node, low, middle, limit, value)
        return left if left is not None else self._first(2 * node + 1, middle, high, limit, value)


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
    return list(_tokens_of(text))


# a decision fit reads the same documents, and mostly the same spans, thousands of times
@functools.lru_cache(maxsize=8192)
def _tokens_of(text: str) -> tuple[Span, ...]:
    return tuple((m.start(), m.end()) for m in re.finditer(r"\S+", text))


@functools.lru_cache(maxsize=65536)
def _marked_in(spans: tuple[Span, ...], text: str) -> frozenset[int]:
    return frozenset(_marked_tokens(spans, _tokens_of(text)))


def token_count(text: str) -> int:
    """The number of whitespace-separated tokens of `text`."""
    return len(_tokens_of(text))


def _marked_tokens(spans: Sequence[Span], tokens: Sequence[Span]) -> set[int]:
    """The indices of the tokens any span overlaps: the spans merged into disjoint ranges, each token looked
    up by bisection ((tokens + spans) · log, not tokens × spans)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    ends = [end for _, end in merged]
    marked = set()
    for index, (t_start, t_end) in enumerate(tokens):
        at = bisect.bisect_right(ends, t_start)  # the first range that ends after the token starts
        if at < len(merged) and merged[at][0] < t_end:
            marked.add(index)
    return marked


def token_prf(predicted: Sequence[Span], gold: Sequence[Span], text: str) -> PRF:
    """Token-level P/R: a whitespace token is marked if any of its characters lies in a span.

    This is the positional token view of the RotoWire evaluation (tokens marked by the gold
    and by the submission) carried over to character spans of any text.
    """
    pred, gold_ = check_spans(predicted, "predicted"), check_spans(gold, "gold")
    p_tokens, g_tokens = _marked_in(tuple(pred), text), _marked_in(tuple(gold_), text)
    tp = len(p_tokens & g_tokens)
    return PRF(tp=tp, fp=len(p_tokens) - tp, fn=len(g_tokens) - tp)


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def snap_to_words(spans: Sequence[Span], text: str) -> list[Span]:
    """Each span grown to whole words and trimmed of surrounding whitespace (factgenie's
    word-boundary snapping): a span that starts or ends inside a word takes the whole word.
    Spans left empty are dropped; spans that snap to the same range are kept once."""
    snapped: list[Span] = []
    seen: set[Span] = set()
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
        if (start, end) not in seen:
            seen.add((start, end))
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
    """Micro exact / overlap / token / MPP P/R/F1 over the scored documents, plus per-category recall.

    A document whose prediction is None (the judge produced no evaluation) or that is absent
    from `predictions` is unscored: counted, and left out of every total — not treated as
    "no errors", which would reward silence with free precision. Per-category recall is the
    share of gold spans of each category matched in the exact and the overlap matching.
    `gold_dropped` sums the loaders' unplaceable gold spans over the scored documents.
    """
    exact, overlap, token = [], [], []
    partial = PartialPRF(0.0, 0.0, 0, 0)
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
        partial += mpp(pred, gold)
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
        "mpp": partial.as_dict(),
        "per_category_recall": {
            category: {
                "gold": t["gold"],
                "exact": t["exact"] / t["gold"],
                "overlap": t["overlap"] / t["gold"],
            }
            for category, t in sorted(by_category.items())
        },
    }
