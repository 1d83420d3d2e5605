"""Can anything the judge writes rank its spans better than its span confidence? Dev judgments only.

    .venv/bin/python bench/span_confidence_features.py

Issue #67 asks for a span confidence that ranks (dev AUC ≥ 0.70 against "overlaps a human span"). A monotone
recalibration cannot change the AUC (`bench/span_confidence_recalibration.py`); a map over several things the
reply shows could. For every protocol run whose dev judgments are kept, each written span is described by:
its confidence (logit), the severity written with it, its length (log characters), where it starts in the
output (a fraction), its place among the reply's errors, how many errors the reply writes, P(some error) =
1 − P(no error) (logit), and the output's domain; where the judgments read them (`ErrorProbabilities.
location_log_probs`, from gemma3-mixed-cut-located-s42 on), also the log-probability of the location's first token
as written and the mean over its first four. The AUC of each alone, and of a logistic regression over all of them
(standardised, L2 0.01) fitted on one fold of the dev tables (even or odd) and read on the other (`combined`:
without the location's features, as every run can; `combined_location`: with them). No model runs; the test split
is never read. Results: bench/results/span_confidence_features.{json,md}, a row per
run and each recipe's mean.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

from spanjudge.eval.distill.choice import rounded, seed_stats
from spanjudge.eval.distill.dev_folds import analysed, kept_dev, table_folds, write_results
from spanjudge.eval.distill.judgments import STUDENT_READ
from spanjudge.eval.spans.documents import SpanDocument
from spanjudge.eval.spans.recalibration import auc, logit
from spanjudge.inference.contract import Evaluation, parse_judge

REPO = Path(__file__).resolve().parents[1]
KEPT = REPO / "bench/results/distill_judgments"
RESULTS = REPO / "bench/results/span_confidence_features"
FEATURES = ("confidence", "severity", "length", "start", "place", "errors", "p_error", "owid", "ice_hockey")
LOCATION_FEATURES = ("location_first", "location_mean")
COLUMNS = (*FEATURES, *LOCATION_FEATURES, "combined", "combined_location")
L2 = 0.01


def span_features(doc: SpanDocument, reading: dict[str, Any], reply: str) -> list[tuple[list[float], float]]:
    """(features, overlaps a human span) for each span the judge wrote on `doc`."""
    parsed = parse_judge(reply)
    severities = [e.severity for e in parsed.errors] if isinstance(parsed, Evaluation) else []
    gold = [(g.start, g.end) for g in doc.gold]
    spans, domain, found = reading["spans"], doc.input_id.split("/")[0], []
    located = reading.get("span_location") or [None] * len(spans)
    for place, (span, confidence, location) in enumerate(zip(spans, reading["span_written"], located, strict=True)):
        start, end = span
        features = [
            logit(confidence), float(severities[place]) if place < len(severities) else 3.0,
            math.log1p(end - start), start / max(1, len(doc.output)), float(place), float(len(spans)),
            -logit(reading["p_no_error"]), float(domain == "owid"), float(domain == "ice_hockey"),
        ]  # fmt: skip
        if location is not None:  # LOCATION_FEATURES
            features += [location[0], sum(location) / len(location)]
        found.append((features, float(any(start < e and s < end for s, e in gold))))
    return found


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standardisation and weights of an L2-regularised logistic regression."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / scale

    def loss(w: np.ndarray) -> float:
        s = z @ w[1:] + w[0]
        return float(np.mean(np.logaddexp(0.0, s) - y * s) + L2 * np.sum(w[1:] ** 2))

    return mean, scale, minimize(loss, np.zeros(x.shape[1] + 1), method="L-BFGS-B").x


def cross_fitted_auc(folds: list[list[tuple[list[float], float]]], width: int) -> float | None:
    """AUC of the regression over the first `width` features, fitted on the other fold, read on each fold's
    spans; None where a span lacks them."""
    if any(len(f) < width for fold in folds for f, _ in fold):
        return None
    folds = [[(f[:width], y) for f, y in fold] for fold in folds]
    predicted: list[tuple[float, float]] = []
    for index, fold in enumerate(folds):
        rest = [pair for other, pairs in enumerate(folds) if other != index for pair in pairs]
        if not fold or not rest:
            return None
        mean, scale, w = _fit(np.array([f for f, _ in rest]), np.array([y for _, y in rest]))
        predicted += [(float(((np.array(f) - mean) / scale) @ w[1:] + w[0]), y) for f, y in fold]
    return auc(predicted)


def run_row(label: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    """Each feature's AUC and the cross-fitted regression's, over one run's dev spans (None: not kept)."""
    kept = kept_dev(KEPT, label, settings)
    if kept is None:
        return None
    docs, readings = kept
    replies = json.loads(gzip.decompress((KEPT / label / "dev" / f"{STUDENT_READ}.json.gz").read_bytes()))["rows"]

    def spans_of(fold: list[SpanDocument]) -> list[tuple[list[float], float]]:
        scored = [(d, r) for d in fold if (r := readings.get(d.id)) is not None]
        return [pair for d, r in scored for pair in span_features(d, r, replies[d.id]["reply"])]

    folds = [spans_of(fold) for fold in table_folds(docs)]
    pairs = [pair for fold in folds for pair in fold]
    row: dict[str, Any] = {"label": label, "recipe": settings["recipe"], "seed": settings["train_seed"]}
    row |= {"spans": len(pairs), "overlap": sum(y for _, y in pairs) / len(pairs) if pairs else None}
    named = (*FEATURES, *LOCATION_FEATURES)
    located = all(len(f) == len(named) for f, _ in pairs)
    row |= {name: auc([(f[i], y) for f, y in pairs]) if i < len(FEATURES) or located else None
            for i, name in enumerate(named)}  # fmt: skip
    row["combined"] = cross_fitted_auc(folds, len(FEATURES))
    row["combined_location"] = cross_fitted_auc(folds, len(named)) if located else None
    return row


