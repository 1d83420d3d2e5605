"""The dataset card: its data built here from the annotation folder (models, counts, licences),
its prose in the Jinja template `configs/cards/dataset.jinja`.

A source's licence comes from `--source-license NAME=LICENSE`, else from a `license` (or
`licence`) that run.json records beside the source's `name`/`dataset`; otherwise the card says
"unknown".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spanjudge.core.errors import InputError

from .dataset import HF_FOLDER, DatasetFolder
from .markdown import category_rows, cell, render

TAGS = ("spanjudge", "nlg-evaluation", "llm-as-a-judge", "error-spans")
UNKNOWN = "unknown"
TEMPLATE = "dataset.jinja"


@dataclass(frozen=True)
class DatasetCardOptions:
    repo_id: str
    license: str = "other"
    source_licenses: Mapping[str, str] = field(default_factory=dict)


def _licenses_in(data: object) -> dict[str, str]:
    """Licences that run.json records: {"licenses": {name: id}}, or a `license` beside a
    source's `name`/`dataset` anywhere in it."""
    found: dict[str, str] = {}
    if isinstance(data, Mapping):
        for key in ("licenses", "licences"):
            if isinstance(data.get(key), Mapping):
                found.update({str(k): str(v) for k, v in data[key].items() if isinstance(v, str)})
        license_ = data.get("license", data.get("licence"))
        name = data.get("name", data.get("dataset"))
        if isinstance(license_, str) and isinstance(name, str):
            found[name] = license_
        for value in data.values():
            found = {**_licenses_in(value), **found}
    elif isinstance(data, list):
        for value in data:
            found = {**_licenses_in(value), **found}
    return found


def source_counts(data: DatasetFolder) -> Counter[str]:
    """Records per source dataset (the records' `dataset` field)."""
    return Counter(str(record.get("dataset") or UNKNOWN) for record in data.records)


def source_licenses(data: DatasetFolder, given: Mapping[str, str]) -> dict[str, str]:
    """Each source's licence: --source-license, else run.json, else "unknown"."""
    sources = sorted(source_counts(data))
    stray = sorted(set(given) - set(sources))
    if stray:
        raise InputError(
            f"--source-license {stray[0]}=...: no source of that name in the records (sources: {', '.join(sources)})"
        )
    recorded = _licenses_in(data.run)
    return {name: given.get(name) or recorded.get(name) or UNKNOWN for name in sources}


@dataclass
class Models:
    """The models behind the records: name -> model id (None where not recorded)."""

    annotators: dict[str, str | None] = field(default_factory=dict)
    supervisors: dict[str, str | None] = field(default_factory=dict)
    ensembles: set[str] = field(default_factory=set)


def _note(found: dict[str, str | None], entry: object) -> None:
    if isinstance(entry, Mapping) and entry.get("name"):
        name = str(entry["name"])
        found[name] = found.get(name) or (str(entry["model_id"]) if entry.get("model_id") else None)


def models_of(records: Iterable[Mapping[str, Any]]) -> Models:
    """The annotators and supervisors named in the records' provenance."""
    models = Models()
    for record in records:
        provenance = record.get("provenance")
        if not isinstance(provenance, Mapping):
            continue
        for entry in provenance.get("annotators") or []:
            _note(models.annotators, entry)
        _note(models.supervisors, provenance.get("supervisor"))
        if provenance.get("ensemble"):
            models.ensembles.add(str(provenance["ensemble"]))
    return models


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def _how_made(run: Mapping[str, Any], models: Models) -> dict[str, Any]:
    """How the records were made: imported (run.json records the format) or annotated."""
    found = run.get("decontamination")
    decontamination = None
    if isinstance(found, Mapping):
        overlapping = cell(found.get("overlapping_inputs"))
        decontamination = {
            "against": f" (`{found['against']}`)" if found.get("against") else "",
            "done": f"{overlapping} inputs that occur in them were kept (`--allow-overlap`)"
            if found.get("allow_overlap")
            else f"{cell(found.get('excluded_examples'))} examples of {overlapping} such inputs were left out",
        }
    return {
        "format": run.get("format") or None,  # only `spanjudge import` records the format it read
        "rule": run.get("rule") or None,
        "ensemble": f" `{', '.join(sorted(models.ensembles))}`" if models.ensembles else "",
        "shards": len(run["merged_from"]) if run.get("merged_from") else None,
        "decontamination": decontamination,
    }


def _teacher(record: Mapping[str, Any]) -> bool:
    provenance = record.get("provenance")
    return isinstance(provenance, Mapping) and bool(provenance.get("teacher"))


def _annotators(data: DatasetFolder, models: Models) -> dict[str, Any]:
    """The annotator table's rows (name, model, role, parse failure rate) and the teachers."""
    failures = data.stats.get("parse_failure_rate") or {}
    rows = [(name, model, "annotator", failures.get(name)) for name, model in models.annotators.items()]
    rows += [(name, model, "supervisor", failures.get(name)) for name, model in models.supervisors.items()]
    for name in failures:  # annotators named only in stats.json
        if name not in models.annotators and name not in models.supervisors:
            rows.append((name, None, "annotator", failures[name]))
    return {
        "rows": [
            (name, model, role, f"{rate:.2%}" if isinstance(rate, int | float) else None)
            for name, model, role, rate in rows
        ],
        "teachers": sorted({str(r["provenance"]["teacher"]) for r in data.records if _teacher(r)}),
    }


def _counts(data: DatasetFolder, licenses: Mapping[str, str]) -> dict[str, Any]:
    run = data.run
    sizes = [f"{split} {len(records)}" for split, records in data.splits.items()]
    extra = [f"{key} {run[key]}" for key in ("unscored", "incomplete") if isinstance(run.get(key), int)]
    aspects = Counter(f"{r.get('task_id')}/{r.get('aspect_name')}" for r in data.records)
    counts = source_counts(data)
    return {
        "records": ", ".join(sizes + extra),
        "categories": category_rows(data.stats),
        "aspects": sorted(aspects.items()),
        "sources": [(n, counts[n], licenses[n]) for n in sorted(counts)],
    }


def _metadata(data: DatasetFolder, options: DatasetCardOptions) -> str:
    from huggingface_hub import DatasetCardData

    present = [split for split, records in data.splits.items() if records]
    return str(
        DatasetCardData(
            license=options.license,
            language=["en"],
            task_categories=["text-generation"],
            size_categories=[_size_category(len(data.records))],
            pretty_name=options.repo_id.split("/")[-1],
            tags=list(TAGS),
            configs=[
                {
                    "config_name": "default",
                    "data_files": [{"split": split, "path": f"{HF_FOLDER}/{split}/*.arrow"} for split in present],
                }
            ],
        ).to_yaml()
    )


def render_dataset_card(data: DatasetFolder, options: DatasetCardOptions) -> str:
    """The dataset card: YAML metadata (licence, task categories, configs/splits) and the body."""
    from huggingface_hub import DatasetCard

    models = models_of(data.records)
    text = render(
        TEMPLATE,
        metadata=_metadata(data, options),
        repo=options.repo_id,
        name=options.repo_id.split("/")[-1],
        license_unset=options.license == "other",
        hf_folder=HF_FOLDER,
        first_split=next(iter(s for s, r in data.splits.items() if r)),
        how_made=_how_made(data.run, models),
        annotators=_annotators(data, models),
        counts=_counts(data, source_licenses(data, options.source_licenses)),
    )
    return str(DatasetCard(text))
