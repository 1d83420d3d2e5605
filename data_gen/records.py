"""Final training records, the train/validation split and their files on disk."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.catalog import Task
from spanjudge.core.fileio import atomic_directory, atomic_write_jsonl

Record = dict[str, Any]


def input_key(record: Record) -> tuple[str, str]:
    return record["dataset"], record["input_id"]


def split_by_input(records: Sequence[Record], fraction: float, seed: int) -> tuple[list[Record], list[Record]]:
    """Thesis §4.4: ~`fraction` of the records for validation, no input in both parts.

    Whole inputs (all their outputs and aspects) are drawn in a seeded order until the
    validation part holds at least `fraction` of the records; with two or more inputs
    at least one goes to validation when the fraction is positive.
    """
    keys = sorted({input_key(r) for r in records})
    random.Random(seed).shuffle(keys)
    target = fraction * len(records)
    chosen: set[tuple[str, str]] = set()
    size = 0
    sizes: dict[tuple[str, str], int] = {}
    for record in records:
        sizes[input_key(record)] = sizes.get(input_key(record), 0) + 1
    for key in keys:
        if fraction <= 0 or len(keys) - len(chosen) <= 1 or (size >= target and chosen):
            break
        chosen.add(key)
        size += sizes[key]
    train = [r for r in records if input_key(r) not in chosen]
    validation = [r for r in records if input_key(r) in chosen]
    return train, validation


def task_fields(task: Task, aspect_name: str) -> dict[str, Any]:
    """The task and aspect fields of a record, from the catalog."""
    aspect = task.aspect(aspect_name)
    return {
        "aspect_name": aspect.name,
        "aspect_definition": aspect.definition,
        "task_type": task.category,
        "task_name": task.title,
        "task_id": task.id,
        "extra_task_info": task.description,
    }


def _as_pairs(headed: dict[str, str]) -> list[dict[str, str]]:
    return [{"header": h, "text": t} for h, t in headed.items()]


def to_hf_row(record: Record) -> dict[str, Any]:
    """Arrow needs one schema for every row: headed texts become [{header, text}] lists
    (tasks differ in their headers) and the provenance becomes a JSON string."""
    row = {k: v for k, v in record.items() if k not in ("inputs", "outputs", "provenance")}
    row["inputs"] = _as_pairs(record["inputs"])
    row["outputs"] = _as_pairs(record["outputs"])
    row["provenance"] = json.dumps(record["provenance"], ensure_ascii=False)
    return row


def write_split(out_dir: Path, train: Sequence[Record], validation: Sequence[Record]) -> None:
    """train.jsonl, validation.jsonl and a Hugging Face DatasetDict in `hf_dataset/`."""
    import datasets

    datasets.disable_progress_bars()  # our own progress display owns the terminal
    atomic_write_jsonl(out_dir / "train.jsonl", train)
    atomic_write_jsonl(out_dir / "validation.jsonl", validation)
    parts = {name: rows for name, rows in (("train", train), ("validation", validation)) if rows}
    if not parts:
        return
    # a folder from before markers is known by its DatasetDict index
    with atomic_directory(out_dir / "hf_dataset", "dataset", recognised_by=("dataset_dict.json",)) as scratch:
        dataset = datasets.DatasetDict(
            {name: datasets.Dataset.from_list([to_hf_row(r) for r in rows]) for name, rows in parts.items()}
        )
        dataset.save_to_disk(str(scratch))
