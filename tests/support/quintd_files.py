"""A quintd-1 folder in the shared layout, written for the import tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spanjudge.data_gen.teacher import (
    ImportConfig,
)

RULE = {"severity": {"Incorrect": 4, "Not checkable": 2, "Misleading": 3, "Other": 2}}


DATA = "Hundertwasser's Rainy Day\n---\n- director: Peter Schamoni\n- genre: documentary film"


OUTPUTS = [
    "Hundertwasser's Rainy Day is a 1966 documentary film directed by Peter Schamoni.",
    "Rainy Day is a documentary film by Peter Schamoni.",
]


def _prompt(data: str) -> str:
    return f"Based on the given data:\n```\n{data}\n```\n\nYour task is to write a brief entity description."


def write_quintd(root: Path, annotations: list[dict[str, Any]], outputs: list[str] = OUTPUTS) -> Path:
    """A quintd1 folder in the shared layout: one model's outputs and GPT-4 records for them."""
    base = root / "spans" / "quintd1"
    out_dir = base / "outputs" / "test" / "wikidata" / "default"
    out_dir.mkdir(parents=True)
    generated = [{"in": _prompt(DATA), "out": text} for text in outputs]
    (out_dir / "llama2.json").write_text(json.dumps({"dataset": "wikidata", "generated": generated}))
    ann_dir = base / "annotations" / "gpt-4"
    ann_dir.mkdir(parents=True)
    lines = [
        json.dumps({"annotator_id": "gpt-4-1106-preview", "dataset": "wikidata", "model": "llama2", "table_idx": i,
                    "annotations": spans})
        for i, spans in enumerate(annotations)
    ]  # fmt: skip
    (ann_dir / "gpt-4-wikidata-test-llama2.jsonl").write_text("\n".join(lines) + "\n")
    return root


def quintd_config(root: Path, **source: Any) -> ImportConfig:
    return ImportConfig.model_validate(
        {"name": "t", "source": {"format": "quintd1", "data_root": str(root), "rule": RULE, **source},
         "validation_fraction": 0.5}
    )  # fmt: skip


GOOD = [
    [
        {"type": 1, "text": "1966", "start": 31, "reason": "The year is not in the data."},
        {"type": 0, "text": "Hundertwasser's Rainy Day", "start": 0, "reason": "Wrong title."},
    ],
    [],
]


def write_annotator(root: Path, name: str, annotations: list[dict[str, Any]]) -> None:
    """Another annotator's records of the same outputs (annotations/other/NAME/, as quintd keeps the later ones)."""
    folder = root / "spans" / "quintd1" / "annotations" / "other" / name
    folder.mkdir(parents=True)
    lines = [
        json.dumps({"annotator_id": name, "dataset": "wikidata", "model": "llama2", "table_idx": i, "annotations": s})
        for i, s in enumerate(annotations)
    ]
    (folder / f"{name}-wikidata-test-llama2.jsonl").write_text("\n".join(lines) + "\n")
