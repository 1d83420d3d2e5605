"""JSON Lines: the one reader of JSONL files, and the one append-only store.

Reading (`iter_jsonl`, `jsonl_lines`): every stage reads JSONL through these, so a malformed
line gets the same one-line `InputError` naming the file and the line wherever it is read.
Files are UTF-8; a byte order mark is dropped, and bytes that are not UTF-8 are reported with
their line. Blank lines are skipped.

Storing (`JsonlStore`): the results of `spanjudge score`, meta-eval judgments and frozen
LLM perturbations are files of one JSON object per line, appended as each result is final, so
a kill loses at most the line in flight and a re-run skips what is done. One store does it for
all three:
- one writer: the store holds a lock (`locks.hold`, on a hidden `.NAME.lock` beside the file,
  removed when the store closes); a second run on the same file is refused with one line
  naming the holder;
- a torn last line (a kill mid-write) is cut off before anything is appended, and a whole last
  row that only lacks its newline (an editor) gets it, so the next row is not glued to it;
- skip-done: the rows already there are parsed into `found`, keyed as the caller says;
- each append is written, flushed and fsynced before the call returns.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeAlias, TypeVar

from .errors import InputError
from .locks import hold, unhold

# a value as JSON holds it (what `json.loads` returns); for annotations only: at run time it is a string
JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

Located = tuple[str, dict[str, Any]]  # (where: "file:line", row)


def not_utf8(path: Path, line: int, column: int, byte: int) -> InputError:
    return InputError(f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x} at column {column}); save the file as UTF-8")


def decode_line(raw: bytes, path: Path, number: int) -> str:
    """Line `number` of `path` as text (a byte order mark on line 1 dropped)."""
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, number, exc.start + 1, raw[exc.start]) from None


def json_object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def jsonl_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; InputError naming `path:line` for a line
    that is not UTF-8, not JSON, or not an object."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    with path.open("rb") as lines:  # bytes: a line that is not UTF-8 is reported, not a traceback
        for number, raw in enumerate(lines, start=1):
            line = decode_line(raw, path, number)
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            yield number, json_object(value, f"{path}:{number}")


def iter_jsonl(path: Path) -> Iterator[Located]:
    """("file:line", object) for every non-blank line (see `jsonl_lines`)."""
    for number, row in jsonl_lines(path):
        yield f"{path}:{number}", row


def read_jsonl(path: Path, missing_ok: bool = False) -> list[dict[str, Any]]:
    """Every object of a JSONL file; [] for a file that is not there when `missing_ok`."""
    if missing_ok and not path.is_file():
        return []
    return [row for _, row in jsonl_lines(path)]


# -- appending -------------------------------------------------------------------------------


def _last_line_start(handle: BinaryIO, size: int) -> int:
    """The offset where the file's last line starts, reading back in blocks (it may be large)."""
    start, block = size, 1 << 16
    while start > 0:
        begin = max(0, start - block)
        handle.seek(begin)
        newline = handle.read(start - begin).rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        start = begin
    return 0


def repair_tail(path: Path) -> None:
    """Make the file end with a whole line before anything is appended to it.

    A run killed mid-write leaves a fragment without its newline: it is cut off (with a
    truncate, so the rows before it are never rewritten). A whole row that only lacks its
    newline (a file edited by hand, or copied) gets the newline."""
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        start = _last_line_start(handle, size)
        handle.seek(start)
        try:
            json.loads(handle.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            handle.truncate(start)
        else:
            handle.write(b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def append_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Append whole lines and flush them to disk, so a kill loses at most the row in flight;
    returns the number of rows written."""
    lines = [json.dumps(dict(row), ensure_ascii=False) + "\n" for row in rows]
    if not lines:
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())
    return len(lines)


# -- the store -------------------------------------------------------------------------------

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# A store's row reader: ("file:line", row) -> (key, value); raises InputError naming `where`
# for a row that is not what the store holds.
RowParser = Callable[[str, dict[str, Any]], tuple[K, V]]


def lock_path(path: Path) -> Path:
    """The hidden lock file beside a store: scores.jsonl -> .scores.jsonl.lock."""
    return path.with_name(f".{path.name}.lock")


class JsonlStore(Generic[K, V]):
    """An append-only JSONL file of rows, held by one run, with the rows already there in
    `found` (key -> value, the last row of a key wins).

        store = JsonlStore(path, parse)          # locks, repairs the tail, reads what is done
        if key not in store: store.append([row])  # written and fsynced at once
        store.close()                             # or `with JsonlStore(...) as store:`

    `parse(where, row)` turns a row into (key, value), or raises InputError naming `where`.
    Appends may come from several threads."""

    def __init__(self, path: Path | str, parse: RowParser[K, V], *, command: str | None = None) -> None:
        self.path = Path(path)
        self.found: dict[K, V] = {}
        self._parse = parse
        self._lines = 0  # lines in the file: where the next row lands
        self._write = threading.Lock()
        # the lock beside the file itself, not beside a link to it: two runs given two names of one
        # file (a symbolic link as --out) must meet at one lock
        self._lock_file = lock_path(self.path.resolve())
        hold(self._lock_file, self.path, command)
        self._release = weakref.finalize(self, unhold, self._lock_file)  # also when never closed
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        if not self.path.is_file():
            return
        repair_tail(self.path)
        for number, row in jsonl_lines(self.path):
            key, value = self._parse(f"{self.path}:{number}", row)
            self.found[key] = value
        with self.path.open("rb") as handle:  # blank lines count too
            self._lines = sum(1 for _ in handle)

    def __contains__(self, key: object) -> bool:
        return key in self.found

    def get(self, key: K) -> V | None:
        return self.found.get(key)

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Write `rows` at the end of the file (flushed to disk) and add them to `found`."""
        written = [dict(row) for row in rows]
        with self._write:
            parsed = [self._parse(f"{self.path}:{self._lines + n}", row) for n, row in enumerate(written, start=1)]
            self._lines += append_jsonl(self.path, written)
            self.found.update(parsed)

    def close(self) -> None:
        """Release the lock (the rows are already on disk)."""
        self._release()

    def __enter__(self) -> JsonlStore[K, V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
