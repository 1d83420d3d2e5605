"""Rows to score (JSONL, JSON, CSV, a Hugging Face dataset) → JudgeRequests.

Field mapping: each task input header is read from `--input HEADER=FIELD`, else from a field
named like the header ("Article", "article", "dialogue_history" for "Dialogue history"); the
output from `--output-field` (default "output"); the id from `--id-field` (default "id", else
the row number). A FIELD may be a dotted path into nested objects (`doc.document`, `resps.0`);
a list of one item stands for that item. Rows written by `spanjudge annotate` (with
`inputs`/`outputs` mappings and `task_id`/`aspect_name`) are read as they are. Other formats
(`tabular.iter_lm_eval_samples`, `tabular.iter_parallel_text`) arrive as rows of the same kind.
Every row is checked before any model runs: a missing field stops the run with the file, the
line and the fix. `spanjudge score` and `Judge.predict` read their rows here; the results file they
write is `inference.score.rows`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanjudge.core.catalog import Aspect, Catalog, Task, validate_inputs
from spanjudge.core.errors import InputError
from spanjudge.core.hub_data import iter_rows, parse_dataset_id
from spanjudge.core.tabular import (
    PARALLEL_FIELDS,
    Located,
    iter_csv,
    iter_json_list,
    iter_jsonl,
    iter_lm_eval_samples,
    iter_parallel_text,
    only_value,
)

from .judge_conversation import JudgeRequest
from .prompts import PromptTemplate


@dataclass(frozen=True)
class FieldMapping:
    id_field: str = "id"
    output_field: str = "output"
    inputs: Mapping[str, str] | None = None  # header -> field


def _rows(path: str, split: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) for every row of a file or dataset (local, or a Hub id `owner/name[:split]`)."""
    if (hub := parse_dataset_id(path)) is not None:  # None for anything that exists here: a path wins
        yield from iter_rows(hub, split)
        return
    local = Path(path)
    if local.is_dir():
        import datasets

        data = datasets.load_from_disk(str(local))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise InputError(f"{path}: no split '{split}' (it has: {', '.join(data)}); choose one with --split")
            data = data[split]
        for number, row in enumerate(data):
            yield f"{path}[{number}]", row
        return
    if not local.is_file():
        raise InputError(f"data not found: {path}")
    suffix = local.suffix.lower()
    readers = {".csv": iter_csv, ".json": iter_json_list}
    yield from readers.get(suffix, iter_jsonl)(local)  # anything else is read as JSONL


def header_fields(header: str) -> list[str]:
    """The fields a row may hold an input in: its header, lower-cased, snake_case ("dialogue_history")."""
    snake = header.lower().replace(" ", "_").replace("-", "_")
    return [header, header.lower(), snake]


_ABSENT = object()


def _lookup(row: Mapping[str, Any], name: str) -> object:
    """row[name], else the value at a dotted path ("doc.document", "resps.0"), else _ABSENT."""
    if name in row:
        return row[name]
    node: object = row
    for part in name.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _ABSENT
    return node


def _field(row: Mapping[str, Any], names: Sequence[str], where: str, what: str, option: str) -> str:
    for name in names:
        value = only_value(_lookup(row, name))
        if value is not _ABSENT and value is not None:
            return str(value)
    raise InputError(f"{where}: missing field '{names[0]}' for {what} (map another field with {option})")


