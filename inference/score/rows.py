"""The resumable JSONL of `spanjudge score`'s results: one `ScoreRow` a line, its resume key, the checks
before anything is appended, the run's provenance file, and the shards of a run split over machines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json
from spanjudge.core.jsonl import JsonlStore
from spanjudge.core.sharding import Shard
from spanjudge.core.tabular import iter_jsonl

from ..judge_conversation import JudgeRequest
from ..prompts import template_sha256

if TYPE_CHECKING:
    from ..judged import JudgedEvaluation
    from ..probabilities import ReplyProbabilities


# One JSON object per line (`ScoreRow`), appended (and fsynced) as each item finishes, in a
# `JsonlStore` (`ScoreStore`) that one run holds at a time. Every row carries
# its resume key: the item (id, and a hash of the exact prompt, which holds the inputs, the
# output, the task and the aspect definition), the model, the decoding and the prompt template's
# hash. The key fields also mark the file as a results file: nothing else writes them all.
# Before anything is appended, every row already there is checked (`check_results_file`): a
# row of another file, or one scored with another judge, decoding, template, task or aspect,
# stops the run; ids already there are skipped.

KEY_FIELDS = ("task", "aspect", "model", "decoding", "prompt_sha256")
TEMPLATE_FIELD = "prompt_template_sha256"  # added after KEY_FIELDS: older rows lack it and are not refused for it
_KEY_NAMES = {"task": "--task", "aspect": "--aspect", "model": "judge"}

Finished = dict[str, tuple[str, dict[str, Any]]]  # id -> (where, row)


def prompt_sha256(request: JudgeRequest) -> str:
    """The resume key of an item's content: a hash of the judge prompt it is scored with."""
    return hashlib.sha256(request.user_prompt().encode("utf-8")).hexdigest()[:16]


def resume_key(request: JudgeRequest, model: str, decoding: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "task": request.task.id,
        "aspect": request.aspect.name,
        "model": model,
        "decoding": dict(decoding),
        "prompt_sha256": prompt_sha256(request),
        TEMPLATE_FIELD: template_sha256(request.template),
    }


class ScoreEvaluation(BaseModel):
    """The judge's verdict in a results row: its error spans and its 0-100 score (None: unscored)."""

    model_config = ConfigDict(extra="allow")

    errors: list[dict[str, Any]] = []
    score: int | float | None  # an int stays an int, so a row reads back as it was written

    @field_validator("score", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"the score must be a number or null, not {value!r}")
        return value


def _present(**fields: Any) -> dict[str, Any]:
    """The fields that are given (not None): a row sets only those, so its JSON keeps the others out."""
    return {name: value for name, value in fields.items() if value is not None}


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def error_problem(error: object, output: str | None, *, complete: bool = False) -> str | None:
    """What makes one error of a results row impossible, or None (see `ScoreRow`). An explanation and a
    severity may be absent (human span annotations carry neither) unless `complete`; given, they must be
    text and an integer 1-5."""
    if not isinstance(error, dict):
        return f"is not an object: {error!r}"
    explanation, severity = error.get("explanation"), error.get("severity")
    if (explanation is not None or complete) and not isinstance(explanation, str):
        return "has no explanation text"
    if (severity is not None or complete) and (
        isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5
    ):
        return f"severity {severity!r} is not an integer 1-5"
    start, end = error.get("start"), error.get("end")
    if start is None and end is None:
        return None
    if not (_integer(start) and _integer(end)):
        return f"offsets {start!r}, {end!r} are not both integers (or both null: not located)"
    if not 0 <= start < end or (output is not None and end > len(output)):
        size = f" of {len(output)} characters" if output is not None else ""
        return f"offsets [{start}, {end}) are not a range inside the output{size}"
    return None


