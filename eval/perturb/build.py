"""Build the four perturbation benchmarks from our source data (BENCHMARKS.md §1-4).

Sources are read through the meta-eval suite (configs/eval/thesis.yaml), so the texts and
inputs are exactly those of the human-correlation sets. Rule-based perturbations run here
with a per-item seed; LLM-made ones go through `LLMPerturber` (the backend layer), which
freezes each accepted text with its provenance. A perturbation that fails validation or
cannot apply to a text is counted by reason in the manifest and printed — never dropped
silently.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spanjudge.inference.catalog import Aspect, InputSpec, Task
from spanjudge.inference.configio import configs_dir
from spanjudge.inference.errors import InputError
from spanjudge.inference.paths import data_dir

from ..datasets import MetaItem, load_suite_dataset, open_suite
from ..suite import load_suite
from . import metrics
from .benchmark import BenchItem, Benchmark, Kind
from .perturbations import (
    ATTACKS,
    DHP_SUMMARIZATION,
    INJECTION_ASPECTS,
    Outcome,
    Perturbation,
    Perturbed,
    apply_rule,
    get,
    split_sentences,
)

Progress = Callable[[str, int], Callable[[int], None]]  # (label, total) -> advance(n)
SOURCES: dict[Kind, tuple[str, ...]] = {
    "dhp": ("summeval",),
    "dual": ("summeval", "topical_chat"),
    "attacks": ("summeval",),
    "prompt": ("summeval", "topical_chat"),
}
GROUND_TRUTH = "Original Ground Truth"  # TopicalChat's human reference response
EXPERT_INPUT = "Human expert rating"  # the extra input of the perturbed-prompt benchmark
# TopicalChat's expert scales (USR): 1-3 except groundedness (0-1); SummEval's are 1-5
SCALES = {"summeval": {}, "topical_chat": {"groundedness": (0, 1)}}
DEFAULT_SCALE = {"summeval": (1, 2, 3, 4, 5), "topical_chat": (1, 2, 3)}
# 001's gold scales where an aspect differs from its dataset's: USR rates these two 0-1, and 001
# (Table 15 and Table 7's "0-1 & 1-3") turns them into a 2-point scale (1..2)
DUAL_SCALES: dict[str, dict[str, tuple[int, ...]]] = {
    "summeval": {},
    "topical_chat": {"understandability": (1, 2), "knowledge use": (1, 2)},
}
RATING_MODE = "mode of the experts' ratings"
RATING_MEAN = "rounded mean (only the experts' mean is in the data)"
# 001's TopicalChat aspects by our catalog's names where they differ
CATALOG_ASPECT = {"context maintenance": "coherence", "knowledge use": "groundedness"}


class LLMMaker(Protocol):
    """What the builders need from `llm_perturb.LLMPerturber`."""

    def perturb(
        self,
        perturbation: Perturbation,
        items: Sequence[tuple[str, str]],
        seed: int,
        progress: Callable[[int, int], None] | None = None,
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


# -- tasks for custom aspects -----------------------------------------------------------------


def _pku_aspects(data_root: Path | None) -> dict[str, Aspect]:
    """002's 11 aspects with the paper's "Gold" descriptions and its 1/5 rubric lines, read from
    ../shared/data/perturbation/pku_aspect_criteria (never copied into the repository)."""
    path = data_dir(data_root) / "perturbation" / "pku_aspect_criteria" / "aspect_criteria.json"
    if not path.is_file():
        raise InputError(f"the aspect-attack benchmark needs {path} (002's aspect descriptions)")
    criteria = json.loads(path.read_text(encoding="utf-8"))
    names = {a.replace("-", "_").lower(): a for a in metrics.ATTACK_ASPECTS}
    names["overall_quality"] = "overall"
    aspects: dict[str, Aspect] = {}
    for key, variants in criteria.items():
        name = names.get(key.lower().replace("-", "_"))
        if name is None:
            raise InputError(f"{path}: unknown aspect '{key}'")

        def fill(text: str) -> str:
            return text.replace("{T}", "summary").replace("{S}", "article").split(": ", 1)[-1].strip()

        rubric = {line[6:7]: line[9:].strip() for line in variants["List"].splitlines() if line.startswith("Score ")}
        aspects[name] = Aspect.custom(
            name,
            fill(variants["Gold"]),
            lowest=f"is rated 1 of 5: {rubric['1']}" if "1" in rubric else None,
            highest=f"is rated 5 of 5: {rubric['5']}" if "5" in rubric else None,
        )
    missing = [a for a in metrics.ATTACK_ASPECTS if a not in aspects]
    if missing:
        raise InputError(f"{path}: no description for aspect(s) {', '.join(missing)}")
    return {a: aspects[a] for a in metrics.ATTACK_ASPECTS}


def _injection_aspects(task: Task, dataset: str) -> dict[str, Aspect]:
    out = {}
    for name, subs in INJECTION_ASPECTS[dataset].items():
        catalog_name = CATALOG_ASPECT.get(name, name)
        if catalog_name in task.aspects:
            out[name] = task.aspects[catalog_name].model_copy(update={"name": name})
        else:
            definition = "; ".join(f"{s.name}: {s.description}" for s in subs)
            out[name] = Aspect.custom(name, f"Extent to which the {task.output.lower()} is good in: {definition}.")
    return out


# -- building ---------------------------------------------------------------------------------


class _Collector:
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


def _run(
    perturbation: Perturbation,
    texts: Sequence[tuple[str, str]],
    seed: int,
    llm: LLMMaker | None,
    progress: Progress | None,
) -> Mapping[str, Outcome]:
    if perturbation.method == "rule":
        return apply_rule(perturbation, texts, seed)
    if llm is None:
        raise InputError(
            f"'{perturbation.name}' ({perturbation.key}) is LLM-made: pass --perturber CONFIG "
            "(e.g. configs/perturb/tiny_local.yaml) or choose rule-based perturbations with --perturbation"
        )
    show = progress(perturbation.key, len(texts)) if progress else None
    return llm.perturb(perturbation, texts, seed, (lambda done, total: show(done)) if show else None)


def _keys(wanted: Sequence[str] | None, default: Sequence[str]) -> list[str]:
    if not wanted:
        return list(default)
    unknown = [k for k in wanted if k not in default]
    if unknown:
        raise InputError(f"perturbation '{unknown[0]}' is not part of this benchmark; choose from {', '.join(default)}")
    return list(wanted)


def _aspects(wanted: Sequence[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
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
    progress: Progress | None,
) -> _Collector:
    """DHP and attacks: each source text as an original, plus one perturbed text per set."""
    collected = _Collector()
    for source in sources:
        collected.items.append(BenchItem(source.group, source.group, None, aspects, source.inputs, source.text))
    texts = [(s.group, s.text) for s in sources]
    by_group = {s.group: s for s in sources}
    for key in keys:
        perturbation = get(key)
        collected.describe(perturbation)
        for group, outcome in _run(perturbation, texts, seed, llm, progress).items():
            made = collected.outcome(key, outcome)
            if made is not None:
                collected.items.append(
                    BenchItem(f"{group}:{key}", group, key, aspects, by_group[group].inputs, made.text,
                              tuple(made.spans), {"removed": [list(r) for r in made.removed]})
                )  # fmt: skip
    return collected


def build_dual(
    dataset: str,
    sources: Sequence[Source],
    steps: int | Mapping[str, int],
    seed: int,
    llm: LLMMaker | None,
    progress: Progress | None,
) -> _Collector:
    """001: per aspect, a chain reference → +1 error → +2 errors …, each step injecting one new
    error of that aspect into the previous text. The chain is a local sequence (quality falls
    strictly); each text with n errors is a global target with gold rating max − n. `steps` is
    the chain length, one for all aspects or per aspect (a 1..2 scale allows one error).

    Simplification, stated in reports: 001 builds its global targets separately (n errors at
    once, calibrated against anchors); here both perspectives share the chains' texts."""
    collected = _Collector()
    for aspect in INJECTION_ASPECTS[dataset]:
        aspect_steps = steps if isinstance(steps, int) else steps[aspect]
        perturbation = get(f"dual.{dataset}.{aspect.replace(' ', '_')}")
        collected.describe(perturbation)
        current = {s.group: s.text for s in sources}
        for source in sources:
            chain = f"{source.group}@{aspect}"
            collected.items.append(
                BenchItem(f"{chain}#0", source.group, None, (aspect,), source.inputs, source.text, (),
                          {"aspect": aspect, "errors": 0, "chain": chain})
            )  # fmt: skip
        for step in range(1, aspect_steps + 1):
            texts = [(f"{g}@{aspect}#{step}", text) for g, text in current.items()]
            outcomes = _run(perturbation, texts, seed, llm, progress)
            for source in sources:
                if source.group not in current:
                    continue
                chain = f"{source.group}@{aspect}"
                made = collected.outcome(perturbation.key, outcomes[f"{chain}#{step}"])
                if made is None:  # the chain stops here; its shorter prefix still counts
                    del current[source.group]
                    continue
                current[source.group] = made.text
                collected.items.append(
                    BenchItem(f"{chain}#{step}", source.group, perturbation.key, (aspect,), source.inputs, made.text,
                              tuple(made.spans), {"aspect": aspect, "errors": step, "chain": chain})
                )  # fmt: skip
    return collected


