"""Score aggregation across annotators (thesis Algorithm 1) and the 0-100 mapping."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spanjudge.inference.contract import rating_to_score, round_to_multiple_of_five

MIN_RATINGS_FOR_OUTLIERS = 3
"""With two ratings neither is an outlier of the other; we need at least three."""


@dataclass(frozen=True)
class Aggregate:
    mean_rating: float  # mean of the kept 1-5 ratings
    score: int  # 0-100, a multiple of 5
    kept: tuple[bool, ...]  # per input rating: False = dropped as an outlier


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


def aggregate(ratings: Sequence[float]) -> Aggregate:
    if not ratings:
        raise ValueError("no ratings to aggregate")
    kept = drop_outliers(ratings)
    mean = statistics.fmean(r for r, keep in zip(ratings, kept, strict=True) if keep)
    return Aggregate(mean_rating=mean, score=round_to_multiple_of_five(rating_to_score(mean)), kept=kept)
