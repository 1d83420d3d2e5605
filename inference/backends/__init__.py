"""The backend layer: one interface (`Backend.generate`) over every way to run a model.

    spec = BackendSpec(kind="openai", model="smollm2", endpoints=("http://127.0.0.1:8011/v1",))
    with CachedBackend(make_backend(spec), LLMCache("runs/cache.sqlite")) as backend:
        results = backend.generate([ChatRequest.user("Say hello.")])

Each kind lives in its own module and is imported only when a spec asks for it, so a
CPU machine never imports vLLM and a missing optional package is one clear error.
The kinds are the engines of `registry.ENGINES`, each declared by its module's `ENGINE`
(`engine.Engine`: what it needs and can do); YAML `kind:`, `score --engine` and `--engine-arg`
ask the declaration.

How to add an engine (say `sglang`), with probabilities and constraints if it has them:
1. `inference/backends/sglang_native.py`: a `Backend` subclass whose `__init__(spec)` takes a
   `BackendSpec` (a server: subclass `server.ServerBackend`, as `ollama_native.py` does), with
   `read_probabilities(request, evaluation)` if it reads them, ending in
   `ENGINE = Engine("sglang", SGLangBackend, ...)`: what it needs (packages, install hint) and can
   do (`serve`, `constrain`, `prefix_reuse_off`, `launch`; `read_probabilities` is the method; see `engine.py`).
2. `inference/backends/registry.py`: one line in `ENGINES`, "sglang": "module:ENGINE" (another
   package adds an entry point of the group `spanjudge.engines` instead).
3. `pyproject.toml`, only if its packages are optional: an extra named in the declaration's `extra`.
YAML kinds, `score --engine`, `--engine-arg` and `Judge.from_pretrained` ask the declaration;
tests/unit/test_recipes.py adds a toy engine that reads probabilities exactly so.
"""

from __future__ import annotations

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
from .engine import Engine, Serving, Wiring
from .registry import ENGINES, engine, engine_names, engines_that
from .spec import BackendKind, BackendSpec, parse_engine_args

__all__ = [
    "ENGINES",
    "Backend",
    "BackendError",
    "BackendKind",
    "BackendSpec",
    "CachedBackend",
    "CallFailure",
    "CallResult",
    "ChatRequest",
    "Completion",
    "Engine",
    "FailureKind",
    "LLMCache",
    "Message",
    "ResultCallback",
    "SamplingParams",
    "Serving",
    "Wiring",
    "engine",
    "engine_names",
    "make_backend",
    "parse_engine_args",
]


def make_backend(spec: BackendSpec) -> Backend:
    """The backend for a spec; BackendError (with the install hint) if it cannot work here.

    Only the chosen engine's module is imported, and its packages only when its backend is made."""
    try:
        declared = engine(spec.kind)
    except ImportError as error:  # a module-level import of the engine's own module
        raise BackendError(f"engine {spec.kind!r} cannot be imported: {error}") from None
    if (spec.extra_body or spec.api != "chat") and not declared.request_fields:
        field = "extra_body" if spec.extra_body else f"api {spec.api!r}"
        raise BackendError(
            f"model {spec.model!r}: {field} is for engines that take request fields "
            f"({engines_that('request_fields')}), not {spec.kind!r}"
        )
    try:
        return declared.backend(spec)  # type: ignore[call-arg]
    except ImportError as error:
        if error.name is None or error.name.split(".")[0] not in declared.packages:
            raise  # something else is broken: a bug to see, not an install hint to give
        package = error.name.split(".")[0]
        raise BackendError(f"backend {spec.kind!r} needs the {package!r} package: {declared.install}") from None
