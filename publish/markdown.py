"""Rendering a card: the Jinja templates under `configs/cards/` and the Markdown helpers they use.

The templates hold the cards' prose; card.py and dataset_card.py compute what varies (tables,
names, counts) and hand it over. Autoescape is off (the output is Markdown, not HTML) and an
undefined name is an error, so a template and its data cannot drift apart silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import jinja2

from spanjudge.core.configio import configs_dir


def slug(text: str, joiner: str = "-") -> str:
    """`text` as an identifier: lower case, each run of other characters one `joiner`."""
    return re.sub(r"[^a-z0-9]+", joiner, text.lower()).strip(joiner) or "value"


def cell(value: object) -> str:
    """A table cell: – for a missing value, 4 significant digits for a float, no pipe or newline."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def fence(text: str, language: str = "") -> str:
    """A code block that a ``` inside `text` cannot close early."""
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{language}\n{text.rstrip(chr(10))}\n{ticks}"


def code_list(names: Iterable[Any]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def category_rows(stats: Mapping[str, Any]) -> list[tuple[Any, ...]] | None:
    """The annotation stats' examples per task category (thesis Table 3.2), as table rows;
    None when the stats have none (the card then leaves the table out)."""
    per_category = stats.get("counts_per_category") or {}
    if not per_category:
        return None
    return [
        (name, c.get("datasets"), c.get("systems"), c.get("aspects"), c.get("examples"))
        for name, c in per_category.items()
        if isinstance(c, Mapping)
    ]


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(configs_dir() / "cards"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown: HTML escaping would garble the text
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(cell=cell, fence=fence, code_list=code_list)
    environment.globals.update(table=table)
    return environment


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)
