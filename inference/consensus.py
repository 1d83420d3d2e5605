"""Agreement among several evaluations of one output: the thesis's Algorithm 1 for scores, and
self-consistency for a judge's sampled replies.

- `drop_outliers` (thesis Algorithm 1): the ensemble's annotators' ratings (`data_gen.aggregate`)
  and a judge's sampled scores are aggregated by the same rule.
- `consensus(evaluations, samples)`: N sampled replies of one judge merged into one evaluation.
  The anchored error spans of all replies are grouped by overlap (spans that share at least one
  character, directly or through others, are one group); a group is kept when at least half of
  the N replies mark a span in it, its **confidence** the share of replies that do. The kept
  error is the group's span that most of the group's other spans overlap (the first such, in
  reply order), with the group's median severity (rounded half up). Errors without a location
  in the output (omissions, quotes not found) cannot be matched and are left out. The score is
  the mean of the replies' scores after Algorithm 1's outlier rule; unparsed replies count as
  replies that marked nothing and add no score.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel

from .contract import ErrorAnnotation, Evaluation

MIN_RATINGS_FOR_OUTLIERS = 3
"""With two ratings neither is an outlier of the other; we need at least three."""


def drop_outliers(ratings: Sequence[float]) -> tuple[bool, ...]:
    """Algorithm 1: drop x when |x - mu| > 2 sigma AND |x - mu| > 1.

    mu and sigma are those of the *other* ratings of the same item (leave-one-out,
    population sigma), following the thesis text: "a score that differs from the other
    scores for the same output by more than two standard deviations". Computed over all
    ratings including x, the rule could never fire with five annotators (one rating
    against four equal ones sits exactly 2 sigma away), which Table 3.3 contradicts.
    The |x - mu| > 1 condition keeps near-unanimous sets from losing a rating over a
    one-label difference.
    """
    if len(ratings) < MIN_RATINGS_FOR_OUTLIERS:
        return tuple(True for _ in ratings)
    kept = []
    for index, x in enumerate(ratings):
        others = [r for i, r in enumerate(ratings) if i != index]
        mu, sigma = statistics.fmean(others), statistics.pstdev(others)
        kept.append(not (abs(x - mu) > 2 * sigma and abs(x - mu) > 1))
    return tuple(kept) if any(kept) else tuple(True for _ in ratings)


class ConsensusError(BaseModel):
    """A span that at least half of the sampled replies marked."""

    location: str | None
    explanation: str
    severity: int
    start: int
    end: int
    confidence: float  # the share of the N replies that marked an overlapping span


class Consensus(BaseModel):
    """N sampled replies of one judge merged (see the module docstring)."""

    samples: int  # replies asked for
    parsed: int  # replies that parsed (the others marked nothing and add no score)
    score: float | None  # None when no reply parsed
    errors: list[ConsensusError]


def _overlap(a: ErrorAnnotation, b: ErrorAnnotation) -> bool:
    assert a.start is not None and a.end is not None and b.start is not None and b.end is not None
    return a.start < b.end and b.start < a.end


def _groups(marked: list[tuple[int, ErrorAnnotation]]) -> list[list[tuple[int, ErrorAnnotation]]]:
    """Connected components of the overlap relation, in order of their first span."""
    parent = list(range(len(marked)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(marked)):
        for j in range(i + 1, len(marked)):
            if _overlap(marked[i][1], marked[j][1]):
                parent[root(j)] = root(i)
    groups: dict[int, list[tuple[int, ErrorAnnotation]]] = {}
    for i, item in enumerate(marked):
        groups.setdefault(root(i), []).append(item)
    return list(groups.values())


def _median_severity(severities: list[int]) -> int:
    return math.floor(statistics.median(severities) + 0.5)


def consensus(evaluations: Sequence[Evaluation | None], samples: int) -> Consensus:
    """Merge the sampled replies' evaluations (None: a reply that did not parse); `samples` = N."""
    parsed = [e for e in evaluations if e is not None]
    marked = [
        (reply, error)
        for reply, evaluation in enumerate(evaluations)
        if evaluation is not None
        for error in evaluation.errors
        if error.start is not None and error.end is not None
    ]
    kept: list[ConsensusError] = []
    for group in _groups(marked):
        share = len({reply for reply, _ in group}) / samples
        if share < 0.5:
            continue
        spans = [error for _, error in group]
        central = max(spans, key=lambda e: sum(_overlap(e, other) for other in spans))  # first of the best
        assert central.start is not None and central.end is not None
        kept.append(
            ConsensusError(
                location=central.location,
                explanation=central.explanation,
                severity=_median_severity([e.severity for e in spans]),
                start=central.start,
                end=central.end,
                confidence=share,
            )
        )
    scores = [float(e.score) for e in parsed if e.score is not None]
    kept_scores = [s for s, keep in zip(scores, drop_outliers(scores), strict=True) if keep]
    return Consensus(
        samples=samples,
        parsed=len(parsed),
        score=statistics.fmean(kept_scores) if kept_scores else None,
        errors=sorted(kept, key=lambda e: (e.start, e.end)),
    )
