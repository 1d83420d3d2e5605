"""What the judge gives for one request: `JudgedEvaluation`, an Evaluation with what happened on the way.

Its own module so that what reads judged evaluations (predictions, score rows) needs no judge."""

from __future__ import annotations

from pydantic import Field

from .consensus import Consensus
from .contract import ErrorAnnotation, Evaluation
from .decisions import AppliedDecision
from .probabilities import ReplyProbabilities


class JudgedEvaluation(Evaluation):
    """An Evaluation plus what happened on the way: the reply, retries, truncation, failures.

    `score` is None for an unscored item; `unscored_reason` then says why. `call_failure` is
    set when the model could not be reached (a re-run may succeed; the CLI does not write
    such items, so they are retried)."""

    id: str | None = None
    unscored_reason: str | None = None
    call_failure: str | None = None
    raw_replies: list[str] = Field(default_factory=list)
    probabilities: ReplyProbabilities | None = None  # with `probabilities=True`: read along the written reply
    # with a decision rule (`decisions.py`): the errors the reply wrote (what `probabilities.errors` follows), and
    # what the rule did; `errors` then holds the decided ones
    written_errors: list[ErrorAnnotation] | None = None
    decision: AppliedDecision | None = None
    consensus: Consensus | None = None  # with `samples=N`: N sampled replies merged
    attempts: int = 0
    truncated: str | None = None

    @property
    def scored(self) -> bool:
        return self.score is not None

    @property
    def reply_errors(self) -> list[ErrorAnnotation]:
        """The errors the reply wrote (the ones `probabilities.errors` follows), decided or not."""
        return self.errors if self.written_errors is None else self.written_errors
