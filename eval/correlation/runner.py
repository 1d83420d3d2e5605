"""One meta-evaluation run: load the suite's sets, get each judge's scores (from the store,
else by running the judge, in chunks that are stored as they finish), correlate with the
human scores at each set's level with bootstrap intervals, and test judge pairs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spanjudge.core.artifacts import read_adapter_metadata
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.overlap import input_digest
from spanjudge.core.progress import Tracker
from spanjudge.core.run_info import run_info
from spanjudge.eval.correlation.bootstrap import input_weights, paired_bootstrap, percentile_interval
from spanjudge.eval.correlation.coefficients import Groups, level_values
from spanjudge.eval.judging.datasets import MetaDataset, load_suite_dataset, open_suite
from spanjudge.eval.judging.judgment import MetaJudge
from spanjudge.eval.judging.sampling import deterministic_warning, mean_scores, sample_judges
from spanjudge.eval.judging.store import JudgmentStore, judgment_path
from spanjudge.eval.judging.suite import SuiteConfig, resolve_config_path

CHUNK = 32
AVERAGE = "average"


@dataclass
class Cell:
    """One judge x dataset x aspect x coefficient."""

    judge: str
    dataset: str
    aspect: str
    coefficient: str
    level: str
    value: float | None
    low: float | None
    high: float | None
    items: int  # items with a human score
    scored: int  # ... and a judge score (the ones correlated)
    unscored: int
    groups: int
    skipped_groups: int
    undefined_resamples: int
    empty: str | None = None  # why value is None (one of EMPTY's keys); None when there is a value


# Why a cell has no value; reports print the key in the cell and count each kind under the table.
EMPTY = {
    "no human score": "no item of the set has a human score for this aspect",
    "no reference": "the metric needs a reference and no item has one",
    "unscored": "the judge scored no item; see Unscored items",
    "too few": "fewer than two items scored",
    "constant": "the judge's or the humans' scores are constant in every group of the level: no coefficient",
    "aspect empty": "an aspect of the average has no value",
}


@dataclass
class Paired:
    judge_a: str
    judge_b: str
    dataset: str
    aspect: str
    coefficient: str
    a: float | None
    b: float | None
    difference: float | None
    low: float | None
    high: float | None
    p_value: float | None  # one-sided: share of resamples where A is not better than B
    items: int


@dataclass
class AspectData:
    """What the plots need: paired judge and human scores."""

    judge: list[float]
    human: list[float]


@dataclass
class MetaEvalResult:
    suite: str
    judges: list[str]
    datasets: dict[str, dict[str, Any]]
    cells: list[Cell] = field(default_factory=list)
    paired: list[Paired] = field(default_factory=list)
    scatter: dict[tuple[str, str, str], AspectData] = field(default_factory=dict)
    unscored_reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    incomplete: dict[str, int] = field(default_factory=dict)  # judge -> judgments a model call never made
    warnings: list[str] = field(default_factory=list)  # judge inputs that look wrong but do not stop the run
    run: dict[str, Any] = field(default_factory=dict)  # what produced it (spanjudge.core.run_info)

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "judges": self.judges,
            "datasets": self.datasets,
            "cells": [asdict(c) for c in self.cells],
            "paired": [asdict(p) for p in self.paired],
            "unscored_reasons": self.unscored_reasons,
            "incomplete": self.incomplete,
            "warnings": self.warnings,
            "run": self.run,
        }


def _num(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


@dataclass
class _Series:
    judge: np.ndarray  # NaN where unscored
    human: np.ndarray  # NaN where no human score


def collect(
    judge: MetaJudge,
    store: JudgmentStore,
    dataset: MetaDataset,
    progress: Tracker | None = None,
) -> tuple[dict[str, _Series], int]:
    """Per aspect: the judge's scores for every item (from the store, else judged now), and how
    many judgments are still missing (a model call failed; a re-run tries them again)."""
    series = {}
    incomplete: dict[str, int] = {}
    for aspect in dataset.spec.aspects:
        wanted = [i for i in dataset.items if aspect.name in i.human]
        todo = [i for i in wanted if (dataset.name, aspect.name, i.id) not in store.found]
        label = f"{dataset.name}/{aspect.name}"
        step = progress(label, len(wanted), done=len(wanted) - len(todo)) if progress else None
        for start in range(0, len(todo), CHUNK):
            chunk = todo[start : start + CHUNK]
            store.add(dataset.name, aspect.name, judge.judge(dataset, aspect, chunk, step).items())
        scores = []
        for item in dataset.items:
            found = store.found.get((dataset.name, aspect.name, item.id))
            scores.append(np.nan if found is None or found.score is None else float(found.score))
        missing = sum((dataset.name, aspect.name, i.id) not in store.found for i in wanted)
        if missing:
            incomplete[aspect.name] = missing
        human = [item.human.get(aspect.name, np.nan) for item in dataset.items]
        series[aspect.name] = _Series(np.array(scores, dtype=np.float64), np.array(human, dtype=np.float64))
    return series, sum(incomplete.values())


def empty_reason(items: int, scored: int, unscored_why: Mapping[str, int]) -> str:
    """Why a coefficient over `scored` of `items` human-rated items is undefined.

    `unscored_why` counts the judge's unscored reasons for the aspect (first word before ':')."""
    if items == 0:
        return "no human score"
    if scored == 0:
        return "no reference" if set(unscored_why) == {"no reference"} else "unscored"
    if scored < 2:
        return "too few"
    return "constant"


