"""How well a judge's own probabilities match the humans: reliability tables, expected calibration error
(ECE) and reliability diagrams (PNG), for the three things a span judge's probabilities claim:

- **span confidence** (the probability that the judge writes a span, with those before it, along its reply)
  against whether that span overlaps a human span;
- **P(no error)** against whether the humans marked nothing in the output;
- **the expected number of errors** against the humans' number of spans.

ECE = Σ_b (n_b / N) · |mean predicted_b − mean observed_b| over equal-width bins of the prediction (10 bins
of [0, 1] for a probability; for a count, bins of width one error from 0, so its ECE is in errors). A
bin with no prediction in it does not count. Beside it, for the two probabilities, the AUC: how well they rank
(0.5: not at all), which no map fitted after the fact can add (`recalibration`). Judgments are the rows the span
study keeps per output (`eval.spans.judging`): written spans, each span's confidence, P(no error) and the expected
count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.eval.spans.documents import SpanDocument

BINS = 10
MEASURES = {
    "span_confidence": "span confidence vs. overlaps a human span",
    "no_error": "P(no error) vs. the humans marked nothing",
    "expected_count": "expected number of errors vs. the humans' number",
}


def reliability(
    pairs: Sequence[tuple[float, float]], *, bins: int = BINS, width: float | None = None
) -> dict[str, Any]:
    """The reliability table and ECE of (predicted, observed) pairs: `bins` equal bins of [0, 1], or bins of
    `width` from 0 up (a count). `ece` is None without pairs."""
    table: dict[int, list[tuple[float, float]]] = {}
    for predicted, observed in pairs:
        index = int(predicted // width) if width else min(int(predicted * bins), bins - 1)
        table.setdefault(index, []).append((predicted, observed))
    size = width or 1.0 / bins
    rows = [
        {
            "low": round(index * size, 6),
            "high": round((index + 1) * size, 6),
            "n": len(members),
            "predicted": sum(p for p, _ in members) / len(members),
            "observed": sum(o for _, o in members) / len(members),
        }
        for index, members in sorted(table.items())
    ]
    n = len(pairs)
    ece = sum(r["n"] / n * abs(r["predicted"] - r["observed"]) for r in rows) if n else None
    return {"n": n, "ece": ece, "bins": rows}


def auc(pairs: Sequence[tuple[float, float]]) -> float | None:
    """P(a positive's confidence > a negative's), ties counting half; None without both kinds."""
    positives = [p for p, o in pairs if o]
    negatives = [p for p, o in pairs if not o]
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def _overlaps(span: Sequence[int], gold: Sequence[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in gold)


def calibration_pairs(
    docs: Sequence[SpanDocument], rows: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, list[tuple[float, float]]]:
    """The (predicted, observed) pairs of each measure over the scored outputs of `rows` (document id -> its
    judgment row with `spans`, `span_written`, `p_no_error` and `expected_errors`; None: unscored)."""
    pairs: dict[str, list[tuple[float, float]]] = {measure: [] for measure in MEASURES}
    for doc in docs:
        row = rows.get(doc.id)
        if row is None:
            continue
        gold = [(g.start, g.end) for g in doc.gold]
        for span, confidence in zip(row["spans"], row["span_written"], strict=True):
            pairs["span_confidence"].append((float(confidence), float(_overlaps(span, gold))))
        pairs["no_error"].append((float(row["p_no_error"]), float(not gold)))
        pairs["expected_count"].append((float(row["expected_errors"]), float(len(gold))))
    return pairs


def calibration(docs: Sequence[SpanDocument], rows: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """Each measure's reliability table and ECE (`reliability`) over `docs`, and for the two probabilities their
    AUC (`auc`; None for the count, and where the outputs give only one kind)."""
    pairs = calibration_pairs(docs, rows)
    return {
        measure: {
            **reliability(found, width=1.0 if measure == "expected_count" else None),
            "auc": None if measure == "expected_count" else auc(found),
        }
        for measure, found in pairs.items()
    }


def calibration_markdown(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A table of each judge's ECE per measure (`results`: judge -> `calibration`)."""
    lines = [
        "",
        "## Calibration of the judges' probabilities",
        "",
        "ECE: the mean gap between what the judge's probabilities predict and what the humans marked, over "
        "10 equal bins (the expected count: bins of one error, its ECE in errors); AUC: how well a probability "
        "ranks what the humans marked (0.5: not at all); n: spans or outputs.",
        "",
        "| judge | " + " | ".join(MEASURES.values()) + " |",
        "|---|" + "---:|" * len(MEASURES),
    ]
    for judge, measures in results.items():
        cells = [_cell(measures[m]) for m in MEASURES]
        lines.append(f"| {judge} | " + " | ".join(cells) + " |")
    return lines


def _cell(found: Mapping[str, Any]) -> str:
    if found["ece"] is None:
        return "–"
    ranks = "" if found.get("auc") is None else f", AUC {found['auc']:.3f}"
    return f"{found['ece']:.3f}{ranks} (n={found['n']})"


def reliability_png(path: Path, measures: Mapping[str, Mapping[str, Any]], title: str) -> Path:
    """A reliability diagram per measure, side by side: each bin's mean prediction against what the humans
    marked, the diagonal where they agree, bins sized by how many fell in them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(MEASURES), figsize=(4.2 * len(MEASURES), 4.0))
    for axis, (measure, label) in zip(axes, MEASURES.items(), strict=True):
        table = measures[measure]
        rows = table["bins"]
        top = 1.0 if measure != "expected_count" else max([1.0, *(max(r["predicted"], r["observed"]) for r in rows)])
        axis.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1)
        if rows:
            sizes = [20 + 180 * math.sqrt(r["n"] / table["n"]) for r in rows]
            axis.plot([r["predicted"] for r in rows], [r["observed"] for r in rows], color="tab:blue", linewidth=1)
            axis.scatter([r["predicted"] for r in rows], [r["observed"] for r in rows], s=sizes, color="tab:blue")
        ece = "–" if table["ece"] is None else f"{table['ece']:.3f}"
        axis.set_title(f"{label}\nECE {ece}, n={table['n']}", fontsize=9)
        axis.set_xlabel("predicted (mean of the bin)")
        axis.set_ylabel("observed")
        axis.set_xlim(0, top)
        axis.set_ylim(0, top)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
