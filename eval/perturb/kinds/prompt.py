"""Perturbed prompt: a misleading expert rating (seed 003; docs/research/benchmarks.md §4).

Each rated output twice per aspect: plain, and with the statement that a human expert gave
the perturbed rating PR. Krippendorff's ordinal α of the judge beside the experts, with and
without the injected rating, and the exact-match rate of the two scores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from spanjudge.core.catalog import InputSpec, Task
from spanjudge.eval.perturb import statistics
from spanjudge.eval.perturb.analysis import Scores, num, score_of
from spanjudge.eval.perturb.benchmark import BenchItem, Benchmark, originals_by_group
from spanjudge.eval.perturb.build import DEFAULT_SCALE, BuildRequest, Built, Collector, Source, expert_sources
from spanjudge.eval.perturb.judgments import ScoringResult
from spanjudge.eval.perturb.kind import AnalysisOptions, BenchmarkKind, no_plots
from spanjudge.eval.perturb.report import published_rows, table

EXPERT_INPUT = "Human expert rating"  # the extra input of the perturbed-prompt benchmark
# TopicalChat's expert scales (USR): 1-3 except groundedness (0-1); SummEval's are 1-5
SCALES: dict[str, dict[str, tuple[int, ...]]] = {"summeval": {}, "topical_chat": {"groundedness": (0, 1)}}
RATING_MODE = "mode of the experts' ratings"
RATING_MEAN = "rounded mean (only the experts' mean is in the data)"


def build(request: BuildRequest) -> Built:
    dataset = request.dataset
    task, sources = expert_sources(dataset, request.data_root, request.n, request.seed)
    scale = DEFAULT_SCALE[dataset]
    scales = {a: SCALES[dataset].get(a, scale) for a in ({a for s in sources for a in s.human})}
    scales = {a: scales[a] for a in sorted(scales)}
    inputs = (*task.inputs, InputSpec(header=EXPERT_INPUT, optional=True))
    task = task.model_copy(update={"id": f"{task.id}_expert_rating", "inputs": inputs})
    collected = build_prompt(task, sources, scales)
    info: dict[str, Any] = {"scales": {a: list(s) for a, s in scales.items()}}
    info["rating_rule"] = rating_rules(collected.items)
    if info["rating_rule"]["rules"].get(RATING_MEAN):
        info["note"] = (
            "003 injects PR from the MODE of the experts' ratings; where our data holds only their mean, r is "
            "the mean rounded to the scale, and "
            f"{info['rating_rule']['undecided_by_mean']} of those means also fit ratings whose mode gives the "
            "opposite PR"
        )
    return Built(task, collected, info)


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
        return r, statistics.perturbed_rating(list(ratings), scale), RATING_MODE, True
    r = min(scale, key=lambda point: (abs(point - mean), -point))
    decided = len(statistics.perturbed_ratings_for_mean(mean, scale)) == 1
    return r, statistics.perturbed_rating([r], scale), RATING_MEAN, decided


def build_prompt(task: Task, sources: Sequence[Source], scales: Mapping[str, tuple[int, ...]]) -> Collector:
    """003: each rated output twice per aspect — plain, and with the statement that a human
    expert gave the perturbed rating PR (max of the scale if the experts' rating r ≤ max/2,
    else min). r is the mode of the experts' ratings (003's rule); where a source keeps only
    their mean, r is the rounded mean and the item says so (see `expert_rating`)."""
    collected = Collector()
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


ALPHA_003 = "003's statistic: each expert's rating and the judge as raters"
ALPHA_MEAN = "not 003's statistic: the experts' MEAN as one rater and the judge"


def analyze_prompt(benchmark: Benchmark, scores: Scores) -> dict[str, Any]:
    """Krippendorff's ordinal α of the judge (binned onto the aspect's expert scale) beside the
    experts, with and without the injected rating, and the exact-match rate of the two scores.

    003's α (Table 1) has the three experts and the LLM as four raters. Where only the experts'
    mean is known, α is over two rows (mean, judge): another statistic, labelled as such."""
    scales = benchmark.info.get("scales") or {}
    originals = originals_by_group(benchmark.items)
    per_aspect: dict[str, Any] = {}
    binners: dict[str, str] = {}
    for aspect in benchmark.aspects:
        binner = statistics.EqualWidthBinner(0.0, 100.0, tuple(int(c) for c in scales.get(aspect, (1, 2, 3, 4, 5))))
        binners[aspect] = binner.describe()
        injected = [i for i in benchmark.items if i.perturbation and aspect in i.aspects]
        plain_scores, injected_scores, experts, raters = [], [], [], []
        for item in injected:
            original = originals[item.group]
            experts.append(float(original.meta["experts"][aspect]))
            raters.append([float(r) for r in (original.meta.get("ratings") or {}).get(aspect, [])])
            plain_scores.append(score_of(scores, aspect, original))
            injected_scores.append(score_of(scores, aspect, item))
        individual = bool(raters) and all(len(r) > 1 for r in raters)  # every item's own experts
        rows = _expert_rows(raters) if individual else [experts]
        rate, pairs = statistics.exact_match_rate(plain_scores, injected_scores)
        per_aspect[aspect] = {
            "items": len(injected),
            "alpha_plain": _alpha(plain_scores, rows, binner),
            "alpha_injected": _alpha(injected_scores, rows, binner),
            "alpha_statistic": ALPHA_003 if individual else ALPHA_MEAN,
            "exact_match": num(rate),
            "pairs": pairs,
            "unscored_plain": sum(v is None for v in plain_scores),
            "unscored_injected": sum(v is None for v in injected_scores),
        }
    return {"aspects": per_aspect, "binners": binners, "rating_rule": benchmark.info.get("rating_rule")}


def _expert_rows(raters: list[list[float]]) -> list[list[float | None]]:
    """Per-item rating lists as rater rows (raters x items), padded with None."""
    width = max(len(r) for r in raters)
    return [[r[k] if k < len(r) else None for r in raters] for k in range(width)]


def _alpha(
    values: Sequence[float | None], experts: Sequence[Sequence[float | None]], binner: statistics.EqualWidthBinner
) -> float | None:
    judge = [None if v is None else float(binner(v)) for v in values]
    if sum(v is not None for v in judge) < 2:
        return None
    return num(statistics.krippendorff_alpha_ordinal(judge, experts))


def report(result: Mapping[str, Any], benchmark: Benchmark) -> list[str]:
    rows = [
        [aspect, r["items"], r["alpha_plain"], r["alpha_injected"], r["exact_match"], r["pairs"],
         r["unscored_plain"], r["unscored_injected"]]
        for aspect, r in result["aspects"].items()
    ]  # fmt: skip
    statistics = {r.get("alpha_statistic", ALPHA_MEAN) for r in result["aspects"].values()}
    same_as_003 = statistics == {ALPHA_003}
    alpha = "α" if same_as_003 else "α (mean, judge)"
    lines = ["Judge scores binned per aspect: " + "; ".join(f"{a}: {b}" for a, b in result["binners"].items()), ""]
    rule = result.get("rating_rule") or benchmark.info.get("rating_rule")
    if rule:
        made = ", ".join(f"{n} by the {r}" for r, n in rule["rules"].items())
        lines.append(f"Injected ratings: {made}.")
        if rule.get("undecided_by_mean"):
            lines.append(
                f"003 takes the mode of the experts' ratings; only their means are in our data, and "
                f"{rule['undecided_by_mean']} of the rounded means also fit ratings whose mode gives the opposite PR."
            )
        lines.append("")
    lines.append(f"α columns: {'; '.join(sorted(statistics))}.")
    lines.append("")
    lines += table(["aspect", "items", f"{alpha} plain", f"{alpha} with PR", "exact match", "pairs",
                     "unscored plain", "unscored PR"], rows)  # fmt: skip
    dataset = "summeval" if benchmark.dataset == "summeval" else "usr"
    shown = ("alpha", "exact_match") if same_as_003 else ("exact_match",)
    published = [r for r in published_rows("prompt") if r.dataset == dataset and r.metric in shown]
    if not same_as_003:
        lines += ["", "003's Table 1 α is over three annotators and the LLM; ours is over the experts' mean and "
                  "the judge, a different statistic, so Table 1 is not printed beside it."]  # fmt: skip
    if published:
        lines += ["", "Published (003, Gemini 1 on the official data), for reference:", ""]
        lines += table(
            ["judge", "metric", "strategy", "aspect", "value"],
            [[f"{r.judge} (published)", r.metric, r.strategy, r.aspect, r.value] for r in published],
        )
    return lines


def analyse(benchmark: Benchmark, scored: ScoringResult, options: AnalysisOptions) -> dict[str, Any]:
    return analyze_prompt(benchmark, scored.scores)


KIND = BenchmarkKind(
    name="prompt",
    summary='rated outputs with and without a misleading "human expert rating" in the prompt: α and exact match',
    sources=("summeval", "topical_chat"),
    build=build,
    analyse=analyse,
    report=report,
    plots=no_plots,
    undefined_why="α needs two scored items with varying ratings; exact match needs a scored item",
    aggregation="mean of the samples per item (003 reports no repeated sampling)",
)
