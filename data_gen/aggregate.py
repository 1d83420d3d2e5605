"""Score aggregation across annotators (thesis Algorithm 1, `inference.consensus.drop_outliers`, which
a judge's sampled scores share) and the 0-100 mapping; and the merge of their errors that stands in for
the supervisor's when its call fails or its reply does not parse."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spanjudge.inference.consensus import MIN_RATINGS_FOR_OUTLIERS, drop_outliers
from spanjudge.inference.contract import ErrorAnnotation, cap_errors, rating_to_score, round_to_multiple_of_five

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


UNION_RULE = (
    "the annotators' errors merged without the supervisor: one per location (its most severe, whitespace and case "
    "aside), every error without a location, at most 8, the most severe kept"
)


def union_of_errors(error_sets: Sequence[Sequence[ErrorAnnotation]]) -> list[ErrorAnnotation]:
    """The annotators' errors as one set when the supervisor cannot merge them (`UNION_RULE`): the supervisor
    is one member of the ensemble, and an item its call lost would otherwise lose every annotator's answer."""
    by_location: dict[str, ErrorAnnotation] = {}
    unlocated: list[ErrorAnnotation] = []
    for errors in error_sets:
        for error in errors:
            if not error.location:
                unlocated.append(error)
                continue
            key = " ".join(error.location.split()).casefold()
            if key not in by_location or error.severity > by_location[key].severity:
                by_location[key] = error
    return cap_errors([*by_location.values(), *unlocated])
