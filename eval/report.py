"""Reports of a meta-evaluation run: results.json and report.md in the thesis layout (one
table per set: aspects x coefficients plus the average; measured rows with 95% intervals,
then the published rows of Tables 5.1-5.8, labelled as published)."""

from __future__ import annotations

import json
from pathlib import Path

from spanjudge.inference.fileio import atomic_write_text

from .reference import ReferenceIndex
from .runner import AVERAGE, Cell, MetaEvalResult

SYMBOL = {"pearson": "r", "spearman": "ρ", "kendall": "τ"}
# measured judge -> the published row computed with the same metric (for "Δ published")
PUBLISHED_NAME = {
    "metric:bleu": ("BLEU", "BLEU-4"),
    "metric:rouge1": ("ROUGE-1",),
    "metric:rouge1-recall": ("ROUGE-1",),
    "metric:rouge2": ("ROUGE-2",),
    "metric:rougeL": ("ROUGE-L",),
}


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _cell_text(cell: Cell | None) -> str:
    if cell is None or cell.value is None:
        return "–"
    if cell.low is None or cell.high is None:
        return _fmt(cell.value)
    return f"{cell.value:.3f} [{cell.low:.3f}, {cell.high:.3f}]"


def published_match(
    judge: str, references: ReferenceIndex | None, dataset: str, aspect: str, coefficient: str
) -> float | None:
    if references is None:
        return None
    names = PUBLISHED_NAME.get(judge, ())
    for published in references.lookup(dataset, aspect, coefficient):
        if published.row in names:
            return published.value
    return None


def render_markdown(result: MetaEvalResult, references: ReferenceIndex | None) -> str:
    lines = [f"# Meta-evaluation: suite `{result.suite}`", ""]
    lines.append(
        "Measured rows: value [95% bootstrap interval, inputs resampled]. Rows marked *published* are copied "
        "from the thesis (Kartáč 2025, Tables 5.1-5.8); they were not measured here."
    )
    lines.append("")
    index = {(c.judge, c.dataset, c.aspect, c.coefficient): c for c in result.cells}
    for name, info in result.datasets.items():
        aspects = list(info["aspects"]) + ([AVERAGE] if len(info["aspects"]) > 1 else [])
        coefficients = info["coefficients"]
        tables = ", ".join(info["tables"]) or "none"
        lines.append(f"## {info['title']} (thesis table {tables})")
        lines.append("")
        lines.append(
            f"{info['items']} items, {info['inputs']} inputs, {info['systems']} systems; level **{info['level']}** "
            f"— {info['convention']}"
        )
        lines.append("")
        header = ["Judge"] + [f"{a} {SYMBOL[c]}" for a in aspects for c in coefficients]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for judge in result.judges:
            row = [f"**{judge}**"] + [_cell_text(index.get((judge, name, a, c))) for a in aspects for c in coefficients]
            lines.append("| " + " | ".join(row) + " |")
        if references is not None:
            for published_row in references.rows_for(name):
                values = []
                for a in aspects:
                    for c in coefficients:
                        found = [p.value for p in references.lookup(name, a, c) if p.row == published_row]
                        values.append(_fmt(found[0]) if found else "–")
                if any(v != "–" for v in values):
                    lines.append("| " + " | ".join([f"{published_row} *(published)*", *values]) + " |")
        lines.append("")
        counts = [
            f"{judge}: {c.scored}/{c.items} scored"
            + (f", {c.skipped_groups}/{c.groups} groups skipped (constant)" if c.skipped_groups else "")
            for judge in result.judges
            if (c := index.get((judge, name, info["aspects"][0], coefficients[0]))) is not None
        ]
        lines.append("Coverage (first aspect): " + "; ".join(counts))
        lines.append("")
        for judge in result.judges:
            deltas = []
            for a in aspects:
                for c in coefficients:
                    cell = index.get((judge, name, a, c))
                    ref = published_match(judge, references, name, a, c)
                    if cell is not None and cell.value is not None and ref is not None:
                        deltas.append(f"{a} {SYMBOL[c]} {cell.value:.3f} vs {ref:.3f} (Δ {cell.value - ref:+.3f})")
            if deltas:
                lines.append(f"Same metric as a published row — {judge}: " + "; ".join(deltas))
                lines.append("")
    if result.paired:
        lines.append("## Paired tests (same items, same input resamples)")
        lines.append("")
        lines.append("| A | B | Dataset | Aspect | Coef. | A | B | A−B [95% CI] | p (A ≤ B) | Items |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for p in result.paired:
            diff = "–" if p.difference is None else f"{p.difference:+.3f} [{_fmt(p.low)}, {_fmt(p.high)}]"
            p_value = "–" if p.p_value is None else f"{p.p_value:.3f}"
            lines.append(
                f"| {p.judge_a} | {p.judge_b} | {p.dataset} | {p.aspect} | {SYMBOL[p.coefficient]} | {_fmt(p.a)} | "
                f"{_fmt(p.b)} | {diff} | {p_value} | {p.items} |"
            )
        lines.append("")
    if any(result.unscored_reasons.values()):
        lines.append("## Unscored items (never given an invented score)")
        lines.append("")
        for judge, reasons in result.unscored_reasons.items():
            for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
                lines.append(f"- {judge}: {count} × {reason}")
        lines.append("")
    return "\n".join(lines)


def write_reports(result: MetaEvalResult, references: ReferenceIndex | None, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    if references is not None:
        data["published"] = {
            "source": references.tables.source,
            "note": "published values, not measured here",
            "tables": [t.model_dump() for t in references.tables.tables],
        }
    json_path, md_path = out / "results.json", out / "report.md"
    atomic_write_text(json_path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(md_path, render_markdown(result, references))
    return [json_path, md_path]
