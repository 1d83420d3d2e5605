"""The demo's one HTML report: what ran and how long each step took, the ensemble's and the
judge's error spans highlighted in their outputs, the training loss, the meta-evaluation
tables and plots, the perturbation benchmark's section and the staged publish files.

It reads only the demo's output folder (plus the step records), so it is rebuilt from disk
on every run; plots are embedded as base64 PNG, so the page is one file that opens anywhere.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanjudge.core.artifacts import read_adapter_metadata
from spanjudge.core.jsonl import read_jsonl
from spanjudge.inference.score.html import HEAD, STYLE, legend, render_items

from .layout import DemoLayout

SHOWN_RECORDS = 8  # annotated records shown with their spans (all are in annotate/train.jsonl)

_EXTRA_STYLE = """
body{max-width:72rem} h2{margin-top:2.2rem;border-bottom:2px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.88rem} th,td{border:1px solid #ccc;padding:.2rem .5rem}
.wide{overflow-x:auto}
th{background:#f3f3f3;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
img.plot{max-width:100%;border:1px solid #eee;margin:.4rem .4rem .4rem 0}
.status-done{color:#070}.status-failed{color:#a00}.status-not-built{color:#a60}
.note{background:#fff8e5;border-left:4px solid #e0b000;padding:.5rem .8rem}
code{background:#f4f4f4;padding:0 .2rem;border-radius:3px;overflow-wrap:anywhere}
"""


@dataclass
class StepRecord:
    name: str
    title: str
    status: str  # done | not built
    seconds: float
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Small HTML pieces


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i in numeric else ''}>{cell}</td>" for i, cell in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="plot" alt="{html.escape(alt, quote=True)}" src="data:image/png;base64,{data}">'


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path, missing_ok=True)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _inline(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    out = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def markdown_html(text: str) -> str:
    """The subset of markdown eval/correlation/report.py writes: headings, pipe tables, lists, paragraphs."""
    parts: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        if not line:
            index += 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 2, 6)  # under the report's own h2
            parts.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
            index += 1
        elif line.startswith("|"):
            block = []
            while index < len(lines) and lines[index].startswith("|"):
                block.append([cell.strip() for cell in lines[index].strip().strip("|").split("|")])
                index += 1
            body = [row for row in block[1:] if not all(set(cell) <= set("-: ") for cell in row)]
            head = "".join(f"<th>{_inline(cell)}</th>" for cell in block[0])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in body)
            parts.append(f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>')
        elif line.startswith("- "):
            items = []
            while index < len(lines) and lines[index].startswith("- "):
                items.append(f"<li>{_inline(lines[index][2:])}</li>")
                index += 1
            parts.append(f"<ul>{''.join(items)}</ul>")
        else:
            paragraph = []
            while index < len(lines) and lines[index].strip() and not lines[index].startswith(("#", "|", "- ")):
                paragraph.append(lines[index].strip())
                index += 1
            parts.append(f"<p>{_inline(' '.join(paragraph))}</p>")
    return "".join(parts)


def loss_curve_png(history: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Training (and evaluation) loss by step, from log_history.jsonl."""
    train = [(h["step"], h["loss"]) for h in history if "loss" in h and "step" in h]
    evals = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h and "step" in h]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    if train:
        ax.plot(*zip(*train, strict=True), marker="o", markersize=3, label="train loss")
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="s", linestyle="--", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (completion tokens)")
    ax.set_title("LoRA training loss", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------
# Sections


def _header(run: Mapping[str, Any], records: Sequence[StepRecord], earlier: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            str(i + 1),
            f"<strong>{_e(r.name)}</strong><br><small>{_e(r.title)}</small>",
            f'<span class="status-{r.status.replace(" ", "-")}">{_e(r.status)}</span>',
            f"{r.seconds:.1f}",
            _inline(r.summary),
        ]
        for i, r in enumerate(records)
    ]
    runs = ""
    if earlier:
        previous = [
            [_e(e.get("finished", "")), f"{e.get('seconds', 0):.1f}", _e(e.get("config_name", ""))] for e in earlier
        ]
        previous.append([f"{_e(run.get('finished', ''))} (this run)", f"{run.get('seconds', 0):.1f}", ""])
        runs = "<h3>Runs in this folder</h3>" + _table(["finished", "seconds", "config"], previous, numeric=[1])
    return (
        f'<p class="meta">config <code>{_e(run.get("config", ""))}</code> ({_e(run.get("config_name", ""))}) · '
        f"finished {_e(run.get('finished', ''))} · {_e(run.get('machine', ''))} · "
        f"<strong>{run.get('seconds', 0):.1f} s</strong> in all</p>"
        + _table(["#", "step", "status", "seconds", "what happened"], rows, numeric=[3])
        + runs
    )


def _record_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """An annotate record as a `spanjudge score` result row, for the span renderer."""
    return {
        "id": record["id"],
        "task": record.get("task_id", record.get("dataset", "")),
        "aspect": record.get("aspect_name", ""),
        "output": next(iter(record["outputs"].values())),
        "evaluation": record.get("evaluation") or {"errors": [], "score": None},
        "unscored_reason": record.get("unscored_reason"),
    }


def _reasons(rows: Sequence[Mapping[str, Any]]) -> str:
    counts = Counter(str(r.get("unscored_reason") or "").split(" (")[0] for r in rows if r.get("unscored_reason"))
    if not counts:
        return ""
    items = "".join(f"<li>{count} × {_e(reason)}</li>" for reason, count in counts.most_common())
    return f"<p>Unscored, with the reason (never given an invented score):</p><ul>{items}</ul>"


def _annotate_section(layout: DemoLayout) -> str:
    run = _json(layout.annotate / "run.json")
    if not run:
        return "<p>Not run.</p>"
    records = _jsonl(layout.annotate / "train.jsonl") + _jsonl(layout.annotate / "validation.jsonl")
    unscored = _jsonl(layout.annotate / "unscored.jsonl")
    with_spans = sorted(
        records, key=lambda r: -sum(e.get("start") is not None for e in r.get("evaluation", {}).get("errors", []))
    )
    calls = ", ".join(f"{k} {v}" for k, v in run.get("model_calls", {}).items())
    parts = [
        _table(
            ["requests", "records", "train", "validation", "unscored", "model calls", "cache hits"],
            [
                [
                    run.get("requests"),
                    run.get("records"),
                    run.get("train"),
                    run.get("validation"),
                    run.get("unscored"),
                    _e(calls),
                    sum(run.get("cache_hits", {}).values()),
                ]
            ],
            numeric=[0, 1, 2, 3, 4, 6],
        ),
        _reasons(unscored),
    ]
    histogram = layout.annotate / "score_histogram.png"
    if histogram.is_file():
        parts.append(_img(histogram.read_bytes(), "ensemble score histogram"))
    parts.append(
        f"<h3>What the ensemble marked (supervisor-merged spans, {min(len(records), SHOWN_RECORDS)} of "
        f"{len(records)} records)</h3>{legend()}"
    )
    parts.append(render_items([_record_row(r) for r in with_spans[:SHOWN_RECORDS]], prefix="annotated"))
    return "".join(parts)


def _train_section(layout: DemoLayout) -> str:
    metrics = _json(layout.train / "metrics.json")
    if not metrics:
        return "<p>Not run.</p>"
    keys = ("global_step", "train_examples", "train_loss", "eval_loss", "tokens_per_second", "world_size")
    shown = [
        [_e(k), _e(f"{metrics[k]:.4g}" if isinstance(metrics[k], float) else metrics[k])] for k in keys if k in metrics
    ]
    metadata = read_adapter_metadata(layout.adapter)
    parts = [
        f"<p>Base model <code>{_e((metadata.base_model if metadata else None) or '?')}</code>; adapter in "
        f"<code>{_e(layout.adapter)}</code>.</p>",
        _table(["metric", "value"], shown, numeric=[1]),
    ]
    png = loss_curve_png(_jsonl(layout.train / "log_history.jsonl"))
    if png:
        parts.append(_img(png, "training loss curve"))
    return "".join(parts)


def _score_section(layout: DemoLayout) -> str:
    rows = _jsonl(layout.scores)
    if not rows:
        return "<p>Not run.</p>"
    scored = [r for r in rows if r["evaluation"]["score"] is not None]
    spans = sum(1 for r in scored for e in r["evaluation"]["errors"] if e.get("start") is not None)
    base = _jsonl(layout.base_scores)
    base_part = (
        "<h3>The untrained base, held to the contract's grammar</h3>"
        f"<p>{sum(r['evaluation']['score'] is not None for r in base)}/{len(base)} scored.</p>"
        + _reasons(base)
        + render_items(base, prefix="base")
        if base
        else ""
    )
    return (
        f"<p>{len(rows)} held-out outputs (never trained on), {len(scored)} scored, {spans} error spans anchored "
        f"to their output. Hover or Tab to a highlighted span for its explanation; a fainter span is one the judge was "
        f"less sure it would write (its confidence).</p>{legend()}"
        + _expected_values(scored)
        + _reasons(rows)
        + render_items(rows, prefix="judge")
        + base_part
    )


def _expected_values(rows: Sequence[Mapping[str, Any]]) -> str:
    """The trained judge's probability-aware values beside its written ones, one row per output."""
    read = [r for r in rows if r.get("probabilities")]
    if not read:
        return ""
    table = [
        [
            _e(r["id"]),
            f"{r['evaluation']['score']:g}",
            f"{r['probabilities']['expected_score']:.1f}",
            len(r["evaluation"]["errors"]),
            f"{r['probabilities']['expected_errors']:.2f}",
            f"{r['probabilities']['p_no_error']:.2f}",
            ", ".join(f"{e['confidence']:.2f}" for e in r["evaluation"]["errors"] if e.get("confidence") is not None)
            or "–",
        ]
        for r in read
    ]
    header = ["output", "written score", "expected score", "written errors", "expected errors", "P(no error)",
              "confidence of each error"]  # fmt: skip
    return (
        "<p>What the judge wrote, and what its own probabilities expect (read along the written evaluation: "
        "the score averaged over the contract's 0-100 values, the number of errors from its continue/stop "
        "probability at each error decision):</p>" + _table(header, table, numeric=[1, 2, 3, 4, 5])
    )


def _meta_eval_section(layout: DemoLayout) -> str:
    report = layout.meta_eval / "report.md"
    if not report.is_file():
        return "<p>Not run.</p>"
    plots = sorted(layout.meta_eval.glob("bars_*.png")) + sorted(layout.meta_eval.glob("scatter_*.png"))
    images = "".join(_img(p.read_bytes(), p.stem) for p in plots)
    return (
        '<p class="note">Samples of the human-correlation sets: with this few items the intervals are wide and the '
        "numbers say nothing about a real judge; the published rows are the thesis's, for comparison.</p>"
        + markdown_html(report.read_text(encoding="utf-8"))
        + f"<h3>Plots</h3>{images}"
    )


def _perturbation_section(layout: DemoLayout, records: Sequence[StepRecord]) -> str:
    step = next((r for r in records if r.name == "perturbation"), None)
    report = layout.perturbation / "report.md"
    if report.is_file():
        plots = sorted(layout.perturbation.glob("*/*.png"))
        images = "".join(_img(p.read_bytes(), p.stem.replace("_", " ")) for p in plots)
        return markdown_html(report.read_text(encoding="utf-8")) + images
    if step is None:
        return "<p>Not run.</p>"
    return f'<p class="note">{_inline(step.summary)}.</p>'


def _compare_section(records: Sequence[StepRecord]) -> str:
    """What training changed: every step's base-vs-trained rows, on the same items."""
    rows = [(r.name, row) for r in records for row in r.details.get("compare", [])]
    if not rows:
        return "<p>Not run.</p>"
    teacher = any("teacher" in row for _, row in rows)
    header = ["step", "items", "measure", "untrained base", "trained judge"] + (["teacher"] if teacher else [])
    body = [
        [_e(step), _e(row["what"]), _e(row["measure"]), _e(row.get("base") or "not run"), _e(row["trained"])]
        + ([_e(row.get("teacher") or "")] if teacher else [])
        for step, row in rows
    ]
    return (
        "<p>The same items, the same prompt and decoding, before and after training. A reply that does not "
        "follow the output contract is unscored (never given a score), so the parse rate is the first thing "
        "training must fix; correlations are defined only where enough items were scored.</p>" + _table(header, body)
    )


def _teacher_section(layout: DemoLayout) -> str:
    stats = layout.teacher / "stats.md"
    if not stats.is_file():
        return "<p>Not run.</p>"
    return (
        "<p>Training records read from existing annotations (<code>spanjudge import</code>, no model call): a strong "
        "teacher's error spans, turned into severities and a score by the rule the import config declares.</p>"
        + markdown_html(stats.read_text(encoding="utf-8"))
    )


def _spans_section(layout: DemoLayout) -> str:
    path = layout.spans / "agreement.json"
    if not path.is_file():
        return "<p>Not run.</p>"
    rows = json.loads(path.read_text(encoding="utf-8"))

    def cell(row: Mapping[str, Any], key: str) -> str:
        value = row.get(key)
        return "–" if value is None else f"{value:.3f}"

    body = [
        [_e(name), f"{r['scored']}/{r['n_outputs']}"]
        + [cell(r, k) for k in ("overlap_f1", "token_f1", "count_pearson", "token_pearson")]
        for name, r in rows.items()
    ]
    return (
        "<p>Held-out quintd-1 outputs (inputs never trained on), scored against the crowd workers' spans. "
        "Agreement as in the quintd-1 paper: Pearson r of per-output error counts and of per-token error labels "
        "(– where undefined: nothing scored, or constant counts).</p>"
        + _table(["judge", "scored", "overlap F1", "token F1", "count r", "token r"], body, numeric=[1, 2, 3, 4, 5])
    )


def _publish_section(layout: DemoLayout) -> str:
    if not layout.publish.is_dir():
        return "<p>Not run.</p>"
    files = sorted(p for p in layout.publish.iterdir() if p.is_file())
    rows = [[f'<a href="publish/{_e(p.name)}">{_e(p.name)}</a>', f"{p.stat().st_size:,}"] for p in files]
    return (
        f"<p>Staged in <code>{_e(layout.publish)}</code>: exactly what <code>spanjudge publish</code> would upload "
        "(allow-listed; nothing was uploaded). The model card is <code>README.md</code>.</p>"
        + _table(["file", "bytes"], rows, numeric=[1])
    )


def render_report(
    layout: DemoLayout,
    records: Sequence[StepRecord],
    run: Mapping[str, Any],
    earlier: Sequence[Mapping[str, Any]] = (),
) -> str:
    sections = [
        ("Steps and timings", _header(run, records, earlier)),
        ("What training changed: the untrained base beside the trained judge", _compare_section(records)),
        ("1. Ensemble annotation", _annotate_section(layout)),
        ("2. Teacher data from files", _teacher_section(layout)),
        ("3. Training the judge", _train_section(layout)),
        ("4. Held-out outputs scored by the judge", _score_section(layout)),
        ("5. Error spans against human annotators", _spans_section(layout)),
        ("6. Meta-evaluation against human judgments", _meta_eval_section(layout)),
        ("7. Perturbation benchmark", _perturbation_section(layout, records)),
        ("8. Publish dry run", _publish_section(layout)),
    ]
    body = "".join(f'<h2 id="{_slug(title)}">{_e(title)}</h2>{content}' for title, content in sections)
    return (
        f'<!doctype html><html lang="en"><head>{HEAD}<title>spanjudge demo report</title>'
        f"<style>{STYLE}{_EXTRA_STYLE}</style></head><body><h1>spanjudge demo report</h1>{body}</body></html>\n"
    )


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
