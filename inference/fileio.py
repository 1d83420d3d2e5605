"""Atomic writes: a killed job never leaves a half-written file behind.

Every stage writes its outputs through these helpers: the content goes to a temporary
file in the target folder and is renamed over the target only when complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as tmp:
        tmp.write(text)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, path)


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[Any]) -> int:
    """Write one JSON object per line; returns the number of rows."""
    lines = [json.dumps(row, ensure_ascii=False, default=str) for row in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


@contextlib.contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Yield a scratch folder that replaces `path` only if the block finishes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        yield scratch
        if path.exists():
            shutil.rmtree(path)
        os.replace(scratch, path)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
