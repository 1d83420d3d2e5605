"""Robustness to a perturbed prompt (seed 003, docs/research/benchmarks.md §4): Krippendorff's α, exact
match and the perturbed rating."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import combinations_with_replacement

import krippendorff
import numpy as np


def alpha_ordinal(reliability_rows: Sequence[Sequence[float | None]]) -> float:
    """Krippendorff's ordinal α; rows are raters, columns units, None/NaN a missing rating.

    This is the `krippendorff` package's `reliability_data` layout (raters × units), the
    package 003 says it used, with its default handling of missing values.
    """
    rows = [[math.nan if v is None else float(v) for v in row] for row in reliability_rows]
    if len({len(row) for row in rows}) > 1:
        raise ValueError("every rater row must rate the same units (pad with None)")
    return float(krippendorff.alpha(reliability_data=np.asarray(rows, dtype=float), level_of_measurement="ordinal"))


def krippendorff_alpha_ordinal(judge: Sequence[float | None], experts: Sequence[Sequence[float | None]]) -> float:
    """Ordinal α with the judge as one more rater beside the experts (003, Table 1).

    003 §4.2: "When Krippendorff's alpha is calculated using ratings from three human
    annotators and one LLM output, a drop is consistently observed" — so the reliability
    data are the expert rows plus the judge row, and a high α means the judge fits in with
    the experts. The judge's scores must already be on the experts' scale (bin a 0–100
    score with `EqualWidthBinner` first): ordinal α ranks the pooled values.
    """
    if not experts:
        raise ValueError("krippendorff_alpha_ordinal needs at least one expert row")
    n_units = len(judge)
    bad = [i for i, row in enumerate(experts) if len(row) != n_units]
    if bad:
        raise ValueError(f"expert row(s) {bad} do not have the judge's {n_units} units")
    return alpha_ordinal([*experts, judge])


def exact_match_rate(a: Sequence[float | None], b: Sequence[float | None]) -> tuple[float, int]:
    """Share of items whose two scores are equal (003 Table 3), over items scored in both.

    Returns (rate, pairs used); no pair gives NaN.
    """
    if len(a) != len(b):
        raise ValueError(f"score lists differ in length: {len(a)} and {len(b)}")
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if not pairs:
        return math.nan, 0
    return sum(x == y for x, y in pairs) / len(pairs), len(pairs)


def perturbed_rating(expert_ratings: Sequence[float], scale: Sequence[int]) -> int:
    """The misleading "human expert" rating 003 injects into the prompt (its PR formula, §3).

    r = mode of the expert ratings; "In cases where all three annotators differ, we take the
    highest rating as the mode" — we generalise that to any tie for the mode (take the
    highest tied value). Then PR = max(S) if r ≤ max(S)/2, else min(S): a low consensus is
    contradicted by the top of the scale and a high one by the bottom.
    """
    if not expert_ratings:
        raise ValueError("perturbed_rating needs at least one expert rating")
    if not scale:
        raise ValueError("perturbed_rating needs a non-empty scale")
    counts = Counter(expert_ratings)
    top = max(counts.values())
    r = max(value for value, n in counts.items() if n == top)
    return int(max(scale)) if r <= max(scale) / 2 else int(min(scale))


def perturbed_ratings_for_mean(mean: float, scale: Sequence[int], raters: int = 3) -> set[int]:
    """Every PR that 003's mode rule gives for some set of `raters` integer ratings on `scale`
    whose mean is `mean`. One value: the mean decides PR; two: only the individual ratings do
    (e.g. mean 7/3 on 1-5 is (1, 1, 5) -> PR 5 but also (1, 2, 4) -> PR 1)."""
    total = round(mean * raters)
    return {
        perturbed_rating(list(combo), scale)
        for combo in combinations_with_replacement(sorted(scale), raters)
        if sum(combo) == total
    }
