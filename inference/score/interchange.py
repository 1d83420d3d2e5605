"""Scores files in the formats other span tools read: xCOMET's `error_spans` and a factgenie
annotation campaign; and factgenie campaigns read back as spans on their outputs.

- **xCOMET** (COMET's `model.predict(...).metadata.error_spans`): per output a list of
  `{text, start, end, severity, confidence}` with severity `minor` / `major` / `critical`.
  spanjudge's severities 1–5 map 1–2 → minor, 3–4 → major, 5 → critical (`XCOMET_SEVERITY`);
  the 1–5 value stays beside it (`spanjudge_severity`). `confidence` is the judge's own (rows
  scored with `--probabilities`), else null: never invented. xCOMET's segment score is 0–1, so
  `score` is spanjudge's 0–100 divided by 100 (null when unscored). An error the judge did not
  locate in the output (an omission, or a quote not found) cannot be a span: it is counted in
  `unlocated_errors`.
- **factgenie** (an "external" campaign, the layout factgenie itself writes for imported
  annotations): `CAMPAIGN/metadata.json` with the span categories, and `CAMPAIGN/files/*.jsonl`,
  one record per output with `dataset`, `split`, `setup_id`, `example_idx`, `output`,
  `metadata` and `annotations` of `{reason, text, type, start}`. The categories are the five
  severities (`type` = severity − 1); a row's spanjudge id, task, aspect and score are kept in
  the record's `metadata`. Unlocated errors are left out (factgenie spans are located) and
  counted in the record's metadata. As factgenie 1.2 needs to list, browse and compare it: the
  metadata has `created`; the campaign id, its folder's name, and each record's dataset, split and
  setup id are slugs (factgenie slugifies every id it reads, then looks the folder up by it); and
  `db.csv` marks every output `finished` (factgenie's agreement commands read the status there).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from slugify import slugify

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_text, first_line

XCOMET_SEVERITY = {1: "minor", 2: "minor", 3: "major", 4: "major", 5: "critical"}
SEVERITY_COLOURS = ("#fff3b0", "#ffe08a", "#ffc078", "#ff9a76", "#ff6b6b")  # as scores.html draws them
FACTGENIE_CATEGORIES = [
    {"name": f"severity {s}", "color": SEVERITY_COLOURS[s - 1], "description": f"an error of severity {s} of 5"}
    for s in range(1, 6)
]


def _located(errors: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    located = [e for e in errors if e.get("start") is not None and e.get("end") is not None]
    return located, len(errors) - len(located)


XCOMET_FIELDS = frozenset({"mt", "error_spans", "unlocated_errors"})  # what marks a row as `xcomet_rows`'s


def is_xcomet_file(path: Path) -> bool:
    """Whether the file at `path` is one `render --to xcomet` wrote (its first row has our fields)."""

    row = json.loads(first_line(path))
    return isinstance(row, dict) and row.keys() >= XCOMET_FIELDS


def xcomet_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One xCOMET-style row per result row, in order."""
    converted = []
    for row in rows:
        evaluation = row["evaluation"]
        located, unlocated = _located(evaluation["errors"])
        score = evaluation["score"]
        converted.append(
            {
                "id": row["id"],
                "task": row["task"],
                "aspect": row["aspect"],
                "mt": row["output"],
                "score": None if score is None else score / 100,
                "error_spans": [
                    {
                        "text": row["output"][e["start"] : e["end"]],
                        "start": e["start"],
                        "end": e["end"],
                        "severity": XCOMET_SEVERITY[int(e["severity"])],
                        "spanjudge_severity": int(e["severity"]),
                        "confidence": e.get("confidence"),
                        "explanation": e["explanation"],
                    }
                    for e in sorted(located, key=lambda e: (e["start"], e["end"]))
                ],
                "unlocated_errors": unlocated,
                "unscored_reason": row.get("unscored_reason"),
            }
        )
    return converted


