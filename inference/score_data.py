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

import hashlib
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
#
# One JSON object per line, appended (and fsynced) as each item finishes. Every row carries
# its resume key: the item (id, and a hash of the exact prompt, which holds the inputs, the
# output, the task and the aspect definition), the model and the decoding. A re-run skips the
# ids already there, and refuses a file whose row for an id was scored under another key.

KEY_FIELDS = ("task", "aspect", "model", "decoding", "prompt_sha256")
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
    }


def _checked_row(value: Any, where: str) -> dict[str, Any]:
    """A results row, or one line saying that this is not a results file."""
    if (
        not isinstance(value, dict)
        or value.get("id") is None
        or not isinstance(value.get("evaluation"), dict)
        or "score" not in value["evaluation"]
    ):
        raise InputError(
            f"{where}: not a result of `spanjudge score` (no 'id' and 'evaluation'); "
            "is --out another file? Choose a new results file"
        )
    return value


def _repair_tail(out: Path) -> None:
    """Make the file end with a whole line before anything is appended to it.

    A run killed mid-write leaves a fragment without its newline: it is cut off (with a
    truncate, so the rows before it are never rewritten). A whole row that only lacks its
    newline (a file edited by hand, or copied) gets the newline, so the next row is not glued
    to it."""
    with out.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(max(0, size - 1))
        if handle.read(1) == b"\n":
            return
        # find the start of the last line, reading back in blocks (the file may be large)
        start, block = size, 1 << 16
        while start > 0:
            begin = max(0, start - block)
            handle.seek(begin)
            newline = handle.read(start - begin).rfind(b"\n")
            if newline >= 0:
                start = begin + newline + 1
                break
            start = begin
        handle.seek(start)
        try:
            json.loads(handle.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            handle.truncate(start)
        else:
            handle.write(b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def finished_rows(out: Path) -> Finished:
    """The rows already in the results file by id, with where each is ("file:line"), after
    repairing a last line cut short by a kill."""
    if not out.is_file():
        return {}
    _repair_tail(out)
    return {str(row["id"]): (where, row) for where, row in _results(out)}


def finished_ids(out: Path) -> set[str]:
    """Ids already in the results file (see `finished_rows`)."""
    return set(finished_rows(out))


def check_resume(out: Path, done: Finished, keys: Mapping[str, Mapping[str, Any]]) -> None:
    """InputError, naming the line and what differs, when an id to score is already in `out`
    under another task, aspect, model, decoding or prompt: skipping it would report the old
    result as this run's."""
    for item_id, key in keys.items():
        if item_id not in done:
            continue
        where, row = done[item_id]
        difference = _difference(row, key)
        if difference:
            raise InputError(
                f"{where}: id '{item_id}' was scored with {difference}; "
                f"results of another run go to another --out (or remove {out} to score again)"
            )


def _difference(row: Mapping[str, Any], key: Mapping[str, Any]) -> str | None:
    for name in KEY_FIELDS:
        if name not in row:  # a row from before resume keys: check what it has
            continue
        if name == "prompt_sha256" and row[name] != key[name]:
            return "another prompt (its inputs, output or aspect definition differ)"
        if name == "decoding" and row[name] != key[name]:
            old, new = row[name] or {}, key[name]
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            return "decoding " + ", ".join(f"{k}={old.get(k)!r}, not {new.get(k)!r} as now" for k in changed)
        if row[name] != key[name]:
            return f"{_KEY_NAMES[name]} {row[name]!r}, not {key[name]!r} as now"
    return None


def append_results(out: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append whole lines and flush them to disk, so a kill loses at most the row in flight."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _results(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, row in iter_jsonl(path):
        yield where, _checked_row(row, where)


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a results file; InputError naming the line of one that is not a result."""
    return [row for _, row in _results(path)]
