"""The backend registry: one record per `kind`; everything about a kind is its record.

The `kind:` a YAML model may name (`BackendKind`, checked against the records when a file is
read), the distilled judge's engines (`Judge.from_pretrained(engine=...)`, `spanjudge score
--engine`: the records with `judge=True`), the kinds that take engine arguments (`--engine-arg`),
which engine is reached over HTTP and which reads token probabilities all derive from the
records, so a new backend is its module and one record here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator


@dataclass(frozen=True)
class BackendRecord:
    """One way to run a model.

    name:        the `kind` in YAML (`kind: openai`) and, for a judge engine, the `--engine`
    target:      "module:Class" inside `spanjudge.inference.backends`, imported only when used
    summary:     what it reaches, for docs and `--help`
    packages:    the top-level imports it needs (a missing one is an install hint, not a traceback)
    install:     how to install them
    judge:       the distilled judge may run on it (`Judge.from_pretrained(engine=name)`)
    engine_args: runs in this process; `options` / `--engine-arg` go to its engine
    extra:       the pip extra of spanjudge that installs its packages, if they are optional
    server:      reached over HTTP at `endpoints` (a judge on it needs `base_url`)
    judge_options: the `Judge.from_pretrained` arguments passed on to its engine's options
    probabilities: the judge can read its token probabilities on it (`probabilities=True`)
    """

    name: str
    target: str
    summary: str
    packages: tuple[str, ...]
    install: str
    judge: bool = False
    engine_args: bool = False
    extra: str | None = None
    server: bool = False
    judge_options: tuple[str, ...] = ()
    probabilities: bool = False


BACKENDS: tuple[BackendRecord, ...] = (
    BackendRecord(
        "openai",
        "openai_compat:OpenAIBackend",
        "any OpenAI-compatible server (vLLM serve, Ollama's /v1, llama.cpp, SGLang, TGI)",
        ("openai",),
        "pip install openai",
        judge=True,
        server=True,
    ),
    BackendRecord(
        "ollama",
        "ollama_native:OllamaBackend",
        "Ollama's native API (model options such as num_ctx; constrained replies through its JSON schema)",
        ("ollama", "httpx"),
        "pip install ollama",
        judge=True,
        server=True,
    ),
    BackendRecord(
        "vllm",
        "vllm_offline:VLLMBackend",
        "vLLM's offline batch engine in this process (GPU)",
        ("vllm",),
        "pip install 'spanjudge[vllm]' (needs a CUDA GPU)",
        judge=True,
        engine_args=True,
        extra="vllm",
        judge_options=("reuse_prefix",),
        probabilities=True,
    ),
    BackendRecord(
        "llamacpp",
        "llamacpp_local:LlamaCppBackend",
        "llama.cpp in this process: a GGUF and a GGUF LoRA (CPU); engine option gguf=PATH, lora=PATH",
        ("llama_cpp", "transformers"),
        "pip install 'spanjudge[llamacpp]'",
        judge=True,
        engine_args=True,
        extra="llamacpp",
        judge_options=("reuse_prefix",),
        probabilities=True,
    ),
    BackendRecord(
        "transformers",
        "transformers_local:TransformersBackend",
        "Hugging Face transformers in this process (CPU or GPU)",
        ("transformers", "torch"),
        "pip install transformers",
        judge=True,
        engine_args=True,
        judge_options=("batch_size", "dtype", "reuse_prefix"),
        probabilities=True,
    ),
)

BY_NAME: dict[str, BackendRecord] = {record.name: record for record in BACKENDS}
KINDS: tuple[str, ...] = tuple(BY_NAME)
JUDGE_ENGINES: tuple[str, ...] = tuple(r.name for r in BACKENDS if r.judge)
ENGINE_ARG_KINDS: tuple[str, ...] = tuple(r.name for r in BACKENDS if r.engine_args)
PROBABILITY_ENGINES: tuple[str, ...] = tuple(r.name for r in BACKENDS if r.judge and r.probabilities)
# why the server engines cannot: what a probability reader needs is each prompt token's log-probability
NO_PROMPT_LOGPROBS = "a server's API returns no log-probabilities of the prompt's tokens to read them from"


def _known_kind(name: str) -> str:
    if name not in BY_NAME:
        raise ValueError(f"unknown backend kind {name!r}; choose {one_of(KINDS)}")
    return name


BackendKind = Annotated[str, AfterValidator(_known_kind)]
"""A backend kind in a pydantic model (a YAML model's `kind:`): a record name of `BACKENDS`."""


def judge_engine(name: str) -> BackendRecord:
    """The record of judge engine `name`; ValueError naming the engines when it is none."""
    record = BY_NAME.get(name)
    if record is None or not record.judge:
        raise ValueError(f"engine {name!r} is not a judge engine; choose {one_of(JUDGE_ENGINES)}")
    return record


def one_of(names: tuple[str, ...]) -> str:
    """'a, b or c', for messages and --help."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
