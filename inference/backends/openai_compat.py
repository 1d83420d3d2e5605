"""Any OpenAI-compatible server: vLLM serve, Ollama's /v1, llama.cpp, SGLang, TGI, OpenAI.

Uses the official `openai` client with its own retries off (`max_retries=0`): the shared
runner retries, so back-off, endpoint choice and the failure budget stay in one place.
Replies are read through `with_raw_response`, so a 200 that is not a completion (an HTML
page, no `choices`, `content: null`) is reported with what the server actually sent.

`api: completions` is for base models without a chat template (e.g. Gemma 3 270M): the
messages are flattened into one plain-text prompt by `flatten_messages`. `api: prompt`
sends the last message's text verbatim to the completions API: the distilled judge renders
its chat template itself, with the tokenizer it was trained with, so the server cannot
render a different one.

The token limit goes out as `max_completion_tokens` (the chat API's name since OpenAI
deprecated `max_tokens`; vLLM and OpenAI read it) and also as `max_tokens`: llama-cpp-python's
server (0.3.x) knows only `max_tokens` and ignores unknown fields, so without it a reply
would run to the end of the context. The completions API has only `max_tokens`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..chat import defuse
from ..contract.grammar import judge_grammar, server_grammar_fields
from .base import ChatRequest, Completion, FailureKind, Message
from .engine import Engine, Serving, Wiring
from .server import MalformedReply, ServerBackend, describe_reply, retry_after_seconds, short
from .spec import BackendSpec

if TYPE_CHECKING:  # the client loads with the engine's first use: its import costs a second on every command
    import httpx
    import openai

NO_KEY = "not-needed"  # local servers ignore the key, but the client insists on one


def flatten_messages(messages: tuple[Message, ...]) -> str:
    """The plain-text prompt of the completions API: each message's text in order
    (system text, then user text, then any further turns), separated by a blank line and
    ending with a blank line, so a base model continues after the prompt. Role names are
    left out on purpose: a base model has no convention for them, and the annotator and
    judge prompts already say in words what is asked."""
    return "\n\n".join(defuse(message.content) for message in messages) + "\n\n"


class OpenAIBackend(ServerBackend):
    """Chat (or plain completions) through the OpenAI API of one or more servers."""

    ping_path = "/models"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        env = spec.api_key_env
        self._api_key = os.environ.get(env, "") if env else ""

    def _open_client(self, endpoint: str) -> openai.AsyncOpenAI:
        import openai

        # connecting gets its own short limit: only generation may take timeout_s
        # the client's own Timeout: openai >= 3 is built on httpx2, whose Timeout is not httpx's
        timeout = openai.Timeout(self.spec.timeout_s, connect=self.spec.connect_timeout_s)
        return openai.AsyncOpenAI(base_url=endpoint, api_key=self._api_key or NO_KEY, max_retries=0, timeout=timeout)

    async def _close_client(self, client: openai.AsyncOpenAI) -> None:
        await client.close()

    async def _ping(self, client: openai.AsyncOpenAI) -> None:
        await client.models.list()

    async def _call(self, client: openai.AsyncOpenAI, request: ChatRequest) -> Completion:
        params = request.params
        common: dict[str, Any] = {
            "model": self.spec.model,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "stop": list(params.stop) or None,
        }
        if params.seed is not None:
            common["seed"] = params.seed
        if self.spec.extra_body:
            common["extra_body"] = self.spec.extra_body
        if self.spec.api in ("prompt", "completions"):
            # "prompt": already templated by the caller (the judge), sent verbatim
            prompt = request.messages[-1].content if self.spec.api == "prompt" else flatten_messages(request.messages)
            raw: Any = await client.completions.with_raw_response.create(prompt=prompt, **common)
        else:
            # the server applies its template and tokenizer, which may read control-token spellings in a
            # message as control tokens: the common spellings are broken (`chat.defuse`)
            messages = [{"role": message.role, "content": defuse(message.content)} for message in request.messages]
            # the chat API's current name for the limit, beside the deprecated one that
            # llama-cpp-python's server (0.3.x) and older servers read (see the module docstring)
            common["max_completion_tokens"] = params.max_tokens
            raw = await client.chat.completions.with_raw_response.create(messages=messages, **common)  # type: ignore[arg-type]
        return self._completion(raw.http_response, _parsed(raw))

    def _completion(self, http: httpx.Response, reply: Any) -> Completion:
        """The Completion in a parsed reply, or MalformedReply saying what arrived instead."""
        import openai

        # the client builds replies without validating them: every field may be missing
        choices = getattr(reply, "choices", None)
        if not isinstance(reply, (openai.types.Completion, openai.types.chat.ChatCompletion)) or not choices:
            raise _malformed(http, "is not a completion (no choices)")
        choice = choices[0]
        finish_reason = getattr(choice, "finish_reason", None)
        if self.spec.api == "chat":
            text = getattr(getattr(choice, "message", None), "content", None)
        else:
            text = getattr(choice, "text", None)
        if not isinstance(text, str):  # a 200 with no text: a server fault, not an empty answer to cache
            raise _malformed(http, f"has no text (content: null, finish_reason: {finish_reason})")
        if not text.strip():  # one rule for every caller (the judge, annotate): a server fault, asked again
            raise _malformed(http, f"has empty content (finish_reason: {finish_reason})")
        usage = getattr(reply, "usage", None)
        return Completion(
            text=text,
            finish_reason=finish_reason,
            model=getattr(reply, "model", None) or self.spec.model,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )

    def _classify(self, error: Exception) -> tuple[FailureKind, str] | None:
        return classify_openai_error(error)

    def _retry_after(self, error: Exception) -> float | None:
        import openai

        if isinstance(error, openai.APIStatusError):
            return retry_after_seconds(error.status_code, error.response.headers)
        return None


def _parsed(raw: Any) -> Any:
    """The reply's parsed body; MalformedReply when a JSON content type carries no JSON."""
    try:
        return raw.parse()
    except ValueError as error:  # json.JSONDecodeError
        raise _malformed(raw.http_response, f"is not valid JSON ({error})") from None


