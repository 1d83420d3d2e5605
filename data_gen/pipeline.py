"""The annotation pipeline (thesis §3.2-3.3, Algorithm 1, Fig. A.16-A.17):

sources -> sampled requests -> annotator prompts -> every annotator -> parse (retry with
light sampling) -> Algorithm 1 -> 0-100 in steps of 5 -> supervisor merge of the error
sets (at most 8, most severe kept) -> records with provenance -> 95/5 split by input.

Every model call goes through the SQLite cache and is committed as it arrives, and every
output file is written atomically at the end; so a run killed at any moment, or a run
whose servers died, is finished by running the same command again, which repeats no
call that already succeeded. One run at a time holds the output folder (folder_lock.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spanjudge.core.catalog import Catalog, Task
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl
from spanjudge.core.progress import Tracker
from spanjudge.core.sharding import Shard, input_key
from spanjudge.inference.backends import CachedBackend, LLMCache, engine, make_backend
from spanjudge.inference.contract import (
    MAX_ERRORS,
    AnnotatorEvaluation,
    ErrorAnnotation,
    Evaluation,
    ParseFailure,
    anchor_errors,
    cap_errors,
    parse_annotator,
    parse_supervisor,
)
from spanjudge.inference.prompts import render_annotator_prompt, render_supervisor_prompt

from .aggregate import UNION_RULE, aggregate, union_of_errors
from .annotate import Outcome, limit_annotator, limit_supervisor, run_with_retries
from .config import EnsembleConfig, ModelRole, SourcesConfig, resolve_source_path
from .decontaminate import Decontamination
from .folder_lock import one_run_per_folder
from .records import Record, split_by_input, task_fields, write_split
from .selection import EvalRequest, sample_requests
from .shards import SHARD_RECORDS, finish_shard, settings_hash, start_shard
from .sources import read_source
from .stats import compute_stats, write_stats
from .vote import MergeRule, Vote, agreement, vote_merge

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


class _Role:
    """One model of the ensemble behind its cache, with its call counters."""

    def __init__(self, role: ModelRole, cache_path: Path, parse: Callable[[str], object] | None = None) -> None:
        self.name = role.name
        self.spec = role.backend
        self.cache = LLMCache(cache_path)  # one connection per role: roles run in threads
        # a reply cut off at max_tokens is a failed call here (stored, as the model's reply); with `parse`
        # (--refresh-unscored), stored replies it cannot read, or that were cut off, are asked again
        stale = (
            (lambda c: c.finish_reason == "length" or isinstance(parse(c.text), ParseFailure))
            if parse is not None
            else None
        )
        self.backend = CachedBackend(make_backend(role.backend), self.cache, accept_truncated=False, stale=stale)

    def close(self) -> None:
        self.backend.close()
        self.cache.close()


def _progress_reporter(name: str, total: int, progress: Tracker | None) -> Callable[[int, Outcome[Any]], None] | None:
    if progress is None:
        return None
    advance = progress(name, total, cached=0, failed=0)

    def report(_: int, outcome: Outcome[Any]) -> None:
        cached = outcome.cached_calls > 0 and outcome.model_seconds == 0
        advance(1, cached=int(cached), failed=int(not outcome.complete or outcome.parsed is None))

    return report


def _annotate_all(
    ensemble: EnsembleConfig,
    roles: Sequence[_Role],
    prompts: Sequence[str],
    progress: Tracker | None,
) -> dict[str, list[Outcome[AnnotatorEvaluation]]]:
    """Every annotator over every prompt; annotators run side by side (different servers)."""

    def one(role: _Role) -> list[Outcome[AnnotatorEvaluation]]:
        return run_with_retries(
            role.backend,
            prompts,
            ensemble.sampling,
            ensemble.parse_retry,
            parse_annotator,
            _progress_reporter(role.name, len(prompts), progress),
            limit_annotator(ensemble.field_limits),
        )

    def in_turn(group: Sequence[_Role]) -> list[tuple[str, list[Outcome[AnnotatorEvaluation]]]]:
        return [(role.name, one(role)) for role in group]

    groups = host_groups(roles) if ensemble.one_model_at_a_time else [[role] for role in roles]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        return {name: outcomes for done in pool.map(in_turn, groups) for name, outcomes in done}


def host_groups(roles: Sequence[_Role]) -> list[list[_Role]]:
    """Annotators that share a server (any endpoint's host:port; in-process models share this
    machine), each group in config order: `one_model_at_a_time` runs a group's models in turn."""
    groups: list[tuple[set[str], list[int]]] = []
    for index, role in enumerate(roles):
        hosts = {urlsplit(url).netloc or url for url in role.spec.endpoints} or {"this machine"}
        touching = [g for g in groups if g[0] & hosts]
        groups = [g for g in groups if not any(g is t for t in touching)]
        groups.append((hosts.union(*(g[0] for g in touching)), [i for g in touching for i in g[1]] + [index]))
    ordered = sorted((sorted(indices) for _, indices in groups), key=lambda indices: indices[0])
    return [[roles[i] for i in indices] for indices in ordered]


