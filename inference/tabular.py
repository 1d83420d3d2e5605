"""Rows of JSONL, JSON-list and CSV files, each with where it came from ("file:line").

Every stage reads user data through these, so a malformed line gets the same one-line
message, naming the file and the line, wherever it is read.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError

Located = tuple[str, dict[str, Any]]  # (where, row)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def iter_jsonl(path: Path) -> Iterator[Located]:
    """One object per non-blank line."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            yield where, _object(value, where)


def iter_json_list(path: Path) -> Iterator[Located]:
    """The objects of a file holding one JSON list."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise InputError(f"{path}: expected a JSON list of objects")
    for index, item in enumerate(value):
        yield f"{path}[{index}]", _object(item, f"{path}[{index}]")


def iter_csv(path: Path) -> Iterator[Located]:
    """Rows by header; line numbers count the header as line 1."""
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=2):
            yield f"{path}:{number}", dict(row)
