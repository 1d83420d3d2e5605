# Over 500 lines: all four benchmarks' pure statistics, kept in one I/O-free module beside their hand-checked tests.
"""Pure metrics of the perturbation benchmarks (issue #7), one small function per statistic.

Everything here is numpy/scipy arithmetic over plain sequences: no I/O, no judge, no config,
so every number a report prints can be checked by hand (tests/unit/test_perturb_metrics.py).
Sections follow docs/research/benchmarks.md: §1 DHP (Wilcoxon, harmonic-mean p,
discernment), §2 dual perspective (linear weighted κ, CEM-ORD, adjacent-pair accuracy),
§3 aspect-targeted attacks (expected-effect matrix, Δ summaries), §4 perturbed prompt
(Krippendorff's α, exact match, the perturbed rating), plus the scale helpers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement

import krippendorff
import numpy as np
from scipy import stats

# ---------------------------------------------------------------------------------------------
# §1 DHP — Discernment of Hierarchical Perturbation (seed 000)
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# §2 Dual-perspective meta-evaluation (seed 001)
# ---------------------------------------------------------------------------------------------


def _class_indices(values: Sequence[int], classes: Sequence[int], what: str) -> list[int]:
    position = {c: i for i, c in enumerate(classes)}
    if len(position) != len(classes):
        raise ValueError(f"classes repeat: {list(classes)}")
    unknown = sorted({v for v in values if v not in position})
    if unknown:
        raise ValueError(f"{what} holds values outside the classes {list(classes)}: {unknown}")
    return [position[v] for v in values]


def _paired_classes(
    gold: Sequence[int], predicted: Sequence[int], classes: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Class indices of gold and predicted labels, checked to pair up."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    return _class_indices(gold, classes, "gold"), _class_indices(predicted, classes, "predicted")


def linear_weighted_kappa(gold: Sequence[int], predicted: Sequence[int], classes: Sequence[int]) -> float:
    """Cohen's linear weighted κ as 001 Appendix A.2 defines it.

    c_ij counts items predicted i with gold j; e_ij = c_i• · c_•j / N (independence);
    w_ij = |i − j| in class-index steps (so classes need only be ordered, not equally spaced);
    κ = 1 − Σ w·c / Σ w·e. When Σ w·e = 0 (all gold and all predictions in one single class)
    κ is undefined and we return NaN rather than invent agreement.
    """
    g, p = _paired_classes(gold, predicted, classes)
    if not g:
        return math.nan
    k = len(classes)
    confusion = np.zeros((k, k))
    for pi, gj in zip(p, g, strict=True):
        confusion[pi, gj] += 1
    expected = np.outer(confusion.sum(axis=1), confusion.sum(axis=0)) / confusion.sum()
    idx = np.arange(k)
    weights = np.abs(idx[:, None] - idx[None, :])
    denominator = float((weights * expected).sum())
    if denominator == 0.0:
        return math.nan
    return 1.0 - float((weights * confusion).sum()) / denominator


def cem_ord(gold: Sequence[int], predicted: Sequence[int], classes: Sequence[int]) -> float:
    """Closeness Evaluation Measure for ordinal classification (Amigó et al., ACL 2020).

    001 names Amigó et al. (2020) next to κ (App. A.2) and its code reports CEM-ORD; the
    paper prints no formula, so we use Amigó et al.'s definition. With n_k the number of
    items whose GOLD class is k and N the number of items:

        prox(a, b) = −log2( (n_a / 2 + Σ_{k between a and b, excluding a, including b} n_k) / N )
        CEM-ORD    = Σ_i prox(pred_i, gold_i) / Σ_i prox(gold_i, gold_i)

    (for a = b the sum is empty: prox(b, b) = −log2(n_b / 2N)). A prediction is the closer
    to its gold class the fewer gold items lie between them, so skipping a crowded class
    costs more than skipping a rare one. 1 = perfect; lower is worse.
    """
    g, p = _paired_classes(gold, predicted, classes)
    if not g:
        return math.nan
    counts = np.bincount(g, minlength=len(classes)).astype(float)
    total = float(len(g))

    def prox(a: int, b: int) -> float:
        step = 1 if b >= a else -1
        between = sum(counts[k] for k in range(a + step, b + step, step)) if a != b else 0.0
        return -math.log2((counts[a] / 2 + between) / total)

    return sum(prox(pi, gi) for pi, gi in zip(p, g, strict=True)) / sum(prox(gi, gi) for gi in g)


def gap_pair_counts(sequences: Sequence[Sequence[float | None]], d: int = 1) -> tuple[int, int, int]:
    """(correct, used, skipped) over pairs (k, k+d) of best-first sequences; see `gap_accuracy`."""
    if d < 1:
        raise ValueError(f"the gap d must be at least 1, got {d}")
    correct = used = skipped = 0
    for sequence in sequences:
        for k in range(len(sequence) - d):
            better, worse = sequence[k], sequence[k + d]
            if better is None or worse is None:
                skipped += 1
                continue
            used += 1
            correct += int(better > worse)
    return correct, used, skipped


def gap_accuracy(sequences: Sequence[Sequence[float | None]], d: int) -> tuple[float, int]:
    """Share of pairs (k, k+d) that the judge orders correctly, and how many pairs counted.

    Orientation: each sequence is BEST FIRST (index 0 is the cleanest target, each later
    one has one more injected error). 001 §3.2 writes its sequences the other way round —
    "t_i1, …, t_ik with the incremental target quality" scored by 1(x_ij < x_i,j+1) — which is
    the same test on the reversed list. A pair is correct iff the better target scores
    strictly higher (ties are errors, as the strict inequality in 001 makes them). Pairs
    with a missing score (None: no evaluation) are skipped; the count returned is the pairs
    used, so the caller can report the skipped ones. No usable pair gives NaN.
    """
    correct, used, _ = gap_pair_counts(sequences, d)
    return (correct / used if used else math.nan), used


def adjacent_pair_accuracy(sequences: Sequence[Sequence[float | None]]) -> tuple[float, int]:
    """001's local-perspective accuracy: `gap_accuracy` with d = 1 (adjacent targets)."""
    return gap_accuracy(sequences, 1)


