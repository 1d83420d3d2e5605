"""Atomic writes: a killed job never leaves a half-written file behind.

Every stage writes its outputs through these helpers: the content goes to a temporary
file in the target folder and is renamed over the target only when complete. A write that
fails (a full disk, a read-only folder) removes its temporary file before the error goes on,
so a re-run does not find the disk fuller than before. Files and folders get the permissions
of the process's umask, as `open()` and `mkdir()` would give them (a team sharing a run folder
reads it), not the 0600/0700 of Python's temporary files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import InputError


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status),
    else by setting and restoring it."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def widen_to_umask(folder: Path) -> None:
    """The files under `folder` that a library wrote narrower than the umask allows (safetensors 0.8 writes
    its weights 0600 under any umask) get the mode `open()` would have given them; none is widened beyond."""
    mode = 0o666 & ~current_umask()
    for path in folder.rglob("*"):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) != mode and not stat.S_IMODE(info.st_mode) & ~mode:
            path.chmod(mode)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as tmp:
            os.fchmod(tmp.fileno(), 0o666 & ~current_umask())
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def atomic_write_json(path: Path, payload: object) -> None:
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
        scratch.chmod(0o777 & ~current_umask())
        yield scratch
        (scratch / OUTPUT_MARKER).write_text(kind + "\n", encoding="utf-8")
        check_replaceable(path, kind, option, recognised_by)  # again: the block may have run for hours
        if path.exists():
            shutil.rmtree(path)
        os.replace(scratch, path)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def check_overwritable(
    path: Path,
    kind: str,
    ours: Callable[[Path], bool],
    option: str = "--out",
    inputs: Iterable[Path] = (),
) -> None:
    """InputError, one line, unless `path` is absent or a file this command wrote before (`ours(path)`
    recognises its content: a marker its writer puts in every file of `kind`). A file given as one of the
    command's `inputs` is refused even then. Callers check first, before any long work, and again right
    before they write if the work was long."""

    for given in inputs:
        if path.exists() and given.exists() and path.resolve() == given.resolve():
            raise InputError(f"{option} {path}: is one of this command's inputs; write the {kind} to another file")
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise InputError(f"{option} {path}: exists and is not a regular file; name a new file for the {kind}")
    if path.stat().st_size == 0:  # nothing to lose
        return
    try:
        recognised = ours(path)
    except (OSError, ValueError, UnicodeDecodeError):
        recognised = False
    if not recognised:
        raise InputError(
            f"{option} {path}: the file exists and is not spanjudge's {kind}; it is never overwritten: "
            "name a new file (or remove it)"
        )


def first_line(path: Path, limit: int = 1 << 16) -> str:
    """The first line of a text file (at most `limit` bytes), for recognising what wrote it."""
    with path.open("rb") as handle:
        return handle.read(limit).split(b"\n", 1)[0].decode("utf-8")