def expert_rating(mean: float, ratings: Sequence[float], scale: Sequence[int]) -> tuple[int, int, str, bool]:
    """(r, PR, rule, decided) for one output and aspect (003 §3).

    With each expert's rating, r is their mode (all different: the highest) and PR follows
    003's rule exactly. With only the mean, r is the mean rounded to the scale and `decided`
    says whether every set of three ratings with that mean would give the same PR: rounding
    flips PR for 5 of the 35 possible triples on 1-5, e.g. (1, 2, 3) has mode 3 (PR 1) but
    mean 2 (PR 5)."""
    if ratings:
        counts = Counter(ratings)
        top = max(counts.values())
        r = int(max(v for v, c in counts.items() if c == top))
        return r, metrics.perturbed_rating(list(ratings), scale), RATING_MODE, True
    r = min(scale, key=lambda point: (abs(point - mean), -point))
    decided = len(metrics.perturbed_ratings_for_mean(mean, scale)) == 1
    return r, metrics.perturbed_rating([r], scale), RATING_MEAN, decided


def build_prompt(task: Task, sources: Sequence[Source], scales: Mapping[str, tuple[int, ...]]) -> _Collector:
    """003: each rated output twice per aspect — plain, and with the statement that a human
    expert gave the perturbed rating PR (max of the scale if the experts' rating r ≤ max/2,
    else min). r is the mode of the experts' ratings (003's rule); where a source keeps only
    their mean, r is the rounded mean and the item says so (see `expert_rating`)."""
    collected = _Collector()
    key = "prompt.expert_rating"
    collected.table[key] = {"name": "Perturbed Rating Injection", "paper": "003", "level": "prompt",
                            "method": "prompt", "degree": None, "aspects": list(scales), "params": {}}  # fmt: skip
    for source in sources:
        aspects = tuple(a for a in scales if a in source.human)
        experts = {a: source.human[a] for a in aspects}
        ratings = {a: list(source.ratings[a]) for a in aspects if source.ratings.get(a)}
        meta: dict[str, Any] = {"experts": experts}
        if ratings:
            meta["ratings"] = ratings
        collected.items.append(
            BenchItem(source.group, source.group, None, aspects, source.inputs, source.text, (), meta)
        )
        for aspect in aspects:
            scale = scales[aspect]
            r, pr, rule, decided = expert_rating(experts[aspect], source.ratings.get(aspect, ()), scale)
            statement = (
                f"A human expert rated the {aspect} of this {task.output.lower()} as {pr} "
                f"on a scale from {min(scale)} to {max(scale)}."
            )
            collected.items.append(
                BenchItem(f"{source.group}:{key}:{aspect}", source.group, key, (aspect,),
                          {**source.inputs, EXPERT_INPUT: statement}, source.text, (),
                          {"injected": pr, "expert_rating": r, "rule": rule, "pr_decided": decided})
            )  # fmt: skip
            collected.made[key] += 1
    return collected


