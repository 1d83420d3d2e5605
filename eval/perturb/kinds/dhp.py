"""DHP: discernment of hierarchical perturbation (seed 000; docs/research/benchmarks.md §1).

SummEval references (the one with most sentences per article) under the 12 DHP sets
(character / word / sentence × rule / LLM × minor / major). Per set, a one-sided Wilcoxon p
per aspect (original above perturbed), their harmonic-mean p and the discernment D; then
D_min and the level-balanced D_avg, and with expert weights their EW variants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.configio import read_yaml
from spanjudge.core.errors import InputError
from spanjudge.core.keyvalue import split_item, yaml_value
from spanjudge.eval.perturb import statistics
from spanjudge.eval.perturb.analysis import Scores, paired_scores
from spanjudge.eval.perturb.benchmark import Benchmark
from spanjudge.eval.perturb.build import (
    BuildRequest,
    Built,
    build_perturbed_sets,
    reference_sources,
    select_aspects,
    select_keys,
)
from spanjudge.eval.perturb.judgments import ScoringResult
from spanjudge.eval.perturb.kind import AnalysisOptions, BenchmarkKind
from spanjudge.eval.perturb.perturbations import DHP_SUMMARIZATION, load_tables
from spanjudge.eval.perturb.report import fmt, table

LEVELS = {"character": "C", "word": "W", "sentence": "S"}


def build(request: BuildRequest) -> Built:
    task, sources = reference_sources(request.dataset, request.data_root, request.n, request.seed)
    keys = select_keys(request.perturbations, DHP_SUMMARIZATION)
    rated = select_aspects(request.aspects, load_tables().aspect_sets["summarization"])
    collected = build_perturbed_sets(sources, keys, rated, request.seed, request.llm, request.progress)
    return Built(task, collected)


ExpertWeights = Mapping[str, Mapping[str, float]]  # perturbation key -> aspect -> w (000's EW^i_mj)


def check_weights(benchmark: Benchmark, weights: ExpertWeights) -> dict[str, list[float]]:
    """Per perturbation, the weight of each benchmark aspect (0 where none is given).

    000 §3.3.2 weighs the metrics PER PERTURBATION (10 experts voted which metric each quality
    issue hits): every perturbation of the benchmark needs its own weights, summing to 1."""
    aspects = list(benchmark.aspects)
    unknown = sorted(set(weights) - set(benchmark.perturbations))
    if unknown:
        raise InputError(f"expert weights for '{unknown[0]}', which is not a perturbation of {benchmark.name}")
    missing = [k for k in benchmark.perturbations if k not in weights]
    if missing:
        raise InputError(
            f"expert weights are per perturbation and aspect: none given for {', '.join(missing)} "
            f"(give PERTURBATION:ASPECT=W for every perturbation, or none for no EW variant)"
        )
    out = {}
    for key, per_aspect in weights.items():
        stray = [a for a in per_aspect if a not in aspects]
        if stray:
            raise InputError(f"expert weight for {key}:{stray[0]}: the benchmark rates {', '.join(aspects)}")
        w = [float(per_aspect.get(a, 0.0)) for a in aspects]
        if any(x < 0 for x in w) or abs(sum(w) - 1.0) > 1e-6:
            raise InputError(f"expert weights of {key} must be non-negative and sum to 1, they sum to {sum(w):g}")
        out[key] = w
    return out


def analyze_dhp(
    benchmark: Benchmark, scores: Scores, weights: ExpertWeights | None = None, normalised: bool = False
) -> dict[str, Any]:
    """Per set: one-sided Wilcoxon p per aspect (the paper's metrics m_j), the harmonic-mean p
    and D; then D_min and the level-balanced D_avg. With expert weights per perturbation and
    aspect, also p^EW, D^EW and their summaries. No uniform default: with w = 1/M, p^EW = M·p and
    D^EW = D − ln M / ln 20 for every set, a constant shift that carries no information."""
    aspects = list(benchmark.aspects)
    w = check_weights(benchmark, weights) if weights else None
    sets: dict[str, Any] = {}
    plain: list[statistics.DHPSet] = []
    weighted: list[statistics.DHPSet] = []
    for key, info in benchmark.perturbations.items():
        per_aspect: dict[str, Any] = {}
        for aspect in aspects:
            original, perturbed, lost = paired_scores(benchmark, scores, key, aspect)
            p = statistics.wilcoxon_greater(original, perturbed) if original else None
            per_aspect[aspect] = {"p": p, "pairs": len(original), "unscored_pairs": lost}
        ps = [v["p"] for v in per_aspect.values()]
        entry: dict[str, Any] = {"name": info.get("name"), "level": info.get("level"), "degree": info.get("degree"),
                                 "aspects": per_aspect, "p": None}  # fmt: skip
        sets[key] = entry
        if any(p is None for p in ps):  # an aspect with no scored pair: no honest combined p
            continue
        level = LEVELS.get(str(info.get("level")), str(info.get("level")))
        entry["p"] = statistics.harmonic_p(ps, normalised=normalised)
        entry["D"] = statistics.discernment(entry["p"])
        plain.append(statistics.DHPSet(key, level, entry["p"]))
        if w is not None:
            entry["p_EW"] = statistics.harmonic_p(ps, weights=w[key])
            entry["D_EW"] = statistics.discernment(entry["p_EW"])
            weighted.append(statistics.DHPSet(key, level, entry["p_EW"]))
    summary: dict[str, Any] = {"D_avg": None, "D_min": None}
    if w is not None:
        summary |= {"D_avg_EW": None, "D_min_EW": None}
    if plain:
        s = statistics.dhp_summary(plain)
        summary |= {"D_avg": s["D_avg"], "D_min": s["D_min"]}
    if weighted:
        s_ew = statistics.dhp_summary(weighted)
        summary |= {"D_avg_EW": s_ew["D_avg"], "D_min_EW": s_ew["D_min"]}
    return {
        "sets": sets,
        "summary": summary,
        "sets_without_p": sorted(k for k, v in sets.items() if v["p"] is None),
        "harmonic": "normalised M/sum(1/p)" if normalised else "printed 1/sum(1/p)",
        "weights": {k: dict(zip(aspects, v, strict=True)) for k, v in w.items()} if w is not None else None,
    }


def parse_weights(values: Sequence[str]) -> dict[str, dict[str, float]]:
    """`--dhp-weight` values: PERTURBATION:ASPECT=W, or a YAML/JSON file {perturbation: {aspect: w}}."""
    out: dict[str, dict[str, float]] = {}
    for value in values:
        if value.endswith((".yaml", ".yml", ".json")):
            for key, per_aspect in _weights_file(Path(value)).items():
                out.setdefault(key, {}).update(per_aspect)
            continue
        form, example = "PERTURBATION:ASPECT=NUMBER or a weights file", "dhp.typos.minor:fluency=0.6"
        target, weight = split_item(value, "--dhp-weight", example, form, text=True)
        key, _, aspect = target.rpartition(":")
        number = yaml_value(weight, "--dhp-weight", value)
        if not key.strip() or not aspect.strip() or isinstance(number, bool) or not isinstance(number, int | float):
            raise InputError(f"--dhp-weight expects {form} (e.g. {example}), got {value!r}")
        out.setdefault(key.strip(), {})[aspect.strip()] = float(number)
    return out


def _weights_file(path: Path) -> dict[str, dict[str, float]]:

    if not path.is_file():
        raise InputError(f"--dhp-weight: weights file not found: {path}")
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: expected {{perturbation: {{aspect: weight}}}}")
    out: dict[str, dict[str, float]] = {}
    for key, per_aspect in data.items():
        if not isinstance(per_aspect, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in per_aspect.values()
        ):
            raise InputError(f"{path}: '{key}' must map each aspect to a number")
        out[str(key)] = {str(a): float(v) for a, v in per_aspect.items()}
    return out


def report(result: Mapping[str, Any], benchmark: Benchmark) -> list[str]:
    weights = result.get("weights")
    if weights:
        told = "expert weights per perturbation and aspect: " + "; ".join(
            f"{k}: " + ", ".join(f"{a} {w:g}" for a, w in ws.items()) for k, ws in weights.items()
        )
    else:
        told = (
            "no expert weights given, so no EW variant: 000's weights (per perturbation and aspect) are "
            "printed only in its Figure 7, and uniform ones would make D (EW) = D − ln M / ln 20 for every set"
        )
    lines = [f"Harmonic mean: {result['harmonic']}; {told}.", ""]
    rows = []
    for key, s in result["sets"].items():
        ps = " / ".join(fmt(a["p"]) for a in s["aspects"].values())
        pairs = min((a["pairs"] for a in s["aspects"].values()), default=0)
        lost = max((a["unscored_pairs"] for a in s["aspects"].values()), default=0)
        row = [s["name"], s["level"], s.get("degree"), pairs, lost, ps, s["p"], s.get("D")]
        rows.append([*row, *([s.get("D_EW")] if weights else []), key])
    aspects = "/".join(next(iter(result["sets"].values()))["aspects"]) if result["sets"] else ""
    header = ["set", "level", "degree", "pairs", "unscored pairs", f"p ({aspects})", "p", "D"]
    lines += table([*header, *(["D (EW)"] if weights else []), "key"], rows)
    summary = result["summary"]
    lines += ["", *table([k.replace("_EW", " EW") for k in summary], [[summary[k] for k in summary]])]
    if result["sets_without_p"]:
        lines.append(f"\nNo p (an aspect with no scored pair): {', '.join(result['sets_without_p'])}.")
    lines.append("\nD ≥ 1 means the judge tells the perturbed texts apart at p ≤ 0.05 (000 §3.3).")
    lines.append("000 publishes D only as bar charts (Figures 4-5), so there are no reference rows to print.")
    return lines


def dhp_plot(result: Mapping[str, Any], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [(s["name"] + (f" ({s['degree']})" if s.get("degree") else ""), s["D"]) for s in result["sets"].values()
            if s.get("D") is not None]  # fmt: skip
    if not sets:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh([n for n, _ in sets], [min(d, 10.0) for _, d in sets], color="#4c72b0")
    ax.axvline(1.0, color="red", ls="--", label="D = 1 (p = 0.05)")
    ax.set_xlabel("discernment D (capped at 10)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def analyse(benchmark: Benchmark, scored: ScoringResult, options: AnalysisOptions) -> dict[str, Any]:
    return analyze_dhp(benchmark, scored.scores, options.weights, options.normalised)


def plots(result: Mapping[str, Any], out: Path) -> list[Path]:
    made = dhp_plot(result, out / "dhp_discernment.png")
    return [made] if made else []


def headline(result: Mapping[str, Any]) -> tuple[str, float | None]:
    return "discernment D_avg", result["summary"]["D_avg"]


KIND = BenchmarkKind(
    headline=headline,
    name="dhp",
    summary="SummEval references under the 12 DHP sets; discernment D per set, D_avg and D_min",
    sources=("summeval",),
    build=build,
    analyse=analyse,
    report=report,
    plots=plots,
    undefined_why="an aspect with no scored pair has no Wilcoxon p, and a set without p has no D",
    aggregation="mean of the samples per item (000: scores averaged over 5 runs)",
    wrong_source_hint="; load the official DHP release for its other subsets",
)
