"""The annotation pipeline (thesis §3.2-3.3, Algorithm 1, Fig. A.16-A.17):

sources -> sampled requests -> annotator prompts -> every annotator -> parse (retry with
light sampling) -> Algorithm 1 -> 0-100 in steps of 5 -> supervisor merge of the error
sets (at most 8, most severe kept) -> records with provenance -> 95/5 split by input.

Every model call goes through the SQLite cache and is committed as it arrives, and every
output file is written atomically at the end; so a run killed at any moment, or a run
whose servers died, is finished by running the same command again, which repeats no
call that already succeeded. One run at a time holds the output folder (folder_lock.py).
The models run as roles (`roles.py`); their evaluations become records in `combine.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spanjudge.core.catalog import Catalog
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl
from spanjudge.core.sharding import input_key
from spanjudge.inference.backends import engine
from spanjudge.inference.contract import (
    parse_annotator,
    parse_supervisor,
)
from spanjudge.inference.prompts import render_annotator_prompt

from .combine import aggregate_outcomes, supervisor_merge, vote_records
from .config import EnsembleConfig, ModelRole, SourcesConfig, resolve_source_path
from .decontaminate import Decontamination
from .folder_lock import one_run_per_folder
from .records import Record, split_by_input, write_split
from .roles import Role, annotate_all, keep_loaded
from .selection import EvalRequest, sample_requests
from .shards import SHARD_RECORDS, finish_shard, settings_hash, start_shard
from .source_run import SourceRun
from .sources import read_source
from .stats import compute_stats, write_stats

FAILED_CALLS = "failed_calls.jsonl"  # every failed model call of a run: id, role, cause, reason

# progress: a Tracker (core/progress.py) given one row per role, with `cached` and `failed` tallies


@dataclass
class StageSummary:
    """What a data_gen stage did: its folder, what it set aside, and its model calls."""

    out_dir: Path
    skipped: list[str] = field(default_factory=list)
    model_calls: dict[str, int] = field(default_factory=dict)
    cache_hits: dict[str, int] = field(default_factory=dict)

    @property
    def total_model_calls(self) -> int:
        return sum(self.model_calls.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "out_dir": str(self.out_dir)}


@dataclass
class RunSummary(StageSummary):
    requests: int = 0
    records: int = 0
    train: int = 0
    validation: int = 0
    unscored: int = 0
    incomplete: int = 0
    partial: int = 0  # records made without some annotator (its call failed, or its reply did not parse)
    failed_calls: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> cause -> calls
    not_sampled: int = 0  # source rows the n_systems draw left out (thesis §3.3), by design
    beyond_limit_inputs: int = 0  # source rows of inputs past a source's limit_inputs
    decontamination: dict[str, Any] | None = None  # inputs of the meta-evaluation sets: excluded, or kept loudly

    @property
    def failed_call_count(self) -> int:
        return sum(sum(causes.values()) for causes in self.failed_calls.values())


def build_requests(
    sources: SourcesConfig,
    sources_path: Path,
    catalog: Catalog,
    data_root: Path | None,
    summary: RunSummary,
    decontamination: Decontamination | None = None,
) -> list[EvalRequest]:
    """Sampled requests; rows whose inputs occur in a meta-evaluation set are left out before
    the draw (so n_systems still draws from what may be annotated)."""
    requests: list[EvalRequest] = []
    for spec in sources.sources:
        task = catalog.task(spec.task)
        aspects = list(spec.aspects) or list(task.aspects)
        for name in aspects:
            task.aspect(name)  # unknown aspect: one clear error before any model call
        path = resolve_source_path(spec, sources_path, data_root)
        report = read_source(spec, path, task)
        if not report.items:  # an empty file, or every row skipped: surely not what was meant
            skipped = len(report.oversized) + len(report.empty_outputs) + len(report.duplicates)
            raise InputError(
                f"{path}: source '{spec.name}' has no rows to annotate"
                + (f" ({skipped} skipped: oversized, empty output or duplicate)" if skipped else "")
            )
        summary.skipped += [f"oversized: {w}" for w in report.oversized]
        summary.skipped += [f"empty output: {w}" for w in report.empty_outputs]
        summary.skipped += [f"duplicate: {w}" for w in report.duplicates]
        summary.beyond_limit_inputs += report.beyond_limit
        if decontamination is not None:
            report.items = [
                i for i in report.items if not decontamination.excludes(i.dataset, i.input_id, i.inputs, i.where)
            ]
        drawn = sample_requests(
            report.items,
            aspects,
            spec.n_systems or sources.n_systems,
            spec.n_aspects or sources.n_aspects,
            sources.seed,
        )
        sampled = {(r.item.input_id, r.item.system) for r in drawn}
        summary.not_sampled += sum((i.input_id, i.system) not in sampled for i in report.items)
        requests += drawn
    return requests


def failed_calls(records: Sequence[Record], incomplete: Sequence[Record]) -> list[dict[str, Any]]:
    """Every failed model call of a run, one row each (id, role, cause, reason), from what its records keep:
    the provenance of the records (scored or not) and the failures of the incomplete items."""
    rows = []
    for record in records:
        provenance = record["provenance"]
        for entry in [*provenance.get("annotators", []), provenance.get("supervisor") or {}]:
            if entry.get("call_failure"):
                rows.append({"id": record["id"], "role": entry["name"], "cause": entry.get("status"),
                             "reason": entry["call_failure"]})  # fmt: skip
    for row in incomplete:
        rows += [
            {"id": row["id"], "role": f["name"], "cause": f["cause"], "reason": f["reason"]}
            for f in row.get("failed_calls", [])
        ]
    return rows


def count_failed_calls(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """role -> cause -> failed calls."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        by_cause = counts.setdefault(row["role"], {})
        by_cause[row["cause"]] = by_cause.get(row["cause"], 0) + 1
    return counts


