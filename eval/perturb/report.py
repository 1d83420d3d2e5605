"""Benchmark reports: results.json, report.md and PNG plots, with the seeds' published numbers
beside ours as labelled reference rows (they were measured on the official data, not ours)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.inference.fileio import atomic_write_text

from . import metrics
from .analysis import ALPHA_003, ALPHA_MEAN
from .benchmark import Benchmark
from .published import PublishedRow, load_published, rows_for

# 001's Topical-Chat column names for 001's aspects (our injection aspects)
DUAL_COLUMNS = {
    "understandability": "understandable",
    "naturalness": "natural",
    "context maintenance": "maintains_context",
    "interestingness": "interesting",
    "knowledge use": "uses_knowledge",
}


def _f(value: Any) -> str:
    return "–" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_f(v) for v in row) + " |" for row in rows]
    return lines


def _published(kind: str) -> list[PublishedRow]:
    return rows_for(load_published(), kind)


def _dhp(result: Mapping[str, Any]) -> list[str]:
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
        ps = " / ".join(_f(a["p"]) for a in s["aspects"].values())
        pairs = min((a["pairs"] for a in s["aspects"].values()), default=0)
        lost = max((a["unscored_pairs"] for a in s["aspects"].values()), default=0)
        row = [s["name"], s["level"], s.get("degree"), pairs, lost, ps, s["p"], s.get("D")]
        rows.append([*row, *([s.get("D_EW")] if weights else []), key])
    aspects = "/".join(next(iter(result["sets"].values()))["aspects"]) if result["sets"] else ""
    header = ["set", "level", "degree", "pairs", "unscored pairs", f"p ({aspects})", "p", "D"]
    lines += _table([*header, *(["D (EW)"] if weights else []), "key"], rows)
    summary = result["summary"]
    lines += ["", *_table([k.replace("_EW", " EW") for k in summary], [[summary[k] for k in summary]])]
    if result["sets_without_p"]:
        lines.append(f"\nNo p (an aspect with no scored pair): {', '.join(result['sets_without_p'])}.")
    lines.append("\nD ≥ 1 means the judge tells the perturbed texts apart at p ≤ 0.05 (000 §3.3).")
    lines.append("000 publishes D only as bar charts (Figures 4-5), so there are no reference rows to print.")
    return lines


def _dual(result: Mapping[str, Any], benchmark: Benchmark) -> list[str]:
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
    lines += _table(["aspect", "texts", "unscored", "κ (global)", "CEM-ORD", "pair acc. (local)", "pairs", gap], rows)
    published = [r for r in _published("dual") if r.dataset == benchmark.dataset and r.strategy is None]
    if published:
        lines += ["", f"Published on 001's official {benchmark.dataset} benchmarks (Tables 2-3), for reference:", ""]
        judges = list(dict.fromkeys(r.judge for r in published))
        table = []
        for judge in judges:
            mine = {(r.metric, r.aspect): r.value for r in published if r.judge == judge}
            averages = [mine.get(("kappa", "average")), mine.get(("pair_accuracy", "average"))]
            table.append([f"{judge} (published)", *averages])
        lines += _table(["judge", "κ average", "pair acc. average"], table)
    return lines


def _attacks(result: Mapping[str, Any]) -> list[str]:
    summary = result["summary"]
    lines = [f"Δ = mean(original − perturbed) on the 1-5 scale ({result['scale']}).", ""]
    published = [r for r in _published("attacks") if r.judge == "GPT-3.5"]
    reference = metrics.attack_summary({(r.perturbation, r.aspect): r.value for r in published if r.perturbation})
    keys = ["mean_delta_T", "mean_abs_delta_F", "pass_rate_T", "pass_rate_F", "n_T", "n_F", "missing_T", "missing_F"]
    rows = [["this judge", *[summary[k] for k in keys]]]
    if published:
        rows.append(["GPT-3.5 (published, 002 Table 4)", *[reference[k] for k in keys]])
    lines += _table(["judge", "mean Δ on T ↑", "mean abs Δ on F ↓", "pass T", "pass F", "T", "F", "T missing",
                     "F missing"], rows)  # fmt: skip
    lines += ["", "Cells (T: a drop expected; F: none expected; x: excluded):", ""]
    cells = [[c["perturbation"], c["aspect"], c["expected"], c["delta"], c["items"], c["unscored"]]
             for c in result["cells"]]  # fmt: skip
    lines += _table(["perturbation", "aspect", "expected", "Δ", "items", "unscored pairs"], cells)
    return lines


def _prompt(result: Mapping[str, Any], benchmark: Benchmark) -> list[str]:
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
    lines += _table(["aspect", "items", f"{alpha} plain", f"{alpha} with PR", "exact match", "pairs",
                     "unscored plain", "unscored PR"], rows)  # fmt: skip
    dataset = "summeval" if benchmark.dataset == "summeval" else "usr"
    shown = ("alpha", "exact_match") if same_as_003 else ("exact_match",)
    published = [r for r in _published("prompt") if r.dataset == dataset and r.metric in shown]
    if not same_as_003:
        lines += ["", "003's Table 1 α is over three annotators and the LLM; ours is over the experts' mean and "
                  "the judge, a different statistic, so Table 1 is not printed beside it."]  # fmt: skip
    if published:
        lines += ["", "Published (003, Gemini 1 on the official data), for reference:", ""]
        lines += _table(
            ["judge", "metric", "strategy", "aspect", "value"],
            [[f"{r.judge} (published)", r.metric, r.strategy, r.aspect, r.value] for r in published],
        )
    return lines


# why a value of each benchmark's tables can be undefined ("–"): the judge's unscored texts
# (counted in the tables' "unscored" columns) or scores that do not vary
UNDEFINED_WHY = {
    "dhp": "an aspect with no scored pair has no Wilcoxon p, and a set without p has no D",
    "dual": "κ and CEM-ORD need scored texts whose scores and gold vary; pair accuracy needs a scored pair",
    "attacks": "Δ needs a scored (original, perturbed) pair; a pass rate needs a defined Δ",
    "prompt": "α needs two scored items with varying ratings; exact match needs a scored item",
}


def _undefined_note(lines: Sequence[str], why: str) -> list[str]:
    """Count the undefined cells of the tables and say why they can be undefined."""
    cells = [c.strip() for line in lines if line.startswith("| ") for c in line.strip("|").split("|")]
    count = cells.count("–")
    return ["", f"{count} cells are – (undefined): {why}; unscored texts are counted in the tables."] if count else []


def render_markdown(benchmark: Benchmark, judge: str, result: Mapping[str, Any]) -> str:
    info = benchmark.info
    lines = [
        f"# {benchmark.kind} benchmark `{benchmark.name}` — judge `{judge}`",
        "",
        f"Built from {benchmark.dataset} (sample {info.get('sample') or 'all'}, seed {benchmark.seed}); "
        f"{len(benchmark.items)} texts; perturbations made {sum((info.get('made') or {}).values())}, "
        f"rejected {sum(sum(v.values()) for v in (info.get('rejected') or {}).values())}.",
    ]
    if info.get("rejected"):
        for key, reasons in info["rejected"].items():
            lines.append(f"- rejected `{key}`: " + ", ".join(f"{r} {n}" for r, n in reasons.items()))
    if info.get("built_with"):
        lines.append(f"LLM perturbations by: `{json.dumps(info['built_with'])}`.")
    if info.get("note"):
        lines.append(f"Note: {info['note']}.")
    if result.get("missing"):
        lines.append(f"**{result['missing']} judgments missing** (a model call failed); re-run to finish them.")
    lines.append("")
    body = result["metrics"]
    if benchmark.kind == "dhp":
        lines += _dhp(body)
    elif benchmark.kind == "dual":
        lines += _dual(body, benchmark)
    elif benchmark.kind == "attacks":
        lines += _attacks(body)
    else:
        lines += _prompt(body, benchmark)
    lines += _undefined_note(lines, UNDEFINED_WHY[benchmark.kind])
    spans = result.get("spans")
    if spans:
        lines += ["", "## Error spans vs the characters the perturbations changed", ""]
        lines += _table(
            ["variant", "precision", "recall", "F1", "texts", "unscored"],
            [[v, spans[v]["precision"], spans[v]["recall"], spans[v]["f1"], spans["texts"], spans["unscored"]]
             for v in ("overlap", "token")],
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def heatmap(result: Mapping[str, Any], path: Path) -> Path:
    """The 18 × 11 Δ heat map (grey: no value; T cells outlined)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(metrics.ATTACK_PERTURBATIONS)
    cols = list(metrics.ATTACK_ASPECTS)
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
            if metrics.EXPECTED_EFFECT[name][aspect] == "T":
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


def write_report(
    benchmark: Benchmark, judge: str, result: Mapping[str, Any], out: Path, plots: bool = True
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "report.md"]
    atomic_write_text(written[0], json.dumps({"judge": judge, "benchmark": benchmark.manifest(), **result},
                                             indent=2, ensure_ascii=False, default=str) + "\n")  # fmt: skip
    atomic_write_text(written[1], render_markdown(benchmark, judge, result))
    if plots and benchmark.kind == "attacks":
        written.append(heatmap(result["metrics"], out / "attacks_heatmap.png"))
    if plots and benchmark.kind == "dhp":
        made = dhp_plot(result["metrics"], out / "dhp_discernment.png")
        if made:
            written.append(made)
    return written
