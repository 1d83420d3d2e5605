"""Build the perturbation benchmarks from our source data (docs/research/benchmarks.md §1-4): the parts every
kind shares; `kind.build_benchmark` runs the kind's own `build` (kinds/<kind>.py) with them.

Sources are read through the meta-eval suite (configs/eval/thesis.yaml), so the texts and
inputs are exactly those of the human-correlation sets. Rule-based perturbations run here
with a per-item seed; LLM-made ones go through `LLMPerturber` (the backend layer), which
freezes each accepted text with its provenance. A perturbation that fails validation or
cannot apply to a text is counted by reason in the manifest and printed — never dropped
silently.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spanjudge.core.catalog import Task
from spanjudge.core.configio import configs_dir
from spanjudge.core.errors import InputError
from spanjudge.core.paths import data_dir
from spanjudge.core.progress import Tracker
from spanjudge.eval.judging.datasets import MetaItem, load_suite_dataset, open_suite
from spanjudge.eval.judging.suite import load_suite
from spanjudge.eval.perturb.benchmark import BenchItem
from spanjudge.eval.perturb.perturbations import Outcome, Perturbation, Perturbed, apply_rule, get, split_sentences

GROUND_TRUTH = "Original Ground Truth"  # TopicalChat's human reference response
# the experts' scales of our source datasets: SummEval 1-5, TopicalChat (USR) 1-3
DEFAULT_SCALE = {"summeval": (1, 2, 3, 4, 5), "topical_chat": (1, 2, 3)}


class LLMMaker(Protocol):
    """What the builders need from `llm_perturb.LLMPerturber`."""

    def perturb(
        self,
        perturbation: Perturbation,
        items: Sequence[tuple[str, str]],
        seed: int,
        progress: Tracker | None = None,
    ) -> Mapping[str, Outcome]: ...


@dataclass(frozen=True)
class Source:
    group: str
    inputs: dict[str, str]
    text: str  # the text to perturb: a reference summary or the ground-truth response
    human: dict[str, float]
    ratings: dict[str, tuple[float, ...]] = field(default_factory=dict)  # each expert's rating, where known


# -- sources ----------------------------------------------------------------------------------


def _suite_items(name: str, data_root: Path | None) -> tuple[Task, list[MetaItem]]:
    suite_path = configs_dir() / "eval" / "thesis.yaml"
    data = open_suite(load_suite(suite_path), suite_path, data_dir(data_root))
    dataset = load_suite_dataset(data, name)
    return dataset.task, dataset.items


def _sample(groups: Sequence[str], n: int | None, seed: int) -> list[str]:
    """n groups drawn with the seed, kept in file order (all of them when n is None)."""
    if n is None or n >= len(groups):
        return list(groups)
    chosen = set(random.Random(seed).sample(list(groups), n))
    return [g for g in groups if g in chosen]


def reference_sources(dataset: str, data_root: Path | None, n: int | None, seed: int) -> tuple[Task, list[Source]]:
    """One text per input: SummEval's reference with the most sentences (000 §3.1), or
    TopicalChat's ground-truth response."""
    task, items = _suite_items(dataset, data_root)
    by_input: dict[str, Source] = {}
    for item in items:
        if item.input_id in by_input:
            continue
        if dataset == "summeval":
            text = max(item.references, key=lambda r: len(split_sentences(r)), default="")
        elif item.system == GROUND_TRUTH:
            text = item.output
        else:
            continue
        if text.strip():
            by_input[item.input_id] = Source(f"{dataset}-{len(by_input)}", item.inputs, text.strip(), {})
    groups = _sample(list(by_input), n, seed)
    return task, [by_input[g] for g in groups]


def expert_sources(dataset: str, data_root: Path | None, n: int | None, seed: int) -> tuple[Task, list[Source]]:
    """System outputs with their expert ratings: each expert's where the source keeps them, else
    only the mean (our SummEval and USR copies hold means of 3 experts)."""
    task, items = _suite_items(dataset, data_root)
    rated = {item.id: item for item in items if item.human and item.output.strip()}
    chosen = _sample(list(rated), n, seed)
    return task, [
        Source(i, rated[i].inputs, rated[i].output, dict(rated[i].human), dict(rated[i].ratings)) for i in chosen
    ]


