"""Reports of a meta-evaluation run: results.json and report.md in the thesis layout (one
table per set: aspects x coefficients plus the average; measured rows with 95% intervals,
then the published rows of Tables 5.1-5.8, labelled as published)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from spanjudge.core.fileio import atomic_write_text
from spanjudge.eval.correlation.reference import ReferenceIndex
from spanjudge.eval.correlation.runner import AVERAGE, EMPTY, Cell, MetaEvalResult

SYMBOL = {"pearson": "r", "spearman": "ρ", "kendall": "τ"}
NOT_PUBLISHED = "not published"
EMPTY_TEXT = {**EMPTY, NOT_PUBLISHED: "the published table has no value here", "not run": "no cell was computed"}


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _empty(reason: str) -> str:
    return f"– ({reason})"


def _cell_text(cell: Cell | None) -> str:
    if cell is None:
        return _empty("not run")
    if cell.value is None:
        return _empty(cell.empty or "constant")
    if cell.low is None or cell.high is None:
        return _fmt(cell.value)
    return f"{cell.value:.3f} [{cell.low:.3f}, {cell.high:.3f}]"


def published_match(
    judge: str, references: ReferenceIndex | None, dataset: str, aspect: str, coefficient: str
) -> float | None:
    """The published value computed the way `judge` computes (the table declares it), else None."""
    if references is None:
        return None
    found = references.same_metric(judge, dataset, aspect, coefficient)
    return None if found is None else found.value


def _empty_legend(cells: list[str]) -> str | None:
    """'Empty cells: 3 × constant (...), 1 × unscored (...)' for the "– (reason)" cells given."""
    counts = Counter(c[3:-1] for c in cells if c.startswith("– ("))
    if not counts:
        return None
    parts = [f"{n} × {reason} ({EMPTY_TEXT.get(reason, reason)})" for reason, n in counts.most_common()]
    return "Empty cells: " + "; ".join(parts) + "."


def _published_rows(
    references: ReferenceIndex, name: str, aspects: list[str], coefficients: list[str]
) -> list[list[str]]:
    rows = []
    for published_row in references.rows_for(name):
        values = []
        for a in aspects:
            for c in coefficients:
                found = [p.value for p in references.lookup(name, a, c) if p.row == published_row]
                values.append(_fmt(found[0]) if found else _empty(NOT_PUBLISHED))
        if any(not v.startswith("–") for v in values):
            rows.append([f"{published_row} *(published)*", *values])
    return rows


def _dataset_section(
    result: MetaEvalResult, references: ReferenceIndex | None, name: str, info: dict[str, Any], index: dict[Any, Cell]
) -> list[str]:
    aspects = list(info["aspects"]) + ([AVERAGE] if len(info["aspects"]) > 1 else [])
    coefficients = info["coefficients"]
    tables = ", ".join(info["tables"]) or "none"
    lines = [f"## {info['title']} (thesis table {tables})", ""]
    lines.append(
        f"{info['items']} items, {info['inputs']} inputs, {info['systems']} systems; level **{info['level']}** "
        f"— {info['convention']}"
    )
    if info.get("sample"):
        lines.append(f"Sample: {info['sample']}.")
    lines.append("")
    header = ["Judge"] + [f"{a} {SYMBOL[c]}" for a in aspects for c in coefficients]
    rows = [
        [f"**{judge}**"] + [_cell_text(index.get((judge, name, a, c))) for a in aspects for c in coefficients]
        for judge in result.judges
    ]
    if references is not None:
        rows += _published_rows(references, name, aspects, coefficients)
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines.append("")
    legend = _empty_legend([cell for row in rows for cell in row[1:]])
    if legend:
        lines += [legend, ""]
    if references is not None:
        lines += [f"Published rows: {note}" for note in references.copied_notes(name)]
        if references.copied_notes(name):
            lines.append("")
    counts = [
        f"{judge}: {c.scored}/{c.items} scored"
        + (f", {c.skipped_groups}/{c.groups} groups skipped (constant)" if c.skipped_groups else "")
        for judge in result.judges
        if (c := index.get((judge, name, info["aspects"][0], coefficients[0]))) is not None
    ]
    lines += ["Coverage (first aspect): " + "; ".join(counts), ""]
    for judge in result.judges:
        deltas = []
        for a in aspects:
            for c in coefficients:
                cell = index.get((judge, name, a, c))
                ref = published_match(judge, references, name, a, c)
                if cell is not None and cell.value is not None and ref is not None:
                    deltas.append(f"{a} {SYMBOL[c]} {cell.value:.3f} vs {ref:.3f} (Δ {cell.value - ref:+.3f})")
        if deltas:
            lines += [f"Same metric as a published row (the table says how it was computed) — {judge}: "
                      + "; ".join(deltas), ""]  # fmt: skip
    return lines


def _paired_section(result: MetaEvalResult) -> list[str]:
    lines = ["## Paired tests (same items, same input resamples)", ""]
    lines.append("| A | B | Dataset | Aspect | Coef. | A | B | A−B [95% CI] | p (A ≤ B) | Items |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    shown: list[str] = []
    for p in result.paired:
        # on the items both judges scored: fewer than two, or constant scores, leave no coefficient
        why = _empty("too few" if p.items < 2 else "constant")
        a, b = (why if v is None else _fmt(v) for v in (p.a, p.b))
        diff = why if p.difference is None else f"{p.difference:+.3f} [{_fmt(p.low)}, {_fmt(p.high)}]"
        p_value = (why if p.difference is None else _empty("constant")) if p.p_value is None else f"{p.p_value:.3f}"
        shown += [a, b, diff, p_value]
        lines.append(
            f"| {p.judge_a} | {p.judge_b} | {p.dataset} | {p.aspect} | {SYMBOL[p.coefficient]} | {a} | {b} | "
            f"{diff} | {p_value} | {p.items} |"
        )
    lines.append("")
    legend = _empty_legend(shown)
    return lines + ([legend, ""] if legend else [])


def render_markdown(result: MetaEvalResult, references: ReferenceIndex | None) -> str:
    lines = [f"# Meta-evaluation: suite `{result.suite}`", ""]
    lines.append(
        "Measured rows: value [95% bootstrap interval, inputs resampled]. Rows marked *published* are copied "
        "from the thesis (Kartáč 2025, Tables 5.1-5.8); they were not measured here. A cell without a value "
        "says why: – (reason), counted under each table."
    )
    lines.append("")
    index = {(c.judge, c.dataset, c.aspect, c.coefficient): c for c in result.cells}
    for name, info in result.datasets.items():
        lines += _dataset_section(result, references, name, info, index)
    if result.paired:
        lines += _paired_section(result)
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