class ScoreRow(BaseModel):
    """One line of a results file: what `spanjudge score` writes per item (`ScoreRow.of`) and
    what the resume store and `read_score_rows` read back. The resume key fields (`KEY_FIELDS`)
    are absent from rows written before resume keys; unknown fields are kept."""

    model_config = ConfigDict(extra="allow")

    id: str
    task: str | None = None
    aspect: str | None = None
    model: str | None = None
    decoding: dict[str, Any] | None = None
    prompt_sha256: str | None = None
    prompt_template_sha256: str | None = None
    output: str | None = None
    evaluation: ScoreEvaluation
    unscored_reason: str | None = None
    call_failure: str | None = None  # the model could not be reached: shown, and scored again by the next run
    # with --probabilities: the judge's expected values beside the written ones (`probability_fields`)
    probabilities: dict[str, Any] | None = None
    # with a decision rule (`inference.decisions`): the errors the reply wrote, and what the rule did
    written_errors: list[dict[str, Any]] | None = None
    decision: dict[str, Any] | None = None
    # with --samples N: the N sampled replies merged (`consensus.Consensus`), beside the written evaluation
    consensus: dict[str, Any] | None = None
    truncated: str | bool | None = None
    attempts: int | None = None
    raw_replies: list[str] | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _possible_errors(self) -> ScoreRow:
        """Each error possible (`error_problem`): offsets both null (not located) or a non-empty range inside
        the output, an explanation that is text and a severity 1-5 where given; nothing else is read."""
        for number, error in enumerate(self.evaluation.errors, 1):
            problem = error_problem(error, self.output)
            if problem:
                raise ValueError(f"error {number}: {problem}")
        return self

    @classmethod
    def of(cls, request: JudgeRequest, evaluation: JudgedEvaluation, key: Mapping[str, Any] | None = None) -> ScoreRow:
        """The row of a JudgeRequest and its JudgedEvaluation; `key` is its resume key (`resume_key`)."""
        fields: dict[str, Any] = {
            "id": str(request.id), "task": request.task.id, "aspect": request.aspect.name, **(key or {})
        }  # fmt: skip
        read = getattr(evaluation, "probabilities", None)
        decision = getattr(evaluation, "decision", None)
        written_errors = getattr(evaluation, "written_errors", None)
        written = [e.model_dump() for e in (evaluation.errors if written_errors is None else written_errors)]
        if read is not None:  # each error's confidence and expected severity beside its written severity
            for error, probabilities in zip(written, read.errors, strict=True):
                error.update(confidence=probabilities.confidence, expected_severity=probabilities.expected_severity)
        errors = written if decision is None else [written[index] for index in decision.kept]
        return cls(
            **fields,
            output=request.output,
            evaluation=ScoreEvaluation(errors=errors, score=evaluation.score),
            # a decision rule's row keeps the written errors beside the decided ones, and what the rule did
            **_present(
                written_errors=written if decision is not None else None,
                decision=decision.model_dump() if decision is not None else None,
                probabilities=probability_fields(read) if read is not None else None,
                consensus=merged.model_dump() if (merged := getattr(evaluation, "consensus", None)) else None,
            ),
            unscored_reason=evaluation.unscored_reason,
            **_present(call_failure=getattr(evaluation, "call_failure", None) or None),
            truncated=evaluation.truncated,
            attempts=evaluation.attempts,
            raw_replies=evaluation.raw_replies,
        )

    def line(self) -> dict[str, Any]:
        """The row as written: the fields it was given, in the file's order."""
        return self.model_dump(mode="json", exclude_unset=True)


def probability_fields(read: ReplyProbabilities) -> dict[str, Any]:
    """A results row's `probabilities`: the expected values, labelled, beside the written
    `evaluation` (its score, its errors' count); the score distribution over the contract's values."""
    return {
        "p_no_error": read.p_no_error,
        "expected_errors": read.expected_errors,
        "expected_score": read.expected_score,
        "score_distribution": {str(value): p for value, p in read.score_distribution.items()},
    }


def _checked(value: dict[str, Any], where: str) -> ScoreRow:
    """A results row, or one line saying that this is not a results file."""
    evaluation = value.get("evaluation")
    if value.get("id") is None or not isinstance(evaluation, dict) or "score" not in evaluation:
        raise _not_a_result(where, "no 'id' and 'evaluation'")
    try:
        return ScoreRow.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise _not_a_result(
            where, ": ".join(part for part in (".".join(map(str, first["loc"])), message) if part)
        ) from None


def _not_a_result(where: str, problem: str) -> InputError:
    return InputError(
        f"{where}: not a result of `spanjudge score` ({problem}); is --out another file? Choose a new results file"
    )


def _score_entry(where: str, row: dict[str, Any]) -> tuple[str, tuple[str, dict[str, Any]]]:
    return str(_checked(row, where).id), (where, row)


class ScoreStore(JsonlStore[str, tuple[str, dict[str, Any]]]):
    """The results file as a `JsonlStore`: held by one run (a second `spanjudge score` on the
    same --out is refused), a last line cut short by a kill repaired, and the rows already
    there in `found` by id, with where each is ("file:line")."""

    def __init__(self, out: Path, command: str | None = None) -> None:
        super().__init__(out, _score_entry, command=command)


def finished_rows(out: Path) -> Finished:
    """The rows already in the results file by id, with where each is ("file:line"), after
    repairing a last line cut short by a kill (see `ScoreStore`, which a run holds instead)."""
    if not out.is_file():
        return {}
    with ScoreStore(out) as store:
        return dict(store.found)


def finished_ids(out: Path) -> set[str]:
    """Ids already in the results file (see `finished_rows`)."""
    return set(finished_rows(out))


