"""Compiled grammars kept on disk: xgrammar compiles the judge's grammar against a tokenizer's whole
vocabulary in about 5 s on a CPU core, every time a constrained transformers judge loads; reading
the compiled grammar back takes under 1 s. An entry (`$SPANJUDGE_CACHE/grammars/`) is named by the
sha256 of the xgrammar version, the grammar and the tokenizer's full description (vocabulary, stop
tokens, vocabulary size), so any change to one of them compiles again. An entry that does not read
back is compiled again and replaced; a cache that cannot be written only costs the compile."""

from __future__ import annotations

import contextlib
import hashlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from spanjudge.core.digests import cache_root
from spanjudge.core.fileio import atomic_write_text

if TYPE_CHECKING:
    import xgrammar

KEPT = 8  # entries of ~20 MB each (a 49k vocabulary); the least recently used beyond these are removed


def cache_folder() -> Path:
    return cache_root() / "grammars"


def compiled_grammar(info: xgrammar.TokenizerInfo, grammar: str) -> xgrammar.CompiledGrammar:
    """`grammar` compiled for `info`'s tokenizer: from the cache when it holds it, else compiled
    (errors from xgrammar propagate) and stored."""
    import xgrammar

    entry = cache_folder() / f"{_key(info, grammar)}.json"
    try:
        compiled = xgrammar.CompiledGrammar.deserialize_json(entry.read_text(encoding="utf-8"), info)
    except (OSError, RuntimeError, ValueError):  # missing, torn or from another build: compiled below
        pass
    else:
        with contextlib.suppress(OSError):  # recently used: kept by the pruning below (a read-only cache still reads)
            entry.touch()
        return compiled
    compiled = xgrammar.GrammarCompiler(info, max_threads=1).compile_grammar(grammar)
    with contextlib.suppress(OSError):
        atomic_write_text(entry, compiled.serialize_json())
        _prune(entry.parent)
    return compiled


def _key(info: xgrammar.TokenizerInfo, grammar: str) -> str:
    digest = hashlib.sha256()
    try:
        digest.update(version("xgrammar").encode())
    except PackageNotFoundError:  # a source build without metadata: its compiled form may differ from a release's
        digest.update(b"unknown")
    for part in (grammar, info.serialize_json()):
        digest.update(b"\0" + part.encode("utf-8"))
    return digest.hexdigest()


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in entries[KEPT:]:
        stale.unlink(missing_ok=True)
