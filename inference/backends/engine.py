"""What an engine is and what it can do: the declaration each engine module ends with (`ENGINE = Engine(...)`).

The judge, `spanjudge score`, YAML `kind:` checks and the annotate pipeline ask an engine's
declaration — never its name — what it needs and can do:

- `backend`: the `Backend` class that generates (every engine can);
- `serve`: reached over HTTP (`Serving`: the endpoint to show in messages, whether it takes the
  prompt the judge templated itself, whether it takes server-specific request fields); None for
  an engine that runs in this process and takes engine arguments (`--engine-arg`);
- `read_probabilities`: its backend reads the judge's probabilities along a reply: the backend has
  `read_probabilities(request, evaluation)` (see `probabilities.py`); the method is the declaration;
- `constrain`: how it holds replies to the output contract (`Wiring` for a given number of error
  blocks: a GBNF engine option, request fields, or a JSON schema whose replies come back in the
  contract's JSON form);
- `prefix_reuse_off`: what it is sent when the judge turns prefix reuse off (an in-process engine
  takes `reuse_prefix` among its `judge_options` instead);
- `keep_loaded`: options that keep a model loaded between requests (the annotate pipeline's
  `one_model_at_a_time`);
- `launch`: the engine starts its own server (`Launch`): from its engine options, on a free port of
  127.0.0.1, healthy once it has computed a first completion, a crash reported as one (its exit signal
  and log) at start and in every call that fails after, stopped when the last backend using it closes
  (`launched.py`). Such an engine is reached over HTTP (`serve`) but needs no `base_url`.

Adding an engine is one module ending in its declaration and one line in `registry.ENGINES` (or an
entry point of the group `spanjudge.engines` in another package).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..contract.grammar import judge_grammar
from .base import Backend


@dataclass(frozen=True)
class Wiring:
    """What an engine adds to a model's spec for one judge setting."""

    options: Mapping[str, Any] = field(default_factory=dict)  # engine options (BackendSpec.options)
    request_fields: Mapping[str, Any] = field(default_factory=dict)  # sent with every request (BackendSpec.extra_body)
    json_replies: bool = False  # replies come in the contract's JSON form: rendered to the text evaluation to parse


@dataclass(frozen=True)
class Serving:
    """An engine reached over HTTP at a spec's `endpoints`."""

    endpoint_example: str  # the form of an endpoint URL, for messages
    # takes a prompt the judge rendered with the model's chat template (the completions API), so the
    # judge reads exactly the text training used; else the server applies its own template
    templated_prompt: bool = False
    request_fields: bool = False  # takes server-specific request fields (`extra_body`) and `api` other than chat


class Launched(Protocol):
    """A model server an engine started: where it answers, why it died (None while it runs), how it ends."""

    @property
    def base_url(self) -> str: ...

    def crash_report(self) -> str | None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Launch:
    """How an engine starts its own server.

    start:   the server for these engine options, returned running and healthy (it has answered a first
             completion); a server that dies on the way raises with its crash report
    options: the engine options the server takes (the same ones give the same server: `launched.py` shares it)
    """

    start: Callable[[Mapping[str, Any]], Launched]
    options: tuple[str, ...]


def grammar_option(max_errors: int) -> Wiring:
    """An in-process engine holds replies to the contract's GBNF grammar, given as its option `grammar`."""
    return Wiring(options={"grammar": judge_grammar(max_errors=max_errors)})


def no_constraint(max_errors: int) -> Wiring:
    """An engine that cannot hold replies to a grammar: they are parsed, and retried, as without one."""
    return Wiring()


@dataclass(frozen=True)
class Engine:
    """One engine (see the module docstring).

    packages:      the top-level imports it needs (a missing one is an install hint, not a traceback)
    install:       how to install them
    extra:         the pip extra of spanjudge that installs them, if they are optional
    judge_options: the `JudgeOptions` it takes of those only some engines take (`judge_options.ENGINE_SPECIFIC`:
                   any other given a value is refused), and `reuse_prefix` where an in-process engine takes it;
                   an in-process engine gets them among its engine options
    reads_gguf:    its model is a GGUF file (engine option `gguf`) and an adapter a GGUF LoRA (`lora`)
    """

    name: str
    backend: type[Backend]
    summary: str
    packages: tuple[str, ...]
    install: str
    extra: str | None = None
    serve: Serving | None = None
    judge_options: tuple[str, ...] = ()
    constrain: Callable[[int], Wiring] = no_constraint
    prefix_reuse_off: Wiring = field(default_factory=Wiring)
    keep_loaded: Mapping[str, Any] = field(default_factory=dict)
    launch: Launch | None = None
    reads_gguf: bool = False

    @property
    def in_process(self) -> bool:
        """Runs in this process and takes engine arguments (`--engine-arg`, `engine_options`)."""
        return self.serve is None

    @property
    def read_probabilities(self) -> bool:
        """Its backend reads the judge's probabilities: it has the method (declared there, once)."""
        return callable(getattr(self.backend, "read_probabilities", None))

    @property
    def takes_engine_args(self) -> bool:
        """Takes engine arguments: an in-process engine's, or those a launched server starts with."""
        return self.serve is None or self.launch is not None

    @property
    def request_fields(self) -> bool:
        return self.serve is not None and self.serve.request_fields