def _keep_loaded(role: ModelRole, ensemble: EnsembleConfig) -> ModelRole:
    """With `one_model_at_a_time`, a model stays loaded between its requests where its engine can be told
    to (its declaration's `keep_loaded` options; the user's own win)."""
    backend = role.backend
    keep = engine(backend.kind).keep_loaded if ensemble.one_model_at_a_time else {}
    if not keep.keys() - backend.options.keys():
        return role
    options = {**keep, **backend.options}
    return role.model_copy(update={"backend": backend.model_copy(update={"options": options})})


def _annotator_provenance(name: str, role_model: str, outcome: Outcome[AnnotatorEvaluation]) -> dict[str, Any]:
    parsed = outcome.parsed
    return {
        "name": name,
        "model_id": role_model,
        "status": _status(outcome),
        "prompt_hash": outcome.prompt_hash,
        "raw_replies": outcome.replies,
        "label": parsed.label.text if parsed else None,
        "rating": parsed.rating if parsed else None,
        "errors": [e.model_dump(exclude_none=True) for e in parsed.errors] if parsed else None,
        "parse_failure": outcome.parse_failure if parsed is None else None,
        "call_failure": outcome.call_failure,
        "dropped_outlier": False,
        **_limit_counts(outcome),
    }


def _status(outcome: Outcome[Any]) -> str:
    """What became of one model's call, in a word: answered, unparsable, or the failed call's cause."""
    if outcome.call_cause is not None:
        return outcome.call_cause
    return "answered" if outcome.parsed is not None else "unparsable"


def _limit_counts(outcome: Outcome[Any]) -> dict[str, Any]:
    """What the field limits did to this request's replies (stats.json sums them), and the room of a reply
    asked again because the first was cut off."""
    counts: dict[str, Any] = {"rejected_too_long": outcome.too_long, "capped_fields": outcome.capped}
    if outcome.more_room is not None:
        counts["asked_again_with_max_tokens"] = outcome.more_room
    return counts


def _incomplete(record: Record, reason: str, failures: Sequence[dict[str, Any]]) -> Record:
    keys = ("id", "dataset", "input_id", "system", "aspect_name")
    return {**{k: record[k] for k in keys}, "reason": reason, "failed_calls": list(failures)}


def _failure(name: str, outcome: Outcome[Any]) -> dict[str, Any]:
    return {"name": name, "cause": outcome.call_cause, "reason": outcome.call_failure}


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


def _base_record(request: EvalRequest, task: Task, ensemble: EnsembleConfig, seed: int) -> Record:
    item = request.item
    return {
        "id": request.id,
        "dataset": item.dataset,
        "input_id": item.input_id,
        "system": item.system,
        "inputs": item.inputs,
        "outputs": {task.output: item.output},
        **task_fields(task, request.aspect),
        "provenance": {"ensemble": ensemble.name, "seed": seed, "source": item.where},
    }


