"""The backend registry: one record per `kind`; every list of kinds or engines derives from it.

`BackendKind` (the `kind:` of a YAML model) is the Literal of the record names, written out so
that type checkers read it; `tests/test_backends.py` checks that the two agree. The distilled
judge's engines (`Judge.from_pretrained(engine=...)`, `spanjudge score --engine`) are the
records with `judge=True`; those with `engine_args=True` run in this process and take engine
arguments (`--engine-arg`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
    """

    name: str
    target: str
    summary: str
    packages: tuple[str, ...]
    install: str
    judge: bool = False
    engine_args: bool = False
    extra: str | None = None


BACKENDS: tuple[BackendRecord, ...] = (
    BackendRecord(
        "openai",
        "openai_compat:OpenAIBackend",
        "any OpenAI-compatible server (vLLM serve, Ollama's /v1, llama.cpp, SGLang, TGI)",
        ("openai",),
        "pip install openai",
        judge=True,
    ),
    BackendRecord(
        "ollama",
        "ollama_native:OllamaBackend",
        "Ollama's native API (model options such as num_ctx)",
        ("ollama", "httpx"),
        "pip install ollama",
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
    ),
    BackendRecord(
        "transformers",
        "transformers_local:TransformersBackend",
        "Hugging Face transformers in this process (CPU or GPU)",
        ("transformers", "torch"),
        "pip install transformers",
        judge=True,
        engine_args=True,
    ),
)

# the record names, written out for type checkers (a test checks they equal BACKENDS' names)
BackendKind = Literal["openai", "ollama", "vllm", "transformers"]
# the records with judge=True, in registry order (same test)
JudgeEngine = Literal["openai", "vllm", "transformers"]

BY_NAME: dict[str, BackendRecord] = {record.name: record for record in BACKENDS}
KINDS: tuple[str, ...] = tuple(BY_NAME)
JUDGE_ENGINES: tuple[str, ...] = tuple(r.name for r in BACKENDS if r.judge)
ENGINE_ARG_KINDS: tuple[str, ...] = tuple(r.name for r in BACKENDS if r.engine_args)


def one_of(names: tuple[str, ...]) -> str:
    """'a, b or c', for messages and --help."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
