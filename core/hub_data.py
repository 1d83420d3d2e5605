"""Annotated data on the Hugging Face Hub: dataset ids (`owner/name[:split]`) read by `train` and
`score`, and the Arrow row format a published dataset holds.

`spanjudge publish --dataset-dir` uploads an annotation folder whose `hf_dataset/` stores each
record as one Arrow row: the headed texts `inputs`/`outputs` as `[{header, text}]` lists (tasks
differ in their headers and Arrow needs one schema) and `provenance` as a JSON string
(`to_hub_row`). Reading turns such a row back into the record `spanjudge annotate` wrote
(`from_hub_row`); rows of any other dataset pass unchanged.

Where a command takes a path it also takes a Hub id, loaded with `datasets.load_dataset` (the
Hub's cache, `$HF_HOME`, serves it offline). A path that exists here always wins over an id,
and a name that ends like a data file (`data/items.jsonl`) is never taken for one, so a
mistyped path is reported as missing. A dataset that cannot be loaded (offline and not cached,
no such repository, no such split) is one line naming the id, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .fileio import atomic_write_jsonl
from .tabular import Located

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict

_DATASET_ID = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)(?::([A-Za-z0-9][A-Za-z0-9_.-]*))?$")
# endings of local data files: such a name is a path (maybe mistyped), not a Hub repository
_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".txt", ".parquet", ".arrow", ".yaml", ".yml")
HEADED_FIELDS = ("inputs", "outputs")
RECORDS_CACHE = "spanjudge-records"  # under datasets' cache: Hub records as the JSONL training reads


@dataclass(frozen=True)
class HubDatasetId:
    repo_id: str
    split: str | None = None

    def __str__(self) -> str:
        return self.repo_id if self.split is None else f"{self.repo_id}:{self.split}"


def parse_dataset_id(text: str | Path) -> HubDatasetId | None:
    """The Hub dataset `text` names, or None: for anything that exists here (a local path
    always wins), for names shaped like a data file, and for anything not `owner/name[:split]`."""
    text = str(text)
    match = _DATASET_ID.match(text)
    if match is None or ".." in text or text.lower().endswith(_FILE_SUFFIXES):
        return None
    if Path(text).expanduser().exists():
        return None
    return HubDatasetId(match[1], match[2])


# -- the row format of a published dataset ----------------------------------------------------


def to_hub_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record as one Arrow row: headed texts as [{header, text}], the provenance as JSON."""
    row = {key: value for key, value in record.items() if key not in (*HEADED_FIELDS, "provenance")}
    for key in HEADED_FIELDS:
        if isinstance(record.get(key), Mapping):
            row[key] = [{"header": header, "text": text} for header, text in record[key].items()]
    if "provenance" in record:
        row["provenance"] = json.dumps(record["provenance"], ensure_ascii=False)
    return row


def _is_pairs(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(p, Mapping) and set(p) == {"header", "text"} for p in value)


def from_hub_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The record behind a row of a published spanjudge dataset; other rows as they are."""
    record = dict(row)
    for key in HEADED_FIELDS:
        if _is_pairs(record.get(key)) and record[key]:
            record[key] = {pair["header"]: pair["text"] for pair in record[key]}
    if isinstance(record.get("provenance"), str):
        # a dataset of someone else's whose provenance is free text: kept as it is
        with contextlib.suppress(json.JSONDecodeError):
            record["provenance"] = json.loads(record["provenance"])
    return record


# -- loading -----------------------------------------------------------------------------------


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _load_failure(dataset_id: HubDatasetId, exc: Exception, what: str) -> InputError:
    """One line for a dataset that did not load: what was asked, why, and what to do."""
    import datasets

    detail = re.sub(r"\bhf_[A-Za-z0-9]{20,}", "hf_***", (str(exc).splitlines() or [""])[0])[:200]
    prefix = f"{what} {dataset_id.repo_id}: no such local file or folder, and"
    if _offline() and isinstance(exc, ConnectionError | FileNotFoundError):
        return InputError(
            f"{prefix} the Hub dataset is not in the cache ({datasets.config.HF_DATASETS_CACHE}) while "
            "HF_HUB_OFFLINE=1; load it once online, or give a local file or folder"
        )
    return InputError(f"{prefix} the Hub dataset did not load ({exc.__class__.__name__}: {detail})")


def load_splits(dataset_id: HubDatasetId, what: str) -> DatasetDict:
    """The dataset's splits (a `datasets.DatasetDict`), from the Hub or its cache."""
    import datasets

    datasets.disable_progress_bars()  # the command's own output owns the terminal
    try:
        loaded = datasets.load_dataset(dataset_id.repo_id)
    except Exception as exc:  # offline, missing repository, bad card: one line (see _load_failure)
        raise _load_failure(dataset_id, exc, what) from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise InputError(f"{what} {dataset_id.repo_id}: expected a dataset with named splits")
    return loaded


def pick_split(splits: DatasetDict, dataset_id: HubDatasetId, split: str, what: str, option: str) -> Dataset:
    if split not in splits:
        have = ", ".join(splits) or "none"
        raise InputError(
            f"{what} {dataset_id.repo_id}: no split '{split}' (it has: {have}); "
            f"name one as {dataset_id.repo_id}:SPLIT{option}"
        )
    return splits[split]


def iter_rows(dataset_id: HubDatasetId, default_split: str, what: str = "--data") -> Iterator[Located]:
    """(where, row) for the rows `score` reads: the id's split, else `default_split` (--split)."""
    split = dataset_id.split or default_split
    data = pick_split(load_splits(dataset_id, what), dataset_id, split, what, " or with --split")
    for number, row in enumerate(data):
        yield f"{dataset_id.repo_id}:{split}[{number}]", from_hub_row(row)


def local_data(path: Path, what: str) -> Path:
    """`path` itself, or for a Hub id its records as the local JSONL that training reads:
    `owner/name` gives a folder with train.jsonl (and validation.jsonl when the dataset has that
    split), `owner/name:SPLIT` a file with that split alone (`SPLIT-split.jsonl`, so no
    validation.jsonl is ever found beside it)."""
    dataset_id = parse_dataset_id(path)
    return path if dataset_id is None else _records_on_disk(dataset_id, what)


@functools.cache  # one load per process: the training code asks for the train file several times
def _records_on_disk(dataset_id: HubDatasetId, what: str) -> Path:
    import datasets

    splits = load_splits(dataset_id, what)
    if dataset_id.split is not None:
        wanted = {f"{dataset_id.split}-split": pick_split(splits, dataset_id, dataset_id.split, what, "")}
    else:
        wanted = {"train": pick_split(splits, dataset_id, "train", what, "")}
        if "validation" in splits:
            wanted["validation"] = splits["validation"]
    # keyed by the loaded data's fingerprints: another revision of the dataset gets its own folder
    key = hashlib.sha256("\n".join(f"{n}={d._fingerprint}" for n, d in wanted.items()).encode()).hexdigest()[:16]
    folder = Path(datasets.config.HF_DATASETS_CACHE) / RECORDS_CACHE / dataset_id.repo_id.replace("/", "___") / key
    for name, data in wanted.items():
        target = folder / f"{name}.jsonl"
        if not target.is_file():  # written atomically: concurrent ranks of one run write the same
            atomic_write_jsonl(target, (from_hub_row(row) for row in data))
    return folder / f"{dataset_id.split}-split.jsonl" if dataset_id.split is not None else folder
