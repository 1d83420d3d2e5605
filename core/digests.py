"""A file's sha256, computed once per version of the file: model files (GGUFs of several GB) name
the judge in a results file's resume key, and hashing them on every run would cost seconds to
minutes. A digest is kept in a cache file (`$SPANJUDGE_CACHE`, else ~/.cache/spanjudge) under the
file's resolved path, size, modification time and inode; any change to the file computes it again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from .fileio import atomic_write_json

CACHE_FILE = "file-digests.json"
BLOCK = 1 << 22


def cache_root() -> Path:
    """spanjudge's cache folder (digests here, converted and assembled models under models/)."""
    return Path(os.environ.get("SPANJUDGE_CACHE") or Path.home() / ".cache" / "spanjudge")


def _signature(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of the file at `path` (hex), from the cache when the file has not changed."""
    signature = _signature(path)
    cache = cache_root() / CACHE_FILE
    known: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(cache.read_text(encoding="utf-8"))
        known = {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
    if signature in known:
        return known[signature]
    digest = sha256_of(path)
    if _signature(path) == signature:  # not changed while it was read
        current = {k: v for k, v in known.items() if not k.startswith(f"{path.resolve()}|")}
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
            atomic_write_json(cache, {**current, signature: digest})
    return digest
