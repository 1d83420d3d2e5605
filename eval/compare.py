"""Two or more systems judged on the same items (`spanjudge score` results files): each system's mean
with a confidence interval, and for every pair, whether the difference is significant. The scores are
compared, and so is the **error profile**: errors per output in total, at severity ≥ 4 ("major") and
of each category the errors name (where they carry a `category`), with the same paired tests ("B has
significantly fewer major errors than A").

The tests, all paired over the items every system has a score for:
- **paired bootstrap** (Koehn 2004, as comet-compare): the items resampled with replacement, the same
  draw for every system; the interval of the mean difference and its two-sided p-value (twice the
  share of resamples on the smaller side of zero);
- **paired permutation** (sign flips of the per-item differences): exact over all 2^n sign patterns
  for n ≤ 16 items, else `resamples` random ones (with the +1 correction), two-sided;
- **paired t-test** (`scipy.stats.ttest_rel`, the test comet-compare reports beside the bootstrap).
The winner of a pair is named only when the permutation test's p < `alpha`; otherwise the pair is
"no significant difference".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from spanjudge.core.errors import InputError

MAJOR_SEVERITY = 4  # MQM's major and critical errors (severity 4-5 of the contract's 1-5)


@dataclass(frozen=True)
class Measure:
    name: str
    higher_is_better: bool
    of: Callable[[Mapping[str, Any]], float]  # a scored results row -> the number


def _errors(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(row["evaluation"].get("errors") or [])


MEASURES: tuple[Measure, ...] = (
    Measure("score", True, lambda row: float(row["evaluation"]["score"])),
    Measure("errors per output", False, lambda row: float(len(_errors(row)))),
    Measure(
        f"severity ≥ {MAJOR_SEVERITY} errors per output",
        False,
        lambda row: float(sum(1 for e in _errors(row) if (e.get("severity") or 0) >= MAJOR_SEVERITY)),
    ),
)


def category_measures(rows: Iterable[Mapping[str, Any]]) -> tuple[Measure, ...]:
    """Errors per output of each category the rows' errors name (an error's `category`, as a foreign
    judge's or an imported annotation's errors carry it; spanjudge's own contract has none), sorted."""
    categories = sorted({str(e["category"]) for row in rows for e in _errors(row) if e.get("category") is not None})
    return tuple(
        Measure(
            f"'{category}' errors per output",
            False,
            lambda row, category=category: float(sum(1 for e in _errors(row) if str(e.get("category")) == category)),
        )
        for category in categories
    )


@dataclass(frozen=True)
class SystemMean:
    system: str
    measure: str
    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class PairTest:
    measure: str
    a: str
    b: str
    mean_a: float
    mean_b: float
    difference: float  # mean of a − b
    low: float
    high: float
    p_bootstrap: float
    p_permutation: float
    p_ttest: float | None  # None where it does not exist (every difference equal)
    winner: str | None  # the better system when p_permutation < alpha, else None


@dataclass(frozen=True)
class Comparison:
    systems: list[str]
    items: int  # items every system scored
    left_out: dict[str, int]  # per system: its rows not compared (unscored, or not scored by every system)
    means: list[SystemMean]
    pairs: list[PairTest]
    resamples: int
    confidence: float
    alpha: float
    seed: int
    errors_only: bool = False  # the error profile alone (results without scores)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def permutation_p(differences: np.ndarray, resamples: int, rng: np.random.Generator) -> float:
    """Two-sided sign-flip p-value of the mean difference: exact for n ≤ 16, else Monte Carlo (+1 corrected)."""
    n = len(differences)
    observed = abs(differences.mean())
    if n <= 16:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        means = np.abs(signs @ differences / n)
        return float((means >= observed - 1e-12).mean())
    signs = rng.choice((1.0, -1.0), size=(resamples, n))
    means = np.abs(signs @ differences / n)
    return float(((means >= observed - 1e-12).sum() + 1) / (resamples + 1))


