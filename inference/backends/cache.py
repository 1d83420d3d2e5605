"""A transparent SQLite cache in front of any backend (as in lm-evaluation-harness).

A call's identity is `ChatRequest.cache_key(model_id)`: model, messages and sampling
parameters. Each successful completion is committed the moment it arrives, so a run that
is killed keeps everything it finished, and a re-run asks the models only for the rest.
Failures are never stored: a re-run tries them again. Neither is a reply without text (the
backends report it as a failure). A reply cut off at max_tokens is the model's reply and is
stored, but callers that need whole replies (`accept_truncated=False`, the annotation pipeline)
get it as a `truncated` failure, fresh or stored: they ask again with more room, and a re-run
repeats none of it. `stale` re-asks stored replies a caller could not use (`--refresh-unscored`:
a cut-off reply does not parse, so a server given a larger context is asked again then).

The file uses SQLite's write-ahead log, so several processes (e.g. one per ensemble
member) can share one cache file; a writer waits up to 30 s for another's lock. Within one
process every connection to the same file shares one lock: SQLite's busy handler does not
cover all of the setup (switching a new file to WAL can fail at once with "database is
locked" while another connection opens it), so threads never race each other there.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import cast

from spanjudge.core.errors import SpanjudgeError

from .base import Backend, CallFailure, CallResult, ChatRequest, Completion, ResultCallback

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key        TEXT PRIMARY KEY,  -- ChatRequest.cache_key(model_id)
    model_id   TEXT NOT NULL,
    completion TEXT NOT NULL,     -- Completion as JSON
    created    REAL NOT NULL      -- Unix time of the call
)
"""
_QUERY_CHUNK = 500  # keys per SELECT, below SQLite's limit on bound parameters
_SETUP_WAIT_S = 30.0  # how long setup retries while another process holds the file

