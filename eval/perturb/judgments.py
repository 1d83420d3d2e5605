"""Score a benchmark's texts with any meta-eval judge (`scores:`, `distilled:`, `prompted:`, `metric:`).

Each text is scored alone — never next to its original (000 §3.2) — once per aspect it lists.
A reference-based metric gets the group's original, unperturbed text as its reference (how the
benchmarks score metrics: 002 Table 21 compares a metric's scores of the original and the
perturbed text against the reference the perturbation started from).
Judgments go to the meta-eval judgment store (OUT/judgments/<judge>.jsonl), appended as they
come, so a killed run resumes with only what is missing; a failed model call is not stored
and is tried again on the next run. With `samples` > 1 each sample has its own store (see
`spanjudge.eval.judging.sampling`) and the scores are the per-item mean; `ScoringResult.samples` keeps
every sample for aggregations of another kind (dual's global mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spanjudge.core.progress import Tracker
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judgment import Judgment, MetaJudge
from spanjudge.eval.judging.sampling import mean_judgment, sample_judges
from spanjudge.eval.judging.store import JudgmentStore, judge_missing, judgment_path
from spanjudge.eval.judging.suite import AspectSpec, DatasetSpec
from spanjudge.eval.perturb.benchmark import BenchItem, Benchmark, originals_by_group

Scores = dict[tuple[str, str], Judgment]  # (aspect, item id) -> judgment


@dataclass(frozen=True)
class ScoringResult:
    judge: str
    scores: Scores  # with several samples, each item's mean over them
    missing: int  # (item, aspect) pairs with no judgment yet (a model call failed)
    samples: tuple[Scores, ...] = ()  # every sample's scores, sample 0 first (one entry without --samples)


def _meta_item(benchmark: Benchmark, item: BenchItem, original: BenchItem | None) -> MetaItem:
    return MetaItem(
        id=item.id,
        dataset=benchmark.name,
        input_id=item.group,
        system=item.perturbation or "original",
        task_id=benchmark.task.id,
        inputs=item.inputs,
        output=item.output,
        where=f"benchmark {benchmark.name}: {item.id}",
        human={},
        references=() if original is None else (original.output,),
    )


def as_meta_dataset(benchmark: Benchmark) -> MetaDataset:
    """The benchmark in the shape judges take (no human scores: the perturbations are the signal)."""
    spec = DatasetSpec(
        name=benchmark.name,
        level="global",
        aspects=tuple(AspectSpec(name=a, human="-") for a in benchmark.aspects),
    )
    source = benchmark.folder or Path(benchmark.name)
    originals = originals_by_group(benchmark.items)
    items = [_meta_item(benchmark, i, originals.get(i.group)) for i in benchmark.items]
    return MetaDataset(spec, benchmark.task, items, source)


def score_benchmark(
    benchmark: Benchmark,
    judge: MetaJudge,
    out: Path,
    progress: Tracker | None = None,
    samples: int = 1,
) -> ScoringResult:
    """Every (item, aspect) judged once per sample; what the stores already hold is not asked again."""
    dataset = as_meta_dataset(benchmark)
    runs = [_score_sample(benchmark, dataset, one, out, progress) for one in sample_judges(judge, samples)]
    missing = sum(m for _, m in runs)
    per_sample = tuple(scores for scores, _ in runs)
    if len(per_sample) == 1:
        return ScoringResult(judge.name, per_sample[0], missing, per_sample)
    # an item is scored when every sample judged it; one still missing waits for the re-run
    complete = set(per_sample[0]).intersection(*per_sample[1:])
    scores = {key: mean_judgment([sample[key] for sample in per_sample]) for key in complete}
    return ScoringResult(judge.name, scores, missing, per_sample)


def _score_sample(
    benchmark: Benchmark,
    dataset: MetaDataset,
    judge: MetaJudge,
    out: Path,
    progress: Tracker | None,
) -> tuple[Scores, int]:
    store = JudgmentStore(judgment_path(out, judge))
    by_id = {item.id: item for item in dataset.items}
    missing = 0
    for aspect in dataset.spec.aspects:
        wanted = [by_id[i.id] for i in benchmark.items if aspect.name in i.aspects]
        todo = [m for m in wanted if (benchmark.name, aspect.name, m.id) not in store.found]
        label = f"{benchmark.name}/{aspect.name}"
        step = progress(label, len(wanted), done=len(wanted) - len(todo)) if progress else None
        judge_missing(judge, store, dataset, aspect, todo, step)
        missing += sum((benchmark.name, aspect.name, m.id) not in store.found for m in wanted)
    scores = {
        (aspect, item_id): judgment
        for (name, aspect, item_id), judgment in store.found.items()
        if name == benchmark.name and item_id in by_id
    }
    return scores, missing
