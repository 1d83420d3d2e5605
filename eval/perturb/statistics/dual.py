"""The dual-perspective meta-evaluation (seed 001, docs/research/benchmarks.md §2): linear weighted κ,
CEM-ORD and adjacent-pair accuracy."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


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
