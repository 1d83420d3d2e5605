"""The annotators' evaluations of one output made into one record: Algorithm 1 over the parsed ones
(`aggregate_outcomes`), then the supervisor's merge of their error sets (`supervisor_merge`) or a vote
(`vote_records`), each record with its provenance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanjudge.core.catalog import Task
from spanjudge.core.progress import Tracker
from spanjudge.inference.contract import (
    MAX_ERRORS,
    AnnotatorEvaluation,
    ErrorAnnotation,
    Evaluation,
    anchor_errors,
    cap_errors,
    parse_supervisor,
)
from spanjudge.inference.prompts import render_supervisor_prompt

from .aggregate import UNION_RULE, aggregate, union_of_errors
from .annotate import Outcome, limit_supervisor, run_with_retries
from .config import EnsembleConfig
from .records import Record, task_fields
from .roles import Role, progress_reporter
from .selection import EvalRequest
from .vote import MergeRule, Vote, agreement, vote_merge


def aggregate_outcomes(
    ensemble: EnsembleConfig,
    requests: Sequence[EvalRequest],
    tasks: dict[str, Task],
    annotators: Sequence[Role],
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


def supervisor_merge(
    ensemble: EnsembleConfig,
    supervisor: Role,
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
        progress_reporter(supervisor.name, len(prompts), progress),
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


def vote_records(rule: MergeRule, scored: Sequence[tuple[Record, list[AnnotatorEvaluation]]]) -> list[Record]:
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
