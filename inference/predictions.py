"""`Judge.predict`: plain items in, one typed result per item and a system score out.

Shaped like the tools users already know (COMET's `model.predict(data, batch_size=...)`):

    predictions = judge.predict(
        [{"input": article, "output": summary}], task="summeval", aspect="relevance", batch_size=8
    )
    predictions.system_score, predictions[0].score, predictions[0].errors[0].text

An item names its texts as `spanjudge score` reads a row: each task input by its header ("Article",
"article", "dialogue_history"), `input` for the task's first input, `reference` for the task's
reference input, `output` for the text to judge, and `id` (default: its position). Every item is
checked before the model runs; a missing text is one `InputError` naming the item and the field.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from spanjudge.core.catalog import Catalog, Task
from spanjudge.core.errors import InputError

from .judge_conversation import JudgeRequest
from .judged import JudgedEvaluation
from .prompts import PromptTemplate
from .requests import FieldMapping, header_fields, read_requests

if TYPE_CHECKING:
    import pandas

FIRST_INPUT, REFERENCE = "input", "reference"  # an item's short names for the task's inputs


@dataclass(frozen=True)
class PredictedError:
    """One error the judge marked: `text` is the output's characters [`start`, `end`) where the judge's
    quote was found in it (offsets None: an omission, or a quote not found; `text` is then the quote)."""

    start: int | None
    end: int | None
    text: str | None
    severity: int
    explanation: str


@dataclass(frozen=True)
class Prediction:
    """The judge's evaluation of one item: `score` 0-100, or None with `unscored_reason` (a reply that
    did not parse, or the model could not be reached); `evaluation` holds everything else (replies,
    retries, probabilities)."""

    id: str
    score: float | None
    errors: tuple[PredictedError, ...]
    unscored_reason: str | None
    evaluation: JudgedEvaluation

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "score": self.score,
            "errors": [asdict(error) for error in self.errors],
            "unscored_reason": self.unscored_reason,
        }


@dataclass(frozen=True)
class Predictions(Sequence[Prediction]):
    """One `Prediction` per item, in the items' order, and the system's score over them."""

    items: tuple[Prediction, ...]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Prediction:  # type: ignore[override]
        return self.items[index]

    def __iter__(self) -> Iterator[Prediction]:
        return iter(self.items)

    @property
    def scores(self) -> list[float | None]:
        return [item.score for item in self.items]

    @property
    def system_score(self) -> float | None:
        """The mean score of the scored items (None when none was scored: no score is invented)."""
        scored = [score for score in self.scores if score is not None]
        return statistics.fmean(scored) if scored else None

    @property
    def unscored(self) -> int:
        return sum(score is None for score in self.scores)

    def to_json(self) -> str:
        """One JSON document: `system_score`, the `unscored` count and the `items` with their errors."""
        return json.dumps(
            {"system_score": self.system_score, "unscored": self.unscored, "items": [i.to_dict() for i in self]},
            ensure_ascii=False,
        )

    def to_pandas(self) -> pandas.DataFrame:
        """A pandas DataFrame, one row per item (`errors` a list of dicts)."""
        try:
            import pandas
        except ModuleNotFoundError:
            raise InputError("to_pandas needs pandas: pip install pandas") from None
        return pandas.DataFrame([item.to_dict() for item in self.items])


class Scorer(Protocol):
    """What `predict` asks of a judge (`inference.judge.Judge` is one)."""

    @property
    def catalog(self) -> Catalog: ...

    @property
    def prompt_template(self) -> PromptTemplate | None: ...

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgedEvaluation]: ...


def predict(
    judge: Scorer,
    items: Sequence[Mapping[str, Any]],
    *,
    task: str,
    aspect: str,
    aspect_definition: str | None = None,
) -> Predictions:
    """The items judged (see the module docstring); never raises for a model's reply."""
    rows = _rows(judge.catalog.task(task), items)
    requests = read_requests(
        "predict()", judge.catalog, task, aspect, aspect_definition, FieldMapping(), rows=rows,
        template=judge.prompt_template,
    )  # fmt: skip
    results = judge.score(requests)
    return Predictions(tuple(_prediction(request, result) for request, result in zip(requests, results, strict=True)))


def _rows(task: Task, items: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) per item, its short names (`input`, `reference`) renamed to the task's headers;
    an item without its output or a required input is one InputError naming it."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InputError("predict takes a list of items, each a dict such as {'input': ..., 'output': ...}")
    references = [spec.header for spec in task.inputs if REFERENCE in spec.header.lower()]
    short = {FIRST_INPUT: task.inputs[0].header, **({REFERENCE: references[0]} if references else {})}
    rows = []
    for number, item in enumerate(items):
        where = f"item {number}"
        if not isinstance(item, Mapping):
            raise InputError(f"{where}: a dict such as {{'input': ..., 'output': ...}}, not {type(item).__name__}")
        if REFERENCE in item and REFERENCE not in short:
            names = ", ".join(spec.header for spec in task.inputs)
            raise InputError(f"{where}: task '{task.id}' reads no reference (its inputs: {names}); leave it out")
        row = {short.get(key, key): value for key, value in item.items()}
        if "output" not in row:
            raise InputError(f"{where}: no 'output' (the text to judge)")
        for spec in task.inputs:
            if not spec.optional and not any(field in row for field in header_fields(spec.header)):
                also = f"'{FIRST_INPUT}' or " if spec.header == short[FIRST_INPUT] else ""
                raise InputError(f"{where}: no {also}'{spec.header}' (an input of task '{task.id}')")
        rows.append((where, row))
    return rows


def _prediction(request: JudgeRequest, result: JudgedEvaluation) -> Prediction:
    errors = tuple(
        PredictedError(
            start=e.start,
            end=e.end,
            text=request.output[e.start : e.end] if e.start is not None and e.end is not None else e.location,
            severity=e.severity,
            explanation=e.explanation,
        )
        for e in result.errors
    )
    return Prediction(
        id=str(request.id),
        score=result.score,
        errors=errors,
        unscored_reason=result.unscored_reason or result.call_failure,
        evaluation=result,
    )
