"""Correlation of judge scores with human scores at three levels (thesis §2.5.6).

Let X (judge) and Y (human) be S systems x I inputs matrices, here given as flat item
arrays with an input code and a system code per item:

- global (eq. 2.14): one coefficient over all items;
- input  (eq. 2.15): one coefficient per input (across its systems), averaged over inputs;
- item   (eq. 2.16): one coefficient per system (across its inputs), averaged over systems.

A group with fewer than two items, or in which the judge or the human scores are constant,
has no coefficient: it is skipped and counted, never read as 0.

Every coefficient is computed from *input weights*: a matrix W (B x I) saying how many times
each input is present. W = ones gives the plain estimate; a multinomial W is a bootstrap
resample of inputs (duplicated inputs are exact duplicates, so ties are handled as scipy
handles them on the duplicated data). This makes the bootstrap one batch of matrix products
instead of B Python loops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np

from spanjudge.eval.judging.suite import Coefficient, KendallVariant, Level

COEFFICIENTS: tuple[Coefficient, ...] = ("pearson", "spearman", "kendall")
LEVELS: tuple[Level, ...] = ("global", "input", "item")
_REL_TOL = 1e-12


@dataclass(frozen=True)
class Groups:
    """Items as codes: `inputs[k]` in 0..n_inputs-1 and `systems[k]` in 0..n_systems-1."""

    inputs: np.ndarray
    systems: np.ndarray
    n_inputs: int
    n_systems: int

    @classmethod
    def from_labels(cls, inputs: Sequence[object], systems: Sequence[object]) -> Groups:
        if len(inputs) != len(systems):
            raise ValueError("inputs and systems must have one label per item")
        _, input_codes = np.unique(np.asarray([str(i) for i in inputs]), return_inverse=True)
        _, system_codes = np.unique(np.asarray([str(s) for s in systems]), return_inverse=True)
        return cls(
            inputs=input_codes.astype(np.int64),
            systems=system_codes.astype(np.int64),
            n_inputs=int(input_codes.max(initial=-1)) + 1,
            n_systems=int(system_codes.max(initial=-1)) + 1,
        )

    def subset(self, mask: np.ndarray) -> Groups:
        """The items under `mask`, keeping the codes (so resampling weights still line up)."""
        return Groups(self.inputs[mask], self.systems[mask], self.n_inputs, self.n_systems)

    def members(self, level: Level) -> list[tuple[int, np.ndarray]]:
        """(code, item indices) of each non-empty group at `level` (global: one group, code 0)."""
        if level == "global":
            return [(0, np.arange(len(self.inputs)))] if len(self.inputs) else []
        codes, count = (self.inputs, self.n_inputs) if level == "input" else (self.systems, self.n_systems)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(count + 1))
        return [(g, order[bounds[g] : bounds[g + 1]]) for g in range(count) if bounds[g + 1] > bounds[g]]


@dataclass(frozen=True)
class LevelValues:
    """Per-resample values of one coefficient at one level (B values; B=1 for the estimate)."""

    values: np.ndarray  # (B,), NaN where no group had a coefficient
    groups: int  # groups at this level
    skipped: int  # groups without a coefficient in the plain estimate (constant or < 2 items)


def weighted_coefficient(
    x: np.ndarray,
    y: np.ndarray,
    local_inputs: np.ndarray,
    weights: np.ndarray,
    coefficient: Coefficient,
    kendall_variant: KendallVariant = "b",
) -> np.ndarray:
    """`coefficient` of (x, y) for each row of `weights` (B x n_local_inputs): item k counts
    weights[b, local_inputs[k]] times. Returns (B,), NaN where undefined."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    item_w = weights[:, local_inputs].astype(np.float64)  # (B, n)
    if coefficient == "pearson":
        return _pearson(x, y, item_w)
    rx, cx = _ranks(x, item_w)
    ry, cy = _ranks(y, item_w)
    if coefficient == "spearman":
        return _pearson(rx, ry, item_w)
    if coefficient == "kendall":
        return _kendall(x, y, local_inputs, weights.astype(np.float64), item_w, cx, cy, kendall_variant)
    raise ValueError(f"unknown coefficient {coefficient!r}")


