"""What issue #67's "'No Error' within 10 points of the humans" costs a student on dev, and whether a decision fit
that asks for it holds on tables it did not see. Dev judgments only; no model runs; the test split is never read.

The decision fit (`eval.spans.decision_fit`) picks the thresholds (τ₀, τ) with the best objective and nothing else,
and the 0–49 students' fits say "No Error" for 5–8 % of dev outputs against the humans' 26 %. Here, for every
protocol run whose dev judgments are kept, each pair the fit tried is also read for its 'No Error' share (decided
spans empty, over all outputs asked, as the bar reads it), and the **constrained** fit is the best pair whose
share lies within `MARGIN` of the humans' on the outputs it is fitted on (the same tie rule: the grid's order).
Both fits are read on all of dev (their own outputs) and across the two folds of tables (fitted on the even
tables, read on the odd ones, and back; the mean of the two): the objective and the share's distance from the
humans' there.

    .venv/bin/python bench/no_error_share.py    # → bench/results/no_error_share.{json,md}
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine  # noqa: E402

from spanjudge.eval.distill.choice import rounded, seed_stats, spread  # noqa: E402
from spanjudge.eval.distill.dev_folds import Readings, analysed, kept_dev, table_folds, write_results  # noqa: E402
from spanjudge.eval.spans.decision_fit import decided_spans, fit_decision_rule, objective  # noqa: E402
from spanjudge.eval.spans.documents import SpanDocument  # noqa: E402
from spanjudge.inference.decisions import DecisionRule  # noqa: E402

RESULTS = BENCH / "results"
KEPT = RESULTS / "distill_judgments"
OUT = RESULTS / "no_error_share"
MARGIN = 0.10  # the issue's bar: the judge's 'No Error' rate within 10 points of the humans'
FITS = ("fit", "constrained")


def no_error_share(docs: list[SpanDocument], read: Readings, rule: DecisionRule) -> float:
    """The share of `docs` whose decided spans are none ('No Error'; an unscored output is not one)."""
    decided = decided_spans({d.id: read.get(d.id) for d in docs}, rule)
    return sum(1 for d in docs if decided[d.id] == []) / len(docs)


def human_share(docs: list[SpanDocument]) -> float:
    return sum(1 for d in docs if not d.gold_spans) / len(docs)


def fits(docs: list[SpanDocument], read: Readings) -> dict[str, DecisionRule]:
    """The decision fit's rule on `docs`, and the best rule of its grid whose 'No Error' share there lies within
    `MARGIN` of the humans' (the fit's rule when no pair's share does)."""
    fit = fit_decision_rule(docs, read, split="dev", data="quintd-1 dev")
    target = human_share(docs)
    best: tuple[float, DecisionRule] | None = None
    for tau0, tau, value in fit.tried:  # the grid's order, as the fit breaks ties
        rule = DecisionRule(no_error_threshold=tau0, min_confidence=tau)
        if abs(no_error_share(docs, read, rule) - target) <= MARGIN + 1e-9 and (
            best is None or value > best[0] + 1e-12
        ):
            best = (value, rule)
    return {"fit": fit.rule, "constrained": fit.rule if best is None else best[1]}


def reading(docs: list[SpanDocument], read: Readings, rule: DecisionRule) -> dict[str, float]:
    """A rule read on `docs`: the objective and the 'No Error' share's distance from the humans'."""
    share = no_error_share(docs, read, rule)
    decided = decided_spans({d.id: read.get(d.id) for d in docs}, rule)
    return {"objective": objective(docs, decided), "share": share, "gap": abs(share - human_share(docs))}


def run_row(label: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    found = kept_dev(KEPT, label, settings)
    if found is None:
        return None
    docs, read = found
    whole = fits(docs, read)
    folds = table_folds(docs)
    crossed: dict[str, list[dict[str, float]]] = {name: [] for name in FITS}
    for fitted_on, read_on in ((folds[0], folds[1]), (folds[1], folds[0])):
        for name, rule in fits(fitted_on, read).items():
            crossed[name].append(reading(read_on, read, rule))
    row: dict[str, Any] = {"label": label, "recipe": settings["recipe"], "seed": settings["train_seed"],
                           "human_share": human_share(docs)}  # fmt: skip
    for name in FITS:
        rule = whole[name]
        row[name] = {
            "thresholds": [rule.no_error_threshold, rule.min_confidence],
            "dev": reading(docs, read, rule),
            "folds": {key: statistics.mean(r[key] for r in crossed[name]) for key in ("objective", "share", "gap")},
        }
    return row


def recipe_stats(group: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        name: {f"{where}_{key}": seed_stats([r[name][where][key] for r in group])
               for where in ("dev", "folds") for key in ("objective", "gap")}
        for name in FITS
    }  # fmt: skip


def results(runs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A row per protocol run with dev judgments kept, and each recipe's mean over its seeds."""
    return analysed(runs, run_row, recipe_stats)


def markdown(rows: list[dict[str, Any]], recipes: list[dict[str, Any]]) -> str:
    def cells(result: dict[str, Any]) -> str:
        tau0, tau = (rounded(t) if t is not None else "–" for t in result["thresholds"])
        dev, folds = result["dev"], result["folds"]
        return (f"{tau0} / {tau} | {rounded(dev['objective'])} | {rounded(dev['share'])} | "
                f"{rounded(folds['objective'])} | {rounded(folds['share'])}")  # fmt: skip

    lines = [
        "# 'No Error' within 10 points of the humans, on dev (`bench/no_error_share.py`)",
        "",
        f"Machine: {machine()} (no model runs). Every protocol run's kept dev judgments (quintd-1 tables 70–79). "
        "`fit`: the decision fit's thresholds (best objective); `constrained`: the best of the same grid whose "
        f"'No Error' share is within {MARGIN:.2f} of the humans' on the outputs it is fitted on. Each read on all of "
        "dev (the fit's own outputs) and across folds of tables (fitted on even tables, read on odd, and back; the "
        "mean). share: the outputs the rule says 'No Error' for, of all asked.",
        "",
        "| run | humans' share | fit τ₀ / τ | objective | share | objective, folds | share, folds "
        "| constrained τ₀ / τ | objective | share | objective, folds | share, folds |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        *(
            f"| {r['label']} | {rounded(r['human_share'])} | {cells(r['fit'])} | {cells(r['constrained'])} |"
            for r in rows
        ),
        "",
        "Each recipe's mean [lowest, highest] over its seeds (gap: the share's distance from the humans'):",
        "",
        "| recipe | seeds | "
        + " | ".join(f"{n}: objective | {n}: gap | {n}: objective, folds | {n}: gap, folds" for n in FITS)
        + " |",
        "|---|---|" + "---:|" * 8,
        *(
            f"| {r['recipe']} | {', '.join(map(str, r['seeds']))} | "
            + " | ".join(
                spread(r[n][k]) for n in FITS for k in ("dev_objective", "dev_gap", "folds_objective", "folds_gap")
            )
            + " |"
            for r in recipes
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    print(write_results(OUT, results, markdown))


if __name__ == "__main__":
    main()
