"""Ollama's native API (`/api/chat`) through the official `ollama` client.

Use this kind rather than Ollama's OpenAI-compatible `/v1` when model options matter:
`/v1` cannot set `num_ctx`, and Ollama's default context (2048 tokens in many versions)
silently truncates long annotator prompts. `spec.options` are sent as Ollama model
options with every request (`num_ctx`, `repeat_penalty`, ...); the sampling options
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

from typing import Any

import httpx
import ollama

from .base import BackendError, ChatRequest, Completion, FailureKind
from .runner import ServerBackend, short
from .spec import BackendSpec

SAMPLING_OPTIONS = frozenset({"temperature", "top_p", "seed", "num_predict", "stop"})


class OllamaBackend(ServerBackend):
    """Chat through Ollama's native API on one or more Ollama servers."""

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        clash = sorted(SAMPLING_OPTIONS & spec.options.keys())
        if clash:
            raise BackendError(
                f"ollama model {spec.model!r}: options {clash} are set per request (SamplingParams), "
                "not in the backend's options"
            )

    def _open_client(self, endpoint: str) -> ollama.AsyncClient:
        return ollama.AsyncClient(host=endpoint, timeout=self.spec.timeout_s)

    async def _close_client(self, client: ollama.AsyncClient) -> None:
        await client.close()

    async def _call(self, client: ollama.AsyncClient, request: ChatRequest) -> Completion:
        messages = [{"role": message.role, "content": message.content} for message in request.messages]
        reply = await client.chat(model=self.spec.model, messages=messages, options=self.options(request), stream=False)
        return Completion(
            text=reply.message.content or "",
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
        return {**options, **self.spec.options}

    def _classify(self, error: Exception) -> tuple[FailureKind, str] | None:
        return classify_ollama_error(error)


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
