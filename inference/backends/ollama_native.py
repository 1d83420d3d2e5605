"""Ollama's native API (`/api/chat`) through the official `ollama` client.

Use this kind rather than Ollama's OpenAI-compatible `/v1` when model options matter:
`/v1` cannot set `num_ctx`, and Ollama's default context (2048 tokens in many versions)
silently truncates long annotator prompts. `spec.options` are sent as Ollama model
options with every request (`num_ctx`, `repeat_penalty`, ...), except `keep_alive` ("30m"),
which is sent as the request's own field (how long the model stays loaded), and `format`, a JSON
schema every reply is held to (Ollama's structured outputs; the judge's constrained decoding
here, `contract.json_form`), also a request field; the sampling options
(temperature, top_p, seed, num_predict, stop) come from each request's `SamplingParams`
so that they are part of its cache key, and are refused in `spec.options`.

The thesis models can also be created once with their context baked in, so that every
client (Ollama's `/v1` included) gets it. For each ensemble member write a `Modelfile`

    FROM <tag>
    PARAMETER num_ctx 8192

(`<tag>` as in `ollama pull <tag>` / `ollama list`), run `ollama create <name> -f Modelfile`
and use `<name>` as the model of the backend spec.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import httpx
import ollama

from ..chat import defuse
from ..contract.json_form import judge_json_schema
from .base import BackendError, ChatRequest, Completion, FailureKind
from .engine import Engine, Serving, Wiring
from .server import MalformedReply, ServerBackend, describe_reply, retry_after_seconds, short
from .spec import BackendSpec

SAMPLING_OPTIONS = frozenset({"temperature", "top_p", "seed", "num_predict", "stop"})
KEEP_ALIVE = "keep_alive"  # in `spec.options`, but sent as the request's own field
FORMAT = "format"  # likewise: a JSON schema (or "json") the reply is held to
REQUEST_FIELDS = frozenset({KEEP_ALIVE, FORMAT})

# The last HTTP response of the running call: the ollama client does not expose it, and a
# reply it cannot read (an HTML page, no message) is reported with what the server sent.
# Each call runs in its own task (the runner's wait_for), so calls never see each other's.
_last_response: ContextVar[httpx.Response | None] = ContextVar("_last_response", default=None)


async def _remember(response: httpx.Response) -> None:
    _last_response.set(response)


class OllamaBackend(ServerBackend):
    """Chat through Ollama's native API on one or more Ollama servers."""

    ping_path = "/api/tags"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        clash = sorted(SAMPLING_OPTIONS & spec.options.keys())
        if clash:
            raise BackendError(
                f"ollama model {spec.model!r}: options {clash} are set per request (SamplingParams), "
                "not in the backend's options"
            )

    def _open_client(self, endpoint: str) -> ollama.AsyncClient:
        # connecting gets its own short limit: only generation may take timeout_s
        timeout = httpx.Timeout(self.spec.timeout_s, connect=self.spec.connect_timeout_s)
        return ollama.AsyncClient(host=endpoint, timeout=timeout, event_hooks={"response": [_remember]})

    async def _close_client(self, client: ollama.AsyncClient) -> None:
        await client.close()

    async def _ping(self, client: ollama.AsyncClient) -> None:
        await client.list()

    async def _call(self, client: ollama.AsyncClient, request: ChatRequest) -> Completion:
        # Ollama applies its template and tokenizer: common control-token spellings in text are broken first
        messages = [{"role": message.role, "content": defuse(message.content)} for message in request.messages]
        _last_response.set(None)
        try:
            reply = await client.chat(
                model=self.spec.model,
                messages=messages,
                options=self.options(request),
                stream=False,
                keep_alive=self.keep_alive,
                format=self.spec.options.get(FORMAT),
            )
        except ollama.ResponseError as error:
            response = _last_response.get()  # the client keeps no headers: Retry-After is read here
            if response is not None:
                error.retry_after_s = retry_after_seconds(error.status_code, response.headers)  # type: ignore[attr-defined]
            raise
        except (ValueError, TypeError) as error:  # not JSON, or JSON that is no chat reply
            if _last_response.get() is None:
                raise  # no reply was read: not the server's doing
            raise _malformed("is not an Ollama chat reply") from error
        if reply.message.content is None:  # a 200 with no text: a server fault, not an empty answer
            raise _malformed(f"has no text (message.content: null, done_reason: {reply.done_reason})")
        if not reply.message.content.strip():  # as for every server: a fault, asked again (server.py)
            raise _malformed(f"has empty content (done_reason: {reply.done_reason})")
        return Completion(
            text=reply.message.content,
            finish_reason=reply.done_reason,
            model=reply.model or self.spec.model,
            prompt_tokens=reply.prompt_eval_count,
            completion_tokens=reply.eval_count,
        )

    def options(self, request: ChatRequest) -> dict[str, Any]:
        """The Ollama model options of one request: its sampling parameters plus `spec.options`."""
        params = request.params
        options: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p}
        options["num_predict"] = params.max_tokens
        if params.seed is not None:
            options["seed"] = params.seed
        if params.stop:
            options["stop"] = list(params.stop)
        return {**options, **{k: v for k, v in self.spec.options.items() if k not in REQUEST_FIELDS}}

    @property
    def keep_alive(self) -> str | float | None:
        """`options.keep_alive` ("30m", 3600, -1 = for good): how long Ollama keeps the model
        loaded after a call. A request field, not a model option: it saves a big model from
        being unloaded between requests, and never changes a reply (so no cache key holds it)."""
        return self.spec.options.get(KEEP_ALIVE)

    def _classify(self, error: Exception) -> tuple[FailureKind, str] | None:
        return classify_ollama_error(error)

    def _retry_after(self, error: Exception) -> float | None:
        return getattr(error, "retry_after_s", None)  # set by _call from the reply's headers


