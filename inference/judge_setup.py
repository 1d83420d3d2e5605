"""How a distilled judge is wired to its engine: the model's spec and the judge's setup, from the judge's
options and what the engine declares it needs and can do (`backends.engine.Engine`), never its name.

- A served engine (`serve`) needs `base_url`, unless it starts its own server (`launch`: it then takes
  engine arguments, and the judge's tokenizer folder as `tokenizer`). It is sent the prompt the judge
  rendered with the model's chat template when it takes one (`Serving.templated_prompt`) and a
  tokenizer is at hand, so it reads exactly the text training used; else the server applies its own.
- An in-process engine loads the model (and the adapter) itself; the judge options it takes
  (`judge_options`) and the user's engine arguments (which win) become its options.
- `constrained=True` adds the engine's own constraint (`constrain`: a GBNF option, request fields,
  or a JSON schema whose replies come back in JSON form); `reuse_prefix=False` adds what the engine
  is told then (`prefix_reuse_off`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.errors import InputError, SpanjudgeError

from .backends import BackendSpec, Engine, Wiring, engine
from .backends.base import ChatRequest
from .backends.registry import NO_PROMPT_LOGPROBS, engines_taking, engines_that
from .chat import render_chat
from .contract import Evaluation
from .contract.grammar import errors_within
from .decisions import DecisionRule, effective_rule, stored_rule
from .hf_models import load_tokenizer
from .judge_options import JudgeOptions, not_taken
from .probabilities import ReplyProbabilities
from .prompts import PromptTemplate

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# reads the judge's probabilities along a parsed evaluation, from the request the model was sent
ProbabilitySource = Callable[[ChatRequest, Evaluation], ReplyProbabilities]


@dataclass(frozen=True)
class JudgeSetup:
    """How a judge talks to its engine (`Judge(backend, options, catalog, setup)`).

    tokenizer:          measures prompts to fit `max_context` and renders the chat template (None: neither)
    templated_prompt:   the backend is sent the finished templated prompt, not a user turn
    json_replies:       replies come in the contract's JSON form, rendered to the text evaluation to parse
    prompt_template:    the judge's prompt (None: the built-in one)
    probability_reader: reads probabilities for an engine that does not itself (a served llama.cpp judge)
    decisions:          the decision rule (`decisions.py`) applied to each reply; decisions_source: "stored"
                        (with the judge, fitted or written there by hand) or "given" (thresholds as options);
                        decisions_skipped: why the rule stored with the judge is not (its engine cannot read
                        probabilities)
    """

    tokenizer: PreTrainedTokenizerBase | None = None
    templated_prompt: bool = False
    max_context: int | None = None
    json_replies: bool = False
    name: str = "judge"
    prompt_template: PromptTemplate | None = None
    probability_reader: ProbabilitySource | None = None
    decisions: DecisionRule | None = None  # applied to each reply read with its probabilities
    decisions_source: str = "given"
    decisions_skipped: str | None = None  # why the rule stored with the judge is not applied


def judge_engine(options: JudgeOptions, probability_reader: ProbabilitySource | None = None) -> Engine:
    """The engine the options name, checked against what they ask of it; one InputError if it cannot."""
    declared = engine(options.engine)
    if options.probabilities and not declared.read_probabilities and probability_reader is None:
        why = (
            f"{NO_PROMPT_LOGPROBS}; a llama.cpp judge on a server: --engine llamacpp-server starts one and reads them, "
            "or give probability_reader= for one you serve"
            if declared.serve
            else ""
        )
        raise InputError(
            f"probabilities are read on the {engines_that('read_probabilities')} engines, not {declared.name!r}"
            + (f" ({why})" if why else "")
        )
    if declared.launch is not None and options.base_url:
        raise InputError(f"engine {declared.name!r} starts its own server: give no base_url")
    refused = not_taken(options, declared.judge_options)
    if refused:
        takers = "; ".join(f"{name}: engine {' or '.join(engines_taking(name))}" for name in refused)
        raise InputError(f"engine {declared.name!r} does not take {', '.join(refused)} ({takers})")
    return declared


def wire(
    declared: Engine, o: JudgeOptions, *, location: str, adapter: str | None, model: str
) -> tuple[BackendSpec, JudgeSetup]:
    """The backend's spec and the judge's setup for a judge at `location` (its adapter folder, if any, and
    the model to load) on engine `declared`."""
    wiring = [
        declared.constrain(errors_within(o.max_new_tokens)) if o.constrained else Wiring(),
        declared.prefix_reuse_off if o.reuse_prefix is False else Wiring(),
    ]
    added: dict[str, Any] = {key: value for w in wiring for key, value in w.options.items()}
    fields: dict[str, Any] = {key: value for w in wiring for key, value in w.request_fields.items()}
    tokenizer_folder = adapter or (model if Path(model).is_dir() else None)
    if declared.serve:
        if declared.launch is None and not o.base_url:
            raise InputError(f"engine {declared.name!r} needs base_url (e.g. {declared.serve.endpoint_example})")
        tokenizer = (
            load_tokenizer(tokenizer_folder, trust_remote_code=o.trust_remote_code) if tokenizer_folder else None
        )
        templated = tokenizer is not None and declared.serve.templated_prompt
        # an engine that starts its own server reads probabilities in this process with the judge's tokenizer
        launched = {"tokenizer": tokenizer_folder} if declared.launch is not None and tokenizer_folder else {}
        spec = BackendSpec(
            kind=declared.name,
            model=o.served_model or Path(location).name or "judge",
            endpoints=(o.base_url,) if o.base_url else (),
            api="prompt" if templated else "chat",
            concurrency=o.concurrency,
            timeout_s=o.timeout_s,
            options={**(o.engine_options or {}), **added, **launched},
            extra_body=fields,
        )
        context = o.max_context
    else:
        tokenizer = load_tokenizer(tokenizer_folder or model, trust_remote_code=o.trust_remote_code)
        templated = False
        engine_kwargs: dict[str, Any] = {"trust_remote_code": o.trust_remote_code}
        engine_kwargs.update({name: getattr(o, name) for name in declared.judge_options})
        engine_kwargs.update(o.engine_options or {})  # the user's engine arguments win over the defaults above
        ours = sorted(({"adapter"} | declared.constrain(1).options.keys()) & engine_kwargs.keys())
        if ours:
            raise SpanjudgeError(
                f"engine arguments {ours} are set by the judge (the adapter it loads, constrained=True)"
            )
        spec = BackendSpec(
            kind=declared.name,
            model=model,
            options={**engine_kwargs, **added, **({"adapter": adapter} if adapter else {})},
        )
        context = o.max_context or _model_context(model)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        render_chat(tokenizer, [{"role": "user", "content": "?"}])  # a template that cannot render: one line now
    json_replies = any(w.json_replies for w in wiring)
    return spec, JudgeSetup(tokenizer, templated, context, json_replies, name=location)


def _model_context(model: str) -> int | None:
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    return int(value) if value is not None else None


def decision_rule_for(
    options: JudgeOptions, location: str, probability_reader: ProbabilitySource | None = None
) -> tuple[DecisionRule | None, str | None]:
    """The decision rule the judge at `location` applies (`decisions.effective_rule`), and why a rule stored
    with it is not applied: an engine that cannot read probabilities judges with its written replies then
    (said, never silent); thresholds given by hand on such an engine are refused by `judge_engine`."""
    return applied_rule(options, stored_rule(Path(location).expanduser()), probability_reader)


def applied_rule(
    options: JudgeOptions, stored: DecisionRule | None, probability_reader: ProbabilitySource | None
) -> tuple[DecisionRule | None, str | None]:
    """`decision_rule_for` with the judge's stored rule already read (`stored`: the very object, so that the
    judge can tell its own rule from thresholds given as options)."""
    rule = effective_rule(options, stored)
    if rule is None or options.probabilities or rule is not stored:
        return rule, None
    declared = engine(options.engine)
    if declared.read_probabilities or probability_reader is not None:
        return rule, None
    return None, (
        f"the decision rule stored with the judge ({rule.describe()}) needs its probabilities, which the "
        f"{declared.name} engine does not read: its written replies are used"
    )
