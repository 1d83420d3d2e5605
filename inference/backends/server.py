"""Shared async machinery of the server backends (OpenAI-compatible servers, Ollama).

A backend subclasses `ServerBackend` and supplies three things: how to open and close
a client for one endpoint, how to make one call, and how to name a client exception's
failure kind. Everything that must behave the same for every server lives here:

- a pool of endpoints, each with its own client and `asyncio.Semaphore(spec.concurrency)`;
  a request goes to the endpoint with the fewest requests in flight;
- at most `len(endpoints) * concurrency` requests in progress at once, back-off sleeps
  included, so a dead server is not hit by every queued request before the failure
  budget can stop it;
- retries with exponential back-off (`backoff_s * 2**retry`, plus up to 10 % jitter so
  parallel retries do not arrive together) on connection errors, timeouts, HTTP 429 and
  5xx; a retry prefers another endpoint than the one that just failed. A 429 or 503 that
  says when to come back (`Retry-After`: seconds or an HTTP date, RFC 9110) waits at least
  that long, at most `RETRY_AFTER_CAP_S`, so a rate-limited server is not hit again early;
- a failure budget: after `max_consecutive_failures` failed calls in a row the backend is
  disabled, and every request not yet sent comes back as `CallFailure(kind="disabled")`
  without a call. The backend stays disabled for its lifetime; a new one (or a re-run
  with the cache) tries again;
- a health check before each `generate`: every endpoint must answer a cheap GET within
  `health_check_s` (longer than one generation: a one-slot server answers only after the
  generation it is busy with, e.g. one a killed client left running). A server that accepts
  connections but never replies would otherwise cost `timeout_s × (retries + 1)` per request
  (hours by the thesis defaults) before the budget stops it; such an endpoint is left out of
  the pool, and when none answers the backend is disabled with one message naming each. Any
  HTTP answer, an error status included, passes; a refused connection passes too, since it
  fails fast on its own;
- a call that fails at the endpoint of a server spanjudge started itself (`llamacpp.LlamaCppServer`,
  registered with `watch_endpoint`) whose process has died disables the backend at once, and every
  request left says why: which server, its exit signal, the end of its log (a crash is not a
  network fault worth retrying, nor "a server did not answer");
- a reply longer than `max_tokens` tokens can spell (`REPLY_CHARS_PER_TOKEN`): a server that
  ignores the limit fails that call, and nothing of it is kept or cached;
- a reply that arrives but is not in the API's shape (an HTML page, no `choices`, no
  text, or empty text: `content: ""`) is a `server` failure whose reason says what the server
  sent, never an `AttributeError` from deep inside a client, and never a completion to cache;
  every caller (the judge, annotate) sees it alike: a failed call, asked again by a re-run.

`generate` runs its own event loop with `asyncio.run`: callers are synchronous and no
loop is running in them. Clients are opened inside that loop and closed before it ends,
because async HTTP clients are bound to the loop that created them.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, cast

from .base import Backend, BackendError, CallFailure, CallResult, ChatRequest, Completion, FailureKind, ResultCallback
from .registry import engine
from .spec import BackendSpec

RETRYABLE: frozenset[FailureKind] = frozenset({"connection", "timeout", "server", "rate_limit"})
REASON_LIMIT = 300  # characters of a server's error message kept in a failure reason
BODY_LIMIT = 200  # characters of a malformed reply's body quoted in its failure reason
JITTER = 0.1
RETRY_AFTER_STATUSES = frozenset({429, 503})  # the statuses whose Retry-After is honoured
RETRY_AFTER_CAP_S = 60.0  # a server asking for longer still gets a retry after this many seconds
# the longest reply a call accepts: max_tokens tokens of at most this many characters (a token of a real
# vocabulary is far shorter), plus some slack; a server that ignores max_tokens must not fill the disk
REPLY_CHARS_PER_TOKEN = 64
REPLY_SLACK_CHARS = 4096


# endpoint URL -> what says why the process serving it died (None while it runs), for servers spanjudge
# started itself; the process is the source of truth, so a URL is looked up with and without a trailing /
_MANAGED: dict[str, Callable[[], str | None]] = {}


def watch_endpoint(url: str, why_dead: Callable[[], str | None]) -> None:
    """Register a server this process started: a call that fails at `url` asks `why_dead()`."""
    _MANAGED[url.rstrip("/")] = why_dead


def forget_endpoint(url: str) -> None:
    _MANAGED.pop(url.rstrip("/"), None)


def dead_server(url: str) -> str | None:
    """Why the managed server at `url` is dead, or None (running, or not ours)."""
    why_dead = _MANAGED.get(url.rstrip("/"))
    return why_dead() if why_dead is not None else None


class MalformedReply(Exception):
    """A reply that arrived with a success status but is not what the API promises."""


def describe_reply(status: int, content_type: str | None, body: str, problem: str) -> str:
    """What the server sent, for a MalformedReply: status, content type and the body's start."""
    text = " ".join(body.split())
    quoted = text if len(text) <= BODY_LIMIT else text[: BODY_LIMIT - 1] + "…"
    return f"the reply (HTTP {status}, {content_type or 'no content-type'}) {problem}; the server sent: {quoted!r}"


