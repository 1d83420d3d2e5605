"""The human-judgment sets in one shape: one `MetaItem` per (input, system output) with its
headed inputs, the output, the references it carries and the human score per aspect.

Rows are read with the annotation stage's source readers (`spanjudge.data_gen.sources`,
configured in `configs/sources/meta_eval_sets.yaml`), so the judge sees exactly the inputs
the annotators saw; this module adds the human scores and references.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spanjudge.core.catalog import Catalog, Task, load_catalog
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.data_gen.config import SourcesConfig, SourceSpec, load_sources, resolve_source_path
from spanjudge.data_gen.sources import Row, SourceItem, source_fields, source_item, source_rows
from spanjudge.eval.judging.qags import summary_score
from spanjudge.eval.judging.suite import DatasetSpec, References, SuiteConfig, resolve_config_path

QAGS_MAJORITY = "qags_majority"


@dataclass(frozen=True, kw_only=True)
class MetaItem(SourceItem):
    """A source's output with the human judgments a meta-evaluation compares a judge with."""

    id: str  # "<dataset>-<row number>", stable across runs
    human: dict[str, float]  # report aspect name -> human score (absent when the row has none)
    references: tuple[str, ...] = ()
    # report aspect name -> each rater's score, where the source keeps them (a list at the human path);
    # `human` then holds their mean. Most staged copies keep only means (SummEval, USR).
    ratings: dict[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class MetaDataset:
    spec: DatasetSpec
    task: Task
    items: list[MetaItem]
    source_path: Path

    @property
    def name(self) -> str:
        return self.spec.name


def human_value(row: Row, path: str) -> float | None:
    """The human score at `path` in a row (None when missing or empty)."""
    if path == QAGS_MAJORITY:
        return summary_score(row.data.get("summary_sentences"), row.where)
    value: object = row.data
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    if value is None or value == "":
        return None
    if isinstance(value, list):  # each rater's score: the human score is their mean
        ratings = rater_scores(row, path)
        return sum(ratings) / len(ratings) if ratings else None
    try:
        if not isinstance(value, int | float | str):
            raise TypeError(type(value).__name__)
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{row.where}: human score '{path}' is not a number ({value!r})") from None
    return None if math.isnan(number) else number


def rater_scores(row: Row, path: str) -> tuple[float, ...]:
    """Each rater's score when the value at `path` is a list of numbers (else empty)."""
    value: object = row.data
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return ()
        value = value[part]
    if not isinstance(value, list):
        return ()
    try:
        ratings = tuple(float(v) for v in value if v is not None)
    except (TypeError, ValueError):
        raise InputError(f"{row.where}: human ratings '{path}' are not all numbers ({value!r})") from None
    return tuple(r for r in ratings if not math.isnan(r))


def _field_references(row: Row, field: str) -> tuple[str, ...]:
    value = row.data.get(field)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InputError(f"{row.where}: reference field '{field}' is missing or not text")


def _input_reference(item: MetaItem, row: Row, header: str) -> tuple[str, ...]:
    if header not in item.inputs:
        raise InputError(
            f"{row.where}: reference input '{header}' is not an input of this set ({', '.join(item.inputs)})"
        )
    return (item.inputs[header],)


def _attach_references(
    items: list[MetaItem], rows: list[Row], refs: References, data_root: Path | None, suite_path: Path
) -> list[MetaItem]:
    if refs.field is not None:
        return [_with(item, _field_references(row, refs.field)) for item, row in zip(items, rows, strict=True)]
    if refs.input is not None:
        return [_with(item, _input_reference(item, row, refs.input)) for item, row in zip(items, rows, strict=True)]
    if refs.system is not None:
        by_input = {i.input_id: i.output for i in items if i.system == refs.system}
        if not by_input:
            raise InputError(f"dataset '{items[0].dataset}': no output of reference system '{refs.system}'")
        return [_with(i, (by_input[i.input_id],) if i.input_id in by_input else ()) for i in items]
    assert refs.file is not None
    path = _data_path(refs.file, data_root, suite_path)
    try:
        aligned = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"reference file not found: {path}") from None
    if not isinstance(aligned, list) or len(aligned) != len(items):
        raise InputError(f"{path}: expected a JSON list of {len(items)} rows aligned with the source")
    out = []
    for index, (item, ref_row) in enumerate(zip(items, aligned, strict=True)):
        # the aligned copy must describe the same output, or the pairing is wrong
        if isinstance(ref_row, Mapping) and "system_output" in ref_row and ref_row["system_output"] != item.output:
            raise InputError(f"{path}[{index}]: system_output differs from {item.id}; the files are not aligned")
        out.append(_with(item, _field_references(Row(ref_row, f"{path}[{index}]"), refs.file_field)))
    return out


