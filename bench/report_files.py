"""What every benchmark writes the same way: the machine line, and its results as
`OUT.json` (the payload) and `OUT.md` (the table, also printed)."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any


def machine(cores: int | None = None) -> str:
    """The machine a benchmark ran on, as its reports name it."""
    return f"{platform.processor() or platform.machine()}, {cores or os.cpu_count()} cores, no GPU"


def write_report(out: Path, payload: dict[str, Any], lines: list[str]) -> None:
    """OUT.json and OUT.md (the lines), and the lines printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def merge_labelled_row(
    out: Path, row: dict[str, Any], markdown: Callable[[str, list[dict[str, Any]]], list[str]]
) -> None:
    """`row` into OUT.json's rows and OUT.md, replacing the row of the same label (a rerun replaces its label)."""
    saved = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").is_file() else {}
    rows = [r for r in saved.get("rows", []) if r["label"] != row["label"]] + [row]
    write_report(out, {"machine": machine(), "rows": rows}, markdown(machine(), rows))
