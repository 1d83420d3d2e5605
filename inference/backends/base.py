"""The backend layer's interface: one way to ask any model for chat completions.

Every stage that runs a model (annotators, the supervisor, output generation, prompted
judges, the distilled judge) goes through `Backend.generate`, so caching, retries, the
failure budget and endpoint pools behave the same everywhere.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from spanjudge.core.errors import SpanjudgeError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SamplingParams(_Frozen):
    """Decoding parameters; part of every cache key. Defaults = the thesis annotators."""

    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=1024, ge=1)
    seed: int | None = 0
    stop: tuple[str, ...] = ()


class Message(_Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(_Frozen):
    messages: tuple[Message, ...] = Field(min_length=1)
    params: SamplingParams = SamplingParams()

    @classmethod
    def user(cls, content: str, params: SamplingParams | None = None) -> ChatRequest:
        return cls(messages=(Message(role="user", content=content),), params=params or SamplingParams())

    def cache_key(self, model_id: str) -> str:
        """sha256 of (model id, messages, sampling params): the identity of a call."""
        payload = {"model": model_id, "messages": [m.model_dump() for m in self.messages], **self.params.model_dump()}
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Completion(_Frozen):
    text: str
    finish_reason: str | None = None  # "stop", "length" (truncated), ...
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0  # wall time of the model call; 0 for a cache hit
    cached: bool = False
    attempts: int = 1
    endpoint: str | None = None


# "truncated": a reply cut off at max_tokens, refused by a caller that needs whole replies; "crashed": the
# server process died, or an in-process engine raised
FailureKind = Literal[
    "connection", "timeout", "server", "rate_limit", "client", "disabled", "truncated", "crashed", "other"
]
# what each kind means, in the words a user reads: only a server that could not be reached "did not answer"
CAUSES: dict[str, str] = {
    "connection": "did not answer",
    "timeout": "timed out",
    "server": "server error",
    "rate_limit": "rate-limited",
    "client": "refused",
    "disabled": "not sent",
    "truncated": "truncated",
    "crashed": "crashed",
    "other": "failed",
}


class CallFailure(_Frozen):
    """A call that did not produce text after all retries (never a made-up completion)."""

    reason: str
    kind: FailureKind
    attempts: int = 0
    endpoint: str | None = None

    @property
    def cause(self) -> str:
        """The failure in a user's words: truncated, refused, timed out, crashed, did not answer ..."""
        return CAUSES[self.kind]

    def describe(self) -> str:
        return f"{self.cause}: {self.reason}"


CallResult = Completion | CallFailure
ResultCallback = Callable[[int, CallResult], None]


class BackendError(SpanjudgeError):
    """A backend that cannot work at all (missing package, bad configuration)."""


class Backend(ABC):
    """Something that turns chat requests into completions.

    `model_id` is the model's identity in cache keys: two endpoints serving the same
    model share cached answers. `generate` returns one result per request, in order, and
    calls `on_result(index, result)` as each one finishes (for progress bars and for
    writing results as they arrive). It never raises for a failed call: failures come
    back as `CallFailure` so one bad request cannot stop a run.
    """

    model_id: str
    batch_size: int | None = None  # requests generated together, where this process batches them (transformers)

    @abstractmethod
    def generate(self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None) -> list[CallResult]:
        """Run all requests (batched / concurrently as the backend allows)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients, engines or GPU memory."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