def rating_rules(items: Sequence[BenchItem]) -> dict[str, Any]:
    """How the injected ratings were made: items per rule, and how many rounded means could
    stand for ratings whose mode gives the other PR."""
    injected = [i for i in items if i.perturbation]
    rules = Counter(str(i.meta.get("rule", RATING_MEAN)) for i in injected)
    undecided = sum(1 for i in injected if i.meta.get("rule") == RATING_MEAN and not i.meta.get("pr_decided", True))
    return {"rules": dict(rules), "undecided_by_mean": undecided}


def build_benchmark(
    kind: Kind,
    dataset: str,
    *,
    data_root: Path | None,
    n: int | None,
    seed: int = 0,
    perturbations: Sequence[str] | None = None,
    llm: LLMMaker | None = None,
    llm_info: Mapping[str, Any] | None = None,
    steps: int | None = None,
    aspects: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> Benchmark:
    """The benchmark `kind` from `dataset`; `aspects` narrows what the judge rates (dhp, attacks)."""
    if dataset not in SOURCES[kind]:
        raise InputError(
            f"benchmark '{kind}' is built from {', '.join(SOURCES[kind])}, not '{dataset}'"
            + ("; load the official DHP release for its other subsets" if kind == "dhp" else "")
        )
    info: dict[str, Any] = {"source": dataset, "sample": n, "built_with": dict(llm_info or {}) or None}
    if kind == "prompt":
        task, sources = expert_sources(dataset, data_root, n, seed)
        scale = DEFAULT_SCALE[dataset]
        scales = {a: SCALES[dataset].get(a, scale) for a in ({a for s in sources for a in s.human})}
        scales = {a: scales[a] for a in sorted(scales)}
        inputs = (*task.inputs, InputSpec(header=EXPERT_INPUT, optional=True))
        task = task.model_copy(update={"id": f"{task.id}_expert_rating", "inputs": inputs})
        collected = build_prompt(task, sources, scales)
        info["scales"] = {a: list(s) for a, s in scales.items()}
        info["rating_rule"] = rating_rules(collected.items)
        if info["rating_rule"]["rules"].get(RATING_MEAN):
            info["note"] = (
                "003 injects PR from the MODE of the experts' ratings; where our data holds only their mean, r is "
                "the mean rounded to the scale, and "
                f"{info['rating_rule']['undecided_by_mean']} of those means also fit ratings whose mode gives the "
                "opposite PR"
            )
    else:
        task, sources = reference_sources(dataset, data_root, n, seed)
        if kind == "dhp":
            keys = _keys(perturbations, DHP_SUMMARIZATION)
            rated = _aspects(aspects, ("coherence", "consistency", "fluency", "relevance"))
            collected = build_perturbed_sets(sources, keys, rated, seed, llm, progress)
        elif kind == "attacks":
            custom = _pku_aspects(data_root)
            task = task.model_copy(update={"id": f"{task.id}_attacks", "aspects": custom})
            keys = _keys(perturbations, ATTACKS)
            rated = _aspects(aspects, tuple(custom))
            collected = build_perturbed_sets(sources, keys, rated, seed, llm, progress)
        else:
            custom = _injection_aspects(task, dataset)
            task = task.model_copy(update={"id": f"{task.id}_dual", "aspects": custom})
            scale = DEFAULT_SCALE[dataset]
            chain_steps = steps if steps is not None else len(scale) - 1
            if not 1 <= chain_steps <= len(scale) - 1:
                raise InputError(f"--steps must be 1..{len(scale) - 1} for a {min(scale)}-{max(scale)} scale")
            scales = {a: DUAL_SCALES[dataset].get(a, scale) for a in INJECTION_ASPECTS[dataset]}
            # a gold rating never falls below the aspect's scale: a 1..2 aspect takes one error at most
            per_aspect = {a: min(chain_steps, len(s) - 1) for a, s in scales.items()}
            collected = build_dual(dataset, sources, per_aspect, seed, llm, progress)
            for item in collected.items:
                item.meta["gold"] = max(scales[item.meta["aspect"]]) - int(item.meta["errors"])
            info["scale"] = list(scale)
            info["scales"] = {a: list(s) for a, s in scales.items()}
            info["note"] = "global targets and local sequences share the injection chains (see build_dual)"
            short = [a for a, n in per_aspect.items() if n < chain_steps]
            if short:
                info["note"] += f"; {', '.join(short)} rated 1-2 (binary in USR), so one error at most"
    info["made"] = dict(collected.made)
    info["rejected"] = {k: dict(v) for k, v in collected.rejected.items()}
    return Benchmark(kind, f"{kind}-{dataset}", dataset, task, collected.items, collected.table, seed, info)
