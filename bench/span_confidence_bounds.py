"""Would anything outside a student's reply rank its spans? Dev judgments only (issue #67); no model runs.

`bench/span_confidence_features.py` found nothing in the reply that ranks a student's spans against "overlaps a
human span" (AUC about 0.5). This reads three signals from outside the reply, for every protocol run whose dev
judgments are kept:

- `in_input`: the span's text is not found in the input data (case and spacing folded): a quote that the data
  holds word for word is less likely to be an error. Available when judging.
- `other_seeds`: the share of the recipe's other seeds (their kept dev judgments) that mark a span overlapping it:
  what an ensemble of seed students would read. Available when judging with them all (the judging cost times
  the seeds); – for a recipe with one seed.
- `teacher`: GPT-4 (the teacher the students learn from) marks a span overlapping it. Not available when
  judging: an oracle, read as a bound on what a student's confidence could reach by agreeing with its teacher.

Beside them, `confidence_vs_teacher`: the span confidence ranked against the teacher's spans instead of the humans'.

    .venv/bin/python bench/span_confidence_bounds.py    # → bench/results/span_confidence_bounds.{json,md}
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402

from spanjudge.eval.distill.choice import rounded, seed_stats, spread  # noqa: E402
from spanjudge.eval.distill.dev_folds import dev_split  # noqa: E402
from spanjudge.eval.distill.judgments import STUDENT_READ, archived, readings  # noqa: E402
from spanjudge.eval.spans.recalibration import auc  # noqa: E402

RESULTS = BENCH / "results"
KEPT = RESULTS / "distill_judgments"
OUT = RESULTS / "span_confidence_bounds"
SIGNALS = ("confidence", "in_input", "other_seeds", "teacher")
# the span confidence against the teacher's spans instead of the humans': does the student know which of its spans
# its own teacher would mark? (bench/span_confidence_probe.py asks its states)
AGAINST_TEACHER = "confidence_vs_teacher"
COLUMNS = (*SIGNALS, AGAINST_TEACHER)
Span = tuple[int, int]


def folded(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def overlaps(span: Span, others: list[Span] | list[list[int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in others)


def span_signals(
    output: str, input_text: str, reading: dict[str, Any], others: list[dict[str, Any] | None], teacher: list[Span]
) -> list[dict[str, float | None]]:
    """Each written span's signals (the module docstring); `others`: the other seeds' readings of the output."""
    data = folded(input_text)
    found = []
    for (start, end), confidence in zip(reading["spans"], reading["span_written"], strict=True):
        span = (start, end)
        marking = [other is not None and overlaps(span, other["spans"]) for other in others]
        found.append(
            {
                "confidence": confidence,
                "in_input": 0.0 if folded(output[start:end]) in data else 1.0,
                "other_seeds": sum(marking) / len(marking) if marking else None,
                "teacher": float(overlaps(span, teacher)),
            }
        )
    return found


def recipe_rows(runs: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per protocol run with kept dev judgments: its spans, their share overlapping a human span, and each
    signal's AUC."""
    members: dict[str, list[str]] = {}
    for label, run in runs.items():
        if run["settings"].get("protocol") and archived(KEPT, label, "dev").get(STUDENT_READ) is not None:
            members.setdefault(run["settings"]["recipe"], []).append(label)
    rows = []
    for recipe, labels in members.items():
        docs, teacher = dev_split(labels[0], runs[labels[0]]["settings"])
        read = {label: readings(archived(KEPT, label, "dev")[STUDENT_READ]) for label in labels}
        for label in labels:
            pairs: dict[str, list[tuple[float, float]]] = {signal: [] for signal in COLUMNS}
            for doc in docs:
                if (reading := read[label].get(doc.id)) is None:
                    continue
                others = [read[other].get(doc.id) for other in labels if other != label]
                gold = [(g.start, g.end) for g in doc.gold]
                text = " ".join(doc.inputs.values())
                for span, signals in zip(
                    reading["spans"], span_signals(doc.output, text, reading, others, teacher[doc.id]), strict=True
                ):
                    for signal, value in signals.items():
                        if value is not None:
                            pairs[signal].append((value, float(overlaps(span, gold))))
                    pairs[AGAINST_TEACHER].append((signals["confidence"], signals["teacher"]))
            spans = len(pairs["confidence"])
            rows.append(
                {"label": label, "recipe": recipe, "seed": runs[label]["settings"]["train_seed"], "spans": spans,
                 "overlap": sum(y for _, y in pairs["confidence"]) / spans if spans else None}
                | {signal: auc(pairs[signal]) if pairs[signal] else None for signal in COLUMNS}
            )  # fmt: skip
    return rows


def markdown(rows: list[dict[str, Any]], recipes: list[dict[str, Any]]) -> list[str]:
    head = " | ".join(COLUMNS)
    return [
        "# Would anything outside the reply rank a student's spans? (`bench/span_confidence_bounds.py`)",
        "",
        f'Machine: {machine()} (no model runs). AUC against "overlaps a human span" on the dev split (tables '
        "70–79) of each written span's confidence (as the judge reads it), whether its text is missing from the "
        "input data (`in_input`), the share of the recipe's other seeds that mark an overlapping span "
        "(`other_seeds`), and whether the teacher, GPT-4, marks one (`teacher`: an oracle, not available when "
        f"judging); and `{AGAINST_TEACHER}`: the span confidence's AUC against whether the teacher marks an "
        "overlapping span (does the student know which of its spans its teacher would mark?).",
        "",
        f"| run | recipe | seed | spans | overlap a human span | {head} |",
        "|---|---|---:|---:|---:|" + "---:|" * len(COLUMNS),
        *(
            f"| {r['label']} | {r['recipe']} | {r['seed']} | {r['spans']} | "
            + " | ".join(rounded(r[c]) for c in ("overlap", *COLUMNS))
            + " |"
            for r in rows
        ),
        "",
        "Each recipe's mean [lowest, highest] over its seeds:",
        "",
        f"| recipe | seeds | {head} |",
        "|---|---|" + "---:|" * len(COLUMNS),
        *(
            f"| {r['recipe']} | {', '.join(map(str, r['seeds']))} | " + " | ".join(spread(r[s]) for s in COLUMNS) + " |"
            for r in recipes
        ),
    ]


def main() -> None:
    runs = json.loads((RESULTS / "distill_quintd.json").read_text())["runs"]
    rows = recipe_rows(runs)
    recipes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        recipes.setdefault(row["recipe"], []).append(row)
    means = [
        {"recipe": recipe, "seeds": [r["seed"] for r in group]}
        | {s: seed_stats([r[s] for r in group]) for s in COLUMNS}
        for recipe, group in recipes.items()
    ]
    write_report(OUT, {"machine": machine(), "runs": rows, "recipes": means}, markdown(rows, means))


if __name__ == "__main__":
    main()
