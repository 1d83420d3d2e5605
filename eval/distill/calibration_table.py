"""The report's calibration table: the ECE of each recipe's probabilities over its seeds, per split and domain, and
how well its span confidence ranks (AUC)."""

from __future__ import annotations

from typing import Any

from spanjudge.eval.spans.calibration import MEASURES


def calibration_tables(entries: list[dict[str, Any]]) -> list[str]:
    """Per split, the ECE of each recipe's probabilities and its span confidence's AUC (mean [lowest, highest] over
    its seeds), per domain."""
    chosen = [e for e in entries if e.get("calibration")]
    if not chosen:
        return []
    lines = [
        "",
        "### Calibration of the student's probabilities",
        "",
        "Expected calibration error (`spanjudge.eval.spans.calibration`: 10 equal bins; the count in bins of one "
        "error, its ECE in errors), mean [lowest, highest] over the seeds; reliability diagrams in "
        "`bench/results/distill_calibration/`. AUC: how well the span confidence ranks the spans that overlap a "
        "human span above the others (0.5: not at all; – for rows recorded before it was).",
        "",
        "| recipe | split | domain | seeds | span confidence vs. overlaps a human span | P(no error) vs. humans "
        "marked nothing | expected count vs. human count (errors) | span-confidence AUC |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for e in chosen:
        cells = []
        for found in [*(e["calibration"][m] for m in MEASURES), e.get("span_confidence_auc", {"mean": None})]:
            cells.append(
                "–" if found["mean"] is None else f"{found['mean']:.3f} [{found['min']:.2f}, {found['max']:.2f}]"
            )
        seeds = ", ".join(map(str, e["seeds"]))
        lines.append(f"| {e['recipe']} | {e['split']} | {e['domain']} | {seeds} | {' | '.join(cells)} |")
    return lines
