"""A judge's error spans on a span set: held-out quintd-1 outputs, judged and kept on disk.

Shared by `spanjudge demo` (base vs trained judge on a few held-out tables) and
bench/distill_quintd.py (the full held-out comparison). Judgments are written once all are
in, to one JSON file per judge; a file that exists is reused, so a re-run makes no model call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanjudge.data_gen.quintd import QUINTD_DOMAINS
from spanjudge.inference.errors import SpanjudgeError
from spanjudge.inference.fileio import atomic_write_json
from spanjudge.inference.progress import Advance

from .documents import SpanDocument
from .quintd import load_quintd1

QUINTD_TASK = "quintd1"  # configs/tasks/data_to_text.yaml: quintd-1's own task and aspect
QUINTD_ASPECT = "accuracy"


def quintd_tables(
    annotator: str, tables: tuple[int, int], domains: Sequence[str] = ("wikidata",), root: Path | None = None
) -> list[SpanDocument]:
    """All systems' outputs of quintd-1 tables [first, stop) in `domains`, with `annotator`'s spans."""
    first, stop = tables
    docs = load_quintd1(root, annotator=annotator, domains=tuple(d for d in QUINTD_DOMAINS if d in domains))
    return [d for d in docs if first <= int(d.input_id.split("/")[1]) < stop]


def judge_span_documents(
    judge: Any, docs: Sequence[SpanDocument], path: Path, progress: Advance | None = None
) -> dict[str, Any]:
    """The judge's spans per document (None when unscored), with its speed; cached in `path`.

    `judge` is a `spanjudge.inference.judge.Judge`. A model call that failed is an error (the
    file is not written, so a re-run asks again), never an unscored item.
    """
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    task = judge.catalog.task(QUINTD_TASK)
    header = task.inputs[0].header
    requests = [
        judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(d.inputs.values()))}, d.output, id=d.id)
        for d in docs
    ]
    started = time.perf_counter()
    results = judge.score(requests, progress)
    wall = time.perf_counter() - started
    failed = [r.call_failure for r in results if r.call_failure]
    if failed:
        raise SpanjudgeError(f"{len(failed)} model calls failed (first: {failed[0]}); run again to retry them")
    rows = {
        r.id: {
            "spans": [[e.start, e.end] for e in r.errors if e.start is not None] if r.scored else None,
            "errors": len(r.errors) if r.scored else None,
            "unanchored": r.unanchored_count if r.scored else None,
            "score": r.score,
            "attempts": r.attempts,
            "reply": r.raw_replies[-1] if r.raw_replies else None,
            "unscored_reason": r.unscored_reason,
        }
        for r in results
    }
    payload = {
        "wall_s": round(wall, 1),
        "evaluations_per_s": round(len(requests) / wall, 3) if wall > 0 else None,
        "retries": sum(row["attempts"] - 1 for row in rows.values() if row["attempts"]),
        "rows": rows,
    }
    atomic_write_json(path, payload)
    return payload


def predictions(judged: dict[str, Any]) -> dict[str, list[tuple[int, int]] | None]:
    """Document id -> spans (None: unscored), as `span_agreement` takes them."""
    return {
        doc_id: None if row["spans"] is None else [tuple(s) for s in row["spans"]]  # type: ignore[misc]
        for doc_id, row in judged["rows"].items()
    }
