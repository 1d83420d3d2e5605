"""LLM-made perturbations: prompt templates run through the backend layer, validated, frozen.

    perturber = LLMPerturber(spec, "runs/perturb/summeval.jsonl")
    results = perturber.perturb(get("dhp.fictional_entities.minor"), [("doc1", text)], seed=0)
    print(perturber.summary)   # made / reused / rejected by reason

Why frozen: an LLM perturbation is not reproducible bit for bit (servers differ, models
change), so a benchmark is built once. Every outcome of a model reply (a validated text or
a validation rejection) is appended as one JSONL line keyed by (perturbation key, item id,
seed) with its provenance (model, prompt sha256, seed, template, time) and the perturber that
made it (model, sampling, prompt templates); a re-run reuses those lines and calls no model.
Failed calls (dead server) are never frozen: they come back as `Rejected("call failed: ...")`
to retry later, and if every call of a batch fails the whole batch raises `BackendError`
naming the model and the endpoint.
The store belongs to one perturber: opening it with another model, sampling or prompt
templates is refused with one line naming the line frozen by the other (never reused under
the new model's name); use another store to build with another perturber.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from spanjudge.core.configio import configs_dir, read_yaml
from spanjudge.core.errors import InputError
from spanjudge.core.jsonl import JsonlStore
from spanjudge.core.progress import Advance, Tracker
from spanjudge.eval.perturb.perturbations import (
    INJECTION_ASPECTS,
    Outcome,
    Perturbation,
    Perturbed,
    Rejected,
    changed_spans,
    derive_seed,
)
from spanjudge.inference.backends import (
    Backend,
    BackendError,
    BackendSpec,
    CallFailure,
    CallResult,
    ChatRequest,
    Completion,
    SamplingParams,
    make_backend,
)
from spanjudge.inference.prompts import fence

# Validation bounds: a rewrite, insertion or abbreviation stays within 0.3x-3x of the
# original length; outside that the model answered something else (a summary of the task,
# a run-away continuation).
MIN_LENGTH_RATIO = 0.3
MAX_LENGTH_RATIO = 3.0

# A reply that opens like this (and the original does not contain it) is a refusal.
_REFUSALS = re.compile(
    r"\b(I can(?:'|’)?t|I cannot|I can not|I(?:'|’)m sorry|I am sorry|I apologi[sz]e|as an AI|"
    r"I(?:'|’)m (?:not able|unable) to|I am (?:not able|unable) to|I won(?:'|’)t|I will not)\b",
    re.IGNORECASE,
)
_FENCED = re.compile(r"^(`{3,})[^\n`]*\n(.*)\n\1\s*$", re.DOTALL)
_PREAMBLE = re.compile(
    r"^(?:(?:here is|here's|sure|certainly|okay|ok)\b[^\n]{0,120}:|"
    r"(?:revised|modified|new|rewritten|perturbed|changed) (?:summary|text|response|version)\s*:)[ \t]*\n?",
    re.IGNORECASE,
)
_QUOTES = (('"', '"'), ("“", "”"), ("'", "'"))


def clean_reply(reply: str, original: str) -> str:
    """The text of a reply, with conservative clean-up only: surrounding whitespace; a fence
    around the WHOLE reply; one leading "Here is the revised text:" / "Revised summary:"
    line; quotes around the whole reply when the original is not quoted. Anything else is
    left to validation: trimming more would risk cutting the perturbation itself."""
    text = _PREAMBLE.sub("", reply.strip(), count=1).strip()
    match = _FENCED.match(text)
    if match:
        text = match.group(2).strip()
    for left, right in _QUOTES:
        quoted = len(text) > 1 and text.startswith(left) and text.endswith(right)
        if quoted and not original.strip().startswith(left):
            text = text[1:-1].strip()
    return text


def validate(reply: str, original: str) -> str | Rejected:
    """The cleaned reply, or why it is no perturbation: empty, unchanged (whitespace
    normalised), a refusal (a refusal phrase the original lacks), or a length ratio outside
    [MIN_LENGTH_RATIO, MAX_LENGTH_RATIO]."""
    text = clean_reply(reply, original)
    if not text:
        return Rejected("empty: the reply has no text")
    if " ".join(text.split()) == " ".join(original.split()):
        return Rejected("unchanged: the reply repeats the original")
    refusal = _REFUSALS.search(text[:300])
    if refusal and not _REFUSALS.search(original):
        return Rejected(f"refusal: the reply says {refusal.group(0)!r}")
    ratio = len(text) / max(1, len(original))
    if not MIN_LENGTH_RATIO <= ratio <= MAX_LENGTH_RATIO:
        return Rejected(f"length: {ratio:.2f}x the original, outside [{MIN_LENGTH_RATIO}, {MAX_LENGTH_RATIO}]")
    return text


# -- templates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptTemplates:
    """configs/perturb/prompts.yaml: a shared preamble and output format, one instruction per key."""

    preamble: str
    output_format: str
    templates: Mapping[str, str]

    @classmethod
    def load(cls, path: Path | None = None) -> PromptTemplates:
        path = path or configs_dir() / "perturb" / "prompts.yaml"
        data = cast(dict[str, Any], read_yaml(path))  # its parts are checked below
        try:
            return cls(data["preamble"].strip(), data["output_format"].strip(), dict(data["templates"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{path}: needs preamble, output_format and templates ({exc})") from None

    def render(self, perturbation: Perturbation, text: str, rng: random.Random) -> str:
        """The full prompt for one text; error injection draws its sub-aspects from `rng`."""
        if perturbation.template not in self.templates:
            raise InputError(f"no prompt template {perturbation.template!r} for perturbation {perturbation.key!r}")
        fields = {"n": "", "errors": ""}
        if perturbation.paper == "001":
            fields = _injection_fields(perturbation, rng)
        instruction = self.templates[str(perturbation.template)].format_map(fields).strip()
        return f"{self.preamble}\n\n{instruction}\n\nText:\n{fence(text)}\n\n{self.output_format}"


def _injection_fields(perturbation: Perturbation, rng: random.Random) -> dict[str, str]:
    """001: n errors, each against a sub-aspect drawn at random (with replacement, as in the paper)."""
    dataset, aspect, n = perturbation.params["dataset"], perturbation.params["aspect"], perturbation.params["n"]
    subs = INJECTION_ASPECTS[str(dataset)][str(aspect)]
    lines = []
    for number in range(1, int(n) + 1):  # type: ignore[call-overload]
        sub = rng.choice(subs)
        lines.append(f"Error {number}: {aspect} / {sub.name} (the text should satisfy: {sub.description})")
    return {"n": str(n), "errors": "\n".join(lines)}


# -- the frozen store -----------------------------------------------------------------------


FrozenKey = tuple[str, str, int]  # perturbation key, item id, seed


@dataclass(frozen=True)
class Frozen:
    """One frozen line: its outcome, where it is ("file:line") and the perturber that made it
    (None on lines frozen before perturbers were recorded: their provenance's model stands in)."""

    outcome: Outcome
    where: str
    perturber: Mapping[str, Any] | None


def _frozen_row(where: str, record: dict[str, Any]) -> tuple[FrozenKey, Frozen]:
    try:
        outcome = _outcome(record)
        perturber = record.get("perturber")
        if perturber is None and isinstance(outcome, Perturbed) and "model" in outcome.provenance:
            perturber = {"model": outcome.provenance["model"]}
        return (record["key"], record["item_id"], record["seed"]), Frozen(outcome, where, perturber)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{where}: damaged frozen perturbation ({exc})") from None


def _describe(perturber: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {value!r}" for name, value in perturber.items())


class FrozenStore:
    """JSONL of frozen outcomes, one line per (perturbation key, item id, seed): a `JsonlStore`
    (one writer; a torn last line is cut before the next append; a damaged line anywhere else
    is an InputError naming file:line). `perturber` (model, sampling, templates) is written on
    every line, and a store holding another perturber's lines is refused when it opens."""

    def __init__(self, path: Path | str, perturber: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.perturber = dict(perturber or {})
        self._store: JsonlStore[FrozenKey, Frozen] = JsonlStore(self.path, _frozen_row)
        self.entries = self._store.found
        try:
            self._check_perturber()
        except BaseException:
            self._store.close()
            raise

    def _check_perturber(self) -> None:
        for frozen in self.entries.values():
            recorded = frozen.perturber
            if recorded is None or not self.perturber:
                continue
            differs = [name for name in recorded if recorded[name] != self.perturber.get(name)]
            if differs:
                old = {name: recorded[name] for name in differs}
                new = {name: self.perturber.get(name) for name in differs}
                raise InputError(
                    f"{frozen.where}: frozen by another perturber ({_describe(old)}, not {_describe(new)} as now); "
                    f"another perturber's perturbations are never reused: build into another folder, or remove "
                    f"{self.path} to rebuild"
                )

    def get(self, key: str, item_id: str, seed: int) -> Outcome | None:
        frozen = self._store.get((key, item_id, seed))
        return frozen.outcome if frozen is not None else None

    def put(self, key: str, item_id: str, seed: int, outcome: Outcome) -> None:
        """Append and flush at once, so a crash loses at most the line being written."""
        record: dict[str, Any] = {"key": key, "item_id": item_id, "seed": seed, "perturber": self.perturber}
        if isinstance(outcome, Perturbed):
            record |= {"text": outcome.text, "spans": outcome.spans, "removed": outcome.removed}
            record["provenance"] = dict(outcome.provenance)
        else:
            record["rejected"] = outcome.reason
        self._store.append([record])

    def close(self) -> None:
        self._store.close()


def _outcome(record: Mapping[str, Any]) -> Outcome:
    if "rejected" in record:
        return Rejected(str(record["rejected"]))
    spans = tuple((int(s), int(e)) for s, e in record["spans"])
    removed = tuple((int(s), int(e)) for s, e in record["removed"])
    return Perturbed(str(record["text"]), spans, removed, dict(record["provenance"]))


# -- the perturber --------------------------------------------------------------------------


@dataclass
class PerturbSummary:
    """Counts over a perturber's runs: made (new model replies), reused (frozen), rejected by reason."""

    made: int = 0
    reused: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    def reject(self, reason: str) -> None:
        self.rejected[reason.split(":", 1)[0]] += 1

    def __str__(self) -> str:
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(self.rejected.items())) or "none"
        return f"made {self.made}, reused {self.reused}, rejected {sum(self.rejected.values())} ({reasons})"


class LLMPerturber:
    """Makes LLM perturbations through one backend and freezes them in one JSONL store."""

    def __init__(
        self,
        backend: Backend | BackendSpec,
        store: Path | str,
        sampling: SamplingParams | None = None,
        templates: PromptTemplates | None = None,
    ) -> None:
        self.backend = make_backend(backend) if isinstance(backend, BackendSpec) else backend
        # sampled (seeded per item) so that reruns with another seed give other rewrites
        self.sampling = sampling or SamplingParams(temperature=0.7, top_p=0.95, max_tokens=1024)
        self.templates = templates or PromptTemplates.load()
        self.summary = PerturbSummary()
        try:
            self.store = FrozenStore(store, self.identity())
        except BaseException:
            self.backend.close()
            raise

    def identity(self) -> dict[str, Any]:
        """What makes this perturber's replies what they are: the model, the sampling (less the
        per-item seed) and a hash of the prompt templates."""
        templates = json.dumps(
            [self.templates.preamble, self.templates.output_format, dict(self.templates.templates)], sort_keys=True
        )
        return {
            "model": self.backend.model_id,
            "sampling": self.sampling.model_dump(mode="json", exclude={"seed"}),
            "templates_sha256": hashlib.sha256(templates.encode("utf-8")).hexdigest()[:16],
        }

    def close(self) -> None:
        self.backend.close()
        self.store.close()

    def __enter__(self) -> LLMPerturber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def perturb(
        self,
        perturbation: Perturbation,
        items: Sequence[tuple[str, str]],
        seed: int,
        progress: Tracker | None = None,
    ) -> dict[str, Outcome]:
        """Outcomes per item id: frozen ones reused without a call, the rest asked for
        (`progress` gets one row, labelled with the perturbation's key)."""
        if perturbation.template is None:
            raise InputError(f"perturbation {perturbation.key!r} is rule-based: use its apply()")
        results: dict[str, Outcome] = {}
        pending: list[tuple[str, str, int, str]] = []  # item id, text, item seed, prompt
        for item_id, text in items:
            item_seed = derive_seed(seed, item_id, perturbation.key)
            frozen = self.store.get(perturbation.key, item_id, item_seed)
            if frozen is not None:
                results[item_id] = frozen
                self.summary.reused += 1
                if isinstance(frozen, Rejected):
                    self.summary.reject(frozen.reason)
                continue
            prompt = self.templates.render(perturbation, text, random.Random(item_seed))
            pending.append((item_id, text, item_seed, prompt))
        advance = progress(perturbation.key, len(items), done=len(results)) if progress else None
        if pending:
            results |= self._ask(perturbation, pending, advance)
        return {item_id: results[item_id] for item_id, _ in items}

    def _ask(
        self, perturbation: Perturbation, pending: list[tuple[str, str, int, str]], advance: Advance | None
    ) -> dict[str, Outcome]:
        requests = [
            ChatRequest.user(prompt, self.sampling.model_copy(update={"seed": s})) for _, _, s, prompt in pending
        ]
        outcomes: dict[str, Outcome] = {}
        lock = threading.Lock()

        def on_result(index: int, result: CallResult) -> None:
            item_id, text, item_seed, prompt = pending[index]
            outcome = self._judge(perturbation, text, item_seed, prompt, result)
            if not isinstance(result, CallFailure):  # failed calls are retried on the next run
                self.store.put(perturbation.key, item_id, item_seed, outcome)
            with lock:
                outcomes[item_id] = outcome
                self._count(outcome)
            if advance:
                advance(1)

        results = self.backend.generate(requests, on_result=on_result)
        for index, result in enumerate(results):  # a backend that skipped the callback
            if pending[index][0] not in outcomes:
                on_result(index, result)
        failures = [r for r in results if isinstance(r, CallFailure)]
        if failures and len(failures) == len(results):
            first = failures[0]
            raise BackendError(
                f"model {self.backend.model_id!r} at {first.endpoint or 'its endpoint'}: all {len(results)} "
                f"calls for {perturbation.key!r} failed ({first.kind}: {first.reason}); nothing was frozen"
            )
        return outcomes

    def _count(self, outcome: Outcome) -> None:
        if isinstance(outcome, Perturbed):
            self.summary.made += 1
        else:
            self.summary.reject(outcome.reason)

    def _judge(self, perturbation: Perturbation, text: str, item_seed: int, prompt: str, result: CallResult) -> Outcome:
        """A validated Perturbed (spans by diff) or the Rejected reason for one reply."""
        if isinstance(result, CallFailure):
            return Rejected(f"call failed: {result.kind}: {result.reason}")
        assert isinstance(result, Completion)
        if result.finish_reason == "length":
            return Rejected(f"truncated: the reply hit max_tokens ({self.sampling.max_tokens})")
        checked = validate(result.text, text)
        if isinstance(checked, Rejected):
            return checked
        spans, removed = changed_spans(text, checked)
        provenance = {
            "method": "llm",
            "key": perturbation.key,
            "model": self.backend.model_id,
            "served_model": result.model,
            "endpoint": result.endpoint,
            "prompt_sha256": hashlib.sha256(prompt.encode("utf-8")).hexdigest(),
            "seed": item_seed,
            "template": perturbation.template,
            "params": dict(perturbation.params),
            "sampling": self.sampling.model_dump(mode="json", exclude={"seed"}),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        return Perturbed(checked, spans, removed, provenance)
