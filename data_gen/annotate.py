"""Ask models for annotations and read them: one annotator or the supervisor at a time.

A reply that does not parse is asked again with light sampling (thesis §3.2.2), a few
times, and then recorded as a parse failure with every raw reply kept. A call that fails
(server down, timeout) is not a parse failure: the request stays *incomplete* so that a
re-run, which finds everything else in the cache, finishes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from spanjudge.inference.backends.base import Backend, CallFailure, ChatRequest, SamplingParams
from spanjudge.inference.contract import ParseFailure

from .config import ParseRetry

ParsedT = TypeVar("ParsedT")


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


@dataclass
class Outcome(Generic[ParsedT]):
    """What one model made of one prompt, with everything needed to audit it."""

    prompt_hash: str
    replies: list[str] = field(default_factory=list)  # every raw reply, first try first
    parsed: ParsedT | None = None
    parse_failure: str | None = None  # the last parse failure's reason, when nothing parsed
    call_failure: str | None = None  # the call never produced text: the request is incomplete
    cached_calls: int = 0
    model_seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return self.call_failure is None


def retry_params(base: SamplingParams, retry: ParseRetry, attempt: int) -> SamplingParams:
    """Light sampling for retry `attempt` (1, 2, ...): a new seed each time, so each retry is
    a new cache entry and a re-run reproduces the same sequence."""
    seed = (base.seed or 0) + attempt
    return base.model_copy(update={"temperature": retry.temperature, "top_p": retry.top_p, "seed": seed})


def run_with_retries(
    backend: Backend,
    prompts: Sequence[str],
    params: SamplingParams,
    retry: ParseRetry,
    parse: Callable[[str], ParsedT | ParseFailure],
    on_done: Callable[[int, Outcome[ParsedT]], None] | None = None,
) -> list[Outcome[ParsedT]]:
    """All prompts through one backend; unparseable replies retried in rounds."""
    outcomes: list[Outcome[ParsedT]] = [Outcome(prompt_hash(p)) for p in prompts]
    pending = list(range(len(prompts)))
    for attempt in range(retry.attempts + 1):
        if not pending:
            break
        round_params = params if attempt == 0 else retry_params(params, retry, attempt)
        requests = [ChatRequest.user(prompts[i], round_params) for i in pending]
        results = backend.generate(requests)
        still_pending = []
        for index, result in zip(pending, results, strict=True):
            outcome = outcomes[index]
            if isinstance(result, CallFailure):
                outcome.call_failure = f"{result.kind}: {result.reason}"
            else:
                outcome.replies.append(result.text)
                outcome.cached_calls += int(result.cached)
                outcome.model_seconds += result.seconds
                parsed = parse(result.text)
                if isinstance(parsed, ParseFailure):
                    outcome.parse_failure = parsed.reason
                    still_pending.append(index)
                    continue
                outcome.parsed, outcome.parse_failure = parsed, None
            if on_done is not None:
                on_done(index, outcome)
        pending = still_pending
    if on_done is not None:
        for index in pending:  # out of retries: a final parse failure
            on_done(index, outcomes[index])
    return outcomes
