"""Ask models for annotations and read them: one annotator or the supervisor at a time.

A reply that does not parse is asked again with light sampling (thesis §3.2.2), a few
times, and then recorded as a parse failure with every raw reply kept. A call that fails
(server down, timeout) is not a parse failure: the call is recorded with its cause, the item is
made from the annotators that answered, and a re-run, which finds everything else in the cache,
asks the failed call again.

A reply cut off at max_tokens is asked once more with twice the room (`ROOM_FACTOR`) before it
counts as a failed call ("truncated"): a model that rambles past the limit once usually ends
within twice it, and greedy decoding would only repeat the same cut-off reply.

A reply that parses but carries a field over the ensemble's `field_limits` is rejected like an
unparseable one (or has the field cut, with `too_long: cap`); both are counted per request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from spanjudge.inference.backends.base import Backend, CallFailure, CallResult, ChatRequest, SamplingParams
from spanjudge.inference.contract import AnnotatorEvaluation, ErrorAnnotation, ParseFailure

from .config import FieldLimits, ParseRetry

ParsedT = TypeVar("ParsedT")
ROOM_FACTOR = 2  # a truncated reply is asked again with this many times its max_tokens, once


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


@dataclass
class Outcome(Generic[ParsedT]):
    """What one model made of one prompt, with everything needed to audit it."""

    prompt_hash: str
    replies: list[str] = field(default_factory=list)  # every raw reply, first try first
    parsed: ParsedT | None = None
    parse_failure: str | None = None  # the last parse failure's reason, when nothing parsed
    call_failure: str | None = None  # the call never produced a usable reply: its cause and reason
    call_cause: str | None = None  # that failure's cause alone (truncated, refused, timed out, crashed ...)
    more_room: int | None = None  # the max_tokens of a reply asked again because the first was cut off
    cached_calls: int = 0
    model_seconds: float = 0.0
    too_long: int = 0  # replies rejected because a field was over its limit
    capped: int = 0  # fields of the kept reply cut to their limit

    @property
    def complete(self) -> bool:
        return self.call_failure is None


def retry_params(base: SamplingParams, retry: ParseRetry, attempt: int) -> SamplingParams:
    """Light sampling for retry `attempt` (1, 2, ...): a new seed each time, so each retry is
    a new cache entry and a re-run reproduces the same sequence."""
    seed = (base.seed or 0) + attempt
    return base.model_copy(update={"temperature": retry.temperature, "top_p": retry.top_p, "seed": seed})


@dataclass(frozen=True)
class Limited(Generic[ParsedT]):
    """A parsed reply after the field limits: kept (perhaps with fields cut) or rejected."""

    value: ParsedT | None  # None: rejected
    reason: str | None = None  # why it was rejected
    capped: int = 0  # fields cut to their limit


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _over_limit(error: ErrorAnnotation, limits: FieldLimits) -> list[tuple[str, int, int]]:
    """(field, length, limit) for each field of `error` longer than its limit."""
    fields = (
        ("location", error.location or "", limits.location),
        ("explanation", error.explanation, limits.explanation),
    )
    return [(name, len(text), limit) for name, text, limit in fields if len(text) > limit]


def limit_errors(errors: Sequence[ErrorAnnotation], limits: FieldLimits) -> Limited[list[ErrorAnnotation]]:
    kept: list[ErrorAnnotation] = []
    capped = 0
    for number, error in enumerate(errors, start=1):
        over = _over_limit(error, limits)
        if over and limits.too_long == "reject":
            name, length, limit = over[0]
            return Limited(None, f"error {number}'s {name} has {length} characters (field_limits.{name} is {limit})")
        capped += len(over)
        update = {name: _cut(getattr(error, name), limit) for name, _, limit in over}
        kept.append(error.model_copy(update=update) if update else error)
    return Limited(kept, capped=capped)


def limit_annotator(limits: FieldLimits) -> Callable[[AnnotatorEvaluation], Limited[AnnotatorEvaluation]]:
    def check(parsed: AnnotatorEvaluation) -> Limited[AnnotatorEvaluation]:
        errors = limit_errors(parsed.errors, limits)
        if errors.value is None:
            return Limited(None, errors.reason)
        return Limited(parsed.model_copy(update={"errors": errors.value}), capped=errors.capped)

    return check


def limit_supervisor(limits: FieldLimits) -> Callable[[list[ErrorAnnotation]], Limited[list[ErrorAnnotation]]]:
    return lambda errors: limit_errors(errors, limits)


def _read(
    outcome: Outcome[ParsedT],
    text: str,
    parse: Callable[[str], ParsedT | ParseFailure],
    limit: Callable[[ParsedT], Limited[ParsedT]] | None,
) -> ParsedT | ParseFailure:
    parsed = parse(text)
    if isinstance(parsed, ParseFailure) or limit is None:
        return parsed
    limited = limit(parsed)
    if limited.value is None:
        outcome.too_long += 1
        return ParseFailure(reason=limited.reason or "a field is too long", raw=text)
    outcome.capped = limited.capped
    return limited.value


def run_with_retries(
    backend: Backend,
    prompts: Sequence[str],
    params: SamplingParams,
    retry: ParseRetry,
    parse: Callable[[str], ParsedT | ParseFailure],
    on_done: Callable[[int, Outcome[ParsedT]], None] | None = None,
    limit: Callable[[ParsedT], Limited[ParsedT]] | None = None,
) -> list[Outcome[ParsedT]]:
    """All prompts through one backend; unparseable replies (and, with `limit`, replies it
    rejects) retried in rounds."""
    outcomes: list[Outcome[ParsedT]] = [Outcome(prompt_hash(p)) for p in prompts]
    pending = list(range(len(prompts)))
    for attempt in range(retry.attempts + 1):
        if not pending:
            break
        round_params = params if attempt == 0 else retry_params(params, retry, attempt)
        results = _with_more_room(backend, [prompts[i] for i in pending], round_params, [outcomes[i] for i in pending])
        still_pending = []
        for index, result in zip(pending, results, strict=True):
            outcome = outcomes[index]
            if isinstance(result, CallFailure):
                outcome.call_failure, outcome.call_cause = result.describe(), result.cause
            else:
                outcome.call_failure = outcome.call_cause = None
                outcome.replies.append(result.text)
                outcome.cached_calls += int(result.cached)
                outcome.model_seconds += result.seconds
                parsed = _read(outcome, result.text, parse, limit)
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


def _with_more_room(
    backend: Backend, prompts: Sequence[str], params: SamplingParams, outcomes: Sequence[Outcome[Any]]
) -> list[CallResult]:
    """One round of calls; each reply cut off at max_tokens is asked once more with ROOM_FACTOR times the room
    (recorded in its outcome), and only a second cut-off is a failed call, naming both limits."""
    results = backend.generate([ChatRequest.user(prompt, params) for prompt in prompts])
    cut = [i for i, result in enumerate(results) if isinstance(result, CallFailure) and result.kind == "truncated"]
    if not cut:
        return results
    roomier = params.model_copy(update={"max_tokens": params.max_tokens * ROOM_FACTOR})
    again = backend.generate([ChatRequest.user(prompts[i], roomier) for i in cut])
    for index, result in zip(cut, again, strict=True):
        outcomes[index].more_room = roomier.max_tokens
        if isinstance(result, CallFailure):
            reason = (
                f"cut off at max_tokens={params.max_tokens}, and asked again with {roomier.max_tokens}: "
                f"{result.describe() if result.kind != 'truncated' else 'cut off again'}"
            )
            result = result.model_copy(update={"kind": "truncated", "reason": reason})
        results[index] = result
    return results
