"""Judges whose evaluations come from a file, or from the distilled judge run in this process.

Scores file (JSONL, one evaluation per line), e.g. `spanjudge score` output:

    {"id": "summeval-17", "aspect": "coherence", "evaluation": {"errors": [...], "score": 65}, ...}

- `id`: the meta-eval item id (`<dataset>-<row>`, as in `meta-eval --export-requests`), or
  `<item id>@<aspect>`; the aspect is the judge aspect of the suite (e.g. interestingness).
- `aspect` (optional): used when the id carries none; a line with no aspect at all applies to
  every aspect of that item.
- the score: `evaluation.score`, else a top-level `score`; null means unscored (the line's
  `unscored_reason`, if any, is kept). Items missing from the file are reported as missing.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.inference.errors import InputError, SpanjudgeError
from spanjudge.inference.judge_prompt import JudgeRequest

from .datasets import MetaDataset, MetaItem
from .judges import Judgment, Progress
from .suite import AspectSpec

CHUNK = 16


def _score_of(row: Mapping[str, Any], where: str) -> float | None:
    evaluation = row.get("evaluation")
    value = evaluation.get("score") if isinstance(evaluation, Mapping) else row.get("score")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: score must be a number or null, got {value!r}")
    return float(value)


def _file_spans(evaluation: Any) -> dict[str, Any] | None:
    """Anchored spans of a scores-file evaluation (as `spanjudge score` writes them), if any."""
    errors = evaluation.get("errors") if isinstance(evaluation, Mapping) else None
    if not isinstance(errors, list):
        return None
    spans = [
        [e["start"], e["end"]]
        for e in errors
        if isinstance(e, Mapping) and isinstance(e.get("start"), int) and isinstance(e.get("end"), int)
    ]
    return {"errors": len(errors), "spans": spans}


def read_scores_file(path: Path) -> dict[tuple[str, str | None], Judgment]:
    """(item id, aspect or None) -> Judgment."""
    if not path.is_file():
        raise InputError(f"scores file not found: {path}")
    found: dict[tuple[str, str | None], Judgment] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, Mapping) or row.get("id") is None:
            raise InputError(f"{where}: each line needs an 'id' (the meta-eval item id)")
        item_id, sep, aspect = str(row["id"]).partition("@")
        key = (item_id, aspect if sep else (str(row["aspect"]) if row.get("aspect") else None))
        score = _score_of(row, where)
        reason = None if score is not None else str(row.get("unscored_reason") or "unscored in the scores file")
        found[key] = Judgment(score, reason, _file_spans(row.get("evaluation")))
    return found


def error_spans(evaluation: Any) -> list[list[int]]:
    """The anchored error spans of an evaluation ([start, end] character offsets), for span metrics."""
    return [[e.start, e.end] for e in evaluation.errors if e.start is not None and e.end is not None]


class ScoresFileJudge:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = f"scores:{path.name}"
        self._scores = read_scores_file(path)

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Progress | None = None
    ) -> dict[str, Judgment]:
        results = {}
        for item in items:
            found = self._scores.get((item.id, aspect.judge_aspect)) or self._scores.get((item.id, None))
            results[item.id] = found or Judgment(None, f"missing from {self.path.name}")
            if progress:
                progress(1)
        return results

    def close(self) -> None:
        pass


def _option(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


class DistilledJudge:
    """`spanjudge.inference.judge.Judge.from_pretrained(location, **options)`."""

    def __init__(self, location: str, options: Mapping[str, str]) -> None:
        try:
            module = importlib.import_module("spanjudge.inference.judge")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("spanjudge"):
                raise SpanjudgeError(
                    "the distilled judge (spanjudge.inference.judge) is not available in this install; "
                    "score with `spanjudge score` elsewhere and pass --judge scores:FILE"
                ) from None
            raise
        self.name = f"distilled:{Path(location).name or location}"
        self._judge = module.Judge.from_pretrained(location, **{k: _option(v) for k, v in options.items()})

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Progress | None = None
    ) -> dict[str, Judgment]:
        # the dataset's own Task, not a catalog lookup: benchmarks carry tasks of their own
        task_aspect = dataset.task.aspect(aspect.judge_aspect)
        requests = [
            JudgeRequest(task=dataset.task, aspect=task_aspect, inputs=item.inputs, output=item.output, id=item.id)
            for item in items
        ]
        results: dict[str, Judgment] = {}
        for evaluation, item in zip(self._judge.score(requests, progress=progress), items, strict=True):
            if getattr(evaluation, "call_failure", None):
                continue  # the model was unreachable: not stored, tried again next run
            results[item.id] = Judgment(
                None if evaluation.score is None else float(evaluation.score),
                getattr(evaluation, "unscored_reason", None),
                {"errors": len(evaluation.errors), "spans": error_spans(evaluation)},
            )
        return results

    def close(self) -> None:
        close = getattr(self._judge, "close", None)
        if close:
            close()
