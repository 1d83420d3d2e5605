"""Rows to score (JSONL, JSON, CSV, a Hugging Face dataset) → JudgeRequests, and the
resumable JSONL of results.

Field mapping: each task input header is read from `--input HEADER=FIELD`, else from a field
named like the header ("Article", "article", "dialogue_history" for "Dialogue history"); the
output from `--output-field` (default "output"); the id from `--id-field` (default "id", else
the row number). Rows written by `spanjudge annotate` (with `inputs`/`outputs` mappings and
`task_id`/`aspect_name`) are read as they are. Every row is checked before any model runs: a
missing field stops the run with the file, the line and the fix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import Aspect, Catalog, validate_inputs
from .errors import InputError
from .judge_prompt import JudgeRequest
from .tabular import iter_csv, iter_json_list, iter_jsonl


@dataclass(frozen=True)
class FieldMapping:
    id_field: str = "id"
    output_field: str = "output"
    inputs: Mapping[str, str] | None = None  # header -> field


def _rows(path: str, split: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) for every row of a file or dataset."""
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


def _candidates(header: str) -> list[str]:
    snake = header.lower().replace(" ", "_").replace("-", "_")
    return [header, header.lower(), snake]


def _field(row: Mapping[str, Any], names: Sequence[str], where: str, what: str, option: str) -> str:
    for name in names:
        if name in row and row[name] is not None:
            return str(row[name])
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
) -> list[JudgeRequest]:
    """Every row as a JudgeRequest, in order; ids must be unique (they key resumption)."""
    requests: list[JudgeRequest] = []
    seen: dict[str, str] = {}
    for number, (where, row) in enumerate(_rows(path, split)):
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
                    else _candidates(spec.header)
                )
                if spec.optional and not any(name in row for name in names):
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
        requests.append(JudgeRequest(task=task, aspect=aspect, inputs=checked, output=output, id=item_id))
    if not requests:
        raise InputError(f"{path}: no rows to score")
    return requests


# -- the results file ----------------------------------------------------------------------


def finished_ids(out: Path) -> set[str]:
    """Ids already in the results file. A last line cut short by a kill is removed first."""
    if not out.is_file():
        return set()
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    ids, good = set(), []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # the run was killed mid-write: drop the fragment
                break
            raise InputError(f"{out}:{number}: not valid JSON; this results file is damaged") from None
        ids.add(str(row["id"]))
        good.append(line)
    if len(good) != len(lines):
        out.write_text("".join(good), encoding="utf-8")
    return ids


def append_results(out: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append whole lines and flush them to disk, so a kill loses at most the batch in flight."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_results(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise InputError(f"{path}:{number}: not valid JSON") from None
    return rows
