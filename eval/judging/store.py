"""Judgments on disk: OUT/judgments/<judge>-<key>.jsonl, one line per (dataset, aspect, item),
appended and flushed as they come (`inference.jsonl.JsonlStore`), so a re-run only asks for
what is not there yet.

<key> is a hash of what decides the judgments (the judge's `store_key`: its spec plus the
content of its scores file, adapter or ensemble file), not of its display name alone: two
scores files named scores.jsonl, or two adapters in folders named adapter/, must never share
one store in the same --out, or the second would silently report the first one's scores."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from spanjudge.core.errors import InputError
from spanjudge.core.jsonl import JsonlStore
from spanjudge.core.progress import Advance
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judgment import Judgment, MetaJudge
from spanjudge.eval.judging.suite import AspectSpec

Key = tuple[str, str, str]  # dataset, aspect, item id


def judge_slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_") or "judge"


class _Named(Protocol):
    name: str


def store_name(judge: _Named) -> str:
    """The readable name, then a hash of the judge's `store_key` (its name when it has none:
    a metric is fully named by its name)."""
    key = getattr(judge, "store_key", None) or judge.name
    return f"{judge_slug(judge.name)}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]}"


def judgment_path(out: Path, judge: _Named) -> Path:
    """Where `judge`'s judgments live under the output folder `out`."""
    return out / "judgments" / f"{store_name(judge)}.jsonl"


def _judgment_row(where: str, row: dict[str, Any]) -> tuple[Key, Judgment]:
    try:
        key = (row["dataset"], row["aspect"], row["id"])
        return key, Judgment(row["score"], row.get("unscored_reason"), row.get("detail"))
    except KeyError as exc:
        raise InputError(f"{where}: no {exc} in this judgment; this judgments file is damaged") from None


class JudgmentStore:
    """One judge's judgments: a `JsonlStore` (one writer, a torn last line cut, each chunk
    flushed to disk as it is added) with the judgments already made in `found`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store: JsonlStore[Key, Judgment] = JsonlStore(path, _judgment_row)
        self.found = self._store.found

    def add(self, dataset: str, aspect: str, judgments: Iterable[tuple[str, Judgment]]) -> None:
        self._store.append(
            {
                "dataset": dataset,
                "aspect": aspect,
                "id": item_id,
                "score": judgment.score,
                "unscored_reason": judgment.unscored_reason,
                "detail": judgment.detail,
            }
            for item_id, judgment in judgments
        )

    def close(self) -> None:
        self._store.close()


# items handed to a judge at a time: each chunk is stored as soon as it is judged
JUDGE_CHUNK = 16


def judge_missing(
    judge: MetaJudge,
    store: JudgmentStore,
    dataset: MetaDataset,
    aspect: AspectSpec,
    todo: Sequence[MetaItem],
    step: Advance | None = None,
) -> None:
    """Judge `todo` in chunks, each chunk stored as it comes (a kill loses at most one chunk)."""
    for start in range(0, len(todo), JUDGE_CHUNK):
        chunk = todo[start : start + JUDGE_CHUNK]
        store.add(dataset.name, aspect.name, judge.judge(dataset, aspect, chunk, step).items())
