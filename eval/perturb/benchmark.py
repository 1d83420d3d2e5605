"""A perturbation benchmark on disk: one folder, built once and scored by any number of judges.

    <folder>/benchmark.json   what it is: kind, dataset, the task the judge is asked about
                              (a full catalog Task, so custom aspects travel with it), the
                              perturbations, the seed, who made the LLM perturbations, counts
    <folder>/items.jsonl      one text to score per line (originals and perturbed texts)
    <folder>/frozen.jsonl     the LLM-made perturbations with provenance (reused on rebuild)

An item line:

    {"id": "summeval-3:dhp.char_deletion.minor", "group": "summeval-3",
     "perturbation": "dhp.char_deletion.minor" | null, "aspects": ["coherence", ...],
     "inputs": {"Article": "..."}, "output": "...", "spans": [[12, 19]], "meta": {...}}

`group` ties a perturbed text to its original (same group, `perturbation: null`); `spans` are
the characters the perturbation changed (ground truth for span metrics); `meta` holds what a
kind needs (dual: `aspect`, `errors`, `gold`; prompt: `experts`, `injected`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spanjudge.core.catalog import Task
from spanjudge.core.configio import validation_to_config_error
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl
from spanjudge.core.jsonl import jsonl_lines
from spanjudge.eval.perturb.registry import KindName

FORMAT = "spanjudge-benchmark/1"
MANIFEST = "benchmark.json"
ITEMS = "items.jsonl"
FROZEN = "frozen.jsonl"


@dataclass(frozen=True)
class BenchItem:
    id: str
    group: str
    perturbation: str | None
    aspects: tuple[str, ...]
    inputs: dict[str, str]
    output: str
    spans: tuple[tuple[int, int], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "group": self.group,
            "perturbation": self.perturbation,
            "aspects": list(self.aspects),
            "inputs": self.inputs,
            "output": self.output,
            "spans": [list(s) for s in self.spans],
            "meta": self.meta,
        }


class PerturbationEntry(BaseModel):
    """One perturbation of a benchmark as its manifest lists it (`build.Collector.describe`)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    paper: str | None = None
    level: str | None = None
    method: str | None = None
    degree: str | None = None
    aspects: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)


class BenchmarkManifest(BaseModel):
    """benchmark.json: what `build` writes and analysis and reports read. The fields below are
    every kind's; a kind adds its own (dual: scale, scales; prompt: scales, rating_rule), kept
    as they are. Only format, kind and task are required (a hand-made benchmark is fine)."""

    model_config = ConfigDict(extra="allow")
    format: Literal["spanjudge-benchmark/1"]
    kind: KindName
    name: str | None = None  # default: the folder's name
    dataset: str = ""
    seed: int = 0
    task: Task
    perturbations: dict[str, PerturbationEntry] = Field(default_factory=dict)
    items: int | None = None
    source: str | None = None
    sample: int | None = None
    built_with: dict[str, Any] | None = None
    made: dict[str, int] = Field(default_factory=dict)
    rejected: dict[str, dict[str, int]] = Field(default_factory=dict)
    note: str | None = None

    def info(self) -> dict[str, Any]:
        """The fields beyond a benchmark's identity, as given (build counts, the kind's own fields)."""
        return self.model_dump(mode="json", exclude_unset=True, exclude=set(_IDENTITY))


_IDENTITY = ("format", "kind", "name", "dataset", "seed", "task", "perturbations", "items")


