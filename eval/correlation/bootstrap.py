"""Bootstrap confidence intervals and a paired judge-vs-judge test, resampling *inputs*.

Inputs (not items) are the resampled unit: the outputs of one input share its difficulty,
so resampling them one by one would understate the uncertainty. A resample is a row of
multinomial input counts; all rows go through `level_values` at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spanjudge.eval.correlation.coefficients import Coefficient, Groups, KendallVariant, Level, level_values


def input_weights(n_inputs: int, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, n_inputs) counts: each row draws n_inputs inputs with replacement."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_inputs, size=(n_resamples, n_inputs))
    weights = np.zeros((n_resamples, n_inputs))
    np.add.at(weights, (np.repeat(np.arange(n_resamples), n_inputs), draws.ravel()), 1.0)
    return weights


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    resamples: int
    undefined: int  # resamples where the coefficient did not exist (e.g. all groups constant)


def percentile_interval(value: float, samples: np.ndarray, confidence: float) -> Interval:
    """The percentile interval of the finite `samples` around `value`; nan bounds when none is finite."""
    finite = samples[~np.isnan(samples)]
    if finite.size == 0:
        return Interval(value, float("nan"), float("nan"), len(samples), len(samples))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return Interval(value, float(low), float(high), len(samples), int(samples.size - finite.size))


def bootstrap_interval(
    judge: np.ndarray,
    human: np.ndarray,
    groups: Groups,
    level: Level,
    coefficient: Coefficient,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    kendall_variant: KendallVariant = "b",
    weights: np.ndarray | None = None,
) -> Interval:
    """Percentile interval of the coefficient at `level` over input resamples."""
    plain = level_values(judge, human, groups, level, coefficient, None, kendall_variant).values[0]
    if weights is None:
        weights = input_weights(groups.n_inputs, n_resamples, seed)
    samples = level_values(judge, human, groups, level, coefficient, weights, kendall_variant).values
    return percentile_interval(float(plain), samples, confidence)


@dataclass(frozen=True)
class PairedTest:
    """Judge A minus judge B on the same items: the difference, its interval, and the
    one-sided bootstrap p-value of "A is not better than B" (share of resamples with
    difference <= 0)."""

    a: float
    b: float
    difference: Interval
    p_value: float


def paired_bootstrap(
    judge_a: np.ndarray,
    judge_b: np.ndarray,
    human: np.ndarray,
    groups: Groups,
    level: Level,
    coefficient: Coefficient,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    kendall_variant: KendallVariant = "b",
) -> PairedTest:
    """Both judges see the same input resamples, so the difference's spread is the paired one."""
    weights = input_weights(groups.n_inputs, n_resamples, seed)
    a_plain = float(level_values(judge_a, human, groups, level, coefficient, None, kendall_variant).values[0])
    b_plain = float(level_values(judge_b, human, groups, level, coefficient, None, kendall_variant).values[0])
    a = level_values(judge_a, human, groups, level, coefficient, weights, kendall_variant).values
    b = level_values(judge_b, human, groups, level, coefficient, weights, kendall_variant).values
    difference = a - b
    finite = difference[~np.isnan(difference)]
    p_value = float((finite <= 0).mean()) if finite.size else float("nan")
    return PairedTest(a_plain, b_plain, percentile_interval(a_plain - b_plain, difference, confidence), p_value)
