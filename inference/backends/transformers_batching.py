"""Continuous batching on the transformers engine: which requests take it, and the paged KV cache sized to them
(transformers' own default takes most of the free memory)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import (
    BackendError,
    ChatRequest,
    SamplingParams,
)

if TYPE_CHECKING:
    pass


CPU_BATCH_TOKENS = 2048  # tokens one continuous-batching step reads on a CPU (its attention masks grow with it)


def takes_continuous(params: SamplingParams) -> bool:
    """Whether requests with these parameters can go through continuous batching: greedy, no stop strings."""
    return params.temperature == 0 and not any(params.stop)


def sampling_groups(requests: Sequence[ChatRequest]) -> list[list[int]]:
    """Indices of requests grouped by their generate() arguments (one generate call takes one set)."""
    groups: dict[tuple[float, float, int, int | None, tuple[str, ...]], list[int]] = {}
    for index, request in enumerate(requests):
        params = request.params
        key = (params.temperature, params.top_p, params.max_tokens, params.seed, params.stop)
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def check_continuous_batching(model: str, adapter: bool, merge_adapter: object, grammar: object) -> None:
    """continuous_batching's conditions, in one line before any weights load: a merged adapter, no grammar."""
    problem = None
    if adapter and merge_adapter is not None and not merge_adapter:
        problem = "it needs the adapter merged into the weights: leave merge_adapter unset (or true)"
    elif grammar:
        problem = "it takes no grammar: constrained replies go through batched generate (leave one of them off)"
    if problem:
        raise BackendError(f"transformers model {model!r}: continuous_batching: {problem}")


def cpu_paged_cache(token_counts: Sequence[int]) -> Any:
    """A paged KV cache the size of these requests (prompt + room for the reply each), for continuous batching
    on a CPU: transformers sizes it by default to most of the free memory (several GB for one row of a 135M
    model), which on a GPU is what the cache is for and on a CPU is the machine's RAM."""
    from transformers import ContinuousBatchingConfig

    page = ContinuousBatchingConfig().page_size
    blocks = sum(-(-count // page) for count in token_counts) + 1  # each request's own pages, and one spare
    return ContinuousBatchingConfig(num_blocks=blocks, max_batch_tokens=min(CPU_BATCH_TOKENS, sum(token_counts)))
