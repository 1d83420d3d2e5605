"""Decisions from the judge's own probabilities: when to say "No Error", which written errors to keep.

A greedy reply almost never says "No Error" even where the judge's probability of it is high (a small
student wrote it for 3 of 720 outputs where the humans marked nothing in 57 of 240), so the written reply
alone wastes what the judge knows. The rule, read along the written reply (`probabilities.ReplyProbabilities`):

- **No Error** when P(no error) ≥ `no_error_threshold` (τ₀): the evaluation keeps no error;
- otherwise each written error is kept when its **confidence**, the probability that the judge writes it
  and every error before it along its reply (`ReplyProbabilities.written`), is ≥ `min_confidence` (τ).

The rule never adds an error and never changes the score (the written one; the expected score stays
beside it in the probabilities). τ₀ and τ are chosen on a development split (`eval.spans.decision_fit`) and
stored with the judge (`spanjudge.json`'s `decisions`, with what chose them); `Judge.from_pretrained`
applies them unless asked otherwise (`JudgeOptions.no_error_threshold`, `min_confidence`, `written`), and
the written errors stay beside the decided ones (`JudgedEvaluation.written_errors`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spanjudge.core.artifacts import ADAPTER_METADATA, read_adapter_metadata, validated
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_write_text

if TYPE_CHECKING:
    from .judge_options import JudgeOptions
    from .probabilities import ReplyProbabilities


DECISIONS_KEY = "decisions"  # the rule's key in spanjudge.json


class FittedOn(BaseModel):
    """What chose a rule's values: the split (never a test split), its outputs, the objective and its value,
    and the digests of its inputs (`core.overlap`), so that an evaluation on the same inputs is refused."""

    model_config = ConfigDict(extra="allow", frozen=True)

    split: str
    data: str
    outputs: int
    objective: str
    value: float | None = None
    written_value: float | None = None  # the objective of the written replies on the same outputs
    rule: str | None = None  # `core.overlap.RULE`: how the input digests were made
    sha1: list[str] = []


class DecisionRule(BaseModel):
    """τ₀ and τ (None: that decision is the written reply's), and what chose them (None: given by hand)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # strict: a stored `true` or "0.5" is a mistake in the file, never read as 1.0 or 0.5
    no_error_threshold: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    min_confidence: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    fitted_on: FittedOn | None = None

    @property
    def changes_anything(self) -> bool:
        return self.no_error_threshold is not None or self.min_confidence is not None

    def thresholds(self) -> dict[str, float | None]:
        """The values alone: what a results file's resume key and each row record."""
        return {"no_error_threshold": self.no_error_threshold, "min_confidence": self.min_confidence}

    def describe(self) -> str:
        tau0, tau, fitted = self.no_error_threshold, self.min_confidence, self.fitted_on
        parts = [
            f"'No Error' when P(no error) >= {tau0:g}" if tau0 is not None else "",
            f"errors kept at confidence >= {tau:g}" if tau is not None else "",
        ]
        text = "; ".join(p for p in parts if p) or "the written reply"
        if fitted is not None:
            text += f" (fitted on {fitted.data}, {fitted.split} split, {fitted.outputs} outputs)"
        return text


class AppliedDecision(BaseModel):
    """What the rule did to one reply (a results row's `decision`): its thresholds, where they came from,
    the indices of the written errors it kept, and whether it said "No Error"."""

    no_error_threshold: float | None
    min_confidence: float | None
    source: str  # "stored" (spanjudge.json, fitted on a dev split) or "given" (an option)
    kept: list[int]
    no_error: bool


def decide(
    p_no_error: float, confidences: Sequence[float], rule: DecisionRule, *, written_no_error: bool = False
) -> tuple[list[int], bool]:
    """The indices of the written errors the rule keeps, and whether the evaluation says "No Error".

    `confidences`: each written error's probability of being written (with those before it) along the reply."""
    if written_no_error or (rule.no_error_threshold is not None and p_no_error >= rule.no_error_threshold):
        return [], True
    tau = rule.min_confidence
    kept = [index for index, confidence in enumerate(confidences) if tau is None or confidence >= tau]
    return kept, False


def decide_reply(reading: ReplyProbabilities, rule: DecisionRule) -> tuple[list[int], bool]:
    """`decide` for one written reply read with its probabilities."""
    return decide(reading.p_no_error, reading.written(), rule, written_no_error=not reading.errors)


def stored_rule(folder: Path) -> DecisionRule | None:
    """The rule stored with a judge (its spanjudge.json's `decisions`), or None; a bad one is one InputError
    naming the file and the field."""
    metadata = read_adapter_metadata(folder) if folder.is_dir() else None
    found = None if metadata is None else (metadata.model_extra or {}).get(DECISIONS_KEY)
    return None if found is None else validated(DecisionRule, found, folder / ADAPTER_METADATA)


def save_rule(folder: Path, rule: DecisionRule) -> Path:
    """Store `rule` with the judge in `folder` (its spanjudge.json's `decisions`, the file's other keys kept;
    the file is made if the folder has none); the file's path."""
    path = folder / ADAPTER_METADATA
    metadata = read_adapter_metadata(folder)
    record = {} if metadata is None else metadata.record()  # unknown keys included
    record[DECISIONS_KEY] = rule.model_dump(mode="json")
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path


def effective_rule(options: JudgeOptions, stored: DecisionRule | None) -> DecisionRule | None:
    """The rule a judge applies: none with `written`; else the stored one, each threshold given in `options`
    replacing its own (a rule given by hand has no `fitted_on`); None when no threshold is set."""
    if options.written:
        if options.no_error_threshold is not None or options.min_confidence is not None:
            raise SpanjudgeError("written=True applies no decision rule: give it or the thresholds, not both")
        return None
    tau0, tau = options.no_error_threshold, options.min_confidence
    if tau0 is None and tau is None:
        return stored if stored is not None and stored.changes_anything else None
    if stored is not None:  # a threshold not given keeps the stored value
        tau0 = stored.no_error_threshold if tau0 is None else tau0
        tau = stored.min_confidence if tau is None else tau
    try:
        return DecisionRule(no_error_threshold=tau0, min_confidence=tau)
    except ValidationError as exc:
        raise SpanjudgeError(f"a decision threshold is a probability, 0 to 1: {exc.errors()[0]['msg']}") from None