def read_manifest(path: Path) -> BenchmarkManifest:
    """The validated manifest; any problem is one InputError naming the file and the field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path}: not a {FORMAT} manifest")
    try:
        return BenchmarkManifest.model_validate(data)
    except ValidationError as exc:
        raise InputError(str(validation_to_config_error(path, exc, BenchmarkManifest))) from None


@dataclass
class Benchmark:
    kind: str  # a name of registry.KINDS
    name: str
    dataset: str
    task: Task
    items: list[BenchItem]
    perturbations: dict[str, dict[str, Any]]  # key -> name, level, method, degree, aspects
    seed: int
    info: dict[str, Any] = field(default_factory=dict)  # counts, rejections, builder settings, provenance
    folder: Path | None = None

    @property
    def aspects(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for item in self.items for a in item.aspects))

    def manifest(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "name": self.name,
            "dataset": self.dataset,
            "seed": self.seed,
            "task": self.task.model_dump(mode="json"),
            "perturbations": self.perturbations,
            "items": len(self.items),
            **self.info,
        }


def write_benchmark(benchmark: Benchmark, folder: Path) -> None:
    """Items first, manifest last: a folder with a manifest is a complete benchmark."""
    manifest = benchmark.manifest()
    BenchmarkManifest.model_validate(manifest)  # what is written can be read back
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(folder / ITEMS, (item.to_json() for item in benchmark.items))
    atomic_write_json(folder / MANIFEST, manifest)
    benchmark.folder = folder


def _need(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in row:
        raise InputError(f"{where}: missing field '{key}'")
    value = row[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{where}: field '{key}' has the wrong type ({type(value).__name__})")
    return value


def _spans(value: object, output: str, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list | tuple):
        raise InputError(f"{where}: spans must be a list of [start, end], not {type(value).__name__}")
    spans = []
    for span in value:
        if (
            not isinstance(span, list | tuple)
            or len(span) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in span)
            or not 0 <= span[0] <= span[1] <= len(output)
        ):
            raise InputError(f"{where}: span {span!r} is not [start, end] within the output")
        spans.append((span[0], span[1]))
    return tuple(spans)


def parse_item(row: object, where: str, task: Task) -> BenchItem:
    if not isinstance(row, Mapping):
        raise InputError(f"{where}: each line must be a JSON object")
    inputs = _need(row, "inputs", dict, where)
    if not all(isinstance(v, str) for v in inputs.values()):
        raise InputError(f"{where}: every input must be a string")
    unknown = [h for h in inputs if h not in task.input_headers]
    if unknown:
        raise InputError(f"{where}: input '{unknown[0]}' is not one of task '{task.id}': {task.input_headers}")
    output = _need(row, "output", str, where)
    aspects = tuple(_need(row, "aspects", list, where))
    for aspect in aspects:
        if aspect not in task.aspects:
            raise InputError(f"{where}: aspect '{aspect}' is not an aspect of task '{task.id}'")
    perturbation = row.get("perturbation")
    if perturbation is not None and not isinstance(perturbation, str):
        raise InputError(f"{where}: field 'perturbation' must be a string or null")
    return BenchItem(
        id=str(_need(row, "id", (str, int), where)),
        group=str(_need(row, "group", (str, int), where)),
        perturbation=perturbation,
        aspects=aspects,
        inputs=inputs,
        output=output,
        spans=_spans(row.get("spans") or [], output, where),
        meta=dict(row.get("meta") or {}),
    )


def load_benchmark(folder: Path) -> Benchmark:
    """A built benchmark; any damage is one message naming the file, line and field."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise InputError(f"{folder} is not a benchmark folder (no {MANIFEST}); build one with `spanjudge perturb`")
    manifest = read_manifest(manifest_path)
    task = manifest.task
    items_path = folder / ITEMS
    if not items_path.is_file():
        raise InputError(f"{items_path} is missing")
    items: list[BenchItem] = []
    seen: set[str] = set()
    for number, row in jsonl_lines(items_path):
        where = f"{items_path}:{number}"
        item = parse_item(row, where, task)
        if item.id in seen:
            raise InputError(f"{where}: item id '{item.id}' appears twice")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise InputError(f"{items_path} has no items")
    known = set(manifest.perturbations)
    stray = sorted({i.perturbation for i in items if i.perturbation and i.perturbation not in known})
    if stray:
        raise InputError(f"{items_path}: perturbation '{stray[0]}' is not listed in {MANIFEST}")
    return Benchmark(
        kind=manifest.kind,
        name=manifest.name or folder.name,
        dataset=manifest.dataset,
        task=task,
        items=items,
        perturbations={k: v.model_dump(exclude_unset=True) for k, v in manifest.perturbations.items()},
        seed=manifest.seed,
        info=manifest.info(),
        folder=folder,
    )


def originals_by_group(items: Sequence[BenchItem]) -> dict[str, BenchItem]:
    return {item.group: item for item in items if item.perturbation is None}
