"""The backend layer: one interface (`Backend.generate`) over every way to run a model.

    spec = BackendSpec(kind="openai", model="smollm2", endpoints=("http://127.0.0.1:8011/v1",))
    with CachedBackend(make_backend(spec), LLMCache("runs/cache.sqlite")) as backend:
        results = backend.generate([ChatRequest.user("Say hello.")])

Each kind lives in its own module and is imported only when a spec asks for it, so a
CPU machine never imports vLLM and a missing optional package is one clear error.
"""

from __future__ import annotations

import importlib

from .base import (
    Backend,
    BackendError,
    CallFailure,
    CallResult,
    ChatRequest,
    Completion,
    FailureKind,
    Message,
    ResultCallback,
    SamplingParams,
)
from .cache import CachedBackend, LLMCache
from .spec import BackendKind, BackendSpec, parse_engine_args

__all__ = [
    "Backend",
    "BackendError",
    "BackendKind",
    "BackendSpec",
    "CachedBackend",
    "CallFailure",
    "CallResult",
    "ChatRequest",
    "Completion",
    "FailureKind",
    "LLMCache",
    "Message",
    "ResultCallback",
    "SamplingParams",
    "make_backend",
    "parse_engine_args",
]

# kind -> (module, class, the packages it imports, how to install them)
_KINDS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "openai": ("openai_compat", "OpenAIBackend", ("openai",), "pip install openai"),
    "ollama": ("ollama_native", "OllamaBackend", ("ollama", "httpx"), "pip install ollama"),
    "vllm": ("vllm_offline", "VLLMBackend", ("vllm",), "pip install 'spanjudge[vllm]' (needs a CUDA GPU)"),
    "transformers": (
        "transformers_local",
        "TransformersBackend",
        ("transformers", "torch"),
        "pip install transformers",
    ),
}


def make_backend(spec: BackendSpec) -> Backend:
    """The backend for a spec; BackendError (with the install hint) if it cannot work here.

    Modules are imported here, not at the top, so that only the chosen kind's packages
    are needed (and loaded).
    """
    if spec.extra_body and spec.kind != "openai":
        raise BackendError(f"model {spec.model!r}: extra_body is for kind 'openai' only, not {spec.kind!r}")
    if spec.api != "chat" and spec.kind != "openai":
        raise BackendError(f"model {spec.model!r}: api {spec.api!r} is for kind 'openai' only, not {spec.kind!r}")
    module_name, class_name, packages, hint = _KINDS[spec.kind]
    try:
        backend_class: type[Backend] = getattr(importlib.import_module(f"{__name__}.{module_name}"), class_name)
        return backend_class(spec)  # type: ignore[call-arg]
    except ImportError as error:
        if error.name is None or error.name.split(".")[0] not in packages:
            raise  # something else is broken: a bug to see, not an install hint to give
        raise BackendError(f"backend {spec.kind!r} needs the {error.name.split('.')[0]!r} package: {hint}") from None
