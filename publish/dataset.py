"""Publishing an annotated dataset: reading the folder, and the allow-list of what is staged.

`spanjudge publish --dataset-dir DIR` reads the folder that `spanjudge annotate`, `import` or
`merge` wrote; dataset_staging.py stages (with `--dry-run OUT`, into OUT, for reading):

- `train.jsonl`, `validation.jsonl`: the records, each `provenance` with machine-local paths cut
  to their last component (a record's `source` names the file it came from);
- `hf_dataset/`: the same records as the Arrow DatasetDict annotate saves (`hub_data.to_hub_row`),
  rebuilt from the staged JSONL so both hold the same cleaned records; the card's `configs` point
  the Hub's viewer and `datasets.load_dataset` at its Arrow files;
- `stats.json`, `run.json` (machine-local paths cut), `stats.md`;
- `README.md`: the dataset card (dataset_card.py).

Nothing else is read: no `cache.sqlite`, `unscored.jsonl`, `incomplete.jsonl`, shards or locks.
The same rules as model publishing hold (staging.py): what is read must be a regular file
inside the folder, and before anything leaves the machine every staged file is scanned for
token-like strings and the metadata and provenance for the folder's and the home folder's paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.tabular import iter_jsonl

from .run_folder import read_json
from .staging import CARD_FILE, check_inside, strip_local_paths

SPLITS = ("train", "validation")
RECORD_FILES = tuple(f"{split}.jsonl" for split in SPLITS)
METADATA_FILES = ("stats.json", "stats.md", "run.json")
HF_FOLDER = "hf_dataset"
_HF_FILE = re.compile(
    rf"^{HF_FOLDER}/(?:dataset_dict\.json|(?:{'|'.join(SPLITS)})/(?:state\.json|dataset_info\.json|"
    r"data-\d{5}-of-\d{5}\.arrow))$"
)


def staged_name(name: str) -> bool:
    """Whether a staged file (its path relative to the staging folder, with /) is on the allow-list."""
    return name in RECORD_FILES or name in METADATA_FILES or name == CARD_FILE or bool(_HF_FILE.match(name))


# ---------------------------------------------------------------------------------------
# Reading the folder


@dataclass(frozen=True)
class DatasetFolder:
    """An annotation folder, as far as publishing needs it; records have their paths cut."""

    folder: Path
    splits: dict[str, list[dict[str, Any]]]  # the JSONL files present, by split (may be empty)
    run: dict[str, Any]
    stats: dict[str, Any]
    stats_md: str | None

    @property
    def records(self) -> list[dict[str, Any]]:
        return [record for records in self.splits.values() for record in records]


def _source(folder: Path, name: str) -> Path | None:
    """folder/name when present (checked: a regular file inside the folder), else None."""
    path = folder / name
    if not (path.is_symlink() or path.exists()):
        return None
    check_inside(path, folder)
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    return path


def _clean_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record with machine-local paths in its provenance cut; texts are never touched
    (an output may well begin with '/')."""
    if "provenance" not in record:
        return record
    return {**record, "provenance": strip_local_paths(record["provenance"])}


def read_dataset_folder(folder: Path) -> DatasetFolder:
    """The records, run.json and stats of an annotation folder (not a shard: merge those first)."""
    folder = folder.expanduser()
    if not folder.is_dir():
        raise InputError(f"--dataset-dir {folder}: not a folder")
    paths = {name: _source(folder, name) for name in (*RECORD_FILES, *METADATA_FILES)}
    if paths["train.jsonl"] is None:
        hint = " (a shard: join the shards with `spanjudge merge` first)" if (folder / "records.jsonl").exists() else ""
        raise InputError(
            f"--dataset-dir {folder}: no train.jsonl; not a folder written by spanjudge annotate, import or merge{hint}"
        )
    splits = {
        split: [_clean_record(record) for _, record in iter_jsonl(path)]
        for split in SPLITS
        if (path := paths[f"{split}.jsonl"]) is not None
    }
    if not any(splits.values()):
        raise InputError(f"--dataset-dir {folder}: train.jsonl and validation.jsonl hold no records")
    stats_md = paths["stats.md"]
    return DatasetFolder(
        folder=folder,
        splits=splits,
        # cut here, so the card quotes them as they are staged
        run=strip_local_paths(read_json(paths["run.json"])) if paths["run.json"] else {},
        stats=strip_local_paths(read_json(paths["stats.json"])) if paths["stats.json"] else {},
        stats_md=stats_md.read_text(encoding="utf-8") if stats_md else None,
    )
