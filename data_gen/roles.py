"""The ensemble's models as roles: each with its cached backend and parser, run in turn per host (two
models on one server would swap), with a progress row each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spanjudge.core.progress import Tracker
from spanjudge.inference.backends import CachedBackend, LLMCache, engine, make_backend
from spanjudge.inference.contract import (
    AnnotatorEvaluation,
    ParseFailure,
    parse_annotator,
)

from .annotate import Outcome, limit_annotator, run_with_retries
from .config import EnsembleConfig, ModelRole


class Role:
    """One model of the ensemble behind its cache, with its call counters."""

    def __init__(self, role: ModelRole, cache_path: Path, parse: Callable[[str], object] | None = None) -> None:
        self.name = role.name
        self.spec = role.backend
        self.cache = LLMCache(cache_path)  # one connection per role: roles run in threads
        # a reply cut off at max_tokens is a failed call here (stored, as the model's reply); with `parse`
        # (--refresh-unscored), stored replies it cannot read, or that were cut off, are asked again
        stale = (
            (lambda c: c.finish_reason == "length" or isinstance(parse(c.text), ParseFailure))
            if parse is not None
            else None
        )
        self.backend = CachedBackend(make_backend(role.backend), self.cache, accept_truncated=False, stale=stale)

    def close(self) -> None:
        self.backend.close()
        self.cache.close()


def progress_reporter(name: str, total: int, progress: Tracker | None) -> Callable[[int, Outcome[Any]], None] | None:
    if progress is None:
        return None
    advance = progress(name, total, cached=0, failed=0)

    def report(_: int, outcome: Outcome[Any]) -> None:
        cached = outcome.cached_calls > 0 and outcome.model_seconds == 0
        advance(1, cached=int(cached), failed=int(not outcome.complete or outcome.parsed is None))

    return report


def annotate_all(
    ensemble: EnsembleConfig,
    roles: Sequence[Role],
    prompts: Sequence[str],
    progress: Tracker | None,
) -> dict[str, list[Outcome[AnnotatorEvaluation]]]:
    """Every annotator over every prompt; annotators run side by side (different servers)."""

    def one(role: Role) -> list[Outcome[AnnotatorEvaluation]]:
        return run_with_retries(
            role.backend,
            prompts,
            ensemble.sampling,
            ensemble.parse_retry,
            parse_annotator,
            progress_reporter(role.name, len(prompts), progress),
            limit_annotator(ensemble.field_limits),
        )

    def in_turn(group: Sequence[Role]) -> list[tuple[str, list[Outcome[AnnotatorEvaluation]]]]:
        return [(role.name, one(role)) for role in group]

    groups = host_groups(roles) if ensemble.one_model_at_a_time else [[role] for role in roles]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        return {name: outcomes for done in pool.map(in_turn, groups) for name, outcomes in done}


def host_groups(roles: Sequence[Role]) -> list[list[Role]]:
    """Annotators that share a server (any endpoint's host:port; in-process models share this
    machine), each group in config order: `one_model_at_a_time` runs a group's models in turn."""
    groups: list[tuple[set[str], list[int]]] = []
    for index, role in enumerate(roles):
        hosts = {urlsplit(url).netloc or url for url in role.spec.endpoints} or {"this machine"}
        touching = [g for g in groups if g[0] & hosts]
        groups = [g for g in groups if not any(g is t for t in touching)]
        groups.append((hosts.union(*(g[0] for g in touching)), [i for g in touching for i in g[1]] + [index]))
    ordered = sorted((sorted(indices) for _, indices in groups), key=lambda indices: indices[0])
    return [[roles[i] for i in indices] for indices in ordered]


def keep_loaded(role: ModelRole, ensemble: EnsembleConfig) -> ModelRole:
    """With `one_model_at_a_time`, a model stays loaded between its requests where its engine can be told
    to (its declaration's `keep_loaded` options; the user's own win)."""
    backend = role.backend
    keep = engine(backend.kind).keep_loaded if ensemble.one_model_at_a_time else {}
    if not keep.keys() - backend.options.keys():
        return role
    options = {**keep, **backend.options}
    return role.model_copy(update={"backend": backend.model_copy(update={"options": options})})
