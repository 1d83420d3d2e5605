"""Does the decision fit's pooled objective buy its gain by saying "No Error" for a whole domain? Dev only.

    .venv/bin/python bench/decision_objective.py

The protocol fits a student's thresholds (τ₀, τ: `eval.spans.decision_fit`) by the mean of four agreement
measures over the dev outputs of all domains pooled. Pooled, the count r can rise when a domain with few
errors is sorted apart from the others, even as that domain's span F1s fall. This compares, held out, four
ways to fit the thresholds:

- `written`: no thresholds (the written reply);
- `pooled`: the protocol's fit, one (τ₀, τ) by the pooled objective;
- `domain_mean`: one (τ₀, τ) by the mean over domains of each domain's own objective;
- `per_domain`: a (τ₀, τ) per domain, each by its domain's objective.

For every protocol run whose dev judgments are kept, the dev inputs split into two folds (even and odd
tables); each fold's outputs are decided by thresholds fitted on the other fold, and the decided dev outputs
are then read whole: the pooled objective, the mean of the domains' objectives, and how often each domain
says "No Error". No model runs; the test split is never read. Results:
bench/results/decision_objective.{json,md}, a row per run and each recipe's mean over its seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.eval.distill.choice import seed_stats, spread
from spanjudge.eval.distill.dev_folds import analysed, kept_dev, table_folds, write_results
from spanjudge.eval.spans.decision_fit import (
    CONFIDENCE_GRID,
    NO_ERROR_GRID,
    Spans,
    decided_spans,
    fit_decision_rule,
    objective,
)
from spanjudge.eval.spans.documents import SpanDocument
from spanjudge.inference.decisions import DecisionRule

REPO = Path(__file__).resolve().parents[1]
KEPT = REPO / "bench/results/distill_judgments"
RESULTS = REPO / "bench/results/decision_objective"
VARIANTS = ("written", "pooled", "domain_mean", "per_domain")
Rows = Mapping[str, Mapping[str, Any] | None]


def domain(doc: SpanDocument) -> str:
    return doc.input_id.split("/", 1)[0]


def by_domain(docs: Sequence[SpanDocument]) -> dict[str, list[SpanDocument]]:
    found: dict[str, list[SpanDocument]] = {}
    for doc in docs:
        found.setdefault(domain(doc), []).append(doc)
    return dict(sorted(found.items()))


def domain_mean_objective(docs: Sequence[SpanDocument], spans: Mapping[str, Spans]) -> float:
    """The mean over domains of each domain's `objective`."""
    groups = by_domain(docs)
    return sum(objective(members, spans) for members in groups.values()) / len(groups)


def fit_domain_mean(docs: Sequence[SpanDocument], rows: Rows) -> DecisionRule:
    """The (τ₀, τ) of the fit's grids with the best `domain_mean_objective`; on a tie the earlier pair (the
    grids start with the written reply's None), as `fit_decision_rule` breaks them."""
    best: tuple[float, DecisionRule] | None = None
    for tau0 in NO_ERROR_GRID:
        for tau in CONFIDENCE_GRID:
            rule = DecisionRule(no_error_threshold=tau0, min_confidence=tau)
            value = domain_mean_objective(docs, decided_spans(rows, rule))
            if best is None or value > best[0] + 1e-12:
                best = (value, rule)
    assert best is not None
    return best[1]


def fit(variant: str, docs: Sequence[SpanDocument], rows: Rows) -> dict[str, DecisionRule]:
    """Domain -> the thresholds `variant` fits on `docs`."""
    groups = by_domain(docs)
    if variant == "per_domain":
        return {name: fit_decision_rule(members, rows, split="dev", data=name).rule for name, members in groups.items()}
    if variant == "pooled":
        rule = fit_decision_rule(docs, rows, split="dev", data="pooled").rule
    else:
        rule = fit_domain_mean(docs, rows) if variant == "domain_mean" else DecisionRule()
    return dict.fromkeys(groups, rule)


