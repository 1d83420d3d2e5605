"""`spanjudge merge`: the shards of one `annotate` or `generate` run joined into what a single run
writes, by the same code (`pipeline.write_dataset`): the records in the single run's order, so the
train/validation split, hf_dataset/, stats and run.json come out the same."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl, atomic_write_text

from .folder_lock import one_run_per_folder
from .pipeline import RunSummary, write_dataset
from .records import Record
from .shards import MANIFEST, SHARD_RECORDS, ShardPart, load_shards


def in_order(parts: Sequence[ShardPart], name: str) -> list[Record]:
    """The rows of every shard's `name`, in the single run's order."""
    positioned = [(part.order[row["id"]], row) for part in parts for row in part.rows(name)]
    return [row for _, row in sorted(positioned, key=lambda pair: pair[0])]


def summed(dicts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in dicts:
        for key, value in counts.items():
            total[key] = total.get(key, 0) + value
    return total


@one_run_per_folder("out_dir", "spanjudge merge")
def merge_shards(folders: Sequence[Path], out_dir: Path) -> dict[str, Any]:
    """Join the shards of one `annotate` or `generate` run into `out_dir`; returns its run.json."""
    command, parts = load_shards(folders, out_dir)
    if command == "annotate":
        return _merge_annotate(parts, out_dir)
    if command == "generate":
        return _merge_generate(parts, out_dir)
    raise InputError(f"{parts[0].folder / MANIFEST}: unknown command '{command}'")


def _merge_annotate(parts: Sequence[ShardPart], out_dir: Path) -> dict[str, Any]:
    runs = [part.run_json() for part in parts]
    first, manifest = runs[0], parts[0].manifest
    summary = RunSummary(
        out_dir=out_dir,
        skipped=first["skipped"],  # every shard reads all the sources: the same list in each
        model_calls=summed([r["model_calls"] for r in runs]),
        cache_hits=summed([r["cache_hits"] for r in runs]),
        requests=sum(r["requests"] for r in runs),
        not_sampled=first["not_sampled"],
        beyond_limit_inputs=first["beyond_limit_inputs"],
        decontamination=first["decontamination"],
    )
    write_dataset(
        out_dir,
        in_order(parts, SHARD_RECORDS),
        in_order(parts, "unscored.jsonl"),
        in_order(parts, "incomplete.jsonl"),
        manifest["annotators"],
        manifest["validation_fraction"],
        manifest["seed"],
        summary,
        merged_from=[str(part.folder) for part in parts],
    )
    return dict(json.loads((out_dir / "run.json").read_text(encoding="utf-8")))


def _merge_generate(parts: Sequence[ShardPart], out_dir: Path) -> dict[str, Any]:
    """What `generate._write` writes, from the shards' files."""
    runs = [part.run_json() for part in parts]
    first = runs[0]
    outputs = {name: in_order(parts, f"outputs/{name}.jsonl") for name in first["per_source"]}
    rejected, incomplete = in_order(parts, "rejected.jsonl"), in_order(parts, "incomplete.jsonl")
    (out_dir / "outputs").mkdir(parents=True, exist_ok=True)
    for name, rows in outputs.items():
        atomic_write_jsonl(out_dir / "outputs" / f"{name}.jsonl", rows)
    atomic_write_text(out_dir / "sources.yaml", (parts[0].folder / "sources.yaml").read_text(encoding="utf-8"))
    atomic_write_jsonl(out_dir / "rejected.jsonl", rejected)
    atomic_write_jsonl(out_dir / "incomplete.jsonl", incomplete)
    reasons: dict[str, int] = {}
    for row in rejected:  # in the single run's order, as it counts them
        reasons[row["reject_reason"]] = reasons.get(row["reject_reason"], 0) + 1
    summary = {
        "out_dir": str(out_dir),
        "skipped": first["skipped"],
        "model_calls": summed([r["model_calls"] for r in runs]),
        "cache_hits": summed([r["cache_hits"] for r in runs]),
        "jobs": sum(r["jobs"] for r in runs),
        "outputs": sum(len(rows) for rows in outputs.values()),
        "rejected": len(rejected),
        "incomplete": len(incomplete),
        "truncated": sum(r["truncated"] for r in runs),
        "per_source": {name: len(rows) for name, rows in outputs.items()},
        "rejected_reasons": reasons,
        "merged_from": [str(part.folder) for part in parts],
    }
    atomic_write_json(out_dir / "run.json", summary)
    return summary
