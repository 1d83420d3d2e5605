"""Dual perspective: error-injection chains (seed 001; docs/research/benchmarks.md §2).

Per aspect, a chain reference → +1 error → +2 errors …, each step injecting one new error of
that aspect (LLM-made). Global: the judge's score binned onto the gold scale, linear weighted κ
and CEM-ORD per aspect. Local: each chain is a sequence of strictly falling quality;
adjacent-pair accuracy (ties are errors) and gap-d accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spanjudge.core.catalog import Aspect, Task
from spanjudge.core.errors import InputError
from spanjudge.core.progress import Tracker
from spanjudge.eval.judging.sampling import mode_class
from spanjudge.eval.perturb import statistics
from spanjudge.eval.perturb.analysis import Scores, num, score_of
from spanjudge.eval.perturb.benchmark import BenchItem, Benchmark
from spanjudge.eval.perturb.build import (
    DEFAULT_SCALE,
    BuildRequest,
    Built,
    Collector,
    LLMMaker,
    Source,
    reference_sources,
    run_perturbation,
)
from spanjudge.eval.perturb.judgments import ScoringResult
from spanjudge.eval.perturb.kind import AnalysisOptions, BenchmarkKind, no_plots
from spanjudge.eval.perturb.perturbations import INJECTION_ASPECTS, get
from spanjudge.eval.perturb.report import published_rows, table

# 001's gold scales where an aspect differs from its dataset's: USR rates these two 0-1, and 001
# (Table 15 and Table 7's "0-1 & 1-3") turns them into a 2-point scale (1..2)
DUAL_SCALES: dict[str, dict[str, tuple[int, ...]]] = {
    "summeval": {},
    "topical_chat": {"understandability": (1, 2), "knowledge use": (1, 2)},
}
# 001's TopicalChat aspects by our catalog's names where they differ
CATALOG_ASPECT = {"context maintenance": "coherence", "knowledge use": "groundedness"}

# 001's Topical-Chat column names for 001's aspects (our injection aspects)
DUAL_COLUMNS = {
    "understandability": "understandable",
    "naturalness": "natural",
    "context maintenance": "maintains_context",
    "interestingness": "interesting",
    "knowledge use": "uses_knowledge",
}


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


def build(request: BuildRequest) -> Built:
    dataset = request.dataset
    task, sources = reference_sources(dataset, request.data_root, request.n, request.seed)
    custom = _injection_aspects(task, dataset)
    task = task.model_copy(update={"id": f"{task.id}_dual", "aspects": custom})
    scale = DEFAULT_SCALE[dataset]
    chain_steps = request.steps if request.steps is not None else len(scale) - 1
    if not 1 <= chain_steps <= len(scale) - 1:
        raise InputError(f"--steps must be 1..{len(scale) - 1} for a {min(scale)}-{max(scale)} scale")
    scales = {a: DUAL_SCALES[dataset].get(a, scale) for a in INJECTION_ASPECTS[dataset]}
    # a gold rating never falls below the aspect's scale: a 1..2 aspect takes one error at most
    per_aspect = {a: min(chain_steps, len(s) - 1) for a, s in scales.items()}
    collected = build_dual(dataset, sources, per_aspect, request.seed, request.llm, request.progress)
    for item in collected.items:
        item.meta["gold"] = max(scales[item.meta["aspect"]]) - int(item.meta["errors"])
    info: dict[str, Any] = {"scale": list(scale), "scales": {a: list(s) for a, s in scales.items()}}
    info["note"] = "global targets and local sequences share the injection chains (see build_dual)"
    short = [a for a, n in per_aspect.items() if n < chain_steps]
    if short:
        info["note"] += f"; {', '.join(short)} rated 1-2 (binary in USR), so one error at most"
    return Built(task, collected, info)


def build_dual(
    dataset: str,
    sources: Sequence[Source],
    steps: int | Mapping[str, int],
    seed: int,
    llm: LLMMaker | None,
    progress: Tracker | None,
) -> Collector:
    """001: per aspect, a chain reference → +1 error → +2 errors …, each step injecting one new
    error of that aspect into the previous text. The chain is a local sequence (quality falls
    strictly); each text with n errors is a global target with gold rating max − n. `steps` is
    the chain length, one for all aspects or per aspect (a 1..2 scale allows one error).

    Simplification, stated in reports: 001 builds its global targets separately (n errors at
    once, calibrated against anchors); here both perspectives share the chains' texts."""
    collected = Collector()
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
            outcomes = run_perturbation(perturbation, texts, seed, llm, progress)
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