def _with(item: MetaItem, references: tuple[str, ...]) -> MetaItem:
    return MetaItem(**{**item.__dict__, "references": references})


def _data_path(value: str, data_root: Path | None, suite_path: Path) -> Path:
    if value.startswith("$DATA/"):
        if data_root is None:
            raise ConfigError(suite_path, "references.file", "uses $DATA but no data folder was found")
        return data_root / value.removeprefix("$DATA/")
    return resolve_config_path(value, suite_path)


def load_dataset(
    spec: DatasetSpec,
    source: SourceSpec,
    sources_path: Path,
    data_root: Path | None,
    task: Task,
    suite_path: Path,
    max_items: int | None = None,
    seed: int = 0,
) -> MetaDataset:
    """Every row of the source as a MetaItem; with `max_items`, a seeded sample of whole inputs
    (see `sample_inputs`)."""
    path = resolve_source_path(source, sources_path, data_root)
    fields = source_fields(source)
    items: list[MetaItem] = []
    rows: list[Row] = []
    for index, row in enumerate(source_rows(source, path)):
        base = source_item(source, task, fields, row)
        human = {a.name: v for a in spec.aspects if (v := human_value(row, a.human)) is not None}
        ratings = {a.name: r for a in spec.aspects if a.human != QAGS_MAJORITY and (r := rater_scores(row, a.human))}
        items.append(
            MetaItem(
                **{**vars(base), "dataset": spec.name, "task_id": task.id},
                id=f"{spec.name}-{index}",
                human=human,
                ratings=ratings,
            )
        )
        rows.append(row)
    if not items:
        raise InputError(f"dataset '{spec.name}': {path} has no rows")
    if spec.references is not None:
        items = _attach_references(items, rows, spec.references, data_root, suite_path)
    if max_items is not None:
        items = sample_inputs(items, max_items, seed)
    return MetaDataset(spec, task, items, path)


def sample_inputs(items: list[MetaItem], max_items: int, seed: int = 0) -> list[MetaItem]:
    """A seeded sample of INPUTS, each with all its systems, kept in file order.

    Inputs are drawn in a seeded random order and taken whole while the total stays within
    `max_items` (always at least one input). Cutting the file after N rows would keep one
    input with a few of its systems: input-level correlations (SummEval) would rest on one
    article, and the sample would lean towards the first rows of the file.
    """
    by_input: dict[str, int] = {}
    for item in items:
        by_input[item.input_id] = by_input.get(item.input_id, 0) + 1
    order = list(by_input)
    random.Random(seed).shuffle(order)
    chosen: set[str] = set()
    total = 0
    for input_id in order:
        if chosen and total + by_input[input_id] > max_items:
            continue  # a smaller input further on may still fit
        chosen.add(input_id)
        total += by_input[input_id]
    return [item for item in items if item.input_id in chosen]


@dataclass(frozen=True)
class SuiteData:
    suite: SuiteConfig
    suite_path: Path
    sources: SourcesConfig
    sources_path: Path
    data_root: Path | None
    catalog: Catalog


def open_suite(
    suite: SuiteConfig, suite_path: Path, data_root: Path | None, catalog: Catalog | None = None
) -> SuiteData:
    sources_path = resolve_config_path(suite.sources, suite_path)
    sources = load_sources(sources_path)
    known = {s.name for s in sources.sources}
    for index, spec in enumerate(suite.datasets):
        if spec.name not in known:
            raise ConfigError(suite_path, f"datasets[{index}].name", f"'{spec.name}' is not a source in {sources_path}")
    return SuiteData(suite, suite_path, sources, sources_path, data_root, catalog or load_catalog())


def load_suite_dataset(data: SuiteData, name: str, max_items: int | None = None, seed: int = 0) -> MetaDataset:
    spec = data.suite.dataset(name)
    source = next(s for s in data.sources.sources if s.name == name)
    task = data.catalog.task(source.task)
    for aspect in spec.aspects:
        task.aspect(aspect.judge_aspect)  # a clear error now, not after an hour of judging
    return load_dataset(spec, source, data.sources_path, data.data_root, task, data.suite_path, max_items, seed)
