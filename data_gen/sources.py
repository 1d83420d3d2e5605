"""Read source examples (task inputs + one system output) from JSONL / JSON / CSV / HF
datasets, and from the formats of the meta-evaluation sets in ../shared/data.

Each row becomes a `SourceItem` with headed inputs. A row that cannot be read stops the
run with one message naming the file, the line and the field: a silent skip would change
what the ensemble annotates without anyone noticing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

from spanjudge.core.catalog import Task
from spanjudge.core.errors import InputError
from spanjudge.core.tabular import iter_csv, iter_json_list, iter_jsonl

from .config import FieldMap, SourceSpec

PRESETS: dict[str, FieldMap] = {
    # ../shared/data/meta_eval/summeval/summeval.jsonl
    "summeval": FieldMap(input_id="doc_id", system="system_id", output="system_output", inputs={"Article": "source"}),
    # OpeNLGauge copies: {"id", "inputs": {header: text}, "outputs": {header: text}, ["system"]}
    # (SFRES/SFHOT carry no system: map `fields.system` only where the files have one)
    "openlgauge": FieldMap(inputs_from="inputs", output_from="outputs"),
    # QAGS raw mturk lines: the article and the summary sentences (joined below)
    "qags_mturk": FieldMap(output="summary", inputs={"Article": "article"}),
}


@dataclass(frozen=True)
class SourceItem:
    dataset: str
    input_id: str
    system: str
    task_id: str
    inputs: dict[str, str]
    output: str
    where: str  # "file:line", for messages


@dataclass(frozen=True)
class Row:
    data: Mapping[str, Any]
    where: str


def source_rows(spec: SourceSpec, path: Path) -> Iterator[Row]:
    """The rows of a source's file (or Hub dataset), read by its format, each with where it came from."""
    if not path.exists() and spec.format != "hf":
        raise InputError(f"source '{spec.name}': {path} not found")
    reader = spec.format
    if reader in ("summeval", "qags_mturk"):
        reader = "jsonl"
    elif reader == "openlgauge":
        reader = "json"
    if reader == "jsonl":
        yield from _jsonl(path)
    elif reader == "json":
        yield from _json(path)
    elif reader == "csv":
        yield from _csv(path)
    else:
        yield from _hf(spec, path)


def _jsonl(path: Path) -> Iterator[Row]:
    return (Row(data, where) for where, data in iter_jsonl(path))


def _json(path: Path) -> Iterator[Row]:
    return (Row(data, where) for where, data in iter_json_list(path))


def _csv(path: Path) -> Iterator[Row]:
    return (Row(data, where) for where, data in iter_csv(path))