@dataclass
class _Endpoint:
    url: str
    client: Any
    slots: asyncio.Semaphore
    in_flight: int = 0  # requests assigned here: waiting for a slot or running


def short(text: object) -> str:
    """One line of at most REASON_LIMIT characters, for failure reasons."""
    line = " ".join(str(text).split())
    return line if len(line) <= REASON_LIMIT else line[: REASON_LIMIT - 1] + "…"


def backoff_delay(backoff_s: float, retry: int) -> float:
    """Seconds to wait before retry number `retry` (0 = the first retry)."""
    return backoff_s * 2.0**retry * (1.0 + random.uniform(0.0, JITTER))


def retry_after_seconds(status: int, headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """The wait a 429/503 reply asks for in its `Retry-After` header, capped at RETRY_AFTER_CAP_S;
    None for other statuses or without a readable header. The header holds seconds or an HTTP date."""
    value = headers.get("retry-after") if status in RETRY_AFTER_STATUSES else None
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value.strip())
        except (TypeError, ValueError):
            return None  # neither form: ignored, the back-off applies
        if when.tzinfo is None:  # RFC 9110 dates are GMT
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


class ServerBackend(Backend):
    """A backend that sends each request over HTTP to one of a pool of servers."""

    ping_path: str = "/"  # what `_ping` asks for, after the endpoint URL (for messages)

    def __init__(self, spec: BackendSpec) -> None:
        if not spec.endpoints:
            raise BackendError(
                f"backend {spec.kind!r} for model {spec.model!r} needs at least one endpoint "
                f"(endpoints: [{engine(spec.kind).serve.endpoint_example}])"  # type: ignore[union-attr]
            )
        self.spec = spec
        self.model_id = spec.model_id
        self._failures_in_a_row = 0
        self._disabled_reason: str | None = None

    @property
    def disabled_reason(self) -> str | None:
        """Why the failure budget disabled this backend, or None while it is enabled."""
        return self._disabled_reason

    # -- what a concrete backend supplies ------------------------------------------------

    @abstractmethod
    def _open_client(self, endpoint: str) -> Any:
        """A client for one endpoint, created inside the running event loop."""

    @abstractmethod
    async def _close_client(self, client: Any) -> None:
        """Close a client made by `_open_client`."""

    @abstractmethod
    async def _call(self, client: Any, request: ChatRequest) -> Completion:
        """One attempt; raise the client's exception on failure. The runner fills in
        `seconds`, `attempts` and `endpoint` of the returned completion."""

    @abstractmethod
    def _classify(self, error: Exception) -> tuple[FailureKind, str] | None:
        """The failure kind and reason of a client exception, or None if not the client's."""

    @abstractmethod
    async def _ping(self, client: Any) -> None:
        """A cheap GET on the server (the health check); raise the client's exception on failure."""

    def _retry_after(self, error: Exception) -> float | None:
        """Seconds a failed call's reply asked to wait before the next one (Retry-After), or None."""
        return None

    # -- the shared machinery -------------------------------------------------------------

    def generate(self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None) -> list[CallResult]:
        if not requests:
            return []
        return asyncio.run(self._generate(list(requests), on_result))

    async def _generate(self, requests: list[ChatRequest], on_result: ResultCallback | None) -> list[CallResult]:
        endpoints = [
            _Endpoint(url, self._open_client(url), asyncio.Semaphore(self.spec.concurrency))
            for url in self.spec.endpoints
        ]
        in_progress = asyncio.Semaphore(len(endpoints) * self.spec.concurrency)
        results: list[CallResult | None] = [None] * len(requests)
        answering = await self._answering(endpoints) if self._disabled_reason is None else endpoints

        async def run_one(index: int, request: ChatRequest) -> None:
            async with in_progress:
                result = await self._with_retries(request, answering)
                # still inside: the budget and the caller (e.g. the cache's commit) see
                # this result before the next request is sent
                self._account(result)
                results[index] = result
                if on_result is not None:
                    on_result(index, result)

        try:
            await asyncio.gather(*(run_one(i, request) for i, request in enumerate(requests)))
        finally:
            for endpoint in endpoints:
                await self._close_client(endpoint.client)
        return cast("list[CallResult]", results)  # gather finished: every slot is filled

    async def _answering(self, endpoints: list[_Endpoint]) -> list[_Endpoint]:
        """The endpoints that pass the health check; none: the backend is disabled, saying why."""
        problems = await asyncio.gather(*(self._hung(endpoint) for endpoint in endpoints))
        answering = [endpoint for endpoint, problem in zip(endpoints, problems, strict=True) if problem is None]
        if not answering:
            self._disabled_reason = f"{self.model_id} disabled: " + "; ".join(p for p in problems if p)
            return endpoints
        return answering

    async def _hung(self, endpoint: _Endpoint) -> str | None:
        """Why `endpoint` fails the health check (no HTTP answer in time), or None."""
        try:
            await asyncio.wait_for(self._ping(endpoint.client), self.spec.health_check_s)
            return None
        except asyncio.TimeoutError:
            pass  # no answer in time: hung
        except Exception as error:
            classified = self._classify(error)
            if classified is None or classified[0] != "timeout":
                return None  # an error status is an answer; a refused connection fails fast anyway
        return (
            f"no answer to a health check (GET {endpoint.url.rstrip('/')}{self.ping_path}) within "
            f"{self.spec.health_check_s:g} s (health_check_s): the server is hung, overloaded or "
            "unreachable; no request was sent to it"
        )

    async def _with_retries(self, request: ChatRequest, endpoints: list[_Endpoint]) -> CallResult:
        attempt = 0
        failed_at: _Endpoint | None = None
        while True:
            if self._disabled_reason is not None:
                return CallFailure(reason=self._disabled_reason, kind="disabled", attempts=attempt)
            attempt += 1
            endpoint = _least_busy(endpoints, avoid=failed_at)
            result, asked_wait = await self._attempt(endpoint, request, attempt)
            if isinstance(result, Completion) or result.kind not in RETRYABLE or attempt > self.spec.retries:
                return result
            failed_at = endpoint
            await asyncio.sleep(max(backoff_delay(self.spec.backoff_s, attempt - 1), asked_wait or 0.0))

    async def _attempt(
        self, endpoint: _Endpoint, request: ChatRequest, attempt: int
    ) -> tuple[CallResult, float | None]:
        """One call's result, and the wait its reply asked for before a retry (Retry-After)."""
        endpoint.in_flight += 1
        try:
            async with endpoint.slots:
                started = time.perf_counter()
                completion = await asyncio.wait_for(self._call(endpoint.client, request), self.spec.timeout_s)
                seconds = time.perf_counter() - started
        except asyncio.TimeoutError:
            reason = f"no answer within {self.spec.timeout_s:g} s"
            return CallFailure(reason=reason, kind="timeout", attempts=attempt, endpoint=endpoint.url), None
        except MalformedReply as error:  # a proxy's page, a half-broken server: worth a retry
            return CallFailure(reason=str(error), kind="server", attempts=attempt, endpoint=endpoint.url), None
        except Exception as error:  # one bad call must not stop a run: it becomes a CallFailure
            kind, reason = self._classify(error) or ("other", f"{type(error).__name__}: {short(error)}")
            crash = dead_server(endpoint.url)
            if crash is not None:  # its server died: every request left says so, none is sent
                self._disabled_reason = reason = crash
                kind = "crashed"
            failure = CallFailure(reason=reason, kind=kind, attempts=attempt, endpoint=endpoint.url)
            return failure, self._retry_after(error)
        finally:
            endpoint.in_flight -= 1
        limit = request.params.max_tokens * REPLY_CHARS_PER_TOKEN + REPLY_SLACK_CHARS
        if len(completion.text) > limit:  # not retried: the server would do it again
            reason = (
                f"the reply has {len(completion.text):,} characters, more than {request.params.max_tokens} tokens "
                f"(max_tokens) can spell ({limit:,}): the server ignores max_tokens; the reply is not kept"
            )
            return CallFailure(reason=reason, kind="other", attempts=attempt, endpoint=endpoint.url), None
        return completion.model_copy(update={"seconds": seconds, "attempts": attempt, "endpoint": endpoint.url}), None

    def _account(self, result: CallResult) -> None:
        """Update the failure budget with one finished request."""
        if isinstance(result, Completion):
            self._failures_in_a_row = 0
            return
        if result.kind == "disabled":
            return
        self._failures_in_a_row += 1
        if self._disabled_reason is None and self._failures_in_a_row >= self.spec.max_consecutive_failures:
            self._disabled_reason = (
                f"{self.model_id} disabled after {self._failures_in_a_row} failed calls in a row; "
                f"last error ({result.kind} at {result.endpoint}): {result.reason}"
            )


def _least_busy(endpoints: list[_Endpoint], avoid: _Endpoint | None) -> _Endpoint:
    """The endpoint with the fewest requests in flight, preferring any other than `avoid`."""
    candidates = [endpoint for endpoint in endpoints if endpoint is not avoid] or endpoints
    return min(candidates, key=lambda endpoint: endpoint.in_flight)
