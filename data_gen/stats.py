"""Dataset statistics in the shapes of the thesis: counts (Table 3.2), outlier rates per
annotator and task category (Table 3.3), parse-failure rates, and the score histogram
(Fig. 3.1)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.fileio import atomic_write_json, atomic_write_text

from .records import Record


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _field_limit_counts(groups: Sequence[Sequence[Record]]) -> dict[str, dict[str, int]]:
    """Per model: replies rejected for a field over `field_limits`, and fields cut to it."""
    rejected: Counter[str] = Counter()
    capped: Counter[str] = Counter()
    for group in groups:
        for r in group:
            provenance = r["provenance"]
            for entry in [*provenance["annotators"], provenance.get("supervisor") or {}]:
                if "rejected_too_long" in entry:  # imported records carry no model replies
                    rejected[entry["name"]] += entry["rejected_too_long"]
                    capped[entry["name"]] += entry["capped_fields"]
    return {"rejected_replies": dict(sorted(rejected.items())), "capped_fields": dict(sorted(capped.items()))}


def compute_stats(records: Sequence[Record], annotators: Sequence[str], unscored: Sequence[Record]) -> dict[str, Any]:
    categories = sorted({r["task_type"] for r in records})
    counts = {}
    for category in categories:
        rows = [r for r in records if r["task_type"] == category]
        counts[category] = {
            "datasets": len({r["dataset"] for r in rows}),
            "systems": len({(r["dataset"], r["system"]) for r in rows}),
            "aspects": len({(r["task_id"], r["aspect_name"]) for r in rows}),
            "examples": len(rows),
        }
    rated: dict[str, Counter[str]] = defaultdict(Counter)
    dropped: dict[str, Counter[str]] = defaultdict(Counter)
    asked: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for scored, group in ((True, records), (False, unscored)):
        for r in group:
            for a in r["provenance"]["annotators"]:
                asked[a["name"]] += 1
                if a["parse_failure"] is not None:
                    failed[a["name"]] += 1
                elif scored:
                    rated[a["name"]][r["task_type"]] += 1
                    dropped[a["name"]][r["task_type"]] += int(a["dropped_outlier"])
    return {
        "examples": len(records),
        "unscored": len(unscored),
        "counts_per_category": counts,
        "counts_per_dataset": dict(sorted(Counter(r["dataset"] for r in records).items())),
        "counts_per_system": dict(sorted(Counter(f"{r['dataset']}/{r['system']}" for r in records).items())),
        "counts_per_aspect": dict(sorted(Counter(f"{r['task_id']}/{r['aspect_name']}" for r in records).items())),
        "outlier_rate": {name: {c: _rate(dropped[name][c], rated[name][c]) for c in categories} for name in annotators},
        "parse_failure_rate": {name: _rate(failed[name], asked[name]) for name in annotators},
        "field_limits": _field_limit_counts((records, unscored)),
        "score_histogram": {
            str(s): n for s, n in sorted(Counter(int(r["evaluation"]["score"]) for r in records).items())
        },
    }


def stats_markdown(stats: dict[str, Any]) -> str:
    lines = [f"# Annotation statistics\n\n{stats['examples']} examples, {stats['unscored']} unscored.\n"]
    lines += [
        "## Counts (thesis Table 3.2)\n",
        "| task | datasets | systems | aspects | examples |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {c} | {v['datasets']} | {v['systems']} | {v['aspects']} | {v['examples']} |"
        for c, v in stats["counts_per_category"].items()
    ]
    categories = list(stats["counts_per_category"])
    lines += ["", "## Outlier rate per annotator (thesis Table 3.3)\n", "| model | " + " | ".join(categories) + " |"]
    lines += ["|---|" + "---|" * len(categories)]
    for name, rates in stats["outlier_rate"].items():
        cells = ["-" if rates.get(c) is None else f"{100 * rates[c]:.2f}%" for c in categories]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Parse-failure rate per annotator\n", "| model | rate |", "|---|---|"]
    lines += [
        f"| {name} | {'-' if rate is None else f'{100 * rate:.2f}%'} |"
        for name, rate in stats["parse_failure_rate"].items()
    ]
    limits = stats.get("field_limits")
    if limits and any((*limits["rejected_replies"].values(), *limits["capped_fields"].values())):
        lines += ["", "## Field limits (`field_limits` of the ensemble)\n", "| model | replies rejected | fields cut |"]
        lines += ["|---|---|---|"]
        names = sorted({*limits["rejected_replies"], *limits["capped_fields"]})
        lines += [
            f"| {n} | {limits['rejected_replies'].get(n, 0)} | {limits['capped_fields'].get(n, 0)} |" for n in names
        ]
    if "import" in stats:
        lines += ["", *_import_markdown(stats["import"])]
    if stats.get("decontamination"):
        lines += ["", *_decontamination_markdown(stats["decontamination"])]
    return "\n".join(lines) + "\n"


def _import_markdown(info: dict[str, Any]) -> list[str]:
    """What `spanjudge import` read, and the declared rule that made its scores."""
    lines = [
        f"## Teacher import `{info['name']}` ({info['format']})\n",
        f"{info['outputs']} outputs of {info['inputs']} inputs; {info['spans']} spans "
        f"({info['relocated']} relocated to their text, {info['dropped']} dropped, "
        f"{info['capped']} outputs capped at the 8 most severe errors).\n",
    ]
    if info.get("rule"):
        lines.append(f"Rule: {info['rule']}.\n")
    if info["spans_per_type"]:
        lines += ["| span type | spans |", "|---|---|"]
        lines += [f"| {t} | {n} |" for t, n in info["spans_per_type"].items()]
    return lines


def _decontamination_markdown(info: dict[str, Any]) -> list[str]:
    """Inputs that occur in the meta-evaluation sets: excluded, or kept with --allow-overlap."""
    lines = ["## Overlap with the meta-evaluation sets\n"]
    if info["allow_overlap"]:
        lines.append(f"**Warning:** {info['warning']}.\n")
    lines.append(
        f"Against {info['against']} ({info['meta_eval_inputs']} inputs): {info['overlapping_inputs']} inputs overlap; "
        f"{info['excluded_examples']} examples excluded (listed in run.json). Rule: {info['rule']}.\n"
    )
    return lines


def write_histogram(path: Path, histogram: dict[str, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    bins = list(range(0, 101, 5))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(bins, [histogram.get(str(b), 0) for b in bins], width=4, color="#3b6ea8")
    ax.set_xlabel("overall score")
    ax.set_ylabel("examples")
    ax.set_title("Distribution of overall scores (cf. thesis Fig. 3.1)")
    ax.set_xticks(bins[::2])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def write_stats(out_dir: Path, stats: dict[str, Any]) -> None:
    atomic_write_json(out_dir / "stats.json", stats)
    atomic_write_text(out_dir / "stats.md", stats_markdown(stats))
    write_histogram(out_dir / "score_histogram.png", stats["score_histogram"])
