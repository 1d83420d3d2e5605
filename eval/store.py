"""Judgments on disk: OUT/judgments/<judge>-<key>.jsonl, one line per (dataset, aspect, item),
appended and flushed as they come, so a re-run only asks for what is not there yet.

<key> is a hash of what decides the judgments (the judge's `store_key`: its spec plus the
content of its scores file, adapter or ensemble file), not of its display name alone: two
scores files named scores.jsonl, or two adapters in folders named adapter/, must never share
one store in the same --out, or the second would silently report the first one's scores."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from spanjudge.inference.errors import InputError

from .judges import Judgment

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


class JudgmentStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: dict[Key, Judgment] = {}
        if path.is_file():
            self._load()

    def _load(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        good = []
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):  # a kill mid-write: drop the fragment
                    break
                raise InputError(f"{self.path}:{number}: not valid JSON; this judgments file is damaged") from None
            key = (row["dataset"], row["aspect"], row["id"])
            self.found[key] = Judgment(row["score"], row.get("unscored_reason"), row.get("detail"))
            good.append(line)
        if len(good) != len(lines):
            self.path.write_text("".join(good), encoding="utf-8")

    def add(self, dataset: str, aspect: str, judgments: Iterable[tuple[str, Judgment]]) -> None:
        rows = []
        for item_id, judgment in judgments:
            self.found[(dataset, aspect, item_id)] = judgment
            rows.append(
                {
                    "dataset": dataset,
                    "aspect": aspect,
                    "id": item_id,
                    "score": judgment.score,
                    "unscored_reason": judgment.unscored_reason,
                    "detail": judgment.detail,
                }
            )
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
