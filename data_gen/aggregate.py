"""Score aggregation across annotators (thesis Algorithm 1, `inference.consensus.drop_outliers`, which
a judge's sampled scores share) and the 0-100 mapping."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spanjudge.inference.consensus import MIN_RATINGS_FOR_OUTLIERS, drop_outliers
from spanjudge.inference.contract import rating_to_score, round_to_multiple_of_five

__all__ = ["MIN_RATINGS_FOR_OUTLIERS", "Aggregate", "aggregate", "drop_outliers"]  # Algorithm 1 lives in inference


@dataclass(frozen=True)
class Aggregate:
    mean_rating: float  # mean of the kept 1-5 ratings
    score: int  # 0-100, a multiple of 5
    kept: tuple[bool, ...]  # per input rating: False = dropped as an outlier


def aggregate(ratings: Sequence[float]) -> Aggregate:
    if not ratings:
        raise ValueError("no ratings to aggregate")
    kept = drop_outliers(ratings)
    mean = statistics.fmean(r for r, keep in zip(ratings, kept, strict=True) if keep)
    return Aggregate(mean_rating=mean, score=round_to_multiple_of_five(rating_to_score(mean)), kept=kept)