@one_run_per_folder("out_dir", "spanjudge annotate")
def run_pipeline(
    ensemble: EnsembleConfig,
    sources: SourcesConfig,
    sources_path: Path,
    out_dir: Path,
    catalog: Catalog,
    *,
    data_root: Path | None,
    cache_path: Path | None = None,
    progress: Tracker | None = None,
    refresh_unscored: bool = False,
    decontamination: Decontamination | None = None,
    shard: Shard | None = None,
) -> RunSummary:
    """`refresh_unscored`: ask again every cached reply that did not parse (left unscored).
    `decontamination`: leave out (or, allowed, count) inputs of the meta-evaluation sets.
    `shard`: only the requests of the inputs in this shard (data_gen/shards.py)."""
    start_shard(out_dir, shard, "annotate")
    summary = RunSummary(out_dir=out_dir)
    requests = build_requests(sources, sources_path, catalog, data_root, summary, decontamination)
    if decontamination is not None:
        summary.decontamination = decontamination.as_dict()
    # every shard plans the whole run, so each request knows its place in the single run's order
    position = {r.id: i for i, r in enumerate(requests)}
    plan = settings_hash((r.id, r.item.inputs, r.item.output) for r in requests)  # the same data in every shard
    if shard is not None:
        requests = [r for r in requests if shard.holds(input_key(r.item.dataset, r.item.input_id))]
    summary.requests = len(requests)
    cache_path = cache_path or out_dir / "cache.sqlite"
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    tasks = {r.item.task_id: catalog.task(r.item.task_id) for r in requests}
    prompts = [
        render_annotator_prompt(
            tasks[r.item.task_id], tasks[r.item.task_id].aspect(r.aspect), r.item.inputs, r.item.output
        )
        for r in requests
    ]
    annotators = [
        _Role(_keep_loaded(a, ensemble), cache_path, parse_annotator if refresh_unscored else None)
        for a in ensemble.annotators
    ]
    supervisor = (
        None
        if ensemble.supervisor is None  # merged by vote: no model call
        else _Role(
            _keep_loaded(ensemble.supervisor, ensemble), cache_path, parse_supervisor if refresh_unscored else None
        )
    )
    try:
        outcomes = _annotate_all(ensemble, annotators, prompts, progress)
        scored, unscored, incomplete = _aggregate(ensemble, requests, tasks, annotators, outcomes, sources.seed)
        records = _merge(ensemble, supervisor, scored, progress) if supervisor else _vote(ensemble.merge, scored)
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


def _aggregate(
    ensemble: EnsembleConfig,
    requests: Sequence[EvalRequest],
    tasks: dict[str, Task],
    annotators: Sequence[_Role],
    outcomes: dict[str, list[Outcome[AnnotatorEvaluation]]],
    seed: int,
) -> tuple[list[tuple[Record, list[AnnotatorEvaluation]]], list[Record], list[Record]]:
    """Algorithm 1 per request; requests missing annotators' calls are incomplete."""
    scored, unscored, incomplete = [], [], []
    for index, request in enumerate(requests):
        record = _base_record(request, tasks[request.item.task_id], ensemble, seed)
        per_role = [(role, outcomes[role.name][index]) for role in annotators]
        provenance = [_annotator_provenance(role.name, role.spec.model_id, o) for role, o in per_role]
        record["provenance"]["annotators"] = provenance
        answered = [o for _, o in per_role if o.complete]
        if len(answered) < ensemble.min_annotators:
            failures = [_failure(role.name, o) for role, o in per_role if not o.complete]
            said = "; ".join(f"{f['name']}: {f['reason']}" for f in failures)
            need = f"{ensemble.min_annotators} (min_annotators)"
            incomplete.append(_incomplete(record, f"{len(answered)} annotators answered, not {need}: {said}", failures))
            continue
        parsed = [(p, o.parsed) for p, (_, o) in zip(provenance, per_role, strict=True) if o.parsed is not None]
        # who the record is made from, and why the others are not in it
        record["provenance"]["answered"] = [p["name"] for p, _ in parsed]
        if not parsed:
            record["unscored_reason"] = "no annotator reply could be parsed"
            unscored.append(record)
            continue
        result = aggregate([float(e.rating) for _, e in parsed])
        for (entry, _), keep in zip(parsed, result.kept, strict=True):
            entry["dropped_outlier"] = not keep
        record["provenance"].update({"mean_rating": result.mean_rating, "aggregated_score": result.score})
        scored.append((record, [e for _, e in parsed]))
    return scored, unscored, incomplete