def _malformed(http: httpx.Response, problem: str) -> MalformedReply:
    return MalformedReply(describe_reply(http.status_code, http.headers.get("content-type"), http.text, problem))


def classify_openai_error(error: Exception) -> tuple[FailureKind, str] | None:
    """Failure kind of an `openai` exception: 429 and 5xx are worth a retry, other 4xx not."""
    import openai

    if isinstance(error, openai.APITimeoutError):  # a subclass of APIConnectionError: test it first
        return "timeout", f"request timed out: {short(error)}"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return "connection", f"cannot connect: {type(cause).__name__}: {short(cause)}"
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        kind: FailureKind = "rate_limit" if status == 429 else "server" if status >= 500 else "client"
        return kind, f"HTTP {status}: {short(error.message)}"
    return None


def request_grammar(max_errors: int) -> Wiring:
    """The contract's grammar in both llama.cpp's (`grammar`) and vLLM's (`structured_outputs`) request
    field: a server that reads neither (Ollama's /v1) decodes unconstrained."""
    return Wiring(request_fields=server_grammar_fields(judge_grammar(max_errors=max_errors)))


ENGINE = Engine(
    name="openai",
    backend=OpenAIBackend,
    summary="any OpenAI-compatible server (vLLM serve, Ollama's /v1, llama.cpp, SGLang, TGI)",
    packages=("openai",),
    install="pip install openai",
    serve=Serving("http://127.0.0.1:8080/v1", templated_prompt=True, request_fields=True),
    judge_options=("base_url", "served_model", "concurrency", "timeout_s"),
    constrain=request_grammar,
    # llama.cpp's server reuses its slot's prompt cache unless told not to (vLLM ignores the field)
    prefix_reuse_off=Wiring(request_fields={"cache_prompt": False}),
)
