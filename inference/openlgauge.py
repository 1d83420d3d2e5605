"""OpeNLGauge's released training format: a JSON array of records with `dataset, input_id, system,
task_name, aspect_name, inputs, outputs, evaluation` (the evaluation as the judge's text or as
`{errors, score}`), read as spanjudge records.

Both `spanjudge import` (data_gen: teacher data, with its field limits) and `spanjudge train`
(training: such a file given directly as data.train) read it, so it lives here, below both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spanjudge.core.catalog import Catalog, Task
from spanjudge.core.errors import InputError
from spanjudge.core.tabular import iter_json_list

from .contract import ErrorAnnotation, Evaluation, anchor_errors, cap_errors, parse_judge
from .contract.model import ParseFailure

# what an importer does to a record's errors before they are anchored (the field limits): errors, where -> errors
ErrorLimit = Callable[[list[ErrorAnnotation], str], list[ErrorAnnotation]]


OPENLGAUGE_FIELDS = ("inputs", "outputs", "aspect_name", "task_name", "evaluation")


def _headed(value: object, where: str, name: str) -> dict[str, str]:
    """{header: text}, or [{header, text}, ...] as Arrow stores it."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(v, Mapping) and {"header", "text"} <= set(v) for v in value):
        return {str(v["header"]): str(v["text"]) for v in value}
    raise InputError(f"{where}: '{name}' must map headers to texts")


def _find_task(record: Mapping[str, Any], catalog: Catalog, task_map: Mapping[str, str], where: str) -> Task:
    name = str(record["task_name"])
    if name in task_map:
        return catalog.task(task_map[name])
    wanted = name.strip().lower()
    category = str(record.get("task_type", "")).strip().lower()
    matches = [
        t
        for t in catalog.tasks.values()
        if wanted in (t.id.lower(), t.title.lower()) and (not category or category in (t.category, ""))
    ]
    if len(matches) != 1:
        found = (
            "no catalog task" if not matches else f"{len(matches)} catalog tasks ({', '.join(t.id for t in matches)})"
        )
        raise InputError(f"{where}: task_name '{name}' matches {found}; map it with task_map: {{'{name}': TASK_ID}}")
    return matches[0]


def _structured_evaluation(value: Mapping[str, Any], where: str) -> Evaluation:
    errors = []
    for index, error in enumerate(value.get("errors") or []):
        if not isinstance(error, Mapping):
            raise InputError(f"{where}: evaluation.errors[{index}] is not an object")
        location = error.get("location", error.get("span"))
        try:
            errors.append(
                ErrorAnnotation.model_validate(
                    {
                        "location": location,
                        "explanation": str(error.get("explanation", "")),
                        "severity": error.get("severity"),
                    }
                )
            )
        except ValidationError as exc:
            raise InputError(f"{where}: evaluation.errors[{index}]: {exc.errors()[0]['msg']}") from None
    try:
        return Evaluation(errors=errors, score=value.get("score"))
    except ValidationError as exc:
        raise InputError(f"{where}: evaluation.score: {exc.errors()[0]['msg']}") from None


def openlgauge_evaluation(value: object, where: str) -> Evaluation:
    """Structured `{errors, score}` or the judge's text format; a missing score is an error."""
    if isinstance(value, str):
        parsed = parse_judge(value)
        if isinstance(parsed, ParseFailure):
            raise InputError(f"{where}: evaluation text does not parse ({parsed.reason})")
        evaluation = parsed
    elif isinstance(value, Mapping):
        evaluation = _structured_evaluation(value, where)
    else:
        raise InputError(f"{where}: 'evaluation' must be the judge's text or an object with errors and score")
    if evaluation.score is None:
        raise InputError(f"{where}: the evaluation has no score")
    return evaluation


def openlgauge_record(
    record: Mapping[str, Any],
    where: str,
    catalog: Catalog,
    task_map: Mapping[str, str],
    number: int,
    limit: ErrorLimit | None = None,
) -> dict[str, Any]:
    missing = [k for k in OPENLGAUGE_FIELDS if k not in record]
    if missing:
        raise InputError(f"{where}: missing field '{missing[0]}'")
    task = _find_task(record, catalog, task_map, where)
    inputs = _headed(record["inputs"], where, "inputs")
    outputs = record["outputs"]
    outputs = {task.output: outputs} if isinstance(outputs, str) else _headed(outputs, where, "outputs")
    if len(outputs) != 1:
        raise InputError(f"{where}: 'outputs' must hold the one evaluated text, got {len(outputs)}")
    output = next(iter(outputs.values()))
    if not output.strip():
        raise InputError(f"{where}: missing output (the evaluated text is empty)")
    evaluation = openlgauge_evaluation(record["evaluation"], where)
    errors = evaluation.errors if limit is None else limit(evaluation.errors, where)
    anchored = Evaluation(errors=cap_errors(anchor_errors(errors, output)), score=evaluation.score)
    aspect = str(record["aspect_name"])
    definition = record.get("aspect_definition")
    if aspect not in task.aspects and not definition:
        raise InputError(f"{where}: task '{task.id}' has no aspect '{aspect}' and the record gives no definition")
    return {
        "id": f"{record.get('dataset', 'openlgauge')}/{record.get('input_id', number)}/{record.get('system', '-')}/"
        f"{aspect}",
        "dataset": str(record.get("dataset", "openlgauge")),
        "input_id": str(record.get("input_id", number)),
        "system": str(record.get("system", "-")),
        "inputs": inputs,
        "outputs": {task.output: output},
        "aspect_name": aspect,
        "aspect_definition": str(definition or task.aspects[aspect].definition),
        "task_type": task.category,
        "task_name": task.title,
        "task_id": task.id,
        "extra_task_info": record.get("extra_task_info") or task.description,
        "evaluation": anchored.model_dump(),
        "provenance": {
            "source": where,
            "teacher": "OpeNLGauge release",
            "annotators": [{"name": "openlgauge", "parse_failure": None, "dropped_outlier": False}],
        },
    }


def iter_openlgauge(
    path: Path, catalog: Catalog, task_map: Mapping[str, str] | None = None, limit: ErrorLimit | None = None
) -> Iterator[dict[str, Any]]:
    """OpeNLGauge's JSON array as records; `train` reads such a file directly through this, `import` with its
    field limits (`limit`)."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    for number, (where, record) in enumerate(iter_json_list(path)):
        yield openlgauge_record(record, where, catalog, task_map or {}, number, limit)