def cross_fitted(variant: str, folds: Sequence[Sequence[SpanDocument]], rows: Rows) -> dict[str, Spans]:
    """Every fold's outputs decided by the thresholds `variant` fits on the other folds."""
    spans: dict[str, Spans] = {}
    for index, fold in enumerate(folds):
        rules = fit(variant, [d for other, f in enumerate(folds) if other != index for d in f], rows)
        for name, members in by_domain(fold).items():
            spans |= decided_spans({d.id: rows.get(d.id) for d in members}, rules[name])
    return spans


def no_error(docs: Sequence[SpanDocument], spans: Mapping[str, Spans]) -> dict[str, int]:
    """Domain -> how many of its outputs are read as "No Error" (no span; unscored outputs are not)."""
    return {name: sum(1 for d in members if spans.get(d.id) == []) for name, members in by_domain(docs).items()}


def run_row(label: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The four fits of one run, held out on its dev judgments (None: they are not kept)."""
    kept = kept_dev(KEPT, label, settings)
    if kept is None:
        return None
    docs, rows = kept
    folds = table_folds(docs)
    row: dict[str, Any] = {"label": label, "recipe": settings["recipe"], "seed": settings["train_seed"]}
    row["humans_no_error"] = {name: sum(1 for d in members if not d.gold) for name, members in by_domain(docs).items()}
    for variant in VARIANTS:
        spans = cross_fitted(variant, folds, rows)
        row[variant] = {
            "pooled": objective(docs, spans),
            "domain_mean": domain_mean_objective(docs, spans),
            "no_error": no_error(docs, spans),
        }
    return row


def markdown(rows: list[dict[str, Any]], recipes: list[dict[str, Any]]) -> str:
    lines = [
        "# The decision fit's objective, pooled or per domain, held out on dev (`bench/decision_objective.py`)",
        "",
        "Thresholds (τ₀, τ) fitted four ways on one fold of the dev split (tables 70–79: even and odd tables) and "
        "read on the other, so that every dev output is decided by thresholds that did not see it: `written` (none), "
        "`pooled` (the protocol's fit: the mean of overlap F1, token F1, count r and token r over all domains "
        "pooled), `domain_mean` (one pair, by the mean over domains of each domain's own objective), `per_domain` "
        "(a pair per domain). Each cell: the objective pooled / the mean of the domains' objectives; then the "
        "outputs read as \"No Error\" per domain, against the humans'. The test split is not read. No model runs.",
        "",
        "| run | seed | " + " | ".join(VARIANTS) + " | 'No Error' per domain: " + ", ".join(
            f"{v}" for v in VARIANTS) + " (humans) |",
        "|---|---:|" + "---:|" * len(VARIANTS) + "---|",
    ]  # fmt: skip
    for r in rows:
        objectives = " | ".join(f"{r[v]['pooled']:.3f} / {r[v]['domain_mean']:.3f}" for v in VARIANTS)
        said = "; ".join(
            f"{name} " + ", ".join(str(r[v]["no_error"][name]) for v in VARIANTS) + f" ({humans})"
            for name, humans in r["humans_no_error"].items()
        )
        lines.append(f"| {r['label']} | {r['seed']} | {objectives} | {said} |")
    lines += [
        "",
        "Each recipe's mean [lowest, highest] over its seeds, the pooled objective then the mean of the domains':",
        "",
        "| recipe | seeds | " + " | ".join(VARIANTS) + " |",
        "|---|---|" + "---:|" * len(VARIANTS),
    ]
    for r in recipes:
        cells = " | ".join(f"{spread(r[v]['pooled'])} / {spread(r[v]['domain_mean'])}" for v in VARIANTS)
        lines.append(f"| {r['recipe']} | {', '.join(map(str, r['seeds']))} | {cells} |")
    return "\n".join(lines) + "\n"


def results(runs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A row per protocol run with dev judgments kept, and each recipe's mean over its seeds."""
    return analysed(
        runs,
        run_row,
        lambda members: {
            v: {m: seed_stats([r[v][m] for r in members]) for m in ("pooled", "domain_mean")} for v in VARIANTS
        },
    )


def main() -> None:
    print(write_results(RESULTS, results, markdown))


if __name__ == "__main__":
    main()
