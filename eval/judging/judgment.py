"""What a judge under meta-evaluation is: `MetaJudge.judge` gives each item it decided a
`Judgment` (a score, or the reason it has none). Every kind of judge implements it; `judges.py`
makes one from its spec string."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spanjudge.core.progress import Advance
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.suite import AspectSpec


@dataclass(frozen=True)
class Judgment:
    score: float | None
    unscored_reason: str | None = None
    detail: dict[str, object] | None = None  # per-model scores, reply counts ... (kept in the store)


class MetaJudge(Protocol):
    name: str

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        """item id -> Judgment for each item it could decide; an item left out (a model call
        that failed) is not stored and is tried again on the next run."""
        ...

    def close(self) -> None: ...
