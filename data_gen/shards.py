"""Runs split across machines: the shard manifest, and the shards read back for `spanjudge merge`
(`merge.py` joins them).

`spanjudge annotate --shard K/N` and `spanjudge generate --shard K/N` plan the whole run
(every source is read, every request drawn, exactly as one run would), keep the requests of
the inputs in shard K (core/sharding.py) and write them to their own folder, with
OUT/shard.json: which shard, a hash of everything that decides the results (the settings
and the full plan, not the servers), the inputs it holds and each request's place in the
full plan.

`spanjudge merge` checks that the shards are one run's parts (every K of 1..N once, one
settings hash, no input twice) and writes what a single run writes, from the same code: the
records in the single run's order, so the train/validation split, hf_dataset/, stats and
run.json come out the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json
from spanjudge.core.jsonl import iter_jsonl
from spanjudge.core.sharding import Shard

from .records import Record

MANIFEST = "shard.json"
SHARD_RECORDS = "records.jsonl"  # a shard's scored records, not yet split (the split needs all shards)


def settings_hash(parts: Iterable[Any]) -> str:
    """A hash of JSON-able parts: what the results depend on, never where the servers are."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()[:24]


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a shard manifest ({exc.__class__.__name__}: {exc})") from None


def start_shard(out_dir: Path, shard: Shard | None, command: str) -> None:
    """Refuse a folder that holds another shard (or a shard, for a run that is none), then mark
    this shard as started: a manifest without `finished` is refused by merge."""
    found = _read_manifest(out_dir)
    if found is not None and (shard is None or found.get("shard") != shard.label):
        wanted = "an unsharded run" if shard is None else f"shard {shard.label}"
        raise InputError(
            f"{out_dir / MANIFEST}: this folder holds shard {found.get('shard')} of a `{found.get('command')}` run; "
            f"give {wanted} its own --out"
        )
    if shard is None:
        return
    if found is None and (out_dir / "run.json").is_file():
        raise InputError(f"{out_dir} holds an unsharded run; give shard {shard.label} its own --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / MANIFEST, {"command": command, "shard": shard.label, "finished": False})


def finish_shard(
    out_dir: Path,
    shard: Shard,
    command: str,
    settings: str,
    inputs: Iterable[tuple[str, str]],
    order: Mapping[str, int],
    **extra: Any,
) -> None:
    """The manifest of a finished shard; written last, so it vouches for the files before it."""
    atomic_write_json(
        out_dir / MANIFEST,
        {
            "command": command,
            "shard": shard.label,
            "index": shard.index,
            "count": shard.count,
            "finished": True,
            "settings": settings,
            **extra,
            "inputs": sorted({tuple(i) for i in inputs}),
            "order": dict(order),
        },
    )


@dataclass
class ShardPart:
    folder: Path
    manifest: dict[str, Any]

    @property
    def order(self) -> dict[str, int]:
        return dict(self.manifest["order"])

    def rows(self, name: str) -> list[Record]:
        """A JSONL file of the shard, each row checked to be one of the shard's requests."""
        path = self.folder / name
        if not path.is_file():
            raise InputError(f"{path}: missing (the shard folder is incomplete)")
        rows = []
        for where, row in iter_jsonl(path):
            if not isinstance(row, dict) or row.get("id") not in self.order:
                raise InputError(f"{where}: row is not one of this shard's requests (see {self.folder / MANIFEST})")
            rows.append(row)
        return rows

    def run_json(self) -> dict[str, Any]:
        path = self.folder / "run.json"
        if not path.is_file():
            raise InputError(f"{path}: missing (the shard folder is incomplete)")
        return dict(json.loads(path.read_text(encoding="utf-8")))


def load_shards(folders: Sequence[Path], out_dir: Path) -> tuple[str, list[ShardPart]]:
    """The shards of one run, in shard order; one clear error for any gap, repeat or mismatch."""
    if not folders:
        raise InputError("merge needs the shard folders: spanjudge merge --shards DIR1 DIR2 ... --out DIR")
    parts = []
    for folder in folders:
        if folder.resolve() == out_dir.resolve():
            raise InputError(f"--out {out_dir} is one of the shards; merge into another folder")
        manifest = _read_manifest(folder)
        if manifest is None:
            raise InputError(f"{folder}: no {MANIFEST}; not the output folder of a run with --shard")
        if not manifest.get("finished"):
            raise InputError(f"{folder / MANIFEST}: shard {manifest.get('shard')} has not finished; re-run its command")
        parts.append(ShardPart(folder, manifest))
    first = parts[0].manifest
    for part in parts[1:]:
        _same_run(parts[0], part)
    count = first["count"]
    by_index: dict[int, ShardPart] = {}
    for part in parts:
        index = part.manifest["index"]
        if index in by_index:
            raise InputError(f"shard {index}/{count} is given twice: {by_index[index].folder} and {part.folder}")
        by_index[index] = part
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise InputError(f"shard {', '.join(missing)} missing: merge needs all {count} shards of the run")
    _disjoint([by_index[k] for k in sorted(by_index)])
    return first["command"], [by_index[k] for k in sorted(by_index)]


def _same_run(reference: ShardPart, part: ShardPart) -> None:
    ref, other = reference.manifest, part.manifest
    if other["command"] != ref["command"]:
        raise InputError(f"{part.folder} is a `{other['command']}` shard, {reference.folder} an `{ref['command']}` one")
    if other["count"] != ref["count"]:
        raise InputError(
            f"{part.folder} is shard {other['shard']}, {reference.folder} shard {ref['shard']}: not parts of one run"
        )
    if other["settings"] != ref["settings"]:
        raise InputError(
            f"{part.folder} (shard {other['shard']}) was run with other settings than {reference.folder} "
            f"(shard {ref['shard']}): another config, sources or data (settings hash {other['settings']} "
            f"vs {ref['settings']})"
        )


def _disjoint(parts: Sequence[ShardPart]) -> None:
    owner: dict[tuple[str, ...], Path] = {}
    for part in parts:
        for key in part.manifest["inputs"]:
            key = tuple(key)
            if key in owner:
                raise InputError(f"input {'/'.join(key)} is in two shards: {owner[key]} and {part.folder}")
            owner[key] = part.folder
