"""The engine registry: one line per engine; everything about an engine is its module's `ENGINE`.

The `kind:` a YAML model may name (`BackendKind`, checked against the names when a file is read),
the distilled judge's engines (`Judge.from_pretrained(engine=...)`, `spanjudge score --engine`)
and what each needs and can do (its `engine.Engine` declaration) all come from here, so a new
engine is its module and one line in `ENGINES` (or an entry point of the group
`spanjudge.engines` in another package: `core.registry`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from spanjudge.core.errors import InputError
from spanjudge.core.registry import Registry, one_of

from .engine import Engine

ENGINES: Registry[Engine] = Registry(
    "engine",
    "spanjudge.engines",
    {
        "openai": "spanjudge.inference.backends.openai_compat:ENGINE",
        "ollama": "spanjudge.inference.backends.ollama_native:ENGINE",
        "vllm": "spanjudge.inference.backends.vllm_offline:ENGINE",
        "llamacpp": "spanjudge.inference.backends.llamacpp.local:ENGINE",
        "llamacpp-server": "spanjudge.inference.backends.llamacpp.server:ENGINE",
        "transformers": "spanjudge.inference.backends.transformers_local:ENGINE",
    },
    Engine,
)
DEFAULT_KIND = "openai"  # a YAML model's `kind:` when it names none
DEFAULT_JUDGE_ENGINE = "transformers"  # the distilled judge's engine when none is named
# why the server engines cannot: what a probability reader needs is each prompt token's log-probability
NO_PROMPT_LOGPROBS = "a server's API returns no log-probabilities of the prompt's tokens to read them from"


def engine_names() -> tuple[str, ...]:
    return ENGINES.names()


def engine(name: str) -> Engine:
    """The declaration of engine `name` (its module imported on first use); InputError naming the engines."""
    return ENGINES.load(name)


def engines_that(can: str) -> str:
    """'a, b or c': the engines whose declaration has `can` (a capability: read_probabilities, in_process
    ...) true, for messages."""
    return one_of([name for name, declared in ENGINES.load_all().items() if getattr(declared, can)])


def engines_taking(option: str) -> tuple[str, ...]:
    """The engines whose declaration takes the judge option `option` (`Engine.judge_options`)."""
    return tuple(name for name, declared in ENGINES.load_all().items() if option in declared.judge_options)


def _known_kind(name: str) -> str:
    try:
        return ENGINES.check(name)
    except InputError as error:
        raise ValueError(str(error)) from None


BackendKind = Annotated[str, AfterValidator(_known_kind)]
"""An engine in a pydantic model (a YAML model's `kind:`): a name of `ENGINES`."""