def _hf(spec: SourceSpec, path: Path) -> Iterator[Row]:
    import datasets

    try:
        if path.exists():
            loaded = datasets.load_from_disk(str(path))
        else:  # not a folder here: a dataset id on the Hugging Face Hub
            loaded = datasets.load_dataset(spec.path, split=spec.split)
    except Exception as exc:  # datasets raises many types (missing files, offline hub, bad folder)
        raise InputError(
            f"source '{spec.name}': cannot load dataset {spec.path!r} ({type(exc).__name__}: {exc})"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        if spec.split not in loaded:
            raise InputError(f"source '{spec.name}': {path} has no split '{spec.split}' (has {', '.join(loaded)})")
        loaded = loaded[spec.split]
    for index, data in enumerate(loaded):
        yield Row(data, f"{path}[{spec.split}][{index}]")


def _get(row: Row, dotted: str) -> object:
    value: object = row.data
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise InputError(f"{row.where}: missing field '{dotted}'")
        value = value[part]
    return value


def _text(row: Row, dotted: str) -> str:
    value = _get(row, dotted)
    if spec_is_sentence_list(value):
        return " ".join(s["sentence"].strip() for s in value)
    if not isinstance(value, str | int | float):
        raise InputError(f"{row.where}: field '{dotted}' is not text ({type(value).__name__})")
    return str(value)


def spec_is_sentence_list(value: object) -> TypeGuard[list[dict[str, str]]]:
    """QAGS mturk summaries are lists of {"sentence": ...}."""
    return isinstance(value, list) and bool(value) and all(isinstance(s, dict) and "sentence" in s for s in value)


def _headed(row: Row, dotted: str) -> dict[str, str]:
    value = _get(row, dotted)
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise InputError(f"{row.where}: field '{dotted}' is not a {{header: text}} object")
    return dict(value)


def source_fields(spec: SourceSpec) -> FieldMap:
    """The field map of a source: its format's preset with the source's own fields over it."""
    preset = PRESETS.get(spec.format)
    if preset is None:
        return spec.fields
    overrides = spec.fields.model_dump(exclude_defaults=True)
    return preset.model_copy(update=overrides)


def source_item(spec: SourceSpec, task: Task, fields: FieldMap, row: Row) -> SourceItem:
    """One row of a source as an item to evaluate: the task's inputs, the output and their ids."""
    data = row.data
    if spec.format == "qags_mturk":  # the summary is a list of sentences
        data = {**data, "summary": _get(row, "summary_sentences")}
        row = Row(data, row.where)
    inputs, input_id = _inputs_and_id(task, fields, row)
    if fields.output_from:
        outputs = _headed(row, fields.output_from)
        if len(outputs) != 1:
            raise InputError(f"{row.where}: '{fields.output_from}' must hold exactly one output, has {len(outputs)}")
        output = next(iter(outputs.values()))
    elif fields.output:
        output = _text(row, fields.output)
    else:
        raise InputError(f"source '{spec.name}': fields.output (or fields.output_from) is required")
    system = str(_get(row, fields.system)) if fields.system else spec.system
    return SourceItem(spec.name, input_id, system, task.id, inputs, output, row.where)


def _inputs_and_id(task: Task, fields: FieldMap, row: Row) -> tuple[dict[str, str], str]:
    """The task's inputs by header (all required ones present) and the input's id."""
    inputs = _headed(row, fields.inputs_from) if fields.inputs_from else {}
    inputs |= {header: _text(row, name) for header, name in fields.inputs.items()}
    missing = [h for h in task.input_headers if h not in inputs and not _optional(task, h)]
    if missing:
        raise InputError(
            f"{row.where}: task '{task.id}' needs input '{missing[0]}'; this source maps {sorted(inputs) or 'none'}"
        )
    input_id = str(_get(row, fields.input_id)) if fields.input_id else _hash_inputs(inputs)
    return inputs, input_id


def _optional(task: Task, header: str) -> bool:
    return any(i.header == header and i.optional for i in task.inputs)


def _hash_inputs(inputs: Mapping[str, str]) -> str:
    blob = json.dumps(dict(sorted(inputs.items())), ensure_ascii=False)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:16]


@dataclass
class ReadReport:
    items: list[SourceItem]
    oversized: list[str]  # "where: which text, length"
    empty_outputs: list[str]
    duplicates: list[str] = field(default_factory=list)  # "where: what it repeats"
    beyond_limit: int = 0  # rows of inputs past `limit_inputs`


@dataclass
class _Seen:
    """What read_source has kept so far, to tell a repeated row from another output."""

    inputs: dict[str, tuple[str, str]] = field(default_factory=dict)  # input id -> (inputs hash, where)
    outputs: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (input, system, output) -> where
    systems: dict[tuple[str, str], str] = field(default_factory=dict)  # (input id, system) -> where


def _check_input_id(seen: _Seen, item: SourceItem) -> None:
    """One input id must name one input: the split by input and the sampling rely on it."""
    digest = _hash_inputs(item.inputs)
    first = seen.inputs.setdefault(item.input_id, (digest, item.where))
    if first[0] != digest:
        raise InputError(
            f"{item.where}: input id '{item.input_id}' also names other inputs at {first[1]}; map "
            "fields.input_id to a field that is unique per input (or leave it unset to hash the inputs)"
        )


