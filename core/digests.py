"""A file's sha256, computed once per version of the file: model files (GGUFs of several GB) name
the judge in a results file's resume key, and hashing them on every run would cost seconds to
minutes. A digest is kept in a cache file (`$SPANJUDGE_CACHE`, else ~/.cache/spanjudge) under the
file's resolved path, size, modification time and inode; any change to the file computes it again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
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


HASHED_MAX_BYTES = 256 << 20  # an adapter, its metadata, a small model: hashed; bigger: size and time
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt")
WEIGHT_CONFIGS = ("config.json", "adapter_config.json")  # how the weights are read: shape, LoRA alpha


def file_signature(path: Path) -> str:
    """A file's identity by content: its sha256 up to HASHED_MAX_BYTES, above that its size and modification
    time (hashing a model of many GB on every run would cost minutes; replacing it changes both)."""
    stat = path.stat()
    return file_sha256(path) if stat.st_size <= HASHED_MAX_BYTES else f"{stat.st_size}:{stat.st_mtime_ns}"


def folder_fingerprint(location: str, wanted: Callable[[Path], bool]) -> str | None:
    """`location`'s resolved path and the signatures of its files that `wanted` keeps (of the file itself, when
    it is one); None when it is not a local path (a Hub id, an alias such as @smollm2)."""
    path = Path(location).expanduser()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and wanted(p))
    else:
        return None
    return "|".join([str(path.resolve()), *(f"{file.name}={file_signature(file)}" for file in files)])


def weights_digest(location: str) -> str | None:
    """What identifies the weights at `location` (a model or adapter folder, or a weights file): a digest of
    its weight files and the configs that say how they are read. Retrained or replaced weights in the same
    folder get another digest; metadata beside them (spanjudge.json, a stored decision rule) does not count."""
    fingerprint = folder_fingerprint(location, lambda p: p.suffix in WEIGHT_SUFFIXES or p.name in WEIGHT_CONFIGS)
    return None if fingerprint is None else hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