def _merge(
    ensemble: EnsembleConfig,
    supervisor: _Role,
    scored: Sequence[tuple[Record, list[AnnotatorEvaluation]]],
    progress: Tracker | None,
) -> list[Record]:
    """The supervisor merges the annotators' error sets; scores are not shown to it. Where its call fails or its
    reply does not parse, the item is kept with the annotators' errors merged by `UNION_RULE`, and says so."""
    needs_merge = [i for i, (_, evaluations) in enumerate(scored) if any(e.errors for e in evaluations)]
    prompts = [
        render_supervisor_prompt(next(iter(scored[i][0]["outputs"].values())), [e.errors for e in scored[i][1]])
        for i in needs_merge
    ]
    merged = run_with_retries(
        supervisor.backend,
        prompts,
        ensemble.supervisor_sampling,
        ensemble.parse_retry,
        parse_supervisor,
        _progress_reporter(supervisor.name, len(prompts), progress),
        limit_supervisor(ensemble.field_limits),
    )
    merged_by_index = dict(zip(needs_merge, merged, strict=True))
    records = []
    for index, (record, evaluations) in enumerate(scored):
        outcome = merged_by_index.get(index)
        output = next(iter(record["outputs"].values()))
        if outcome is None:  # no annotator found an error: nothing to merge, no call
            record["provenance"]["supervisor"] = {"name": supervisor.name, "skipped": "no errors to merge"}
            errors: list[ErrorAnnotation] = []
        else:
            record["provenance"]["supervisor"] = {
                "name": supervisor.name,
                "model_id": supervisor.spec.model_id,
                "status": _status(outcome),
                "prompt_hash": outcome.prompt_hash,
                "raw_replies": outcome.replies,
                "parse_failure": outcome.parse_failure if outcome.parsed is None else None,
                "call_failure": outcome.call_failure,
                **_limit_counts(outcome),
            }
            if outcome.parsed is None:  # its call failed, or its reply did not parse: the item is kept all the same
                errors = union_of_errors([e.errors for e in evaluations])
                record["provenance"]["supervisor"]["merged_without_it"] = UNION_RULE
            else:
                errors = cap_errors(outcome.parsed)
        anchored = anchor_errors([e.model_copy(update={"aspect": record["aspect_name"]}) for e in errors], output)
        evaluation = Evaluation(errors=anchored, score=record["provenance"]["aggregated_score"])
        record["evaluation"] = evaluation.model_dump()
        records.append(record)
    return records


def _vote(rule: MergeRule, scored: Sequence[tuple[Record, list[AnnotatorEvaluation]]]) -> list[Record]:
    """The annotators' errors merged by vote (`data_gen.vote`, no model call): each annotator's errors placed on
    the output, the clusters of overlapping spans that `rule.min_votes` annotators mark kept (at most 8, the most
    severe, as the supervisor's are); each kept error's votes and members in the record's provenance."""
    records = []
    for record, evaluations in scored:
        output = next(iter(record["outputs"].values()))
        votes = [
            Vote(name, e.start, e.end, e.severity, e.explanation, e.location)
            for name, evaluation in zip(record["provenance"]["answered"], evaluations, strict=True)
            for e in anchor_errors(evaluation.errors, output)
        ]
        merged = vote_merge(votes, rule)
        kept = sorted(sorted(range(len(merged)), key=lambda i: (-merged[i].severity, i))[:MAX_ERRORS])
        errors = [
            ErrorAnnotation(
                location=m.chosen.location if m.start is None else output[m.start : m.end],
                explanation=m.explanation,
                severity=m.severity,
                start=m.start,
                end=m.end,
                aspect=record["aspect_name"],
                anchor=None if m.start is None else "exact",
            )
            for m in (merged[i] for i in kept)
        ]
        record["provenance"]["merge"] = {
            "rule": rule.describe(),
            "errors": [{"votes": merged[i].votes, "members": list(merged[i].members)} for i in kept],
            "agreement": agreement(votes, len(evaluations)),
        }
        record["evaluation"] = Evaluation(errors=errors, score=record["provenance"]["aggregated_score"]).model_dump()
        records.append(record)
    return records


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