def correlate_dataset(
    result: MetaEvalResult,
    suite: SuiteConfig,
    dataset: MetaDataset,
    per_judge: Mapping[str, dict[str, _Series]],
    unscored_why: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
) -> None:
    """Cells of every judge on `dataset`; `unscored_why[judge][aspect]` counts unscored reasons
    (used only to say why a cell is empty)."""
    spec = dataset.spec
    groups = Groups.from_labels([i.input_id for i in dataset.items], [i.system for i in dataset.items])
    resamples = suite.bootstrap.resamples
    weights = input_weights(groups.n_inputs, resamples, suite.bootstrap.seed) if resamples else None
    variant = suite.kendall_variant
    confidence = suite.bootstrap.confidence

    def values(judge: np.ndarray, human: np.ndarray, mask: np.ndarray, coefficient: str) -> tuple[Any, Any]:
        sub = groups.subset(mask)
        plain = level_values(judge[mask], human[mask], sub, spec.level, coefficient, None, variant)  # type: ignore[arg-type]
        boot = (
            level_values(judge[mask], human[mask], sub, spec.level, coefficient, weights, variant).values  # type: ignore[arg-type]
            if weights is not None
            else np.empty(0)
        )
        return plain, boot

    for judge_name, series in per_judge.items():
        for coefficient in spec.coefficients:
            plains, boots = [], []
            for aspect in spec.aspects:
                s = series[aspect.name]
                has_human = ~np.isnan(s.human)
                mask = has_human & ~np.isnan(s.judge)
                plain, boot = values(s.judge, s.human, mask, coefficient)
                interval = percentile_interval(float(plain.values[0]), boot, confidence) if boot.size else None
                plains.append(float(plain.values[0]))
                boots.append(boot)
                items, scored = int(has_human.sum()), int(mask.sum())
                why = ((unscored_why or {}).get(judge_name) or {}).get(aspect.name) or {}
                result.cells.append(
                    Cell(
                        judge_name, spec.name, aspect.name, coefficient, spec.level,
                        _num(plain.values[0]),
                        _num(interval.low) if interval else None,
                        _num(interval.high) if interval else None,
                        items, scored, int((has_human & np.isnan(s.judge)).sum()),
                        plain.groups, plain.skipped, interval.undefined if interval else 0,
                        None if _num(plain.values[0]) is not None else empty_reason(items, scored, why),
                    )
                )  # fmt: skip
            if len(spec.aspects) > 1:
                with np.errstate(invalid="ignore"):
                    mean = float(np.mean(plains))
                    boot_mean = np.mean(np.vstack(boots), axis=0) if weights is not None else np.empty(0)
                interval = percentile_interval(mean, boot_mean, confidence) if boot_mean.size else None
                result.cells.append(
                    Cell(
                        judge_name, spec.name, AVERAGE, coefficient, spec.level, _num(mean),
                        _num(interval.low) if interval else None, _num(interval.high) if interval else None,
                        0, 0, 0, 0, 0, interval.undefined if interval else 0,
                        None if _num(mean) is not None else "aspect empty",
                    )
                )  # fmt: skip
    names = list(per_judge)
    if weights is None or len(names) < 2:
        return
    first = names[0]
    for other in names[1:]:
        for coefficient in spec.coefficients:
            for aspect in spec.aspects:
                a, b = per_judge[first][aspect.name], per_judge[other][aspect.name]
                mask = ~np.isnan(a.human) & ~np.isnan(a.judge) & ~np.isnan(b.judge)
                # the subset keeps the input codes, so these resamples are the intervals' own
                test = paired_bootstrap(
                    a.judge[mask], b.judge[mask], a.human[mask], groups.subset(mask), spec.level, coefficient,
                    n_resamples=resamples, confidence=confidence, seed=suite.bootstrap.seed, kendall_variant=variant,
                )  # fmt: skip
                interval = test.difference
                result.paired.append(
                    Paired(
                        first, other, spec.name, aspect.name, coefficient, _num(test.a), _num(test.b),
                        _num(interval.value), _num(interval.low), _num(interval.high), _num(test.p_value),
                        int(mask.sum()),
                    )
                )  # fmt: skip