def check_results_file(out: Path, done: Finished, keys: Mapping[str, Mapping[str, Any]]) -> None:
    """InputError, naming the line and what differs, before anything is appended to `out`:
    - a row without the resume key: `out` is not a results file of `spanjudge score` (training
      records, a data file), and appending would mix score rows into it;
    - a row of an id to score, under another task, aspect, model, decoding or prompt: skipping
      it would report the old result as this run's;
    - a row of any other id, under another judge, decoding or prompt template, or a task and
      aspect this run does not score: appending would mix two runs' results in one file."""
    if not keys:
        return
    pairs = {(key["task"], key["aspect"]) for key in keys.values()}
    run_key = {name: value for name, value in next(iter(keys.values())).items() if name != "prompt_sha256"}
    for item_id, (where, row) in done.items():
        missing = [name for name in KEY_FIELDS if name not in row]
        if missing:
            raise _not_a_result(where, f"no resume key '{missing[0]}'")
        if item_id in keys:
            difference = _difference(row, keys[item_id])
        elif (row["task"], row["aspect"]) in pairs or len(pairs) > 1:
            difference = _difference(row, {**run_key, "task": row["task"], "aspect": row["aspect"]})
            if difference is None and (row["task"], row["aspect"]) not in pairs:
                difference = f"--task {row['task']!r} and --aspect {row['aspect']!r}, which this run does not score"
        else:
            difference = _difference(row, run_key)
        if difference:
            raise InputError(
                f"{where}: id '{item_id}' was scored with {difference}; "
                f"results of another run go to another --out (or remove {out} to score again)"
            )


def _difference(row: Mapping[str, Any], key: Mapping[str, Any]) -> str | None:
    for name in (*KEY_FIELDS, TEMPLATE_FIELD):
        if name not in row or name not in key:  # a row from before this key field: check what it has
            continue
        if name == "prompt_sha256" and row[name] != key[name]:
            return "another prompt (its inputs, output or aspect definition differ)"
        if name == TEMPLATE_FIELD and row[name] != key[name]:
            return f"prompt template {row[name]}, not {key[name]} as now (the template file differs)"
        if name == "decoding" and row[name] != key[name]:
            old, new = row[name] or {}, key[name]
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            return "decoding " + ", ".join(f"{k}={old.get(k)!r}, not {new.get(k)!r} as now" for k in changed)
        if row[name] != key[name]:
            return f"{_KEY_NAMES[name]} {row[name]!r}, not {key[name]!r} as now"
    return None


def run_info_path(out: Path) -> Path:
    """The results file's provenance beside it: scores.jsonl -> scores.run.json."""
    return out.with_suffix(".run.json")


def write_run_info(out: Path, info: Mapping[str, Any]) -> Path:
    """Write what produces `out` (`run_info.run_info`) beside it, before its rows are scored."""

    path = run_info_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, dict(info))
    return path


def read_results(path: Path, required: Sequence[str] = (), *, complete: bool = False) -> list[dict[str, Any]]:
    """The rows of a results file; InputError naming the line of one that is not a result, or that lacks
    one of the `required` text fields (rows from before resume keys, or from another tool, may), or, with
    `complete`, has an error without its explanation and severity (as `spanjudge score` writes every one)."""
    rows = []
    for where, row in iter_jsonl(path):
        _checked(row, where)
        missing = [name for name in required if not isinstance(row.get(name), str)]
        if missing:
            raise InputError(f"{where}: the row has no {missing[0]} (text); this needs rows `spanjudge score` wrote")
        for number, error in enumerate(row["evaluation"].get("errors") or [], 1):
            problem = error_problem(error, row.get("output"), complete=complete)
            if problem:
                raise InputError(f"{where}: error {number}: {problem}; this needs rows `spanjudge score` wrote")
        rows.append(row)
    return rows


def read_score_rows(path: Path) -> list[ScoreRow]:
    """The rows of a results file, typed; InputError naming the line of one that is not a result."""
    return [_checked(row, where) for where, row in iter_jsonl(path)]


# -- shards (`--shard K/N`) ----------------------------------------------------------------


def shard_key(request: JudgeRequest) -> str:
    """Rows are split by their input text: every output of one input lands in one shard."""
    return json.dumps(dict(request.inputs), sort_keys=True, ensure_ascii=False)


def shard_requests(out: Path, requests: Sequence[JudgeRequest], shard: Shard | None) -> list[JudgeRequest]:
    """The requests of `shard` (all without one). InputError when `out` already holds results of
    this data's other shards: each shard keeps its own results file."""
    if shard is None:
        return list(requests)
    mine = [r for r in requests if shard.holds(shard_key(r))]
    others = {str(r.id) for r in requests} - {str(r.id) for r in mine}
    foreign = sorted(i for i in finished_ids(out) if i in others)
    if foreign:
        raise InputError(
            f"{out} holds results of rows outside shard {shard.label} (e.g. id '{foreign[0]}'); "
            "give each shard its own --out"
        )
    return mine
