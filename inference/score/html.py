"""A self-contained HTML page of scored outputs: error spans highlighted by severity, the
explanation on hover or keyboard focus (Tab moves from span to span), the score beside each
output. No scripts, no external files; readable at a phone's width.

Rows scored with `--probabilities` also show the expected score beside the written one, and
each span is shaded by the judge's confidence in it (faint: the judge was unsure it would write
that error; the confidence is in the hover text and the error list).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

GENERATOR = '<meta name="generator" content="spanjudge">'  # marks a page as ours: only such a page is overwritten
HEAD = f'<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">{GENERATOR}'
STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem} .meta{color:#666;font-size:.9rem}
.item{border:1px solid #ddd;border-radius:6px;padding:.8rem 1rem;margin:1rem 0}
.head{display:flex;justify-content:space-between;align-items:baseline;gap:1rem}
.score{font-weight:700;font-size:1.2rem;padding:.1rem .6rem;border-radius:4px;background:#eef;white-space:nowrap}
.unscored{background:#fee;color:#900}
.output{white-space:pre-wrap;overflow-wrap:anywhere;background:#fafafa;padding:.6rem;border-radius:4px;margin:.5rem 0}
mark{border-radius:3px;padding:0 1px}
mark[data-tip]{position:relative;cursor:help}
mark[data-tip]:focus{outline:2px solid #1a5fb4;outline-offset:1px}
mark[data-tip]:hover::after,mark[data-tip]:focus::after{content:attr(data-tip);position:absolute;left:0;top:100%;
z-index:1;width:max-content;max-width:min(26rem,80vw);margin-top:.2rem;padding:.3rem .5rem;border-radius:4px;
background:#222;color:#fff;font-size:.85rem;font-weight:400;white-space:normal}
.s1{background:#fff3b0}.s2{background:#ffe08a}.s3{background:#ffc078}.s4{background:#ff9a76}.s5{background:#ff6b6b}
.errors{font-size:.92rem;margin:.3rem 0 0 1.2rem;padding:0}
.flag{color:#a60;font-size:.85rem}
.legend mark{margin-right:.4rem;white-space:nowrap;display:inline-block;margin-bottom:.2rem}
"""


def is_our_page(path: Path) -> bool:
    """Whether the file at `path` is a page spanjudge wrote (its head carries `GENERATOR`)."""
    with path.open("rb") as handle:
        return GENERATOR.encode() in handle.read(4096)


def _highlighted(output: str, errors: Sequence[Mapping[str, Any]], item: str) -> str:
    """The output with anchored spans marked; an overlapping later span is listed, not marked.

    A mark is focusable and described by its line in the error list (`aria-describedby`); its
    explanation shows on hover and on focus from `data-tip`, drawn by CSS, never inside the text."""
    spans = sorted(
        ((number, e) for number, e in enumerate(errors, 1) if e.get("start") is not None and e.get("end") is not None),
        key=lambda pair: (pair[1]["start"], -pair[1]["end"]),
    )
    parts, cursor = [], 0
    for number, error in spans:
        start, end = int(error["start"]), int(error["end"])
        if start < cursor or end > len(output):
            continue
        parts.append(html.escape(output[cursor:start]))
        tip = f"severity {error['severity']}{_confidence(error)}: {error['explanation']}"
        parts.append(
            f'<mark class="s{int(error["severity"])}"{_shade(error)} tabindex="0" data-start="{start}" '
            f'data-end="{end}" aria-describedby="{item}-e{number}" data-tip="{html.escape(tip, quote=True)}">'
            f"{html.escape(output[start:end])}</mark>"
        )
        cursor = end
    parts.append(html.escape(output[cursor:]))
    return "".join(parts)


def _confidence(error: Mapping[str, Any]) -> str:
    confidence = error.get("confidence")
    return "" if confidence is None else f", confidence {float(confidence):.2f}"


