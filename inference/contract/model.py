"""The judge's output contract: what an evaluation *is*, independent of any text format.

Every stage speaks these types: data_gen writes them as training targets, training renders
them as completions, inference parses model replies into them and eval reads them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import IntEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

AnchorMethod = Literal["exact", "normalized", "fuzzy"]
"""How a location was found in the evaluated output (see `anchor.py`)."""

MAX_ERRORS = 8
"""Thesis §3.2.2 / Fig. A.17-A.18: evaluations report at most eight errors."""

_NO_LOCATION = {"", "none", "n/a", "na", "-", "null", "not applicable"}
_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")


def single_line(text: str) -> str:
    """Strip and fold line breaks into single spaces.

    The text format is line-oriented, so a value that spans lines could not survive a
    render/parse round trip unchanged; folding at construction keeps the contract exact.
    """
    return _LINE_BREAKS.sub(" ", text).strip()


class ScoreLabel(IntEnum):
    """The annotators' categorical scale (thesis Fig. A.16); values are the 1-5 ratings."""

    UNACCEPTABLE = 1
    POOR = 2
    FAIR = 3
    GOOD = 4
    EXCELLENT = 5

    @property
    def text(self) -> str:
        """The label as written in prompts and replies, e.g. 'Excellent'."""
        return self.name.capitalize()


def rating_to_score(rating: float) -> float:
    """Map a 1-5 rating (possibly an average) to the judge's 0-100 scale (SPEC §2)."""
    return (rating - 1.0) / 4.0 * 100.0


def round_to_multiple_of_five(score: float) -> int:
    """Thesis §3.3: aggregated 0-100 scores are binned to multiples of five (half up)."""
    return int(5 * int(score / 5.0 + 0.5))


class ErrorAnnotation(BaseModel):
    """One error: where it is, why it is an error, how bad it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    location: str | None = Field(description="The quoted span of the evaluated output; None for omissions.")
    explanation: str
    severity: int = Field(ge=1, le=5, description="1 = least severe, 5 = most severe.")
    start: int | None = Field(default=None, ge=0, description="Character offset in the output.")
    end: int | None = Field(default=None, ge=0, description="Exclusive end offset.")
    aspect: str | None = None
    anchor: AnchorMethod | None = Field(default=None, description="How start/end were found; None when not anchored.")

    @field_validator("location", mode="before")
    @classmethod
    def _normalise_location(cls, value: object) -> object:
        if isinstance(value, str):
            value = single_line(value)
            if value.lower().strip(".") in _NO_LOCATION:
                return None
        return value

    @field_validator("explanation", mode="before")
    @classmethod
    def _normalise_explanation(cls, value: object) -> object:
        return single_line(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _offsets_are_a_span(self) -> ErrorAnnotation:
        if (self.start is None) != (self.end is None):
            raise ValueError("start and end must both be set or both be None")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"end ({self.end}) is before start ({self.start})")
        return self

    @property
    def anchored(self) -> bool:
        return self.start is not None


class Evaluation(BaseModel):
    """The judge's result for one (input, output, aspect): errors and a 0-100 score.

    `score` is None only for an unscored item (a reply that did not parse); no code path
    invents a score.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    errors: list[ErrorAnnotation] = Field(default_factory=list)
    score: float | None = Field(ge=0, le=100)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> Evaluation:
        return cls.model_validate_json(text)

    @property
    def unanchored_count(self) -> int:
        """Errors that quote a location which could not be found in the output."""
        return sum(1 for e in self.errors if e.location is not None and not e.anchored)


class AnnotatorEvaluation(BaseModel):
    """An annotator LLM's reply: errors plus a categorical label (thesis Fig. A.16)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    errors: list[ErrorAnnotation] = Field(default_factory=list)
    label: ScoreLabel
    score_explanation: str | None = None

    @property
    def rating(self) -> int:
        return int(self.label)

    def to_evaluation(self) -> Evaluation:
        return Evaluation(errors=self.errors, score=rating_to_score(self.rating))


class ParseFailure(BaseModel):
    """A reply that could not be read; carries the reason and the raw text, never a score."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    raw: str


def cap_errors(errors: Sequence[ErrorAnnotation]) -> list[ErrorAnnotation]:
    """At most MAX_ERRORS, keeping the most severe (order otherwise as given)."""
    if len(errors) <= MAX_ERRORS:
        return list(errors)
    keep = sorted(range(len(errors)), key=lambda i: (-errors[i].severity, i))[:MAX_ERRORS]
    return [errors[i] for i in sorted(keep)]
