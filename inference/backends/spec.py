"""Configuration of one model behind a backend, as written in ensemble/judge YAML files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spanjudge.core.keyvalue import parse_settings

from .registry import DEFAULT_KIND, BackendKind


class BackendSpec(BaseModel):
    """Where and how to reach one model; `kind` is an engine of `registry.ENGINES` (openai: any
    OpenAI-compatible server, ollama: Ollama's native API, vllm: vLLM's offline engine,
    transformers: transformers in this process)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: BackendKind = DEFAULT_KIND
    model: str = Field(min_length=1, description="Model id / Ollama tag / served name / local path.")
    endpoints: tuple[str, ...] = Field(
        default=(), description="Server base URLs (openai: .../v1; ollama: http://host:11434); several = a pool."
    )
    api: Literal["chat", "completions", "prompt"] = Field(
        default="chat",
        description="openai only: 'completions' for models without a chat template (messages flattened to "
        "plain text); 'prompt' sends the last message verbatim to the completions API, for callers that "
        "applied the chat template themselves (the distilled judge does, to match training exactly).",
    )
    api_key_env: str | None = Field(default=None, description="Environment variable holding the API key, if any.")
    concurrency: int = Field(default=1, ge=1, description="Requests in flight per endpoint.")
    timeout_s: float = Field(default=600.0, gt=0, description="Seconds one call may take, generation included.")
    connect_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds to connect to a server (a dead host or port is found in seconds).",
    )
    health_check_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds the health check before each run (GET /v1/models or /api/tags) waits for an "
        "answer: a server that accepts connections but never replies is found in this time instead of after "
        "timeout_s × (retries + 1) per request. A one-slot server (llama-cpp-python's) answers only after the "
        "generation it is busy with, so this must exceed one generation.",
    )
    retries: int = Field(default=3, ge=0, description="Retries on connection errors, timeouts, 429 and 5xx.")
    backoff_s: float = Field(default=1.0, ge=0, description="First retry delay; doubles each retry.")
    max_consecutive_failures: int = Field(
        default=10, ge=1, description="Failure budget: after this many failed calls in a row the model is disabled."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Backend-specific options: ollama model options (num_ctx ...), vLLM engine or "
        "transformers from_pretrained arguments; for vllm and transformers also `grammar`, a GBNF grammar "
        "every reply is held to (constrained decoding), for ollama `format`, a JSON schema.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="openai only: server-specific request fields sent with every call, e.g. llama.cpp's "
        "`grammar` (GBNF) or vLLM's `structured_outputs: {grammar: ...}` to hold small models to the reply format.",
    )
    quantization: str | None = Field(default=None, description="Documentation only (e.g. q8_0).")

    @property
    def model_id(self) -> str:
        """The cache identity: the same model through any endpoint shares cached answers;
        anything that changes what it answers (the API, extra request fields) changes it."""
        base = f"{self.kind}:{self.model}" if self.api == "chat" else f"{self.kind}-{self.api}:{self.model}"
        if self.options.get("adapter"):  # a LoRA adapter changes the model
            base += f"+{self.options['adapter']}"
        changes = dict(self.extra_body)
        for field in ("grammar", "format"):  # constrained decoding (a grammar, Ollama's schema) changes the replies
            if self.options.get(field):
                changes[f"options.{field}"] = self.options[field]
        if not changes:
            return base
        blob = json.dumps(changes, sort_keys=True, ensure_ascii=False)
        return f"{base}#{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:12]}"


def parse_engine_args(values: Iterable[str], option: str = "--engine-arg") -> dict[str, Any]:
    """'KEY=VALUE' strings as engine arguments (vLLM `LLM(...)`, transformers `from_pretrained`),
    each value read as YAML: max_model_len=8192 is an int, enforce_eager=true a bool."""
    return parse_settings(values, option, "max_model_len=8192")
