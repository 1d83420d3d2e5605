"""DHP, discernment of hierarchical perturbation (seed 000, docs/research/benchmarks.md §1): Wilcoxon
p-values, their harmonic mean and the discernment score."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

SIGNIFICANCE = 0.05


def wilcoxon_greater(original: Sequence[float], perturbed: Sequence[float]) -> float:
    """One-sided Wilcoxon signed-rank p-value, H1: originals score higher than perturbed texts.

    DHP (000, §3.3.1) uses `scipy.stats.wilcoxon` with a one-sided alternative "that S^0 has a
    greater distribution than S^i". We keep scipy's default `zero_method="wilcox"` (zero
    differences are dropped before ranking, Wilcoxon's original rule) and default `method`
    (exact distribution for small samples without ties, normal approximation otherwise), as
    the paper does not say it changed them. scipy cannot test when every difference is zero
    (or there are no pairs); no evidence of a drop means p = 1 (docs/research/benchmarks.md §1).
    """
    if len(original) != len(perturbed):
        raise ValueError(f"paired scores differ in length: {len(original)} originals, {len(perturbed)} perturbed")
    diffs = np.asarray(original, dtype=float) - np.asarray(perturbed, dtype=float)
    if np.isnan(diffs).any():
        raise ValueError("paired scores contain NaN; drop unscored pairs before testing")
    if diffs.size == 0 or not np.any(diffs != 0):
        return 1.0
    from scipy import stats  # here, not at the top: scipy.stats costs a second to every command's help

    result = stats.wilcoxon(diffs, alternative="greater", zero_method="wilcox")
    return float(result.pvalue)


def harmonic_p(p_values: Sequence[float], weights: Sequence[float] | None = None, normalised: bool = False) -> float:
    """Combine one perturbation's per-metric p-values with the harmonic mean p (DHP §3.3.2).

    Default is the formula 000 prints, p = 1 / Σ_j 1/p_j (not divided by M, so it is M times
    smaller than the textbook harmonic mean). `normalised=True` gives M / Σ_j 1/p_j. With
    expert weights (Σ w = 1), p^EW = 1 / Σ_j w_j/p_j — already a weighted mean, so combining
    it with `normalised` is refused rather than silently reinterpreted. Any p_j = 0 that
    carries weight makes the sum infinite, so the result is 0.0.
    """
    ps = [float(p) for p in p_values]
    if not ps:
        raise ValueError("harmonic_p needs at least one p-value")
    if any(not 0.0 <= p <= 1.0 for p in ps):
        raise ValueError(f"p-values must lie in [0, 1], got {ps}")
    if weights is None:
        ws = [1.0] * len(ps)
    else:
        if normalised:
            raise ValueError("expert weights already sum to 1; do not combine them with normalised=True")
        ws = [float(w) for w in weights]
        if len(ws) != len(ps):
            raise ValueError(f"{len(ws)} weights for {len(ps)} p-values; give one weight per metric")
        if any(w < 0 for w in ws):
            raise ValueError(f"expert weights must be non-negative, got {ws}")
        if abs(sum(ws) - 1.0) > 1e-9:
            raise ValueError(f"expert weights must sum to 1 (within 1e-9), they sum to {sum(ws)!r}")
    if any(p == 0.0 and w > 0 for p, w in zip(ps, ws, strict=True)):
        return 0.0
    total = sum(w / p for p, w in zip(ps, ws, strict=True) if w > 0)
    if total == 0.0:
        return 1.0
    return (len(ps) if normalised else 1.0) / total


def discernment(p: float) -> float:
    """D = ln(p) / ln(0.05) = log_0.05(p) (DHP §3.3.3): D = 1 is exactly the 0.05 threshold.

    p = 0 gives +inf (infinitely significant); p = 1 gives 0.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    if p == 0.0:
        return math.inf
    return math.log(p) / math.log(SIGNIFICANCE) + 0.0  # + 0.0 turns -0.0 (p = 1) into 0.0


@dataclass(frozen=True)
class DHPSet:
    """One perturbed set: its key (e.g. "C-R-typos-minor"), its level (C/W/S) and its combined p."""

    key: str
    level: str
    p: float


def level_balanced_mean(values_by_set: Mapping[str, float], level_of: Mapping[str, str]) -> float:
    """Mean in which every level present weighs 1/L, split evenly over that level's sets.

    000 §3.3.3: "We assign equal weights to perturbations within the same level and make sure
    that the sum of the weights is the same for each level." So a level with one set counts
    as much as a level with four.
    """
    if not values_by_set:
        raise ValueError("level_balanced_mean needs at least one set")
    missing = [key for key in values_by_set if key not in level_of]
    if missing:
        raise ValueError(f"no level given for set(s): {', '.join(missing)}")
    by_level: dict[str, list[float]] = {}
    for key, value in values_by_set.items():
        by_level.setdefault(level_of[key], []).append(float(value))
    return sum(sum(vals) / len(vals) for vals in by_level.values()) / len(by_level)


def dhp_summary(sets: Sequence[DHPSet]) -> dict[str, object]:
    """Per-set discernment D plus D_min and the level-balanced D_avg for one dataset.

    Call it once with the plain harmonic p-values and once with the expert-weighted ones to
    get (D, D_min, D_avg) and (D^EW, D^EW_min, D^EW_avg). Returns
    {"D": {key: D}, "D_min": float, "D_avg": float, "levels": {level: [keys]}}.
    """
    if not sets:
        raise ValueError("dhp_summary needs at least one perturbed set")
    keys = [s.key for s in sets]
    duplicates = sorted(k for k, n in Counter(keys).items() if n > 1)
    if duplicates:
        raise ValueError(f"perturbed-set keys repeat: {', '.join(duplicates)}")
    d_values = {s.key: discernment(s.p) for s in sets}
    level_of = {s.key: s.level for s in sets}
    levels: dict[str, list[str]] = {}
    for s in sets:
        levels.setdefault(s.level, []).append(s.key)
    return {
        "D": d_values,
        "D_min": min(d_values.values()),
        "D_avg": level_balanced_mean(d_values, level_of),
        "levels": levels,
    }
