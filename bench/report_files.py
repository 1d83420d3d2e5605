"""What every benchmark writes the same way: the machine line, and its results as
`OUT.json` (the payload) and `OUT.md` (the table, also printed)."""

from __future__ import annotations

import json
import os
import platform
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