def run_meta_eval(
    suite: SuiteConfig,
    suite_path: Path,
    judges: Sequence[MetaJudge],
    out: Path,
    *,
    data_root: Path | None,
    max_items: int | None = None,
    datasets: Sequence[str] | None = None,
    progress: Tracker | None = None,
    trained_on: Mapping[str, frozenset[str]] | None = None,
    samples: int = 1,
) -> MetaEvalResult:
    """`trained_on`: judge name -> digests of its training inputs (see `training_inputs`);
    a judge scored on items whose inputs it was trained on gets one warning line.
    `samples`: judge each item N times and correlate the per-item mean (see `.sampling`)."""
    # provenance for results.json: the run's own arguments (the judges and the suite are recorded below)
    options = {"suite_path": suite_path, "out": out, "data_root": data_root, "max_items": max_items,
               "datasets": datasets, "samples": samples}  # fmt: skip
    data = open_suite(suite, suite_path, data_root)
    seen_in_training: dict[str, dict[str, tuple[int, int]]] = {}
    chosen = [d for d in suite.datasets if not datasets or d.name in datasets]
    result = MetaEvalResult(suite.name, [j.name for j in judges], {})
    result.run = run_info(
        "meta-eval",
        {**options, "judges": result.judges, "suite": suite.model_dump(mode="json")},
        seed=suite.bootstrap.seed,
    )
    stores = {j.name: JudgmentStore(judgment_path(out, j)) for j in judges}
    # sample k >= 1 of each judge, with a store of its own (sample 0 is the judge and its store above)
    sampled = {
        j.name: [(s, JudgmentStore(judgment_path(out, s))) for s in sample_judges(j, samples)[1:]] for j in judges
    }
    result.warnings += [w for j in judges if (w := deterministic_warning(j, samples))]
    judge_aspects = {a.judge_aspect for d in suite.datasets for a in d.aspects}
    for judge in judges:
        check = getattr(judge, "warnings", None)  # scores files: aspects no set asks for
        if check is not None:
            result.warnings += check(judge_aspects)
    for spec in chosen:
        dataset = load_suite_dataset(data, spec.name, max_items)
        result.datasets[spec.name] = {
            "title": spec.label,
            "level": spec.level,
            "coefficients": list(spec.coefficients),
            "aspects": [a.name for a in spec.aspects],
            "convention": spec.convention,
            "tables": list(spec.tables),
            "items": len(dataset.items),
            "inputs": len({i.input_id for i in dataset.items}),
            "systems": len({i.system for i in dataset.items}),
            "source": str(dataset.source_path),
            "samples": samples if samples > 1 else None,
            "sample": (
                f"--max-items {max_items}: whole inputs drawn with seed 0 (every system of each)"
                if max_items is not None
                else None
            ),
        }
        for name, digests in (trained_on or {}).items():
            found = _trained_items(dataset, digests)
            if found[0]:
                seen_in_training.setdefault(name, {})[spec.name] = found
        per_judge = {}
        unscored_why: dict[str, dict[str, dict[str, int]]] = {}
        for judge in judges:
            series, missing = collect(judge, stores[judge.name], dataset, progress)
            if sampled[judge.name]:  # --samples: the per-item mean over every sample
                runs = [collect(other, store, dataset, progress) for other, store in sampled[judge.name]]
                missing += sum(m for _, m in runs)
                series = {a: _Series(mean_scores([s.judge] + [r[a].judge for r, _ in runs]), s.human)
                          for a, s in series.items()}  # fmt: skip
            if missing:
                result.incomplete[judge.name] = result.incomplete.get(judge.name, 0) + missing
            per_judge[judge.name] = series
            for aspect, s in series.items():
                keep = ~np.isnan(s.judge) & ~np.isnan(s.human)
                result.scatter[(judge.name, spec.name, aspect)] = AspectData(
                    s.judge[keep].tolist(), s.human[keep].tolist()
                )
            reasons: dict[str, int] = result.unscored_reasons.setdefault(judge.name, {})
            by_aspect: dict[str, dict[str, int]] = unscored_why.setdefault(judge.name, {})
            ids = {item.id for item in dataset.items}
            for (ds, aspect_name, item_id), judgment in stores[judge.name].found.items():
                if ds == spec.name and item_id in ids and judgment.score is None:
                    reason = (judgment.unscored_reason or "unscored").split(":")[0]
                    reasons[reason] = reasons.get(reason, 0) + 1
                    counts = by_aspect.setdefault(aspect_name, {})
                    counts[reason] = counts.get(reason, 0) + 1
        correlate_dataset(result, suite, dataset, per_judge, unscored_why)
    result.warnings += [_overlap_warning(name, found) for name, found in seen_in_training.items()]
    return result


