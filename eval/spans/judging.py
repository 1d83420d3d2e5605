"""A judge's error spans on a span set: held-out quintd-1 outputs, judged and kept on disk.

Shared by `spanjudge demo` (base vs trained judge on a few held-out tables) and
bench/distill_quintd.py (the full held-out comparison). Each finished judgment is appended at
once to `<name>.partial.jsonl`, so a killed run loses only what was in flight and a re-run asks
only for the rest; once all are in they are written to one JSON file per judge, and a file that
exists is reused, so a re-run makes no model call.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.fileio import atomic_write_json
from spanjudge.core.jsonl import JsonlStore
from spanjudge.core.progress import Advance
from spanjudge.eval.spans.documents import SpanDocument
from spanjudge.inference.probabilities import SPAN_KEPT_AT

if TYPE_CHECKING:
    from spanjudge.inference.judge import Judge
    from spanjudge.inference.judge_workers import JudgeWorkers
    from spanjudge.inference.judged import JudgedEvaluation

QUINTD_TASK = "quintd1"  # configs/tasks/data_to_text.yaml: quintd-1's own task and aspect
QUINTD_ASPECT = "accuracy"


def partial_path(path: Path) -> Path:
    """Where the judgments of `path` collect while they come in: spans/trained.json ->
    spans/trained.partial.jsonl."""
    return path.with_name(f"{path.stem}.partial.jsonl")


def _judgment_row(result: JudgedEvaluation) -> dict[str, Any]:
    scored = result.scored
    written = result.reply_errors  # the study reads its decisions from the written reply (`eval.spans.decision_fit`)
    row: dict[str, Any] = {
        "spans": [[e.start, e.end] for e in written if e.start is not None] if scored else None,
        "errors": len(written) if scored else None,
        "unanchored": result.unanchored_count if scored else None,
        "score": result.score,
        "attempts": result.attempts,
        "reply": result.raw_replies[-1] if result.raw_replies else None,
        "unscored_reason": result.unscored_reason,
        "truncated": result.truncated,  # the judge's context policy cut the input (None: it fit)
    }
    if scored and result.probabilities is not None:  # a judge asked for its probabilities (`probabilities=True`)
        reading = result.probabilities
        row["probabilities"] = {
            "p_no_error": reading.p_no_error,
            "expected_errors": reading.expected_errors,
            "expected_score": reading.expected_score,
            "span_written": [
                p for e, p in zip(result.reply_errors, reading.written(), strict=True) if e.start is not None
            ],
            # each span's location tokens as written: log P(token | reply before it), the first LOCATION_TOKENS
            "span_location": [
                block.location_log_probs
                for e, block in zip(result.reply_errors, reading.errors, strict=True)
                if e.start is not None
            ],
        }
    if scored and result.consensus is not None:  # a judge asked for N sampled replies (`samples=N`)
        merged = result.consensus
        row["consensus"] = {
            "samples": merged.samples,
            "parsed": merged.parsed,
            "score": merged.score,
            "spans": [[e.start, e.end] for e in merged.errors],
            "confidence": [e.confidence for e in merged.errors],
        }
    return row


def _parser(judge_name: str) -> Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]:
    def parse(where: str, row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if row.get("judge") != judge_name:  # another judge's judgments are never mixed in
            raise InputError(
                f"{where}: judged by {row.get('judge')!r}, not {judge_name!r}; delete the file to judge again"
            )
        if not isinstance(row.get("id"), str) or not isinstance(row.get("row"), dict):
            raise InputError(f"{where}: not a judgment row (needs 'id' and 'row')")
        return row["id"], row

    return parse


def judge_span_documents(
    judge: Judge | JudgeWorkers | None, docs: Sequence[SpanDocument], path: Path, progress: Advance | None = None
) -> dict[str, Any]:
    """The judge's spans per document (None when unscored), with its speed; cached in `path`.

    `judge` is a `spanjudge.inference.judge.Judge`, or the same judge in worker processes (`JudgeWorkers`). Every
    finished judgment is kept at once in `partial_path(path)` until all are in `path`; a re-run judges only the
    documents not there yet (speed counts the wall time of every run that judged). A model call that failed is an
    error, never an unscored item, and is not kept, so a re-run asks again.
    """
    if path.is_file():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    if judge is None:
        raise SpanjudgeError(f"{path}: not judged yet, and no judge was given to judge it")
    store: JsonlStore[str, dict[str, Any]] = JsonlStore(partial_path(path), _parser(judge.name))
    try:
        payload = _judge_rest(judge, docs, path, store, progress)
    finally:
        store.close()
    partial_path(path).unlink()  # all of it is in `path` now
    return payload


def _judge_rest(
    judge: Judge | JudgeWorkers,
    docs: Sequence[SpanDocument],
    path: Path,
    store: JsonlStore[str, dict[str, Any]],
    progress: Advance | None,
) -> dict[str, Any]:
    task = judge.catalog.task(QUINTD_TASK)
    header = task.inputs[0].header
    todo = [d for d in docs if d.id not in store]
    if progress is not None and len(todo) < len(docs):
        progress(len(docs) - len(todo))
    requests = [
        judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(d.inputs.values()))}, d.output, id=d.id)
        for d in todo
    ]
    session, started = uuid.uuid4().hex, time.perf_counter()

    def keep(index: int, result: JudgedEvaluation) -> None:
        if result.call_failure is None:
            wall = round(time.perf_counter() - started, 3)
            store.append([{"id": todo[index].id, "judge": judge.name, "session": session, "wall_s": wall,
                           "row": _judgment_row(result)}])  # fmt: skip

    results = judge.score(requests, progress, on_result=keep) if requests else []
    failed = [r.call_failure for r in results if r.call_failure]
    if failed:
        raise SpanjudgeError(f"{len(failed)} model calls failed (first: {failed[0]}); run again to retry them")
    kept = [store.found[d.id] for d in docs]
    sessions: dict[str, float] = {}
    for row in kept:  # each run's wall time lasts until its last kept judgment
        sessions[row["session"]] = max(sessions.get(row["session"], 0.0), row["wall_s"])
    wall = sum(sessions.values())
    rows = {row["id"]: row["row"] for row in kept}
    payload = {
        "wall_s": round(wall, 1),
        "evaluations_per_s": round(len(rows) / wall, 3) if wall > 0 else None,
        "retries": sum(row["attempts"] - 1 for row in rows.values() if row["attempts"]),
        "rows": rows,
    }
    atomic_write_json(path, payload)
    return payload


def predictions(judged: dict[str, Any]) -> dict[str, list[tuple[int, int]] | None]:
    """Document id -> spans (None: unscored), as `span_agreement` takes them."""
    return {
        doc_id: None if row["spans"] is None else [tuple(s) for s in row["spans"]]
        for doc_id, row in judged["rows"].items()
    }


def _readings(judged: dict[str, Any], key: str, option: str) -> dict[str, dict[str, Any] | None]:
    """Document id -> the row's `key` reading (None: unscored); a scored row without it was judged without
    `option`."""
    readings: dict[str, dict[str, Any] | None] = {}
    for doc_id, row in judged["rows"].items():
        if row["spans"] is not None and key not in row:
            raise InputError(f"judgment of {doc_id} has no {key}: judge again with {option}")
        readings[doc_id] = None if row["spans"] is None else row[key]
    return readings


def expected_predictions(
    judged: dict[str, Any], keep: float = SPAN_KEPT_AT
) -> tuple[dict[str, list[tuple[int, int]] | None], dict[str, float]]:
    """The probability-aware reading of judgments made with `probabilities=True`: document id -> the spans the
    judge writes with probability at least `keep` along its reply (None: unscored), and document id -> its
    expected number of errors (the count `span_agreement` correlates, via `counts`)."""
    spans: dict[str, list[tuple[int, int]] | None] = {}
    counts: dict[str, float] = {}
    for doc_id, reading in _readings(judged, "probabilities", "probabilities=True").items():
        if reading is None:
            spans[doc_id] = None
            continue
        kept = zip(judged["rows"][doc_id]["spans"], reading["span_written"], strict=True)
        spans[doc_id] = [(start, end) for (start, end), written in kept if written >= keep]
        counts[doc_id] = reading["expected_errors"]
    return spans, counts


def consensus_predictions(judged: dict[str, Any]) -> dict[str, list[tuple[int, int]] | None]:
    """The self-consistency reading of judgments made with `samples=N`: document id -> the spans at least half of
    the N sampled replies mark (None: unscored, as its greedy reply was)."""
    return {
        doc_id: None if merged is None else [(start, end) for start, end in merged["spans"]]
        for doc_id, merged in _readings(judged, "consensus", "samples=N").items()
    }