def _place_output(seen: _Seen, item: SourceItem, unnamed: bool) -> SourceItem | str:
    """The item as it is annotated, or why it is left out. Outputs of one input without a
    system field are told apart as <system>, <system>#2, ... (one output per system and input
    is what the sampling draws from); a row repeating an earlier one is left out."""
    repeated = seen.outputs.get((item.input_id, item.system, item.output))
    if repeated is not None:
        return f"{item.where}: repeats {repeated} (same input, system and output)"
    seen.outputs[(item.input_id, item.system, item.output)] = item.where
    system, number = item.system, 1
    while (item.input_id, system) in seen.systems:
        if not unnamed:
            return (
                f"{item.where}: input '{item.input_id}' already has an output of system '{system}' at "
                f"{seen.systems[(item.input_id, system)]}; map fields.system to tell the outputs apart"
            )
        number += 1
        system = f"{item.system}#{number}"
    seen.systems[(item.input_id, system)] = item.where
    return item if system == item.system else replace(item, system=system)


def read_source(spec: SourceSpec, path: Path, task: Task) -> ReadReport:
    """All usable items of a source (respecting `limit_inputs`), plus what was set aside and why."""
    fields = source_fields(spec)
    report = ReadReport(items=[], oversized=[], empty_outputs=[])
    seen = _Seen()
    for row in source_rows(spec, path):
        item = source_item(spec, task, fields, row)
        if item.input_id not in seen.inputs and spec.limit_inputs is not None and len(seen.inputs) >= spec.limit_inputs:
            report.beyond_limit += 1
            continue
        _check_input_id(seen, item)
        if not item.output.strip():
            report.empty_outputs.append(item.where)
            continue
        too_long = [
            (h, len(t)) for h, t in (*item.inputs.items(), (task.output, item.output)) if len(t) > spec.max_chars
        ]
        if too_long:
            header, length = too_long[0]
            report.oversized.append(f"{item.where}: {header} has {length} characters (max_chars {spec.max_chars})")
            continue
        placed = _place_output(seen, item, unnamed=fields.system is None)
        if isinstance(placed, str):
            report.duplicates.append(placed)
            continue
        report.items.append(placed)
    return report


@dataclass(frozen=True)
class TaskInput:
    dataset: str
    input_id: str
    task_id: str
    inputs: dict[str, str]
    where: str  # "file:line", for messages


@dataclass
class InputsReport:
    inputs: list[TaskInput] = field(default_factory=list)
    oversized: list[str] = field(default_factory=list)


def source_input(spec: SourceSpec, task: Task, row: Row) -> TaskInput:
    """One row of a source as a task input (generation needs no output)."""
    inputs, input_id = _inputs_and_id(task, source_fields(spec), row)
    return TaskInput(spec.name, input_id, task.id, inputs, row.where)


def read_inputs(spec: SourceSpec, path: Path, task: Task) -> InputsReport:
    """For generating outputs: rows need no output, and an input repeated over rows (SummEval
    has 16 systems per article) is given once. Distinct inputs in file order (the first
    `limit_inputs`); oversized ones set aside."""
    report = InputsReport()
    seen: set[str] = set()
    for row in source_rows(spec, path):
        item = source_input(spec, task, row)
        if item.input_id in seen:
            continue
        if spec.limit_inputs is not None and len(seen) >= spec.limit_inputs:
            break
        seen.add(item.input_id)
        too_long = [(h, len(t)) for h, t in item.inputs.items() if len(t) > spec.max_chars]
        if too_long:
            header, length = too_long[0]
            report.oversized.append(f"{item.where}: {header} has {length} characters (max_chars {spec.max_chars})")
            continue
        report.inputs.append(item)
    return report
