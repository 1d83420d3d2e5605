"""Is one protocol recipe better than another, beyond the noise? Paired bootstrap intervals, no model.

    .venv/bin/python bench/distill_paired.py                                   # the comparisons below
    .venv/bin/python bench/distill_paired.py --pair A B --split dev [--pair ...]

For each pair, recipe A's mean over its seeds minus recipe B's, per agreement column, for the student's replies
as written and as decided (`eval.distill.paired`): the protocol's kept judgments of the split
(bench/results/distill_judgments/) and the runs recorded in bench/results/distill_quintd.json, with 95 %
intervals over the same input resamples. The test split is read only for recipes the protocol has judged it
for. Rows merge into bench/results/distill_paired.{json,md} by (A, B, split).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402

from spanjudge.core.errors import InputError  # noqa: E402
from spanjudge.eval.distill.paired import COLUMNS, READINGS, paired_recipes  # noqa: E402

RESULTS = BENCH / "results"
OUT = RESULTS / "distill_paired"
# issue #66: the student taught by dev's choice of teacher (the vote of GPT-4's two samples) against the
# GPT-4-taught one, on dev and on test
PAIRS = [("gemma3-vote-cut", "gemma3-mixed-cut", "dev"), ("gemma3-vote-cut", "gemma3-mixed-cut", "test")]
NAMES = {"overlap_f1": "overlap F1", "token_f1": "token F1", "count_pearson": "count r",
         "token_pearson": "token r", "mpp_f1": "MPP F1"}  # fmt: skip


def _cell(entry: dict[str, Any]) -> str:
    if entry["difference"] is None:
        return "–"
    return f"{entry['difference']:+.3f} [{entry['low']:+.3f}, {entry['high']:+.3f}]"


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "# Recipes compared, paired over the same outputs (`bench/distill_paired.py`)",
        "",
        f"Machine: {machine()} (no model runs). Each cell: recipe A's mean over its seeds minus recipe B's, pooled "
        "over the split's outputs, with the 95 % percentile interval of that difference over 1,000 input "
        "resamples shared by every seed of both (`eval.distill.paired`). Decided: each run's thresholds, fitted "
        "on its dev judgments. An interval that holds zero: the split cannot tell the two apart on that column.",
        "",
        f"| A | B | split | reading | seeds A / B | {' | '.join(NAMES[c] for c in COLUMNS)} |",
        "|---|---|---|---|---|" + "---:|" * len(COLUMNS),
    ]
    for row in rows:
        for reading in READINGS:
            if reading not in row:
                continue
            seeds = f"{len(row['seeds'][row['a']])} / {len(row['seeds'][row['b']])}"
            cells = " | ".join(_cell(row[reading][c]) for c in COLUMNS)
            lines.append(f"| {row['a']} | {row['b']} | {row['split']} | {reading} | {seeds} | {cells} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", nargs=2, action="append", metavar=("A", "B"), help="Two recipes (repeatable).")
    parser.add_argument("--split", choices=("dev", "test"), help="With --pair: the split they are read on.")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args(argv)
    if bool(args.pair) != bool(args.split):
        parser.error("--pair and --split go together")
    pairs = [(a, b, args.split) for a, b in args.pair] if args.pair else PAIRS
    runs = json.loads((RESULTS / "distill_quintd.json").read_text())["runs"]
    saved = json.loads(OUT.with_suffix(".json").read_text())["rows"] if OUT.with_suffix(".json").is_file() else []
    rows = {(r["a"], r["b"], r["split"]): r for r in saved}
    kept = RESULTS / "distill_judgments"
    try:
        for a, b, split in pairs:
            rows[(a, b, split)] = paired_recipes(runs, a, b, split, kept, resamples=args.resamples)
    except InputError as exc:
        print(f"distill_paired: {exc}", file=sys.stderr)
        return 2
    ordered = list(rows.values())
    write_report(OUT, {"machine": machine(), "rows": ordered}, markdown(ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
