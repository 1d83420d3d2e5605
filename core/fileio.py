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


# The marker file every folder written by `atomic_directory` carries: its text names the kind of
# output (an export, a dry run, a dataset). Only such a folder of the same kind, an empty one or
# none at all is ever replaced: a user's folder given as --out by mistake is refused, not wiped.
OUTPUT_MARKER = ".spanjudge-output"


def _replaceable(path: Path, kind: str, recognised_by: tuple[str, ...]) -> bool:
    if path.is_symlink() or not path.is_dir():
        return False
    if not any(path.iterdir()):
        return True
    marker = path / OUTPUT_MARKER
    if marker.is_file() and not marker.is_symlink():
        return marker.read_text(encoding="utf-8", errors="replace").strip() == kind
    return bool(recognised_by) and all((path / name).is_file() for name in recognised_by)


def check_replaceable(path: Path, kind: str, option: str = "--out", recognised_by: tuple[str, ...] = ()) -> None:
    """InputError, one line, unless `path` is absent, an empty folder, or an earlier output of
    `kind` (its marker file says so; `recognised_by`: files that, all present, mark an output
    written before markers existed). Callers check first, before any long work."""
    from .errors import InputError

    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise InputError(f"{option} {path}: exists and is not a folder; name a new or empty folder")
    if not _replaceable(path, kind, recognised_by):
        raise InputError(
            f"{option} {path}: the folder holds files spanjudge did not write there (no {OUTPUT_MARKER} "
            f"marker of a {kind}); it is never replaced: name a new or empty folder"
        )


@contextlib.contextmanager
def atomic_directory(
    path: Path, kind: str, option: str = "--out", recognised_by: tuple[str, ...] = ()
) -> Iterator[Path]:
    """Yield a scratch folder that replaces `path` only if the block finishes, and only when
    `path` is absent, empty or an earlier output of `kind` (`check_replaceable`); the folder
    written carries the marker `OUTPUT_MARKER` naming `kind`."""
    check_replaceable(path, kind, option, recognised_by)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        yield scratch
        (scratch / OUTPUT_MARKER).write_text(kind + "\n", encoding="utf-8")
        check_replaceable(path, kind, option, recognised_by)  # again: the block may have run for hours
        if path.exists():
            shutil.rmtree(path)
        os.replace(scratch, path)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
