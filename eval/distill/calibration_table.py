"""The report's calibration table: the ECE of each recipe's probabilities over its seeds, per split and domain."""

from __future__ import annotations

from typing import Any

from spanjudge.eval.spans.calibration import MEASURES


def calibration_tables(entries: list[dict[str, Any]]) -> list[str]:
    """Per split, the ECE of each recipe's probabilities (mean [lowest, highest] over its seeds), per domain."""
    chosen = [e for e in entries if e.get("calibration")]
    if not chosen:
        return []
    lines = [
        "",
        "### Calibration of the student's probabilities",
        "",
        "Expected calibration error (`spanjudge.eval.spans.calibration`: 10 equal bins; the count in bins of one "
        "error, its ECE in errors), mean [lowest, highest] over the seeds; reliability diagrams in "
        "`bench/results/distill_calibration/`.",
        "",
        "| recipe | split | domain | seeds | span confidence vs. overlaps a human span | P(no error) vs. humans "
        "marked nothing | expected count vs. human count (errors) |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for e in chosen:
        cells = []
        for measure in MEASURES:
            found = e["calibration"][measure]
            cells.append(
                "–" if found["mean"] is None else f"{found['mean']:.3f} [{found['min']:.2f}, {found['max']:.2f}]"
            )
        seeds = ", ".join(map(str, e["seeds"]))
        lines.append(f"| {e['recipe']} | {e['split']} | {e['domain']} | {seeds} | {' | '.join(cells)} |")
    return lines