def markdown(rows: list[dict[str, Any]], recipes: list[dict[str, Any]]) -> str:
    head = " | ".join(COLUMNS)
    lines = [
        "# What ranks a student's spans on dev? (`bench/span_confidence_features.py`)",
        "",
        'AUC against "overlaps a human span" (0.5: no ranking; below 0.5: the feature ranks backwards) of each '
        "thing the reply shows about a written span, and of a logistic regression over all of them fitted on one "
        "fold of the dev tables (even or odd) and read on the other (`combined`). Dev split only (tables 70–79); "
        "no model runs.",
        "",
        f"| run | recipe | seed | spans | overlap a human span | {head} |",
        "|---|---|---:|---:|---:|" + "---:|" * len(COLUMNS),
    ]
    for r in rows:
        cells = " | ".join(rounded(r[c]) for c in ("spans", "overlap", *COLUMNS))
        lines.append(f"| {r['label']} | {r['recipe']} | {r['seed']} | {cells} |")
    lines += ["", "Each recipe's mean [lowest, highest] over its seeds:", "", f"| recipe | seeds | {head} |",
              "|---|---|" + "---:|" * len(COLUMNS)]  # fmt: skip
    for r in recipes:
        cells = " | ".join(
            f"{s['mean']:.3f} [{s['min']:.3f}, {s['max']:.3f}]" if s["mean"] is not None else "–"
            for s in (r[c] for c in COLUMNS)
        )
        lines.append(f"| {r['recipe']} | {', '.join(map(str, r['seeds']))} | {cells} |")
    return "\n".join(lines) + "\n"


def results(runs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A row per protocol run with dev judgments kept, and each recipe's mean over its seeds."""
    return analysed(runs, run_row, lambda members: {c: seed_stats([r[c] for r in members]) for c in COLUMNS})


def main() -> None:
    print(write_results(RESULTS, results, markdown))


if __name__ == "__main__":
    main()