_path_locks: dict[Path, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    """One lock per cache file in this process, shared by all its connections."""
    with _path_locks_guard:
        return _path_locks.setdefault(path.resolve(), threading.Lock())


def _storage_error(path: Path, exc: sqlite3.Error) -> SpanjudgeError:
    """A cache that cannot be written (a full disk, a read-only folder): one line naming it."""
    return SpanjudgeError(
        f"cannot write the call cache {path}: {exc}; free some space or choose a writable place; "
        "every reply stored so far is kept: re-run the same command to resume"
    )


def _connect(path: Path) -> sqlite3.Connection:
    """Open `path` in WAL mode with the schema, retrying while another process sets it up."""
    deadline = time.monotonic() + _SETUP_WAIT_S
    while True:
        try:
            db = sqlite3.connect(path, timeout=30, check_same_thread=False)
        except sqlite3.OperationalError as exc:  # a folder that cannot be written
            raise _storage_error(path, exc) from None
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            db.commit()
            return db
        except sqlite3.OperationalError as exc:
            db.close()
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise _storage_error(path, exc) from None
            time.sleep(0.05)


class LLMCache:
    """Completions stored by cache key in one SQLite file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # on_result may arrive from a backend's worker thread, and other caches in this
        # process may use the same file: one lock per file serialises them
        self._lock = _lock_for(self.path)
        with self._lock:
            self._db = _connect(self.path)

    def get_many(self, keys: Iterable[str]) -> dict[str, Completion]:
        """The stored completions among `keys`, by key (absent keys are simply missing)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Completion] = {}
        with self._lock:
            for start in range(0, len(wanted), _QUERY_CHUNK):
                chunk = wanted[start : start + _QUERY_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(f"SELECT key, completion FROM completions WHERE key IN ({marks})", chunk)
                found.update((key, Completion.model_validate_json(blob)) for key, blob in rows)
        return found

    def get(self, key: str) -> Completion | None:
        return self.get_many([key]).get(key)

    def put(self, key: str, model_id: str, completion: Completion) -> None:
        """Store one completion and commit at once (a killed run loses nothing stored)."""
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO completions (key, model_id, completion, created) VALUES (?, ?, ?, ?)",
                    (key, model_id, completion.model_dump_json(), time.time()),
                )
                self._db.commit()
            except sqlite3.OperationalError as exc:  # the transaction rolls back: the cache stays whole
                raise _storage_error(self.path, exc) from None

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM completions").fetchone()
        return int(count)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class CachedBackend(Backend):
    """`inner` behind the cache: hits come back with `cached=True, seconds=0.0`, misses
    go to `inner.generate` in one call, and each success is stored as it arrives.

    Identical requests within one call are sent once and all get its result.
    `model_calls` counts requests sent to `inner`, `cache_hits` requests served from the
    cache (duplicates of a request sent in the same call are neither).

    `accept_truncated=False`: a reply cut off at max_tokens (finish_reason "length") comes
    back as `CallFailure(kind="truncated")`, whether it was just made (and stored) or stored
    before. `stale(completion)`: True for a stored reply to ask again (and replace).
    """

    def __init__(
        self,
        inner: Backend,
        cache: LLMCache,
        *,
        accept_truncated: bool = True,
        stale: Callable[[Completion], bool] | None = None,
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.accept_truncated = accept_truncated
        self.stale = stale
        self.model_calls = 0
        self.cache_hits = 0

    def _usable(self, completion: Completion) -> bool:
        """Whether a stored completion may answer a request (an empty one, stored before empty
        replies were refused, is asked again)."""
        if not completion.text.strip():
            return False
        return self.stale is None or not self.stale(completion)

    def _delivered(self, result: CallResult, request: ChatRequest) -> CallResult:
        """What the caller gets: an empty reply as a failure (a 200 with `content: ""` is a server fault, never
        an answer to keep), and a cut-off one as `truncated` for callers that need whole replies."""
        if not isinstance(result, Completion):
            return result
        if not result.text.strip():
            reason = f"the server answered with empty content (finish_reason: {result.finish_reason}); not cached"
            return CallFailure(reason=reason, kind="server", attempts=result.attempts, endpoint=result.endpoint)
        if not self.accept_truncated and result.finish_reason == "length":
            reason = (
                f"the reply was cut off at max_tokens={request.params.max_tokens} (finish_reason: length); raise "
                "max_tokens, or the server's context size, if it persists"
            )
            return CallFailure(reason=reason, kind="truncated", attempts=result.attempts, endpoint=result.endpoint)
        return result

    def generate(self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None) -> list[CallResult]:
        keys = [request.cache_key(self.model_id) for request in requests]
        stored = self.cache.get_many(keys)
        results: list[CallResult | None] = [None] * len(requests)
        waiting: dict[str, list[int]] = {}  # key of a miss -> indices of the requests that want it

        def deliver(index: int, result: CallResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        for index, key in enumerate(keys):
            hit = stored.get(key)
            if hit is None or not self._usable(hit):
                waiting.setdefault(key, []).append(index)
            else:
                self.cache_hits += 1
                deliver(
                    index, self._delivered(hit.model_copy(update={"cached": True, "seconds": 0.0}), requests[index])
                )
        if waiting:
            self._send(requests, waiting, deliver)
        return cast("list[CallResult]", results)  # hits and every miss are delivered by now

    def _send(self, requests: Sequence[ChatRequest], waiting: dict[str, list[int]], deliver: ResultCallback) -> None:
        """One inner call for the distinct misses; store and deliver each as it arrives."""
        misses = list(waiting)
        arrived: set[int] = set()

        def on_inner_result(position: int, result: CallResult) -> None:
            arrived.add(position)
            key = misses[position]
            if isinstance(result, Completion) and result.text.strip():  # a cut-off reply too: it is the model's
                self.cache.put(key, self.model_id, result)
            result = self._delivered(result, requests[waiting[key][0]])
            for index in waiting[key]:
                deliver(index, result)

        self.model_calls += len(misses)
        returned = self.inner.generate([requests[waiting[key][0]] for key in misses], on_inner_result)
        # a backend that skipped on_result for some request still has its results stored
        for position, result in enumerate(returned):
            if position not in arrived:
                on_inner_result(position, result)

    def close(self) -> None:
        """Close the inner backend; the cache belongs to whoever opened it."""
        self.inner.close()
