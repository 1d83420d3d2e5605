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

Where two systems' rows hold the same output texts (two judges, or a judge and imported human spans, of the
same outputs), the comparison also reads their **span agreement**: B's error spans against A's, with the span
metrics of `eval.spans.metrics` (overlap, token and MPP precision / recall / F1, micro), each table naming its
matching rule.

Only like with like: every system's rows must be judged on one task and aspect by one judge (its model,
decoding and prompt template, as the results rows record them); results that differ are refused unless
`allow_mixed`, and the table then says what differs. Rows are checked first (`check_rows`): ids unique
within a system, scores finite and within the contract's 0-100, severities 1-5; one bad row is one line
naming the system and the id.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import first_line

if TYPE_CHECKING:
    from pathlib import Path

MAJOR_SEVERITY = 4  # MQM's major and critical errors (severity 4-5 of the contract's 1-5)
# what a results row records about how it was judged, with the flag or name that sets it
SETTINGS = {"task": "task", "aspect": "aspect", "model": "judge", "decoding": "decoding",
            "prompt_template_sha256": "prompt template"}  # fmt: skip


@dataclass(frozen=True)
class Measure:
    name: str
    higher_is_better: bool
    of: Callable[[Mapping[str, Any]], float]  # a scored results row -> the number


def _category_count(category: str) -> Callable[[Mapping[str, Any]], float]:
    """A results row -> how many of its errors are of `category`."""

    def count(row: Mapping[str, Any]) -> float:
        return float(sum(1 for e in _errors(row) if str(e.get("category")) == category))

    return count


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
            _category_count(category),
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
class SpanAgreement:
    """B's located error spans against A's (the reference) on the `items` outputs both scored, which are the
    same texts: each variant's micro counts and P / R / F1 (`eval.spans.metrics`)."""

    a: str
    b: str
    items: int
    overlap: dict[str, float | int]
    token: dict[str, float | int]
    mpp: dict[str, float | int]


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
    mixed: dict[str, dict[str, str]] | None = (
        None  # with allow_mixed: setting -> system -> its value, where they differ
    )
    unrecorded: list[str] | None = None  # settings no system's rows record (hand-made rows): not checked
    span_agreement: list[SpanAgreement] | None = None  # pairs whose rows hold the same outputs

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


def _bad_row(row: Mapping[str, Any]) -> str | None:
    """What makes a results row unusable for a comparison, or None."""
    evaluation = row.get("evaluation")
    if not isinstance(evaluation, Mapping):
        return "it has no evaluation"
    score = evaluation.get("score")
    if score is not None and (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not math.isfinite(score)
        or not 0 <= score <= 100
    ):
        return f"score {score!r} is not a number within 0-100"
    errors = evaluation.get("errors")
    if errors is None:
        return None
    if not isinstance(errors, list) or not all(isinstance(error, Mapping) for error in errors):
        return "its errors are not a list of objects"
    for error in errors:
        severity = error.get("severity")
        if severity is not None and not _number_within(severity, 1, 5):
            return f"severity {severity!r} is not a number within 1-5"
    return None


def _number_within(value: object, low: float, high: float) -> bool:
    """A finite int or float (not a bool) within [low, high]."""
    return (
        not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and low <= value <= high
    )


def check_rows(systems: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """InputError, one line naming the system and the id, for a repeated id or a row `_bad_row` refuses."""
    for name, rows in systems.items():
        seen: set[str] = set()
        for number, row in enumerate(rows, 1):
            item = str(row.get("id"))
            if item in seen:
                raise InputError(f"system '{name}': id '{item}' appears twice (row {number}); keep one row per item")
            seen.add(item)
            problem = _bad_row(row)
            if problem:
                raise InputError(f"system '{name}', id '{item}' (row {number}): {problem}")


def _setting(value: object) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, Mapping | list) else str(value)


UNRECORDED = "(not recorded)"


