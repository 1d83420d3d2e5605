"""The protocol runs' kept dev judgments in two folds of tables, for the analyses that read dev only and fit
on one fold what they read on the other (`bench/span_confidence_recalibration.py`,
`bench/decision_objective.py`). No model runs; the test split is never read."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from spanjudge.eval.distill.judgments import STUDENT_READ, archived, readings
from spanjudge.eval.distill.phases import held_out_documents
from spanjudge.eval.distill.study import StudySettings
from spanjudge.eval.spans.documents import SpanDocument

Readings = dict[str, dict[str, Any] | None]


def dev_split(label: str, settings: Mapping[str, Any]) -> tuple[list[SpanDocument], dict[str, Any]]:
    """A protocol run's dev outputs with their human spans, and the teacher's spans on them (its recorded
    settings' domains and dev tables)."""
    args = StudySettings(label=label, split="dev", eval_domains=settings["eval_domains"],
                         dev_tables=tuple(settings["dev_tables"]))  # fmt: skip
    return held_out_documents(args)


def kept_dev(root: Path, label: str, settings: Mapping[str, Any]) -> tuple[list[SpanDocument], Readings] | None:
    """A run's dev outputs with their human spans, and its student's readings of them (`readings`) from the
    judgments kept under `root` (None: they are not kept)."""
    payload = archived(root, label, "dev").get(STUDENT_READ)
    if payload is None:
        return None
    return dev_split(label, settings)[0], readings(payload)


def table_folds(docs: list[SpanDocument]) -> list[list[SpanDocument]]:
    """The outputs of even tables, then of odd ones: a table's four systems stay in one fold."""
    return [[d for d in docs if int(d.input_id.rsplit("/", 1)[1]) % 2 == parity] for parity in (0, 1)]


def analysed(
    runs: Mapping[str, Any],
    run_row: Callable[[str, dict[str, Any]], dict[str, Any] | None],
    recipe_stats: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """`run_row` of every protocol run in `runs` (`distill_quintd.json`'s; those it gives None left out), and
    per recipe its seeds with `recipe_stats` of its runs' rows."""
    rows = [row for label, run in runs.items() if run["settings"].get("protocol")
            if (row := run_row(label, run["settings"])) is not None]  # fmt: skip
    members: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        members.setdefault(row["recipe"], []).append(row)
    recipes = [{"recipe": recipe, "seeds": [r["seed"] for r in group]} | recipe_stats(group)
               for recipe, group in members.items()]  # fmt: skip
    return {"runs": rows, "recipes": recipes}


def write_results(
    stem: Path,
    results: Callable[[dict[str, Any]], dict[str, list[dict[str, Any]]]],
    markdown: Callable[[list[dict[str, Any]], list[dict[str, Any]]], str],
) -> str:
    """`results` of the protocol runs recorded beside `stem` (its folder's distill_quintd.json), written as
    `stem`.json, and their `markdown` as `stem`.md, which it returns."""
    found = results(json.loads((stem.parent / "distill_quintd.json").read_text())["runs"])
    stem.with_suffix(".json").write_text(json.dumps(found, indent=2) + "\n")
    text = markdown(found["runs"], found["recipes"])
    stem.with_suffix(".md").write_text(text)
    return text