def compare_systems(
    systems: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    errors_only: bool = False,
) -> Comparison:
    """Compare the systems' results rows (`ScoreRow` dicts) on the items all of them scored.

    `errors_only`: compare the error profile alone, of rows that have no score by nature (human
    span annotations: `evaluation.score` null and no `unscored_reason`); a row a judge failed to
    score (with its `unscored_reason`) is still left out."""
    from scipy.stats import ttest_rel

    if len(systems) < 2:
        raise InputError(f"compare needs two or more systems, got {len(systems)}")

    def usable(row: Mapping[str, Any]) -> bool:
        if errors_only:
            return not row.get("unscored_reason") and isinstance(row["evaluation"].get("errors"), list)
        return row["evaluation"].get("score") is not None

    scored = {name: {str(row["id"]): row for row in rows if usable(row)} for name, rows in systems.items()}
    common = sorted(set.intersection(*(set(by_id) for by_id in scored.values())))
    if len(common) < 2:
        what = "annotated" if errors_only else "scored"
        raise InputError(f"the systems share {len(common)} {what} item(s); compare needs at least 2 (matched by id)")
    left_out = {name: len(rows) - len(common) for name, rows in systems.items()}
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(common), size=(resamples, len(common)))
    tail = (1.0 - confidence) / 2 * 100
    means, pairs = [], []
    compared = [by_id[i] for by_id in scored.values() for i in common]
    measures = MEASURES[1:] if errors_only else MEASURES  # MEASURES[0] is the score
    for measure in (*measures, *category_measures(compared)):
        values = {name: np.array([measure.of(by_id[i]) for i in common]) for name, by_id in scored.items()}
        for name, v in values.items():
            low, high = np.percentile(v[draws].mean(axis=1), [tail, 100 - tail])
            means.append(SystemMean(name, measure.name, float(v.mean()), float(low), float(high)))
        for a, b in itertools.combinations(values, 2):
            d = values[a] - values[b]
            boot = d[draws].mean(axis=1)
            low, high = np.percentile(boot, [tail, 100 - tail])
            p_boot = float(min(1.0, 2 * min((boot <= 0).mean(), (boot >= 0).mean())))
            p_perm = permutation_p(d, resamples, rng)
            p_t = None if np.allclose(d, d[0]) else float(ttest_rel(values[a], values[b]).pvalue)
            better = a if (d.mean() > 0) == measure.higher_is_better else b
            winner = better if p_perm < alpha and d.mean() != 0 else None
            pairs.append(
                PairTest(
                    measure.name,
                    a,
                    b,
                    float(values[a].mean()),
                    float(values[b].mean()),
                    float(d.mean()),
                    float(low),
                    float(high),
                    p_boot,
                    p_perm,
                    p_t,
                    winner,
                )
            )
    return Comparison(
        list(systems), len(common), left_out, means, pairs, resamples, confidence, alpha, seed, errors_only
    )


def markdown(result: Comparison) -> str:
    """The comparison as markdown: the systems' means, then every pair's test."""
    pct = round(result.confidence * 100)
    lines = [
        f"{result.items} items {'annotated' if result.errors_only else 'scored'} by every system"
        + "".join(f"; {name}: {n} rows left out" for name, n in result.left_out.items() if n),
        "",
        f"| system | measure | mean [{pct} % CI] |",
        "|---|---|---:|",
        *(f"| {m.system} | {m.measure} | {m.mean:.3f} [{m.low:.3f}, {m.high:.3f}] |" for m in result.means),
        "",
        f"| measure | A | B | A − B [{pct} % CI] | p (bootstrap) | p (permutation) | p (t-test) | better |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for p in result.pairs:
        t = "–" if p.p_ttest is None else f"{p.p_ttest:.4f}"
        winner = p.winner or f"no significant difference (α {result.alpha})"
        lines.append(
            f"| {p.measure} | {p.a} | {p.b} | {p.difference:+.3f} [{p.low:+.3f}, {p.high:+.3f}] | "
            f"{p.p_bootstrap:.4f} | {p.p_permutation:.4f} | {t} | {winner} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: Comparison, path: Any) -> Any:
    """One panel per measure: each system's mean with its interval (a PNG at `path`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = list(dict.fromkeys(m.measure for m in result.means))
    fig, axes = plt.subplots(1, len(measures), figsize=(4 * len(measures), 3))
    for ax, measure in zip(axes, measures, strict=True):
        rows = [m for m in result.means if m.measure == measure]
        low = [m.mean - m.low for m in rows]
        high = [m.high - m.mean for m in rows]
        ax.bar([m.system for m in rows], [m.mean for m in rows], yerr=[low, high], capsize=4, color="#7a9cc6")
        ax.set_title(measure, fontsize=9)
    fig.suptitle(f"{result.items} items; bars: {round(result.confidence * 100)} % bootstrap intervals", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