def _pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted Pearson; x and y are (n,) or (B, n), w is (B, n)."""
    n = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        x = x - (x.mean(axis=-1, keepdims=True) if x.ndim == 2 else x.mean())  # shift: less cancellation
        y = y - (y.mean(axis=-1, keepdims=True) if y.ndim == 2 else y.mean())
        mx = (w * x).sum(axis=1) / n
        my = (w * y).sum(axis=1) / n
        sxx = (w * x * x).sum(axis=1) / n
        syy = (w * y * y).sum(axis=1) / n
        vx = sxx - mx * mx
        vy = syy - my * my
        cov = (w * x * y).sum(axis=1) / n - mx * my
        r = cov / np.sqrt(vx * vy)
    flat = (vx <= _REL_TOL * np.maximum(sxx, 1e-300)) | (vy <= _REL_TOL * np.maximum(syy, 1e-300)) | (n < 2)
    return np.where(flat, np.nan, np.clip(r, -1.0, 1.0))


def _ranks(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based, ties averaged) of x when item k is present w[b, k] times:
    ranks (B, n) and the weighted size of each tie group (B, G)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(x)]
    cumulative = np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(w[:, order], axis=1)], axis=1)
    below = cumulative[:, starts]
    size = cumulative[:, ends] - below
    group_sorted = np.repeat(np.arange(len(starts)), ends - starts)
    group = np.empty(len(x), dtype=np.int64)
    group[order] = group_sorted
    rank = below + (size + 1.0) / 2.0
    return rank[:, group], size


def _kendall(
    x: np.ndarray,
    y: np.ndarray,
    local_inputs: np.ndarray,
    input_w: np.ndarray,
    item_w: np.ndarray,
    ties_x: np.ndarray,
    ties_y: np.ndarray,
    variant: KendallVariant,
) -> np.ndarray:
    """Kendall tau-b (or tau-c). Concordant minus discordant pairs of the resampled data is a
    quadratic form in the input weights, w' M w / 2, with M the pair signs summed per input
    pair: duplicated items pair with themselves at sign 0, as they should."""
    signs = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
    membership = np.zeros((len(x), input_w.shape[1]))
    membership[np.arange(len(x)), local_inputs] = 1.0
    per_input = membership.T @ signs @ membership
    concordance = np.einsum("bi,ij,bj->b", input_w, per_input, input_w) / 2.0
    n = item_w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        if variant == "c":
            distinct = np.minimum((ties_x > 0).sum(axis=1), (ties_y > 0).sum(axis=1)).astype(np.float64)
            tau = 2.0 * concordance / (n * n * (distinct - 1.0) / distinct)
            undefined = distinct < 2
        else:
            pairs = n * (n - 1.0) / 2.0
            untied_x = pairs - (ties_x * (ties_x - 1.0) / 2.0).sum(axis=1)
            untied_y = pairs - (ties_y * (ties_y - 1.0) / 2.0).sum(axis=1)
            tau = concordance / np.sqrt(untied_x * untied_y)
            undefined = (untied_x <= 0) | (untied_y <= 0)
    return np.where(undefined | (n < 2), np.nan, np.clip(tau, -1.0, 1.0))


def level_values(
    judge: np.ndarray,
    human: np.ndarray,
    groups: Groups,
    level: Level,
    coefficient: Coefficient,
    input_weights: np.ndarray | None = None,
    kendall_variant: KendallVariant = "b",
) -> LevelValues:
    """The coefficient at `level` for each row of `input_weights` (B x n_inputs; default: the
    plain estimate, one row of ones)."""
    judge = np.asarray(judge, dtype=np.float64)
    human = np.asarray(human, dtype=np.float64)
    if judge.shape != human.shape or judge.shape != groups.inputs.shape:
        raise ValueError("judge, human and groups must describe the same items")
    weights = np.ones((1, groups.n_inputs)) if input_weights is None else np.asarray(input_weights, dtype=np.float64)
    members = groups.members(level)
    plain_skipped = sum(1 for _, m in members if _flat(judge[m]) or _flat(human[m]))
    if not members:
        return LevelValues(np.full(weights.shape[0], np.nan), 0, 0)
    if level == "input":
        # one coefficient per input, fixed; resampling inputs re-weights their average
        codes = np.array([code for code, _ in members])
        per_group = np.array([_plain(judge[m], human[m], coefficient, kendall_variant) for _, m in members])
        valid = ~np.isnan(per_group)
        counted = weights[:, codes[valid]]
        with np.errstate(invalid="ignore", divide="ignore"):
            values = counted @ per_group[valid] / counted.sum(axis=1)
        return LevelValues(values, len(members), plain_skipped)
    per_group_values = []
    for _, m in members:
        if len(m) < 2:
            per_group_values.append(np.full(weights.shape[0], np.nan))
            continue
        used, local = np.unique(groups.inputs[m], return_inverse=True)
        per_group_values.append(
            weighted_coefficient(judge[m], human[m], local, weights[:, used], coefficient, kendall_variant)
        )
    stacked = np.vstack(per_group_values)  # (groups, B)
    with np.errstate(invalid="ignore"), _quiet():
        values = np.nanmean(stacked, axis=0) if len(members) > 1 else stacked[0]
    return LevelValues(values, len(members), plain_skipped)


def _plain(x: np.ndarray, y: np.ndarray, coefficient: Coefficient, variant: KendallVariant) -> float:
    if _flat(x) or _flat(y):
        return float("nan")
    return float(weighted_coefficient(x, y, np.zeros(len(x), np.int64), np.ones((1, 1)), coefficient, variant)[0])


def _flat(values: np.ndarray) -> bool:
    return len(values) < 2 or bool(np.all(values == values[0]))


class _quiet:
    """Silence numpy's 'mean of empty slice' (an all-NaN column is an expected NaN)."""

    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._catch.__exit__(kind, error, trace)


@dataclass(frozen=True)
class Correlation:
    coefficient: Coefficient
    level: Level
    value: float  # NaN when no group had a coefficient
    groups: int
    skipped: int
    items: int


def correlate(
    judge: Sequence[float] | np.ndarray,
    human: Sequence[float] | np.ndarray,
    inputs: Sequence[object],
    systems: Sequence[object],
    coefficient: Coefficient = "pearson",
    level: Level = "global",
    kendall_variant: KendallVariant = "b",
) -> Correlation:
    """One correlation; items are parallel sequences (judge score, human score, input, system)."""
    groups = Groups.from_labels(inputs, systems)
    result = level_values(np.asarray(judge), np.asarray(human), groups, level, coefficient, None, kendall_variant)
    return Correlation(coefficient, level, float(result.values[0]), result.groups, result.skipped, len(groups.inputs))
