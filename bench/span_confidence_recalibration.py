"""Would a recalibration of the students' span confidence reach issue #49's ECE ≤ 0.05? Dev judgments only.

    .venv/bin/python bench/span_confidence_recalibration.py

For every protocol run whose dev judgments are kept (bench/results/distill_judgments/LABEL/dev/, read with
the student's probabilities), the span confidences are paired with "overlaps a human span"
(`eval.spans.calibration`), the dev inputs split into two folds (even and odd tables), and
`eval.spans.recalibration` reports the raw ECE and AUC and the held-out ECE of temperature scaling, Platt
scaling and the constant base rate, each fitted on one fold and read on the other. No model runs; the
test split is never read. Results: bench/results/span_confidence_recalibration.{json,md}, a row per run and
each recipe's mean over its seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanjudge.eval.distill.dev_folds import analysed, kept_dev, table_folds, write_results
from spanjudge.eval.distill.report import rounded, seed_stats
from spanjudge.eval.spans.calibration import calibration_pairs
from spanjudge.eval.spans.recalibration import recalibration

REPO = Path(__file__).resolve().parents[1]
KEPT = REPO / "bench/results/distill_judgments"
RESULTS = REPO / "bench/results/span_confidence_recalibration"
COLUMNS = ("n", "observed", "mean_confidence", "auc", "ece", "ece_temperature", "ece_platt", "ece_constant")


def run_row(label: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The recalibration of one run's dev span confidences (None: its dev judgments are not kept)."""
    kept = kept_dev(KEPT, label, settings)
    if kept is None:
        return None
    docs, rows = kept
    folds = [calibration_pairs(fold, rows)["span_confidence"] for fold in table_folds(docs)]
    return {"label": label, "recipe": settings["recipe"], "seed": settings["train_seed"], **recalibration(folds)}


def markdown(rows: list[dict[str, Any]], recipes: list[dict[str, Any]]) -> str:
    lines = [
        "# Span confidence recalibrated on dev: would it reach ECE ≤ 0.05? (`bench/span_confidence_recalibration.py`)",
        "",
        'The students\' span confidence against "overlaps a human span", on the dev split (tables 70–79, two folds: '
        "even and odd tables). Each map is fitted on one fold and read on the other (`eval.spans.recalibration`): "
        "temperature σ(logit(c)/T), Platt σ(a·logit(c)+b), and the constant base rate, which a map that knows "
        "nothing can reach. AUC: how well the raw confidence ranks the overlapping spans above the others (0.5: "
        "not at all); no monotone map changes it. ECE: 10 equal bins. The test split is not read. No model runs.",
        "",
        "| run | recipe | seed | spans | overlap a human span | mean confidence | AUC | ECE raw | "
        "ECE temperature | ECE Platt | ECE constant |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = " | ".join(rounded(r[c]) for c in COLUMNS)
        lines.append(f"| {r['label']} | {r['recipe']} | {r['seed']} | {cells} |")
    lines += [
        "",
        "Each recipe's mean [lowest, highest] over its seeds:",
        "",
        "| recipe | seeds | AUC | ECE raw | ECE temperature | ECE Platt | ECE constant |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in recipes:
        cells = " | ".join(
            f"{s['mean']:.3f} [{s['min']:.3f}, {s['max']:.3f}]" if s["mean"] is not None else "–"
            for s in (r[c] for c in COLUMNS[3:])
        )
        lines.append(f"| {r['recipe']} | {', '.join(map(str, r['seeds']))} | {cells} |")
    return "\n".join(lines) + "\n"


def results(runs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A row per protocol run with dev judgments kept, and each recipe's mean over its seeds."""
    return analysed(runs, run_row, lambda members: {c: seed_stats([r[c] for r in members]) for c in COLUMNS[3:]})


def main() -> None:
    print(write_results(RESULTS, results, markdown))


if __name__ == "__main__":
    main()