# the columns of db.csv in factgenie's own external campaigns (factgenie.datasets.propaganda_techniques)
DB_COLUMNS = (
    *("dataset", "split", "example_idx", "setup_id", "batch_idx"),
    *("annotator_id", "annotator_group", "status", "start", "end"),
)


def campaign_folder(out: Path | None, results: Path, suffix: str) -> Path:
    """The campaign's folder: `--out`, refused unless its name is a slug, or RESULTS-SUFFIX beside the results
    made one. factgenie reads a campaign's id, slugifies it and opens the folder of that name, so under any
    other name the campaign is listed but cannot be opened."""
    if out is None:
        return results.with_name(slugify(f"{results.stem}-{suffix}"))
    slug = slugify(out.name)
    if out.name != slug:
        raise InputError(f"--out {out}: factgenie opens a campaign by its slugified name; call it '{slug}'")
    return out


def factgenie_campaign(
    rows: Sequence[Mapping[str, Any]], campaign_id: str, dataset: str, split: str, setup_id: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(metadata.json, the records of files/*.jsonl) of a factgenie campaign holding the judge's spans.
    Unscored rows are left out: an output the judge did not evaluate has no annotation. The ids are
    slugified as factgenie slugifies them when it reads a campaign."""
    campaign_id, dataset, split, setup_id = (slugify(name) for name in (campaign_id, dataset, split, setup_id))
    metadata = {
        "id": campaign_id,
        "mode": "external",
        "created": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),  # factgenie's format; it sorts campaigns by it
        "config": {
            "annotation_span_categories": FACTGENIE_CATEGORIES,
            "flags": [],
            "options": [],
            "sliders": [],
            "text_fields": [],
        },
        "source": "spanjudge",
    }
    records = []
    for example_idx, row in enumerate(rows):
        evaluation = row["evaluation"]
        if evaluation["score"] is None:
            continue
        located, unlocated = _located(evaluation["errors"])
        records.append(
            {
                "dataset": dataset,
                "split": split,
                "setup_id": setup_id,
                "example_idx": example_idx,
                "output": row["output"],
                "metadata": {
                    "annotator_id": Path(row.get("model") or "spanjudge").name,  # the judge, never a local path
                    "annotator_group": 0,
                    "campaign_id": campaign_id,
                    "annotation_span_categories": FACTGENIE_CATEGORIES,
                    "spanjudge_id": row["id"],
                    "task": row["task"],
                    "aspect": row["aspect"],
                    "score": evaluation["score"],
                    "unlocated_errors": unlocated,
                },
                "annotations": [
                    {
                        "reason": e["explanation"],
                        "text": row["output"][e["start"] : e["end"]],
                        "type": int(e["severity"]) - 1,
                        "start": e["start"],
                    }
                    for e in sorted(located, key=lambda e: (e["start"], e["end"]))
                ],
            }
        )
    return metadata, records


@dataclass(frozen=True)
class AnnotatedOutput:
    """One output of a factgenie campaign with its spans: (start, end, category index, reason)."""

    key: tuple[str, str, str, int]  # dataset, split, setup_id, example_idx
    output: str
    spans: tuple[tuple[int, int, int, str], ...]
    categories: tuple[str, ...]
    metadata: Mapping[str, Any]


def read_factgenie_campaign(folder: Path) -> list[AnnotatedOutput]:
    """Every annotated output of a factgenie campaign folder (metadata.json + files/*.jsonl), in
    file order. Anything that is not what factgenie writes (text that is not UTF-8, a metadata file
    that is no object, a category without a name, a record or span of the wrong type, a span whose
    text is not at its `start` in the output) is one InputError naming the file and line."""
    metadata_path = folder / "metadata.json"
    if not metadata_path.is_file():
        raise InputError(f"{folder} is not a factgenie campaign: no metadata.json")
    categories = _categories(metadata_path)
    files = sorted((folder / "files").glob("*.jsonl"))
    if not files:
        raise InputError(f"{folder}/files holds no .jsonl annotation file")
    for path in files:
        if not path.is_file():
            raise InputError(f"{path}: is not a file (a campaign's files/*.jsonl are its annotation files)")
    return [read for path in files for read in _records(path, categories)]


def _utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#x} at offset {exc.start})") from None


def _categories(path: Path) -> tuple[str, ...]:
    """The span categories' names in a campaign's metadata.json."""
    try:
        metadata = json.loads(_utf8(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    config = metadata.get("config", {}) if isinstance(metadata, dict) else None
    categories = config.get("annotation_span_categories", []) if isinstance(config, dict) else None
    if not isinstance(categories, list):
        raise InputError(f"{path}: not a factgenie campaign's metadata (an object whose config lists its categories)")
    names = []
    for number, category in enumerate(categories):
        name = category.get("name") if isinstance(category, dict) else None
        if not isinstance(name, str) or not name:
            raise InputError(f"{path}: span category {number} has no name (config.annotation_span_categories)")
        names.append(name)
    return tuple(names)


def _records(path: Path, categories: tuple[str, ...]) -> Iterator[AnnotatedOutput]:
    for number, line in enumerate(_utf8(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
            output = record["output"]
            key = (str(record["dataset"]), str(record["split"]), str(record["setup_id"]), int(record["example_idx"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: not a factgenie annotation record ({exc!r})") from None
        if not isinstance(output, str):
            raise InputError(f"{where}: the record's output must be text, got {type(output).__name__}")
        annotations = record.get("annotations") or []
        if not isinstance(annotations, list):
            raise InputError(f"{where}: annotations must be a list of spans, got {type(annotations).__name__}")
        spans = []
        for annotation in annotations:
            if not isinstance(annotation, dict):
                raise InputError(f"{where}: a span must be an object with text, start and type, got {annotation!r}")
            kind = annotation.get("type", annotation.get("annotation_type"))
            text, start = annotation.get("text"), annotation.get("start")
            if isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind < len(categories):
                raise InputError(f"{where}: span category {kind!r} is not one of the campaign's {len(categories)}")
            if (
                not isinstance(text, str)
                or not text
                or isinstance(start, bool)
                or not isinstance(start, int)
                or start < 0
                or output[start : start + len(text)] != text
            ):
                raise InputError(f"{where}: span {text!r} is not at character {start!r} of the output")
            reason = annotation.get("reason")
            spans.append((start, start + len(text), kind, reason if isinstance(reason, str) else ""))
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InputError(f"{where}: the record's metadata must be an object, got {type(metadata).__name__}")
        yield AnnotatedOutput(key, output, tuple(spans), categories, metadata)


def write_factgenie_campaign(
    out: Path, metadata: Mapping[str, Any], records: Sequence[Mapping[str, Any]], file_name: str
) -> None:
    """The campaign folder with its db.csv: refuses a folder that already holds a campaign or anything else."""

    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is a file: a campaign is a folder, written to a new or empty one")
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} is not empty: a campaign is written to a new or empty folder")
    (out / "files").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "metadata.json", json.dumps(metadata, indent=2, ensure_ascii=False) + "\n")
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_write_text(out / "files" / f"{file_name}.jsonl", lines)
    atomic_write_text(out / "db.csv", _db_csv(records))


def _db_csv(records: Sequence[Mapping[str, Any]]) -> str:
    """Every record's output as finished, one batch each, as factgenie's external campaigns list them."""
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(DB_COLUMNS)
    for batch, r in enumerate(records):
        group = r["metadata"].get("annotator_group", 0)
        annotator = r["metadata"].get("annotator_id", "")
        key = (r["dataset"], r["split"], r["example_idx"], r["setup_id"])
        writer.writerow([*key, batch, annotator, group, "finished", "", ""])
    return table.getvalue()