# -- building ---------------------------------------------------------------------------------


class Collector:
    """Items, per-perturbation counts and the manifest's perturbation table."""

    def __init__(self) -> None:
        self.items: list[BenchItem] = []
        self.rejected: dict[str, Counter[str]] = {}
        self.made: Counter[str] = Counter()
        self.table: dict[str, dict[str, Any]] = {}

    def describe(self, perturbation: Perturbation) -> None:
        self.table[perturbation.key] = {
            "name": perturbation.name,
            "paper": perturbation.paper,
            "level": perturbation.level,
            "method": perturbation.method,
            "degree": perturbation.degree,
            "aspects": list(perturbation.aspects),
            "params": {k: v if isinstance(v, str | int | float) else list(v) for k, v in perturbation.params.items()},  # type: ignore[call-overload]
        }

    def outcome(self, key: str, outcome: Outcome) -> Perturbed | None:
        if isinstance(outcome, Perturbed):
            self.made[key] += 1
            return outcome
        self.rejected.setdefault(key, Counter())[outcome.reason.split(":", 1)[0]] += 1
        return None


def run_perturbation(
    perturbation: Perturbation,
    texts: Sequence[tuple[str, str]],
    seed: int,
    llm: LLMMaker | None,
    progress: Tracker | None,
) -> Mapping[str, Outcome]:
    if perturbation.method == "rule":
        return apply_rule(perturbation, texts, seed)
    if llm is None:
        raise InputError(
            f"'{perturbation.name}' ({perturbation.key}) is LLM-made: pass --perturber CONFIG "
            "(e.g. configs/perturb/tiny_local.yaml) or choose rule-based perturbations with --perturbation"
        )
    return llm.perturb(perturbation, texts, seed, progress)  # one progress row per perturbation key


def select_keys(wanted: Sequence[str] | None, default: Sequence[str]) -> list[str]:
    if not wanted:
        return list(default)
    unknown = [k for k in wanted if k not in default]
    if unknown:
        raise InputError(f"perturbation '{unknown[0]}' is not part of this benchmark; choose from {', '.join(default)}")
    return list(wanted)


def select_aspects(wanted: Sequence[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if not wanted:
        return default
    unknown = [a for a in wanted if a not in default]
    if unknown:
        raise InputError(f"--aspect '{unknown[0]}' is not rated in this benchmark; choose from {', '.join(default)}")
    return tuple(wanted)


def build_perturbed_sets(
    sources: Sequence[Source],
    keys: Sequence[str],
    aspects: tuple[str, ...],
    seed: int,
    llm: LLMMaker | None,
    progress: Tracker | None,
) -> Collector:
    """DHP and attacks: each source text as an original, plus one perturbed text per set."""
    collected = Collector()
    for source in sources:
        collected.items.append(BenchItem(source.group, source.group, None, aspects, source.inputs, source.text))
    texts = [(s.group, s.text) for s in sources]
    by_group = {s.group: s for s in sources}
    for key in keys:
        perturbation = get(key)
        collected.describe(perturbation)
        for group, outcome in run_perturbation(perturbation, texts, seed, llm, progress).items():
            made = collected.outcome(key, outcome)
            if made is not None:
                collected.items.append(
                    BenchItem(f"{group}:{key}", group, key, aspects, by_group[group].inputs, made.text,
                              tuple(made.spans), {"removed": [list(r) for r in made.removed]})
                )  # fmt: skip
    return collected


# -- the kinds' builders ----------------------------------------------------------------------


@dataclass(frozen=True)
class BuildRequest:
    """What `spanjudge perturb` asks a kind's `build` for; each kind uses the options it has."""

    dataset: str
    data_root: Path | None
    n: int | None  # sample this many source texts (None: all)
    seed: int
    perturbations: Sequence[str] | None = None  # dhp, attacks: only these keys
    llm: LLMMaker | None = None  # makes the LLM perturbations
    steps: int | None = None  # dual: errors per chain
    aspects: Sequence[str] | None = None  # dhp, attacks: rate only these
    progress: Tracker | None = None


@dataclass
class Built:
    """A kind's build: the task the judge is asked about, the items and the kind's manifest fields."""

    task: Task
    collected: Collector
    info: dict[str, Any] = field(default_factory=dict)
