"""Would recalibrating a judge's span confidence help? Measured on a development split, held out by input.

A judge's span confidence (`calibration`: the probability that it writes a span, with those before it) can be
mapped after the fact, on the logit scale, by

- **temperature**: c' = σ(logit(c) / T), which keeps 0.5 where it is and only sharpens or flattens;
- **Platt scaling**: c' = σ(a · logit(c) + b), which can also move the base rate;

each fitted by log loss on (confidence, overlaps a human span) pairs. Fitted and read on the same pairs, any
map looks good, so `cross_fitted` fits on one fold of the inputs and predicts the other. Beside the maps:
the ECE of the constant predictor (the other fold's base rate), which any map that knows nothing can reach,
and the AUC, how well the confidence ranks the spans that overlap a human one above those that do not (0.5:
not at all). A map cannot add ranking: where the AUC is near 0.5, a low ECE only says the map learned the base
rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize

from spanjudge.eval.spans.calibration import auc, reliability

Pairs = Sequence[tuple[float, float]]  # (predicted probability, observed 0 or 1)
EDGE = 1e-6  # confidences are clipped to [EDGE, 1 - EDGE] before their logit


def logit(p: float) -> float:
    p = min(max(p, EDGE), 1.0 - EDGE)
    return math.log(p / (1.0 - p))


def fit_scaling(pairs: Pairs, *, bias: bool) -> tuple[float, float]:
    """(a, b) of σ(a · logit(c) + b) with the least log loss over `pairs`; b is 0 without `bias` (temperature
    scaling, T = 1 / a). a is held in [0.001, 100]: a map never reverses the confidence's order."""
    x = np.array([logit(p) for p, _ in pairs])
    y = np.array([o for _, o in pairs], dtype=float)

    def loss(w: np.ndarray) -> float:
        z = w[0] * x + (w[1] if bias else 0.0)
        # log(1 + e^z) - y z, computed stably
        return float(np.mean(np.logaddexp(0.0, z) - y * z))

    bounds = [(1e-3, 100.0), (-50.0, 50.0) if bias else (0.0, 0.0)]
    found = minimize(loss, np.array([1.0, 0.0]), method="L-BFGS-B", bounds=bounds)
    return float(found.x[0]), float(found.x[1]) if bias else 0.0


def scaled(pairs: Pairs, a: float, b: float) -> list[tuple[float, float]]:
    return [(1.0 / (1.0 + math.exp(-(a * logit(p) + b))), o) for p, o in pairs]


def cross_fitted(folds: Sequence[Pairs], how: str) -> list[tuple[float, float]]:
    """Every pair predicted by a map fitted on the other folds: `how` is "temperature", "platt" or "constant"
    (the other folds' base rate)."""
    predicted: list[tuple[float, float]] = []
    for index, fold in enumerate(folds):
        rest = [pair for other, pairs in enumerate(folds) if other != index for pair in pairs]
        if how == "constant":
            rate = sum(o for _, o in rest) / len(rest)
            predicted += [(rate, o) for _, o in fold]
        else:
            predicted += scaled(fold, *fit_scaling(rest, bias=how == "platt"))
    return predicted


def recalibration(folds: Sequence[Pairs]) -> dict[str, float | int | None]:
    """The raw confidence's ECE and AUC over all folds, and each cross-fitted map's ECE. Every fold needs
    pairs."""
    if len(folds) < 2 or not all(folds):
        raise ValueError("recalibration needs at least two folds, each with pairs")
    pairs = [pair for fold in folds for pair in fold]
    return {
        "n": len(pairs),
        "observed": sum(o for _, o in pairs) / len(pairs),
        "mean_confidence": sum(p for p, _ in pairs) / len(pairs),
        "auc": auc(pairs),
        "ece": reliability(pairs)["ece"],
        **{f"ece_{how}": reliability(cross_fitted(folds, how))["ece"] for how in ("temperature", "platt", "constant")},
    }
