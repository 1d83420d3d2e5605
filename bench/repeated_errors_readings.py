"""What a repeated error block costs a student on dev (issue #67), read from its kept judgments; no model runs.

Greedy students loop: a reply writes an error block (location and explanation) again word for word, each repeat
anchored to another occurrence of its words in the output, or to the same one (`bench/repeated_errors.py` counts
the replies). Every protocol run whose dev judgments are kept is read three ways:

- **as written**: the protocol's reading (each block an error);
- **distinct**: a block written again is dropped (the judge said it once);
- **stopped**: the errors end before the first repeated block, as they would if decoding stopped there.

Each reading re-anchors the blocks it keeps (`contract.anchor_errors`, as the judge does) and keeps the
probabilities the judge read along its reply (the kept blocks' confidences as written); its decision thresholds
are fitted again on it (`eval.spans.decision_fit`). Reported per run and per recipe: the fit's objective (decided,
and the written reply's), the decided overlap F1, token F1, count r and token r, span-confidence AUC, the blocks
each reading drops, and the share of the replies' characters from the first repeated block on (what a decoder
that stopped there would not write). Replies that ran out of tokens stay unscored in every reading. Dev only.

    .venv/bin/python bench/repeated_errors_readings.py    # → bench/results/repeated_errors_readings.{json,md}
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402

from spanjudge.eval.distill.choice import rounded, seed_stats, spread  # noqa: E402
from spanjudge.eval.distill.dev_folds import analysed, dev_split  # noqa: E402
from spanjudge.eval.distill.judgments import STUDENT_READ, archived, readings  # noqa: E402
from spanjudge.eval.spans.agreement import span_agreement  # noqa: E402
from spanjudge.eval.spans.decision_fit import decided_spans, fit_decision_rule  # noqa: E402
from spanjudge.eval.spans.documents import SpanDocument  # noqa: E402
from spanjudge.eval.spans.recalibration import auc  # noqa: E402
from spanjudge.inference.contract import ErrorAnnotation, Evaluation, parse_judge  # noqa: E402
from spanjudge.inference.contract.anchor import anchor_errors  # noqa: E402

RESULTS = BENCH / "results"
KEPT = RESULTS / "distill_judgments"
OUT = RESULTS / "repeated_errors_readings"
READINGS = ("as written", "distinct", "stopped")
DECIDED = {"overlap_f1": "overlap F1", "token_f1": "token F1", "count_pearson": "count r", "token_pearson": "token r"}


def kept_blocks(errors: list[ErrorAnnotation], reading: str) -> list[int]:
    """The indices of the blocks a reading keeps: all (as written), the first of each (location, explanation)
    (distinct), or those before the first block written again (stopped)."""
    seen: set[tuple[str | None, str]] = set()
    kept = []
    for index, error in enumerate(errors):
        block = (error.location, error.explanation)
        if block in seen and reading != "as written":
            if reading == "stopped":
                break
            continue
        seen.add(block)
        kept.append(index)
    return kept


def read_again(row: dict[str, Any], output: str, reading: str) -> tuple[dict[str, Any], int]:
    """A kept judgment row under `reading`, and how many blocks it dropped (an unscored row stays as it is)."""
    parsed = parse_judge(row.get("reply") or "")
    if row["spans"] is None or not isinstance(parsed, Evaluation):
        return row, 0
    written = anchor_errors(parsed.errors, output)
    if [[e.start, e.end] for e in written if e.start is not None] != row["spans"]:
        raise SystemExit(f"repeated_errors_readings: a kept reply does not anchor to its kept spans ({output[:40]!r})")
    kept = kept_blocks(parsed.errors, reading)
    if len(kept) == len(parsed.errors):
        return row, 0
    span_of = {index: place for place, index in enumerate(i for i, e in enumerate(written) if e.start is not None)}
    anchored = anchor_errors([parsed.errors[i] for i in kept], output)
    new = copy.deepcopy(row)
    new["spans"] = [[e.start, e.end] for e in anchored if e.start is not None]
    new["errors"], new["unanchored"] = len(kept), sum(e.start is None for e in anchored)
    for key in ("span_written", "span_location"):  # each anchored block's own reading, as the judge read it
        if values := row["probabilities"].get(key):
            new["probabilities"][key] = [
                values[span_of[i]] for i, e in zip(kept, anchored, strict=True) if e.start is not None
            ]
    return new, len(parsed.errors) - len(kept)


def looping_share(payload: dict[str, Any]) -> tuple[int, int]:
    """(characters from each reply's first repeated block on, characters of all replies), scored or not."""
    looping = total = 0
    for row in payload["rows"].values():
        reply = row.get("reply") or ""
        total += len(reply)
        parsed = parse_judge(reply)
        if not isinstance(parsed, Evaluation):  # cut inside a block: count what the blocks before it repeat
            parsed = parse_judge(reply[: reply.rfind("\n\nError")] + "\n\nOverall score: 0")
        if isinstance(parsed, Evaluation) and (stop := len(kept_blocks(parsed.errors, "stopped"))) < len(parsed.errors):
            at = reply.find(f"Error {stop + 1}:")
            looping += len(reply) - at if at >= 0 else 0
    return looping, total


def measured(docs: list[SpanDocument], payload: dict[str, Any]) -> dict[str, Any]:
    """The fit's objective (decided and written), the decided agreement, and the span-confidence AUC."""
    read = readings(payload)
    fit = fit_decision_rule(docs, read, split="dev", data="quintd-1 dev").rule
    assert fit.fitted_on is not None
    decided = span_agreement(docs, decided_spans(read, fit), n_resamples=1)
    pairs = [
        (confidence, float(any(s < g.end and g.start < e for g in doc.gold)))
        for doc in docs
        if (row := read.get(doc.id)) is not None
        for (s, e), confidence in zip(row["spans"], row["span_written"], strict=True)
    ]
    return {
        "objective": fit.fitted_on.value,
        "objective_written": fit.fitted_on.written_value,
        "thresholds": [fit.no_error_threshold, fit.min_confidence],
        **{key: decided.get(key) or 0.0 for key in DECIDED},
        "auc": auc(pairs),
    }


def run_row(label: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    payload = archived(KEPT, label, "dev").get(STUDENT_READ)
    if payload is None:
        return None
    docs, _ = dev_split(label, settings)
    outputs = {doc.id: doc.output for doc in docs}
    looping, total = looping_share(payload)
    row: dict[str, Any] = {"label": label, "recipe": settings["recipe"], "seed": settings["train_seed"],
                           "looping_chars": looping, "reply_chars": total}  # fmt: skip
    for reading in READINGS:
        again, dropped = copy.deepcopy(payload), 0
        for output_id, judgment in payload["rows"].items():
            again["rows"][output_id], n = read_again(judgment, outputs[output_id], reading)
            dropped += n
        row[reading] = {"dropped": dropped, **measured(docs, again)}
    return row


def recipe_stats(group: list[dict[str, Any]]) -> dict[str, Any]:
    """Each reading's objective and AUC over a recipe's seeds."""
    return {
        reading: {key: seed_stats([r[reading][key] for r in group]) for key in ("objective", "auc")}
        for reading in READINGS
    }


def markdown(rows: list[dict[str, Any]], recipes: list[dict[str, Any]]) -> list[str]:
    def cells(result: dict[str, Any]) -> str:
        values = [result["objective"], result["objective_written"], *(result[k] for k in DECIDED), result["auc"]]
        return " | ".join(rounded(v) for v in values) + f" | {result['dropped']}"

    lines = [
        "# What a repeated error block costs on dev (`bench/repeated_errors_readings.py`)",
        "",
        f"Machine: {machine()} (no model runs). Every protocol run's kept dev judgments (quintd-1 tables 70–79) read "
        "as written, with a block written again word for word dropped (**distinct**), and with the errors ended "
        "before the first repeated block (**stopped**, what a decoder that stopped there would have kept). Each "
        "reading's decisions are fitted again on it; objective = the fit's (mean of overlap F1, token F1, count r, "
        "token r; decided, and the written reply's), then the decided agreement, span-confidence AUC and the blocks "
        "the reading dropped. `looping`: the share of reply characters from the first repeated block on.",
        "",
        "| run | looping | reading | objective | objective (written) | "
        + " | ".join(f"{name}, decided" for name in DECIDED.values())
        + " | AUC | dropped |",
        "|---|---:|---|" + "---:|" * (4 + len(DECIDED)),
    ]
    for row in rows:
        share = f"{row['looping_chars'] / max(1, row['reply_chars']):.1%}"
        for reading in READINGS:
            lines.append(f"| {row['label']} | {share} | {reading} | {cells(row[reading])} |")
    lines += [
        "",
        "Each recipe's mean [lowest, highest] over its seeds:",
        "",
        "| recipe | seeds | " + " | ".join(f"objective, {r} | AUC, {r}" for r in READINGS) + " |",
        "|---|---|" + "---:|" * (2 * len(READINGS)),
        *(
            f"| {r['recipe']} | {', '.join(map(str, r['seeds']))} | "
            + " | ".join(f"{spread(r[x]['objective'])} | {spread(r[x]['auc'])}" for x in READINGS)
            + " |"
            for r in recipes
        ),
    ]
    return lines


def main() -> None:
    found = analysed(json.loads((RESULTS / "distill_quintd.json").read_text())["runs"], run_row, recipe_stats)
    lines = markdown(found["runs"], found["recipes"])
    write_report(OUT, {"machine": machine(), **found}, lines)


if __name__ == "__main__":
    main()
