"""Benchmark reports: results.json, report.md and PNG plots, with the seeds' published numbers
beside ours as labelled reference rows (they were measured on the official data, not ours).
The frame is shared here; each kind writes its own tables and plots (kinds/<kind>.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.fileio import atomic_write_text
from spanjudge.eval.perturb.benchmark import Benchmark
from spanjudge.eval.perturb.kind import get_kind
from spanjudge.eval.perturb.published import PublishedRow, load_published, rows_for


def fmt(value: object) -> str:
    return "–" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return lines


def published_rows(kind: str) -> list[PublishedRow]:
    return rows_for(load_published(), kind)


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
    kind = get_kind(benchmark.kind)
    lines += kind.report(result["metrics"], benchmark)
    lines += _undefined_note(lines, kind.undefined_why)
    spans = result.get("spans")
    if spans:
        lines += ["", "## Error spans vs the characters the perturbations changed", ""]
        lines += table(
            ["variant", "precision", "recall", "F1", "texts", "unscored"],
            [[v, spans[v]["precision"], spans[v]["recall"], spans[v]["f1"], spans["texts"], spans["unscored"]]
             for v in ("overlap", "token")],
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(
    benchmark: Benchmark, judge: str, result: Mapping[str, Any], out: Path, plots: bool = True
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "report.md"]
    atomic_write_text(written[0], json.dumps({"judge": judge, "benchmark": benchmark.manifest(), **result},
                                             indent=2, ensure_ascii=False, default=str) + "\n")  # fmt: skip
    atomic_write_text(written[1], render_markdown(benchmark, judge, result))
    if plots:
        written += get_kind(benchmark.kind).plots(result["metrics"], out)
    return written
