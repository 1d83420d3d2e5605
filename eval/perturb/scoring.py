"""Score a benchmark's texts with any meta-eval judge (`scores:`, `distilled:`, `prompted:`, `metric:`).

Each text is scored alone — never next to its original (000 §3.2) — once per aspect it lists.
Judgments go to the meta-eval judgment store (OUT/judgments/<judge>.jsonl), appended as they
come, so a killed run resumes with only what is missing; a failed model call is not stored
and is tried again on the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..datasets import MetaDataset, MetaItem
from ..judges import Judgment, MetaJudge, Progress
from ..store import JudgmentStore, judgment_path
from ..suite import AspectSpec, DatasetSpec
from .benchmark import BenchItem, Benchmark

CHUNK = 16

Scores = dict[tuple[str, str], Judgment]  # (aspect, item id) -> judgment


@dataclass(frozen=True)
class ScoringResult:
    judge: str
    scores: Scores
    missing: int  # (item, aspect) pairs with no judgment yet (a model call failed)


def _meta_item(benchmark: Benchmark, item: BenchItem) -> MetaItem:
    return MetaItem(
        id=item.id,
        dataset=benchmark.name,
        input_id=item.group,
        system=item.perturbation or "original",
        task_id=benchmark.task.id,
        inputs=item.inputs,
        output=item.output,
        human={},
    )


def as_meta_dataset(benchmark: Benchmark) -> MetaDataset:
    """The benchmark in the shape judges take (no human scores: the perturbations are the signal)."""
    spec = DatasetSpec(
        name=benchmark.name,
        level="global",
        aspects=tuple(AspectSpec(name=a, human="-") for a in benchmark.aspects),
    )
    source = benchmark.folder or Path(benchmark.name)
    return MetaDataset(spec, benchmark.task, [_meta_item(benchmark, i) for i in benchmark.items], source)


def judge_missing(
    judge: MetaJudge,
    store: JudgmentStore,
    dataset: MetaDataset,
    aspect: AspectSpec,
    todo: Sequence[MetaItem],
    step: Progress | None = None,
) -> None:
    """Judge `todo` in chunks, each chunk stored as it comes (a kill loses at most one chunk)."""
    for start in range(0, len(todo), CHUNK):
        chunk = todo[start : start + CHUNK]
        store.add(dataset.name, aspect.name, judge.judge(dataset, aspect, chunk, step).items())


def score_benchmark(
    benchmark: Benchmark,
    judge: MetaJudge,
    out: Path,
    progress: Callable[[str, int, int], Progress] | None = None,
) -> ScoringResult:
    """Every (item, aspect) judged once; what the store already holds is not asked again."""
    store = JudgmentStore(judgment_path(out, judge))
    dataset = as_meta_dataset(benchmark)
    by_id = {item.id: item for item in dataset.items}
    missing = 0
    for aspect in dataset.spec.aspects:
        wanted = [by_id[i.id] for i in benchmark.items if aspect.name in i.aspects]
        todo = [m for m in wanted if (benchmark.name, aspect.name, m.id) not in store.found]
        step = progress(f"{benchmark.name}/{aspect.name}", len(wanted) - len(todo), len(wanted)) if progress else None
        judge_missing(judge, store, dataset, aspect, todo, step)
        missing += sum((benchmark.name, aspect.name, m.id) not in store.found for m in wanted)
    scores = {
        (aspect, item_id): judgment
        for (name, aspect, item_id), judgment in store.found.items()
        if name == benchmark.name and item_id in by_id
    }
    return ScoringResult(judge.name, scores, missing)
