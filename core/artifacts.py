"""Typed files that cross stage boundaries, each with one validating reader.

- `spanjudge.json` (`AdapterMetadata`): written by training into the adapter folder, read by
  scoring (the base and prompt template the judge was trained with), export, meta-eval (the
  inputs it was trained on) and publishing.
- a meta-evaluation result row (`ResultRow`): one correlation as a model card shows it, read
  from the `cells` of meta-eval's results.json (`MetaEvalFile`) or from a hand-written list.

They live in the base layer because the judge itself reads spanjudge.json and every later
stage reads one of them. A bad file is one `InputError` naming the file (and the field).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .configio import validation_to_config_error
from .errors import InputError

ADAPTER_METADATA = "spanjudge.json"
ModelT = TypeVar("ModelT", bound=BaseModel)


class TrainInputs(BaseModel):
    """Which inputs the judge was trained on: their digests under `rule` (core/overlap.py)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    rule: str | None = None
    sha1: list[str] = []


class AdapterMetadata(BaseModel):
    """What training records beside the adapter (training/run.py `_metadata`), in its key order.
    Every key is optional (older folders hold fewer) and unknown keys are kept (newer ones)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    format: str | None = None
    base_model: str | None = None  # as the user named it: a hub id, a local folder, @smollm2 ...
    base_kind: str | None = None
    max_length: int | None = None
    quantization: str | None = None
    finetuning: str | None = None  # lora, or full: the folder holds the whole model (older folders: lora)
    dtype: str | None = None
    chat_template_sha256: str | None = None
    judge_prompt_sha256: str | None = None
    prompt_template: str | None = None  # a file name in the adapter folder
    train_file: str | None = None
    train_examples: int | None = None
    train_inputs: TrainInputs | None = None
    created: str | None = None
    versions: dict[str, str] = {}
    merged_from: str | None = None  # written by export's merge
    merged: bool | None = None  # written by publish
    trained_base_model: str | None = None  # written by publish

    @property
    def full(self) -> bool:
        """Whether the folder holds a fully fine-tuned whole model rather than an adapter."""
        return self.finetuning == "full"

    def record(self) -> dict[str, Any]:
        """The keys the file held (none added), as JSON values: what a copy of it writes."""
        return self.model_dump(mode="json", exclude_unset=True)


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file holding an object; `what` says what it should be, in the error."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object; is this {what}?")
    return data


def validated(model: type[ModelT], data: object, path: Path) -> ModelT:
    """`model` from `data`, or one InputError naming the file and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(str(validation_to_config_error(path, exc, model))) from None


def read_adapter_metadata(folder: Path) -> AdapterMetadata | None:
    """The spanjudge.json of an adapter (or merged model) folder; None where there is none
    (a PEFT adapter or a model not trained by spanjudge)."""
    path = Path(folder).expanduser() / ADAPTER_METADATA
    if not path.is_file():
        return None
    return validated(AdapterMetadata, read_json_object(path, "a spanjudge adapter folder"), path)


# ---------------------------------------------------------------------------------------
# Meta-evaluation result rows


def _number(value: object) -> float | None:
    """A finite number from a number or a numeric string; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _text(value: object) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text or None


CORRELATIONS = ("kendall", "spearman", "pearson")  # the coefficients a card names, bounded by -1 and 1


class ResultRow(BaseModel):
    """One correlation of one judge, as a model card shows it. Hand-written rows may say
    `metric` for `coefficient`, `low`/`high` for `ci_low`/`ci_high`, and give numbers as
    strings; a bound or `n` that is no finite number is dropped, a row without `dataset` or a
    numeric `value` does not validate."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    dataset: str
    metric: str
    value: float
    aspect: str | None = None
    level: str | None = None
    task: str | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    judge: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _canonical(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        n = _number(data.get("n"))
        return {
            "dataset": _text(data.get("dataset")),
            "metric": _text(data.get("coefficient")) or _text(data.get("metric")) or "value",
            "value": _number(data.get("value")),
            "aspect": _text(data.get("aspect")),
            "level": _text(data.get("level")),
            "task": _text(data.get("task")),
            "ci_low": _number(data.get("ci_low", data.get("low"))),
            "ci_high": _number(data.get("ci_high", data.get("high"))),
            "n": int(n) if n is not None else None,
            "judge": _text(data.get("judge")),
        }

    @classmethod
    def parse(cls, data: object) -> ResultRow | None:
        """The row, or None when `data` does not fit (the caller counts it as skipped)."""
        try:
            return cls.model_validate(data)
        except ValidationError:
            return None

    @staticmethod
    def implausible(data: object) -> str | None:
        """Why a raw row's numbers cannot be the correlation it names (kendall, spearman, pearson: -1 to 1),
        or None. Such a row is a mistake to report, not a row to leave out quietly."""
        if not isinstance(data, dict):
            return None
        metric = (_text(data.get("coefficient")) or _text(data.get("metric")) or "").lower()
        if metric not in CORRELATIONS:
            return None
        for key in ("value", "ci_low", "ci_high", "low", "high"):
            number = _number(data.get(key))
            if number is not None and not -1 <= number <= 1:
                return f"{key} {data.get(key)!r} is no {metric} correlation (they lie from -1 to 1)"
        return None

    @staticmethod
    def judge_of(data: object) -> str | None:
        """The judge a raw row names, if any (rows are chosen by judge before they are validated)."""
        return _text(data.get("judge")) if isinstance(data, dict) else None


class MetaEvalCell(BaseModel):
    """One entry of `cells` in the results.json of `spanjudge meta-eval` (eval/correlation/runner.py's Cell):
    one judge x dataset x aspect x coefficient, with its bootstrap interval."""

    model_config = ConfigDict(extra="ignore")

    judge: str
    dataset: str
    aspect: str
    coefficient: str
    level: str | None = None
    value: float | None
    low: float | None = None
    high: float | None = None
    scored: int = 0  # items correlated (a judge score and a human score); 0 for the average

    def row(self) -> ResultRow | None:
        """The card's row, or None when the correlation is undefined (e.g. constant scores)."""
        if self.value is None or not math.isfinite(self.value):
            return None
        finite = [b if b is not None and math.isfinite(b) else None for b in (self.low, self.high)]
        return ResultRow(
            dataset=self.dataset,
            metric=self.coefficient,
            value=self.value,
            aspect=self.aspect,
            level=self.level,
            ci_low=finite[0],
            ci_high=finite[1],
            n=self.scored or None,
            judge=self.judge,
        )


class MetaEvalFile(BaseModel):
    """The part of `spanjudge meta-eval`'s results.json that a model card uses."""

    model_config = ConfigDict(extra="ignore")

    judges: list[str]
    cells: list[MetaEvalCell]
