"""Staging an annotated dataset: exactly what `spanjudge publish --dataset-dir` uploads (the
list is in dataset.py), with the dataset card, after the checks of staging.py."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_directory, atomic_write_jsonl
from spanjudge.core.hub_data import to_hub_row

from .dataset import HF_FOLDER, METADATA_FILES, DatasetFolder, staged_name
from .dataset_card import DatasetCardOptions, render_dataset_card
from .staging import (
    CARD_FILE,
    DRY_RUN_DATASET,
    holds_secret_file,
    local_path_pattern,
    refuse_secrets,
    refuse_strays,
    staged_names,
)


def _write_hf_dataset(scratch: Path, splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    import datasets

    datasets.disable_progress_bars()
    parts = {split: records for split, records in splits.items() if records}
    dataset = datasets.DatasetDict(
        {split: datasets.Dataset.from_list([to_hub_row(r) for r in records]) for split, records in parts.items()}
    )
    dataset.save_to_disk(str(scratch / HF_FOLDER))


def check_dataset_local_paths(folder: Path, data: DatasetFolder) -> None:
    """No metadata file, and no record's provenance, names the dataset folder or the home
    folder (texts are not searched: a story may mention /home)."""
    pattern = local_path_pattern(data.folder)
    holding = [
        name
        for name in (*METADATA_FILES, CARD_FILE)
        if (folder / name).is_file() and pattern.search((folder / name).read_text(encoding="utf-8", errors="replace"))
    ]
    for split, records in data.splits.items():
        if any(pattern.search(json.dumps(r.get("provenance"), ensure_ascii=False)) for r in records):
            holding.append(f"{split}.jsonl (provenance)")
    if holding:
        raise SpanjudgeError(
            f"refusing to publish: a machine-local path (the dataset or home folder) in {', '.join(holding)}; "
            "remove it from the folder's file"
        )


def stage_dataset(
    data: DatasetFolder, out: Path, options: DatasetCardOptions, *, token: str | None = None
) -> list[str]:
    """Write exactly what will be uploaded into `out` (replaced as a whole); returns the file
    names, relative to `out`."""
    with atomic_directory(out, DRY_RUN_DATASET, "--dry-run") as scratch:
        for split, records in data.splits.items():
            atomic_write_jsonl(scratch / f"{split}.jsonl", records)
        _write_hf_dataset(scratch, data.splits)
        for name, payload in (("run.json", data.run), ("stats.json", data.stats)):
            if (data.folder / name).is_file():
                text = json.dumps(payload, indent=2, ensure_ascii=False)
                (scratch / name).write_text(text + "\n", encoding="utf-8")
        if data.stats_md is not None:
            (scratch / "stats.md").write_text(data.stats_md, encoding="utf-8")
        (scratch / CARD_FILE).write_text(render_dataset_card(data, options), encoding="utf-8")
        names = staged_names(scratch)
        refuse_strays(names, staged_name, scratch)
        refuse_secrets([name for name in names if holds_secret_file(scratch / name, token)])
        check_dataset_local_paths(scratch, data)
    return names