# ---------------------------------------------------------------------------------------------
# §4 Robustness to a perturbed prompt (seed 003)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Scale helpers
# ---------------------------------------------------------------------------------------------


def to_likert(score_0_100: float) -> float:
    """Map a 0–100 judge score linearly onto 1–5 (s' = 1 + 4·s/100) for Likert deltas."""
    return 1.0 + 4.0 * float(score_0_100) / 100.0


@dataclass(frozen=True)
class EqualWidthBinner:
    """Cut [low, high] into len(classes) equal-width bins mapped to ordinal classes in order.

    Bins are half-open on the right, [edge_i, edge_i+1), except the last, which is closed so
    that `high` itself lands in the top class: for 0–100 into 1..5, 20 → 2, 100 → 5. Scores
    outside [low, high] are an error, not clipped, so a scale mix-up shows (only float round-off
    within 1e-9 of the range is snapped to it).
    """

    low: float
    high: float
    classes: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(self.classes))
        if not self.high > self.low:
            raise ValueError(f"binner needs low < high, got [{self.low}, {self.high}]")
        if not self.classes:
            raise ValueError("binner needs at least one class")

    @property
    def edges(self) -> list[float]:
        """The len(classes) + 1 bin edges, low first."""
        width = (self.high - self.low) / len(self.classes)
        return [self.low + i * width for i in range(len(self.classes))] + [self.high]

    def __call__(self, score: float) -> int:
        # a metric's float round-off (BLEU of an unchanged text: 100.00000000000004) is no scale mix-up
        slack = 1e-9 * (self.high - self.low)
        if self.low - slack <= score <= self.high + slack:
            score = min(max(score, self.low), self.high)
        if not self.low <= score <= self.high:
            raise ValueError(f"score {score} is outside the binner's range [{self.low}, {self.high}]")
        width = (self.high - self.low) / len(self.classes)
        index = min(int((score - self.low) // width), len(self.classes) - 1)
        return self.classes[index]

    def describe(self) -> str:
        """One line for reports, e.g. 'equal-width bins on [0, 100]: [0, 20)→1 … [80, 100]→5'."""
        edges = self.edges
        parts = [
            f"[{_fmt(edges[i])}, {_fmt(edges[i + 1])}{']' if i == len(self.classes) - 1 else ')'}→{c}"
            for i, c in enumerate(self.classes)
        ]
        return f"equal-width bins on [{_fmt(self.low)}, {_fmt(self.high)}]: " + ", ".join(parts)


def _fmt(x: float) -> str:
    return f"{x:g}"


# ---------------------------------------------------------------------------------------------
# §3 Aspect-targeted perturbation attacks (seed 002)
# ---------------------------------------------------------------------------------------------

ATTACK_ASPECTS: tuple[str, ...] = (
    "fluency",
    "coherence",
    "grammaticality",
    "simplicity",
    "readability",
    "faithfulness",
    "non-contradiction",
    "non-hallucination",
    "informativeness",
    "adequacy",
    "overall",
)

ATTACK_PERTURBATIONS: tuple[str, ...] = (
    "Repetition",
    "Passive Voice",
    "Inversion",
    "Improper Connective",
    "Sentence Exchange",
    "Incorrect Verb Form",
    "Word Exchange",
    "Spelling Mistake",
    "Uncommon Phrase",
    "Complex Sentence",
    "Abbreviation",
    "Hypernym",
    "Sentence Deletion",
    "Complement",
    "Continuation",
    "Different Entity",
    "Conflicting Fact",
    "Negation",
)

# Rows as printed in docs/research/benchmarks.md §3 (columns Flu Coh Gram Sim Read Fai Cont Hal Inf Ade All);
# the rows marked "same row" there share their named row's string.
_MATRIX_ROWS: dict[str, str] = {
    "Repetition": "x F F F x F F F F F x",
    "Passive Voice": "T F F F T F F F F F x",
    "Inversion": "T F F F T F F F F F T",
    "Improper Connective": "F T F F T F F F F F T",
    "Sentence Exchange": "F T F F T F F F F F T",
    "Incorrect Verb Form": "T F T F T F F F F F T",
    "Word Exchange": "T F T F T F F F F F T",
    "Spelling Mistake": "T F T F x F F F F F T",
    "Uncommon Phrase": "F F F T T F F F F F x",
    "Complex Sentence": "F F F T x F F F F F x",
    "Abbreviation": "F F F F F F F F T T T",
    "Hypernym": "F F F F F F F F T T T",
    "Sentence Deletion": "F F F F F F F F T T T",
    "Complement": "F F F F F T F T F T T",
    "Continuation": "F F F F F T F T F T T",
    "Different Entity": "F F F F F T T x T T T",
    "Conflicting Fact": "F F F F F T T x T T T",
    "Negation": "F F F F F T T x T T T",
}

EXPECTED_EFFECT: dict[str, dict[str, str]] = {
    perturbation: dict(zip(ATTACK_ASPECTS, _MATRIX_ROWS[perturbation].split(), strict=True))
    for perturbation in ATTACK_PERTURBATIONS
}
"""EXPECTED_EFFECT[perturbation][aspect]: "T" a drop is expected, "F" none is, "x" excluded."""

DELTA_PASS_T = 0.5
DELTA_PASS_F = 0.2


def attack_delta(
    original_scores: Sequence[float | None], perturbed_scores: Sequence[float | None]
) -> tuple[float | None, int]:
    """Δ = mean over items of score(original) − score(perturbed), on the scale given (1–5).

    Items with either score missing are left out; returns (Δ, items used), (None, 0) if none.
    """
    if len(original_scores) != len(perturbed_scores):
        raise ValueError(f"{len(original_scores)} original scores but {len(perturbed_scores)} perturbed ones")
    diffs = [
        float(o) - float(p)
        for o, p in zip(original_scores, perturbed_scores, strict=True)
        if o is not None and p is not None
    ]
    if not diffs:
        return None, 0
    return sum(diffs) / len(diffs), len(diffs)


def attack_summary(delta: Mapping[tuple[str, str], float | None]) -> dict[str, float | int | None]:
    """Summarise a Δ heat map keyed by (perturbation, aspect) against EXPECTED_EFFECT.

    T cells: mean Δ (higher is better) and the share with Δ > 0.5; F cells: mean |Δ| (lower
    is better) and the share with |Δ| < 0.2 (002 / docs/research/benchmarks.md §3). "x" cells are ignored.
    A T/F cell absent from `delta`, or None, is counted as missing, not as zero. Means and
    rates over no cell are None.
    """
    unknown = [key for key in delta if key[0] not in EXPECTED_EFFECT or key[1] not in EXPECTED_EFFECT.get(key[0], {})]
    if unknown:
        raise ValueError(f"unknown (perturbation, aspect) cell(s): {unknown[:3]}")
    t_values: list[float] = []
    f_values: list[float] = []
    t_missing = f_missing = 0
    for perturbation, row in EXPECTED_EFFECT.items():
        for aspect, expected in row.items():
            if expected == "x":
                continue
            value = delta.get((perturbation, aspect))
            if expected == "T":
                if value is None:
                    t_missing += 1
                else:
                    t_values.append(float(value))
            elif value is None:
                f_missing += 1
            else:
                f_values.append(abs(float(value)))
    return {
        "mean_delta_T": _mean_or_none(t_values),
        "mean_abs_delta_F": _mean_or_none(f_values),
        "pass_rate_T": _mean_or_none([float(v > DELTA_PASS_T) for v in t_values]),
        "pass_rate_F": _mean_or_none([float(v < DELTA_PASS_F) for v in f_values]),
        "n_T": len(t_values),
        "n_F": len(f_values),
        "missing_T": t_missing,
        "missing_F": f_missing,
    }


def _mean_or_none(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