@one_run_per_folder("run.out_dir", "spanjudge annotate")
def run_pipeline(
    ensemble: EnsembleConfig,
    run: SourceRun,
    *,
    refresh_unscored: bool = False,
    decontamination: Decontamination | None = None,
) -> RunSummary:
    """`refresh_unscored`: ask again every cached reply that did not parse (left unscored).
    `decontamination`: leave out (or, allowed, count) inputs of the meta-evaluation sets."""
    sources, out_dir, shard = run.sources, run.out_dir, run.shard
    start_shard(out_dir, shard, "annotate")
    summary = RunSummary(out_dir=out_dir)
    requests = build_requests(sources, run.sources_path, run.catalog, run.data_root, summary, decontamination)
    if decontamination is not None:
        summary.decontamination = decontamination.as_dict()
    # every shard plans the whole run, so each request knows its place in the single run's order
    position = {r.id: i for i, r in enumerate(requests)}
    plan = settings_hash((r.id, r.item.inputs, r.item.output) for r in requests)  # the same data in every shard
    if shard is not None:
        requests = [r for r in requests if shard.holds(input_key(r.item.dataset, r.item.input_id))]
    summary.requests = len(requests)
    cache_path = run.make_cache_folder()
    tasks = {r.item.task_id: run.catalog.task(r.item.task_id) for r in requests}
    prompts = [
        render_annotator_prompt(
            tasks[r.item.task_id], tasks[r.item.task_id].aspect(r.aspect), r.item.inputs, r.item.output
        )
        for r in requests
    ]
    annotators = [
        Role(keep_loaded(a, ensemble), cache_path, parse_annotator if refresh_unscored else None)
        for a in ensemble.annotators
    ]
    supervisor = (
        None
        if ensemble.supervisor is None  # merged by vote: no model call
        else Role(
            keep_loaded(ensemble.supervisor, ensemble), cache_path, parse_supervisor if refresh_unscored else None
        )
    )
    try:
        outcomes = annotate_all(ensemble, annotators, prompts, run.progress)
        scored, unscored, incomplete = aggregate_outcomes(ensemble, requests, tasks, annotators, outcomes, sources.seed)
        records = (
            supervisor_merge(ensemble, supervisor, scored, run.progress)
            if supervisor
            else vote_records(ensemble.merge, scored)
        )
    finally:
        for role in (*annotators, *([supervisor] if supervisor else [])):
            summary.model_calls[role.name] = role.backend.model_calls
            summary.cache_hits[role.name] = role.backend.cache_hits
            role.close()
    names = [a.name for a in ensemble.annotators]
    if shard is None:
        write_dataset(out_dir, records, unscored, incomplete, names, sources.validation_fraction, sources.seed, summary)
        return summary
    _write_shard(out_dir, records, unscored, incomplete, names, summary)
    finish_shard(
        out_dir,
        shard,
        "annotate",
        settings_hash([_results_settings(ensemble), sources.seed, sources.validation_fraction, plan]),
        [(r.item.dataset, r.item.input_id) for r in requests],
        {r.id: position[r.id] for r in requests},
        annotators=names,
        validation_fraction=sources.validation_fraction,
        seed=sources.seed,
    )
    return summary