def _shade(error: Mapping[str, Any]) -> str:
    """A span the judge was unsure of is drawn fainter (opacity 0.35 at confidence 0, 1 at 1)."""
    confidence = error.get("confidence")
    return "" if confidence is None else f' style="opacity:{0.35 + 0.65 * float(confidence):.2f}"'


def _error_list(errors: Sequence[Mapping[str, Any]], item: str) -> str:
    items = []
    for number, error in enumerate(errors, 1):
        location = error.get("location")
        where = "omission (no location)" if location is None else f"“{html.escape(location)}”"
        if location is not None and error.get("start") is None:
            where += ' <span class="flag">(not found in the output)</span>'
        items.append(
            f'<li id="{item}-e{number}"><mark class="s{int(error["severity"])}"{_shade(error)}>'
            f"severity {error['severity']}{_confidence(error)}</mark> {where}: "
            f"{html.escape(error['explanation'])}</li>"
        )
    return f'<ol class="errors">{"".join(items)}</ol>' if items else "<p>No errors reported.</p>"


def render_items(rows: Sequence[Mapping[str, Any]], prefix: str = "item") -> str:
    """The result rows as HTML sections (no page around them), for pages that embed them; `prefix`
    keeps the element ids of two embedded lists apart."""
    sections = []
    for position, row in enumerate(rows, 1):
        item = f"{prefix}{position}"  # row ids may hold any character: element ids are positions
        evaluation = row["evaluation"]
        score = evaluation["score"]
        expected = (row.get("probabilities") or {}).get("expected_score")
        merged = (row.get("consensus") or {}).get("score")
        written = f"{score:g}" if score is not None else ""
        if expected is not None:
            written += f" (expected {expected:.1f})"
        if merged is not None:
            written += f" (consensus {merged:.1f})"
        badge = (
            f'<span class="score">{written}</span>'
            if score is not None
            else f'<span class="score unscored" title="{html.escape(row.get("unscored_reason") or "", quote=True)}">'
            "unscored</span>"
        )
        flags = []
        if row.get("truncated"):
            flags.append(f'<p class="flag">{html.escape(row["truncated"])}</p>')
        if score is None and row.get("unscored_reason"):
            flags.append(f'<p class="flag">unscored: {html.escape(row["unscored_reason"])}</p>')
        sections.append(
            f'<section class="item" id="{html.escape(str(row["id"]), quote=True)}">'
            f'<div class="head"><span>{_heading(row)}</span>{badge}</div>'
            f'<div class="output">{_highlighted(row["output"], evaluation["errors"], item)}</div>'
            f"{_error_list(evaluation['errors'], item)}{''.join(flags)}</section>"
        )
    return "".join(sections)


def _heading(row: Mapping[str, Any]) -> str:
    """The item's id, task and aspect, as far as the row has them (rows from other tools may lack the last two)."""
    parts = [row["id"], row.get("task"), row.get("aspect")]
    return " · ".join(html.escape(str(part)) for part in parts if part is not None and str(part))


def legend() -> str:
    return '<p class="legend">' + "".join(f'<mark class="s{s}">severity {s}</mark>' for s in range(1, 6)) + "</p>"


def render_html(rows: Sequence[Mapping[str, Any]], title: str = "spanjudge evaluations") -> str:
    """One page for result rows as `spanjudge score` writes them."""
    scored = [r for r in rows if r["evaluation"]["score"] is not None]
    mean = sum(r["evaluation"]["score"] for r in scored) / len(scored) if scored else None
    summary = f"{len(rows)} outputs, {len(scored)} scored" + (f", mean score {mean:.1f}" if mean is not None else "")
    return (
        f'<!doctype html><html lang="en"><head>{HEAD}<title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f'<p class="meta">{summary}. Hover or Tab to a highlighted span for its explanation.</p>'
        f"{legend()}{render_items(rows)}</body></html>\n"
    )