def differing_settings(systems: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, str]]:
    """setting -> system -> its value, for each setting (`SETTINGS`) on which the systems differ. A setting some
    systems' rows record and others' do not differs too (it cannot be checked); one no system records is not
    compared (`unrecorded_settings`). A system whose own rows differ is refused (InputError)."""
    found: dict[str, dict[str, str]] = {}
    for field, label in SETTINGS.items():
        values: dict[str, str] = {}
        for name, rows in systems.items():
            own = {_setting(row[field]) if row.get(field) is not None else UNRECORDED for row in rows}
            if len(own) > 1:
                raise InputError(f"system '{name}' mixes rows of several {label}s ({', '.join(sorted(own))})")
            if own:
                values[name] = own.pop()
        if len(set(values.values())) > 1:
            found[field] = values
    return found


def unrecorded_settings(systems: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The settings (task, aspect, judge ...) that no system's rows record: compare cannot check them."""
    return [
        label
        for field, label in SETTINGS.items()
        if all(row.get(field) is None for rows in systems.values() for row in rows)
    ]


def compare_systems(
    systems: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    errors_only: bool = False,
    allow_mixed: bool = False,
) -> Comparison:
    """Compare the systems' results rows (`ScoreRow` dicts) on the items all of them scored.

    `errors_only`: compare the error profile alone, of rows that have no score by nature (human
    span annotations: `evaluation.score` null and no `unscored_reason`); a row a judge failed to
    score (with its `unscored_reason`) is still left out. `allow_mixed`: compare results judged on
    different tasks, aspects or by different judges (refused otherwise); the comparison says which."""
    from scipy.stats import ttest_rel

    if len(systems) < 2:
        raise InputError(f"compare needs two or more systems, got {len(systems)}")
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    check_rows(systems)
    mixed = differing_settings(systems)
    if mixed and not allow_mixed:
        field = next(iter(mixed))
        values = "; ".join(f"{name}: {value}" for name, value in mixed[field].items())
        raise InputError(
            f"the systems were judged with different {SETTINGS[field]}s ({values}): their scores are not comparable; "
            "compare results of one task, aspect and judge, or pass --allow-mixed to compare them anyway"
        )

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
        series = {name: np.array([measure.of(by_id[i]) for i in common]) for name, by_id in scored.items()}
        for name, v in series.items():
            low, high = np.percentile(v[draws].mean(axis=1), [tail, 100 - tail])
            means.append(SystemMean(name, measure.name, float(v.mean()), float(low), float(high)))
        for a, b in itertools.combinations(series, 2):
            d = series[a] - series[b]
            boot = d[draws].mean(axis=1)
            low, high = np.percentile(boot, [tail, 100 - tail])
            p_boot = float(min(1.0, 2 * min((boot <= 0).mean(), (boot >= 0).mean())))
            p_perm = permutation_p(d, resamples, rng)
            p_t = None if np.allclose(d, d[0]) else float(ttest_rel(series[a], series[b]).pvalue)
            better = a if (d.mean() > 0) == measure.higher_is_better else b
            winner = better if p_perm < alpha and d.mean() != 0 else None
            pairs.append(
                PairTest(
                    measure.name,
                    a,
                    b,
                    float(series[a].mean()),
                    float(series[b].mean()),
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
        list(systems), len(common), left_out, means, pairs, resamples, confidence, alpha, seed, errors_only,
        mixed or None, unrecorded_settings(systems) or None, span_agreements(scored, common) or None,
    )  # fmt: skip


def _located(row: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The row's errors that are spans of its output (an omission, or a quote not found, is none)."""
    spans = [(e.get("start"), e.get("end")) for e in _errors(row)]
    return [(start, end) for start, end in spans if isinstance(start, int) and isinstance(end, int) and end > start]


def span_agreements(
    scored: Mapping[str, Mapping[str, Mapping[str, Any]]], common: Sequence[str]
) -> list[SpanAgreement]:
    """For each pair of systems whose rows hold the same output on every common item, the second's spans
    against the first's; pairs of different outputs (the usual case: two systems' own texts) have none."""
    from spanjudge.eval.spans.metrics import PartialPRF, from_matches, micro_total, mpp, overlap_matches, token_prf

    found = []
    for a, b in itertools.combinations(scored, 2):
        texts = [scored[a][i].get("output") for i in common]
        if any(not isinstance(text, str) for text in texts) or texts != [scored[b][i].get("output") for i in common]:
            continue
        overlap, token, partial = [], [], PartialPRF(0.0, 0.0, 0, 0)
        for i, text in zip(common, texts, strict=True):
            gold, predicted = _located(scored[a][i]), _located(scored[b][i])
            overlap.append(from_matches(overlap_matches(predicted, gold), len(predicted)))
            token.append(token_prf(predicted, gold, str(text)))
            partial += mpp(predicted, gold)
        totals = micro_total(overlap).as_dict(), micro_total(token).as_dict(), partial.as_dict()
        found.append(SpanAgreement(a, b, len(common), *totals))
    return found


def markdown(result: Comparison) -> str:
    """The comparison as markdown: the systems' means, then every pair's test."""
    pct = round(result.confidence * 100)
    warning = [
        f"**Mixed settings (--allow-mixed)**: the systems differ in {SETTINGS[field]} "
        f"({'; '.join(f'{name}: {value}' for name, value in values.items())}); the differences below are not "
        "only the systems'."
        for field, values in (result.mixed or {}).items()
    ]
    lines = [
        *(line for text in warning for line in (text, "")),
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
    if result.span_agreement:
        from spanjudge.eval.spans.metrics import MATCHING

        lines += [
            "",
            "Span agreement on the same outputs: B's error spans against A's (the reference), micro over the items. "
            "Matching rules:",
            "",
            *(f"- {MATCHING[variant]}" for variant in ("overlap", "token", "mpp")),
            "",
            "| A (reference) | B | items | overlap P / R / F1 | token P / R / F1 | MPP P / R / F1 |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for agreement in result.span_agreement:
            cells = [
                " / ".join(f"{measured[k]:.3f}" for k in ("precision", "recall", "f1"))
                for measured in (agreement.overlap, agreement.token, agreement.mpp)
            ]
            lines.append(f"| {agreement.a} | {agreement.b} | {agreement.items} | {' | '.join(cells)} |")
    if result.unrecorded:
        lines += [
            "",
            f"Not checked: the rows record no {', '.join(result.unrecorded)}, so compare cannot tell whether the "
            "systems were judged alike; the winners above hold only if they were.",
        ]
    return "\n".join(lines) + "\n"


PLOT_PANELS = 8  # measures drawn at most: the score, the error counts, then the categories with most errors
PLOT_MARK = "spanjudge compare"  # the PNG's Software text: marks a plot as ours (only ours is overwritten)


def plot(result: Comparison, path: Path) -> Path:
    """One panel per measure (at most `PLOT_PANELS`: the table has them all): each system's mean with its
    interval (a PNG at `path`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = list(dict.fromkeys(m.measure for m in result.means))
    peak = {measure: max(m.mean for m in result.means if m.measure == measure) for measure in measures}
    fixed = [m for m in measures if not m.startswith("'")]  # the score and the error counts; categories are quoted
    categories = sorted((m for m in measures if m.startswith("'")), key=lambda m: -peak[m])
    shown = (fixed + categories)[:PLOT_PANELS]
    fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 3), squeeze=False)
    for ax, measure in zip(axes[0], shown, strict=True):
        rows = [m for m in result.means if m.measure == measure]
        low = [m.mean - m.low for m in rows]
        high = [m.high - m.mean for m in rows]
        ax.bar([m.system for m in rows], [m.mean for m in rows], yerr=[low, high], capsize=4, color="#7a9cc6")
        ax.set_title(measure, fontsize=9)
    left = len(measures) - len(shown)
    more = f"; {left} more measures in the table" if left else ""
    title = f"{result.items} items; bars: {round(result.confidence * 100)} % bootstrap intervals{more}"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": PLOT_MARK})
    plt.close(fig)
    return path


def is_our_plot(path: Path) -> bool:
    with open(path, "rb") as handle:
        return PLOT_MARK.encode() in handle.read(4096)


def is_our_table(path: Path) -> bool:

    return bool(re.match(r"(\*\*Mixed settings|\d+ items (scored|annotated) by every system)", first_line(path)))


def is_our_comparison(path: Path) -> bool:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return isinstance(data, dict) and {"systems", "means", "pairs", "results"} <= data.keys()