def analyze_dual(benchmark: Benchmark, scores: Scores, gap: int = 2, samples: Sequence[Scores] = ()) -> dict[str, Any]:
    """Global: the judge's score binned onto the gold scale, linear weighted κ and CEM-ORD per
    aspect. Local: each chain (0, 1, 2 ... injected errors) is a sequence of strictly falling
    quality; adjacent-pair accuracy (ties are errors) and gap-d accuracy.
    With several `samples` (--samples), as 001 §4: the global rating is the mode of the samples'
    binned ratings, the local score their mean (`scores` holds the means)."""
    default = tuple(int(c) for c in benchmark.info.get("scale", (1, 2, 3, 4, 5)))
    scales = benchmark.info.get("scales") or {}
    per_aspect: dict[str, Any] = {}
    binners: dict[str, str] = {}
    for aspect in benchmark.aspects:
        classes = tuple(int(c) for c in scales.get(aspect, default))  # USR's binary aspects: 1..2
        binner = statistics.EqualWidthBinner(0.0, 100.0, classes)
        binners[aspect] = binner.describe()
        items = [i for i in benchmark.items if aspect in i.aspects]
        gold, predicted, unscored = [], [], 0
        chains: dict[str, list[tuple[int, float | None]]] = {}
        for item in items:
            score = score_of(scores, aspect, item)
            chains.setdefault(str(item.meta.get("chain", item.group)), []).append((int(item.meta["errors"]), score))
            if score is None:
                unscored += 1
                continue
            gold.append(int(item.meta["gold"]))
            modal = mode_class([score_of(one, aspect, item) for one in samples], binner) if len(samples) > 1 else None
            predicted.append(binner(score) if modal is None else modal)
        sequences = [[s for _, s in sorted(chain)] for chain in chains.values()]
        accuracy, pairs = statistics.adjacent_pair_accuracy(sequences)
        gap_acc, gap_pairs = statistics.gap_accuracy(sequences, gap)
        per_aspect[aspect] = {
            "texts": len(items),
            "unscored": unscored,
            "kappa": num(statistics.linear_weighted_kappa(gold, predicted, classes)) if gold else None,
            "cem_ord": num(statistics.cem_ord(gold, predicted, classes)) if gold else None,
            "pair_accuracy": num(accuracy),
            "pairs": pairs,
            f"gap{gap}_accuracy": num(gap_acc),
            f"gap{gap}_pairs": gap_pairs,
            "chains": len(sequences),
            "scale": list(classes),
        }

    def mean(metric: str) -> float | None:
        values = [v[metric] for v in per_aspect.values() if v[metric] is not None]
        return sum(values) / len(values) if values else None

    return {
        "aspects": per_aspect,
        "average": {m: mean(m) for m in ("kappa", "cem_ord", "pair_accuracy", f"gap{gap}_accuracy")},
        "binner": "; ".join(dict.fromkeys(binners.values())),
        "binners": binners,
    }


def report(result: Mapping[str, Any], benchmark: Benchmark) -> list[str]:
    gap = next((k for k in result["average"] if k.startswith("gap")), "gap2_accuracy")
    rows = [
        [aspect, r["texts"], r["unscored"], r["kappa"], r["cem_ord"], r["pair_accuracy"], r["pairs"], r[gap]]
        for aspect, r in result["aspects"].items()
    ]
    avg = result["average"]
    rows.append(["**average**", "", "", avg["kappa"], avg["cem_ord"], avg["pair_accuracy"], "", avg[gap]])
    binners = result.get("binners") or {}
    if len(set(binners.values())) > 1:
        told = "per aspect: " + "; ".join(f"{a}: {b}" for a, b in binners.items())
    else:
        told = f"with {result['binner']}"
    lines = [f"Judge scores binned {told}.", ""]
    lines += table(["aspect", "texts", "unscored", "κ (global)", "CEM-ORD", "pair acc. (local)", "pairs", gap], rows)
    published = [r for r in published_rows("dual") if r.dataset == benchmark.dataset and r.strategy is None]
    if published:
        lines += ["", f"Published on 001's official {benchmark.dataset} benchmarks (Tables 2-3), for reference:", ""]
        judges = list(dict.fromkeys(r.judge for r in published))
        reference = []
        for judge in judges:
            mine = {(r.metric, r.aspect): r.value for r in published if r.judge == judge}
            averages = [mine.get(("kappa", "average")), mine.get(("pair_accuracy", "average"))]
            reference.append([f"{judge} (published)", *averages])
        lines += table(["judge", "κ average", "pair acc. average"], reference)
    return lines


def analyse(benchmark: Benchmark, scored: ScoringResult, options: AnalysisOptions) -> dict[str, Any]:
    return analyze_dual(benchmark, scored.scores, samples=scored.samples)


KIND = BenchmarkKind(
    name="dual",
    summary="error chains injecting one error of an aspect per step: global κ / CEM-ORD, local pair accuracy",
    sources=("summeval", "topical_chat"),
    build=build,
    analyse=analyse,
    report=report,
    plots=no_plots,
    undefined_why="κ and CEM-ORD need scored texts whose scores and gold vary; pair accuracy needs a scored pair",
    aggregation="global: mode of the samples' ratings on the gold scale; local: mean (001: 10 samples)",
)