def training_inputs(location: str) -> frozenset[str] | None:
    """The input digests a distilled judge was trained on, from the `train_inputs` of the
    spanjudge.json in its folder (or in its run folder's adapter/); None when it records none."""

    folder = Path(location).expanduser()
    for candidate in (folder, folder / "adapter"):
        try:
            metadata = read_adapter_metadata(candidate)
        except SpanjudgeError:
            return None  # the judge itself reports an unreadable file when it loads
        if metadata is not None:
            recorded = metadata.train_inputs
            return frozenset(recorded.sha1) if recorded is not None and "sha1" in recorded.model_fields_set else None
    return None


def _trained_items(dataset: MetaDataset, digests: frozenset[str]) -> tuple[int, int]:
    """(inputs, items) of `dataset` whose inputs are among a judge's training inputs."""

    hits = [item for item in dataset.items if input_digest(item.inputs) in digests]
    return len({item.input_id for item in hits}), len(hits)


def _overlap_warning(judge: str, found: Mapping[str, tuple[int, int]]) -> str:
    inputs = sum(n for n, _ in found.values())
    items = sum(n for _, n in found.values())
    where = ", ".join(f"{name} {n} inputs / {m} items" for name, (n, m) in found.items())
    return (
        f"{judge} was trained on {inputs} inputs it is scored on here ({items} items: {where}); "
        "its correlations on those sets are not held-out (see its spanjudge.json train_inputs)"
    )


def reference_path(suite: SuiteConfig, suite_path: Path) -> Path | None:
    return resolve_config_path(suite.reference_tables, suite_path) if suite.reference_tables else None