def _results_settings(ensemble: EnsembleConfig) -> dict[str, Any]:
    """What of the ensemble decides the records: the models and how they are asked, not
    where their servers are nor how the calls are scheduled (shards run on other hosts)."""
    return {
        "roles": [(r.name, r.backend.model_id, _model_options(r)) for r in ensemble.roles],
        **ensemble.model_dump(
            mode="json", include={"name", "sampling", "supervisor_sampling", "parse_retry", "field_limits"}
        ),
        "required_annotators": ensemble.min_annotators,
        **({"merge": ensemble.merge.model_dump(mode="json")} if ensemble.merge.method == "vote" else {}),
    }


def _model_options(role: ModelRole) -> dict[str, Any]:
    keep_loaded = engine(role.backend.kind).keep_loaded  # memory, not replies
    return {k: v for k, v in role.backend.options.items() if k not in keep_loaded}


def write_dataset(
    out_dir: Path,
    records: Sequence[Record],
    unscored: Sequence[Record],
    incomplete: Sequence[Record],
    annotators: Sequence[str],
    validation_fraction: float,
    seed: int,
    summary: RunSummary,
    **extra: Any,
) -> None:
    """The files of an annotation run, from its records in request order (one run, or the
    shards of one run merged: the same code makes the same files)."""
    train, validation = split_by_input(records, validation_fraction, seed)
    write_split(out_dir, train, validation)
    atomic_write_jsonl(out_dir / "unscored.jsonl", unscored)
    atomic_write_jsonl(out_dir / "incomplete.jsonl", incomplete)
    failures = failed_calls([*records, *unscored], incomplete)
    atomic_write_jsonl(out_dir / FAILED_CALLS, failures)
    _write_stats(out_dir, records, unscored, annotators, summary)
    summary.records, summary.train, summary.validation = len(records), len(train), len(validation)
    _count(summary, records, unscored, incomplete, failures, annotators)
    atomic_write_json(out_dir / "run.json", {**summary.as_dict(), **extra})


def _count(
    summary: RunSummary,
    records: Sequence[Record],
    unscored: Sequence[Record],
    incomplete: Sequence[Record],
    failures: Sequence[Mapping[str, Any]],
    annotators: Sequence[str],
) -> None:
    summary.unscored, summary.incomplete = len(unscored), len(incomplete)
    summary.partial = sum(1 for r in records if len(r["provenance"].get("answered", annotators)) < len(annotators))
    summary.failed_calls = count_failed_calls(failures)


def _write_shard(
    out_dir: Path,
    records: Sequence[Record],
    unscored: Sequence[Record],
    incomplete: Sequence[Record],
    annotators: Sequence[str],
    summary: RunSummary,
) -> None:
    """A shard's files: its records unsplit (the split needs every shard: `spanjudge merge`)."""
    atomic_write_jsonl(out_dir / SHARD_RECORDS, records)
    atomic_write_jsonl(out_dir / "unscored.jsonl", unscored)
    atomic_write_jsonl(out_dir / "incomplete.jsonl", incomplete)
    _write_stats(out_dir, records, unscored, annotators, summary)
    summary.records = len(records)
    _count(summary, records, unscored, incomplete, failed_calls([*records, *unscored], incomplete), annotators)
    atomic_write_json(out_dir / "run.json", summary.as_dict())


def _write_stats(
    out_dir: Path, records: Sequence[Record], unscored: Sequence[Record], annotators: Sequence[str], summary: RunSummary
) -> None:
    stats = compute_stats(records, annotators, unscored)
    if summary.decontamination is not None:
        stats["decontamination"] = {k: v for k, v in summary.decontamination.items() if k != "overlaps"}
    write_stats(out_dir, stats)


def failure_lines(summary: RunSummary, out_dir: Path) -> list[str]:
    """What failed in an annotation run, for the user: the failed calls by model and cause, the records made
    without some annotator, and the items left without a record (which a re-run asks again)."""
    lines = []
    if summary.failed_calls:
        calls = summary.failed_calls
        parts = ", ".join(f"{role} {cause} ×{n}" for role, causes in calls.items() for cause, n in causes.items())
        truncated = any("truncated" in causes for causes in calls.values())
        lines.append(
            f"{summary.failed_call_count} model calls failed ({parts}): each is in {out_dir / FAILED_CALLS}; "
            f"{summary.partial} records were made from the annotators that answered (their provenance names who "
            "did and why the others did not); a re-run asks the failed calls again"
            + (
                ", but keeps the replies cut off at max_tokens (--refresh-unscored asks them again)"
                if truncated
                else ""
            )
        )
    if summary.incomplete:
        lines.append(
            f"{summary.incomplete} items have no record (see {out_dir / 'incomplete.jsonl'}): fewer annotators "
            "answered them than min_annotators; re-run the same command to ask again"
        )
    return lines
