"""Aspect-targeted perturbation attacks (seed 002; docs/research/benchmarks.md §3).

SummEval references under the 18 attacks (4 rule-based, 14 LLM-made), judged on 002's 11
aspects (described from ../shared/data/perturbation/pku_aspect_criteria). Δ(perturbation,
aspect) = mean(original − perturbed) on the 1-5 scale, summarised against the expected-effect
matrix (T: a drop expected, F: none expected), and drawn as an 18 × 11 heat map.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanjudge.core.catalog import Aspect
from spanjudge.core.errors import InputError
from spanjudge.core.paths import data_dir
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
from spanjudge.eval.perturb.perturbations import ATTACKS
from spanjudge.eval.perturb.report import published_rows, table


def build(request: BuildRequest) -> Built:
    task, sources = reference_sources(request.dataset, request.data_root, request.n, request.seed)
    custom = _pku_aspects(request.data_root)
    task = task.model_copy(update={"id": f"{task.id}_attacks", "aspects": custom})
    keys = select_keys(request.perturbations, ATTACKS)
    rated = select_aspects(request.aspects, tuple(custom))
    collected = build_perturbed_sets(sources, keys, rated, request.seed, request.llm, request.progress)
    return Built(task, collected)


def _pku_aspects(data_root: Path | None) -> dict[str, Aspect]:
    """002's 11 aspects with the paper's "Gold" descriptions and its 1/5 rubric lines, read from
    ../shared/data/perturbation/pku_aspect_criteria (never copied into the repository)."""
    path = data_dir(data_root) / "perturbation" / "pku_aspect_criteria" / "aspect_criteria.json"
    if not path.is_file():
        raise InputError(f"the aspect-attack benchmark needs {path} (002's aspect descriptions)")
    criteria = json.loads(path.read_text(encoding="utf-8"))
    names = {a.replace("-", "_").lower(): a for a in statistics.ATTACK_ASPECTS}
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
    missing = [a for a in statistics.ATTACK_ASPECTS if a not in aspects]
    if missing:
        raise InputError(f"{path}: no description for aspect(s) {', '.join(missing)}")
    return {a: aspects[a] for a in statistics.ATTACK_ASPECTS}


def analyze_attacks(benchmark: Benchmark, scores: Scores) -> dict[str, Any]:
    """Δ(perturbation, aspect) = mean(original − perturbed) on the 1-5 scale (s' = 1 + 4s/100)."""
    delta: dict[tuple[str, str], float | None] = {}
    cells: list[dict[str, Any]] = []
    for key, info in benchmark.perturbations.items():
        name = str(info.get("name"))
        for aspect in benchmark.aspects:
            original, perturbed, lost = paired_scores(benchmark, scores, key, aspect)
            value, used = statistics.attack_delta(
                [statistics.to_likert(s) for s in original], [statistics.to_likert(s) for s in perturbed]
            )
            expected = statistics.EXPECTED_EFFECT.get(name, {}).get(aspect, "?")
            if name in statistics.EXPECTED_EFFECT and aspect in statistics.ATTACK_ASPECTS:
                delta[(name, aspect)] = value
            cells.append(
                {"perturbation": name, "aspect": aspect, "delta": value, "items": used, "unscored": lost,
                 "expected": expected}
            )  # fmt: skip
    return {"cells": cells, "summary": statistics.attack_summary(delta), "scale": "1 + 4*score/100"}


def report(result: Mapping[str, Any], benchmark: Benchmark) -> list[str]:
    summary = result["summary"]
    lines = [f"Δ = mean(original − perturbed) on the 1-5 scale ({result['scale']}).", ""]
    published = [r for r in published_rows("attacks") if r.judge == "GPT-3.5"]
    values = {(r.perturbation, r.aspect): r.value for r in published if r.perturbation and r.aspect}
    reference = statistics.attack_summary(values)
    keys = ["mean_delta_T", "mean_abs_delta_F", "pass_rate_T", "pass_rate_F", "n_T", "n_F", "missing_T", "missing_F"]
    rows = [["this judge", *[summary[k] for k in keys]]]
    if published:
        rows.append(["GPT-3.5 (published, 002 Table 4)", *[reference[k] for k in keys]])
    lines += table(["judge", "mean Δ on T ↑", "mean abs Δ on F ↓", "pass T", "pass F", "T", "F", "T missing",
                     "F missing"], rows)  # fmt: skip
    lines += ["", "Cells (T: a drop expected; F: none expected; x: excluded):", ""]
    cells = [[c["perturbation"], c["aspect"], c["expected"], c["delta"], c["items"], c["unscored"]]
             for c in result["cells"]]  # fmt: skip
    lines += table(["perturbation", "aspect", "expected", "Δ", "items", "unscored pairs"], cells)
    return lines


def heatmap(result: Mapping[str, Any], path: Path) -> Path:
    """The 18 × 11 Δ heat map (grey: no value; T cells outlined)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(statistics.ATTACK_PERTURBATIONS)
    cols = list(statistics.ATTACK_ASPECTS)
    grid = np.full((len(rows), len(cols)), np.nan)
    for cell in result["cells"]:
        if cell["perturbation"] in rows and cell["aspect"] in cols and cell["delta"] is not None:
            grid[rows.index(cell["perturbation"]), cols.index(cell["aspect"])] = cell["delta"]
    fig, ax = plt.subplots(figsize=(9, 8))
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#dddddd")
    limit = max(1.0, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-limit, vmax=limit)
    for i, name in enumerate(rows):
        for j, aspect in enumerate(cols):
            if statistics.EXPECTED_EFFECT[name][aspect] == "T":
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=1.5, ec="black"))
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title("Δ = original − perturbed (1-5); outlined: drop expected")
    fig.colorbar(image, ax=ax, shrink=0.6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def analyse(benchmark: Benchmark, scored: ScoringResult, options: AnalysisOptions) -> dict[str, Any]:
    return analyze_attacks(benchmark, scored.scores)


def plots(result: Mapping[str, Any], out: Path) -> list[Path]:
    return [heatmap(result, out / "attacks_heatmap.png")]


KIND = BenchmarkKind(
    name="attacks",
    summary="the 18 aspect-targeted perturbations judged on 11 aspects: Δ heat map against the expected effects",
    sources=("summeval",),
    build=build,
    analyse=analyse,
    report=report,
    plots=plots,
    undefined_why="Δ needs a scored (original, perturbed) pair; a pass rate needs a defined Δ",
    aggregation="mean of the samples per item (002 reports no repeated sampling)",
)
