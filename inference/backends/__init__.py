"""The backend layer: one interface (`Backend.generate`) over every way to run a model.

    spec = BackendSpec(kind="openai", model="smollm2", endpoints=("http://127.0.0.1:8011/v1",))
    with CachedBackend(make_backend(spec), LLMCache("runs/cache.sqlite")) as backend:
        results = backend.generate([ChatRequest.user("Say hello.")])

Each kind lives in its own module and is imported only when a spec asks for it, so a
CPU machine never imports vLLM and a missing optional package is one clear error.
The kinds are the records of `registry.BACKENDS`; the `kind` Literal, the distilled judge's
engines (`score --engine`) and the kinds that take `--engine-arg` derive from them.

How to add a backend (say `sglang`):
1. `inference/backends/sglang_native.py`: a `Backend` subclass whose `__init__(spec)` takes a
   `BackendSpec` (a server: subclass `server.ServerBackend`, as `ollama_native.py` does).
2. `inference/backends/registry.py`: one `BackendRecord("sglang", "sglang_native:SGLangBackend",
   ...)` in `BACKENDS`: its packages and install hint; `judge=True` if the distilled judge may
   run on it, `server=True` if it is reached over HTTP, `engine_args=True` if it runs in this
   process and takes engine arguments (`judge_options` names the judge's own arguments it takes).
3. `pyproject.toml`, only if its packages are optional: an extra named in the record's `extra`.
YAML kinds, `score --engine`, `--engine-arg` and `Judge.from_pretrained` read the record;
tests/unit/test_recipes.py adds a toy backend exactly so.
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
from .registry import BACKENDS, BY_NAME, JUDGE_ENGINES, BackendRecord, judge_engine
from .spec import BackendKind, BackendSpec, parse_engine_args

__all__ = [
    "BACKENDS",
    "JUDGE_ENGINES",
    "Backend",
    "BackendError",
    "BackendKind",
    "BackendRecord",
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
    "judge_engine",
    "make_backend",
    "parse_engine_args",
]


def make_backend(spec: BackendSpec) -> Backend:
    """The backend for a spec; BackendError (with the install hint) if it cannot work here.

    Modules are imported here, not at the top, so that only the chosen kind's packages
    are needed (and loaded).
    """
    if spec.extra_body and spec.kind != "openai":
        raise BackendError(f"model {spec.model!r}: extra_body is for kind 'openai' only, not {spec.kind!r}")
    if spec.api != "chat" and spec.kind != "openai":
        raise BackendError(f"model {spec.model!r}: api {spec.api!r} is for kind 'openai' only, not {spec.kind!r}")
    record = BY_NAME[spec.kind]
    module_name, class_name = record.target.split(":")
    try:
        backend_class: type[Backend] = getattr(importlib.import_module(f"{__name__}.{module_name}"), class_name)
        return backend_class(spec)  # type: ignore[call-arg]
    except ImportError as error:
        if error.name is None or error.name.split(".")[0] not in record.packages:
            raise  # something else is broken: a bug to see, not an install hint to give
        package = error.name.split(".")[0]
        raise BackendError(f"backend {spec.kind!r} needs the {package!r} package: {record.install}") from None