def _malformed(problem: str) -> MalformedReply:
    """MalformedReply saying what the server sent (status, content type, the body's start)."""
    response = _last_response.get()
    if response is None:
        return MalformedReply(f"the reply {problem}")
    content_type = response.headers.get("content-type")
    return MalformedReply(describe_reply(response.status_code, content_type, response.text, problem))


def classify_ollama_error(error: Exception) -> tuple[FailureKind, str] | None:
    """Failure kind of an `ollama` / `httpx` exception.

    The client turns `httpx.ConnectError` into the built-in `ConnectionError` and HTTP
    error statuses into `ResponseError`; other transport errors arrive as `httpx`'s own.
    """
    if isinstance(error, ollama.ResponseError):
        status = error.status_code
        kind: FailureKind = (
            "rate_limit" if status == 429 else "server" if status >= 500 else "client" if status >= 400 else "other"
        )
        return kind, f"HTTP {status}: {short(error.error)}"
    if isinstance(error, httpx.TimeoutException):  # a TransportError: test it first
        return "timeout", f"request timed out: {type(error).__name__}"
    if isinstance(error, (ConnectionError, httpx.TransportError)):
        return "connection", f"cannot connect: {type(error).__name__}: {short(error)}"
    return None


def _json_schema(max_errors: int) -> Wiring:
    """Ollama holds replies to a JSON schema, not a grammar: the contract's JSON form, each reply rendered
    back to the text evaluation."""
    return Wiring(options={FORMAT: judge_json_schema(max_errors=max_errors)}, json_replies=True)


ENGINE = Engine(
    name="ollama",
    backend=OllamaBackend,
    summary="Ollama's native API (model options such as num_ctx; constrained replies through its JSON schema)",
    packages=("ollama", "httpx"),
    install="pip install ollama",
    # chat only: Ollama applies the model's own template (a tokenizer, if any, still measures the prompt)
    serve=Serving("http://127.0.0.1:11434"),
    judge_options=("base_url", "served_model", "concurrency", "timeout_s"),
    constrain=_json_schema,
    keep_loaded={KEEP_ALIVE: "30m"},  # Ollama's own default is 5m: a slow supervisor turn could unload an annotator
)