def read_requests(
    path: str,
    catalog: Catalog,
    task_id: str | None,
    aspect_name: str | None,
    aspect_definition: str | None,
    mapping: FieldMapping,
    *,
    split: str = "test",
    limit: int | None = None,
    rows: Iterable[Located] | None = None,
    template: PromptTemplate | None = None,
) -> list[JudgeRequest]:
    """Every row as a JudgeRequest, in order; ids must be unique (they key resumption).

    `rows`: rows read from a foreign format (else those of the file or dataset at `path`);
    `template`: the judge's prompt template, carried by every request."""
    requests: list[JudgeRequest] = []
    seen: dict[str, str] = {}
    for number, (where, row) in enumerate(_rows(path, split) if rows is None else rows):
        if limit is not None and number >= limit:
            break
        from_annotate = isinstance(row.get("inputs"), Mapping) and isinstance(row.get("outputs"), Mapping)
        task = catalog.task(task_id or _field(row, ["task_id"], where, "the task", "--task"))
        name = aspect_name or _field(row, ["aspect_name"], where, "the aspect", "--aspect")
        aspect = Aspect.custom(name, aspect_definition) if aspect_definition else task.aspect(name)
        if from_annotate:
            inputs = {str(k): str(v) for k, v in row["inputs"].items()}
            outputs = row["outputs"]
            if len(outputs) != 1:
                raise InputError(f"{where}: 'outputs' must hold exactly one text")
            output = str(next(iter(outputs.values())))
        else:
            inputs = {}
            for spec in task.inputs:
                names = (
                    [mapping.inputs[spec.header]]
                    if mapping.inputs and spec.header in mapping.inputs
                    else header_fields(spec.header)
                )
                if spec.optional and all(_lookup(row, name) is _ABSENT for name in names):
                    continue
                inputs[spec.header] = _field(
                    row, names, where, f"the input '{spec.header}'", f'--input "{spec.header}=FIELD"'
                )
            output = _field(row, [mapping.output_field], where, "the output text", "--output-field")
        item_id = str(row[mapping.id_field]) if row.get(mapping.id_field) is not None else str(number)
        if item_id in seen:
            raise InputError(
                f"{where}: id '{item_id}' already used at {seen[item_id]} (ids must be unique; see --id-field)"
            )
        seen[item_id] = where
        try:
            checked = validate_inputs(task, inputs)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        # a row's own extra_task_info (annotate's records carry one) is rendered as training rendered it
        extra = row.get("extra_task_info")
        requests.append(
            JudgeRequest(
                task=task,
                aspect=aspect,
                inputs=checked,
                output=output,
                id=item_id,
                extra_task_info=str(extra) if extra is not None else None,
                template=template,
            )
        )
    if not requests:
        raise InputError(f"{path}: no rows to score")
    return requests


DATA_FORMATS = ("auto", "lm-eval")


def score_source(
    data: str | None,
    data_format: str,
    texts: Mapping[str, Path | None],
    mapping: FieldMapping,
    task: Task | None,
) -> tuple[str, Iterable[Located] | None, FieldMapping]:
    """(the data's name, its rows when it is not a file or dataset `read_requests` opens itself,
    the field mapping for those rows) for `--data` [`--data-format`] or `--src/--hyp/--ref`
    (`texts`, by those names)."""
    given = {key: path for key, path in texts.items() if path is not None}
    if data_format not in DATA_FORMATS:
        raise InputError(f"--data-format must be {' or '.join(DATA_FORMATS)}, not '{data_format}'")
    if given:
        if data is not None or data_format != "auto":
            raise InputError("give either --data (with --data-format) or --src/--hyp plain text files, not both")
        return _parallel_source(given, mapping, task)
    if data is None:
        raise InputError("give the rows to score: --data FILE, or --src FILE --hyp FILE [--ref FILE]")
    if data_format == "lm-eval":
        if not Path(data).is_file():
            raise InputError(f"--data-format lm-eval reads a samples_*.jsonl file (lm_eval --log_samples), not {data}")
        return data, iter_lm_eval_samples(Path(data)), mapping
    return data, None, mapping


def _parallel_source(
    given: Mapping[str, Path], mapping: FieldMapping, task: Task | None
) -> tuple[str, Iterable[Located], FieldMapping]:
    """Plain text files line by line: the output from --hyp, --src into the task's first input
    (unless --input maps it elsewhere), --ref into the input --input HEADER=ref names."""
    missing = [f"--{key}" for key in ("src", "hyp") if key not in given]
    if missing:
        raise InputError(f"plain text input needs --src and --hyp (one item per line); {missing[0]} is missing")
    if task is None:
        raise InputError("--src/--hyp files hold no task: give --task (and --aspect)")
    inputs = dict(mapping.inputs or {})
    if "src" not in inputs.values():
        inputs.setdefault(task.inputs[0].header, "src")
    if "ref" in given and "ref" not in inputs.values():
        headers = ", ".join(spec.header for spec in task.inputs)
        raise InputError(
            f"--ref {given['ref']}: no input of task '{task.id}' reads it ({headers}); "
            'map it with --input "HEADER=ref", or leave --ref out (the judge needs no reference)'
        )
    rows = list(iter_parallel_text({key: given[key] for key in PARALLEL_FIELDS if key in given}))
    return str(given["hyp"]), rows, FieldMapping(id_field="id", output_field="hyp", inputs=inputs)
