"""quintd-1's LLM annotators as teachers, alone and merged by vote, against the human spans.

A teacher here is what `spanjudge import` trains on: one annotator's spans, or several annotators' merged by
the import's vote (`data_gen.teacher.teacher_spans`, the same code). `teacher_predictions` gives a teacher's
spans on a split's outputs, `no_error_interval` its 'No Error' rate with an interval (bench/ensemble_quintd.py
adds the agreement rows and γ); `paired_difference` compares two teachers over the same resamples;
`beats_best_member` says, column by column, whether a merge beats the best of its members;
`dev_choice` picks the teacher with the protocol's objective on dev; `agreement_signal` asks whether the
number of annotators behind a span says how likely the humans mark it too, `output_agreement_signal` whether
their agreement on an output says how good the teacher is there. No model runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanjudge.data_gen.quintd import QUINTD_LLM_ANNOTATORS
from spanjudge.data_gen.teacher import QuintdImport, QuintdSpans, ScoreRule, teacher_spans
from spanjudge.data_gen.vote import Extent, MergeRule
from spanjudge.eval.spans.agreement import agreement_resamples, span_agreement
from spanjudge.eval.spans.decision_fit import AGREEMENT, row_objective
from spanjudge.eval.spans.documents import SpanDocument, default_root
from spanjudge.eval.spans.recalibration import auc
from spanjudge.inference.contract import ErrorAnnotation

# the annotator subsets the issue asks about: all four; without the second GPT-4 sample; the open-weight and
# cheaper members alone; GPT-4's two samples (self-consistency of one teacher)
SUBSETS: dict[str, tuple[str, ...]] = {
    "all": QUINTD_LLM_ANNOTATORS,
    "no-gpt4-t1": ("gpt-4", "gpt-3.5", "llama3"),
    "open-cheap": ("gpt-3.5", "llama3"),
    "gpt4-twice": ("gpt-4", "gpt-4-temperature-1"),
}
EXTENTS: tuple[Extent, ...] = ("union", "majority", "shortest")
# the columns a merge must beat its best member on (higher is better; 'No Error' gap: lower is better)
COLUMNS = (*AGREEMENT, "gamma", "no_error_gap")


@dataclass(frozen=True)
class Teacher:
    """A candidate teacher: its name in the tables, its members and its vote (None: one annotator)."""

    name: str
    members: tuple[str, ...]
    merge: MergeRule | None = None

    def source(self, rule: ScoreRule, domains: Sequence[str]) -> QuintdImport:
        """The import source that trains on this teacher (relocating misplaced spans, dropping empty ones)."""
        read = {"format": "quintd1", "domains": list(domains), "rule": rule}
        read |= {"on_mismatch": "relocate_or_drop", "empty_spans": "drop"}
        if self.merge is None:
            return QuintdImport.model_validate({**read, "annotator": self.members[0]})
        return QuintdImport.model_validate({**read, "annotators": list(self.members), "merge": self.merge})


def vote_name(subset: str, min_votes: int, extent: Extent) -> str:
    return f"vote{min_votes}-{extent}({subset})"


def candidates() -> list[Teacher]:
    """Every member alone, then each subset's vote at every threshold (1 to all of its members) and extent."""
    teachers = [Teacher(name, (name,)) for name in QUINTD_LLM_ANNOTATORS]
    for subset, members in SUBSETS.items():
        for k in range(1, len(members) + 1):
            for extent in EXTENTS:
                rule = MergeRule(method="vote", min_votes=k, extent=extent)
                teachers.append(Teacher(vote_name(subset, k, extent), members, rule))
    return teachers


def teacher_errors(
    teacher: Teacher, rule: ScoreRule, docs: Sequence[SpanDocument], root: Path | str | None = None
) -> dict[str, list[ErrorAnnotation]]:
    """The teacher's errors on `docs` (ids quintd1/<domain>/<model>/<table>), as the import makes them; an output
    no member annotated is left out."""
    return {doc_id: found.errors for doc_id, found in _voted(teacher, rule, docs, root).items()}


def teacher_predictions(
    teacher: Teacher, rule: ScoreRule, docs: Sequence[SpanDocument], root: Path | str | None = None
) -> dict[str, list[tuple[int, int]]]:
    """The teacher's spans on `docs`; an output no member annotated is left out (unscored), never read as
    'No Error'."""
    return {
        doc_id: [(e.start, e.end) for e in errors if e.start is not None and e.end is not None]
        for doc_id, errors in teacher_errors(teacher, rule, docs, root).items()
    }


def no_error_interval(
    docs: Sequence[SpanDocument], spans: dict[str, Any], resamples: int, seed: int
) -> dict[str, float | None]:
    """The share of the scored outputs the teacher calls 'No Error', the humans' share of the same outputs, and
    the teacher's share's 95 % input-bootstrap interval."""
    scored = [d for d in docs if spans.get(d.id) is not None]
    if not scored:
        return {
            "no_error_rate": None,
            "human_no_error_rate": None,
            "no_error_rate_low": None,
            "no_error_rate_high": None,
        }
    inputs = sorted({d.input_id for d in scored})
    index = {input_id: i for i, input_id in enumerate(inputs)}
    clean = np.zeros(len(inputs))
    total = np.zeros(len(inputs))
    for d in scored:
        clean[index[d.input_id]] += not spans[d.id]
        total[index[d.input_id]] += 1
    draws = np.random.default_rng(seed).integers(0, len(inputs), size=(resamples, len(inputs)))
    rates = clean[draws].sum(axis=1) / total[draws].sum(axis=1)
    low, high = np.percentile(rates, [2.5, 97.5])
    return {
        "no_error_rate": float(clean.sum() / total.sum()),
        "human_no_error_rate": sum(not d.gold_spans for d in scored) / len(scored),
        "no_error_rate_low": float(low),
        "no_error_rate_high": float(high),
    }


def with_derived(row: dict[str, Any]) -> dict[str, Any]:
    """A row with the protocol's objective and the 'No Error' gap to the humans."""
    gap = None
    if row.get("no_error_rate") is not None:
        gap = abs(row["no_error_rate"] - row["human_no_error_rate"])
    return {**row, "objective": row_objective(row), "no_error_gap": gap}


def beats_best_member(row: dict[str, Any], member_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Column by column (`COLUMNS`), the best of the members' values and whether the merge's row beats it."""
    verdict: dict[str, Any] = {}
    for column in COLUMNS:
        values: list[float] = [m[column] for m in member_rows if m.get(column) is not None]
        mine = row.get(column)
        if not values or mine is None:
            verdict[column] = {"best_member": None, "beats": None}
            continue
        best = min(values) if column == "no_error_gap" else max(values)
        verdict[column] = {"best_member": best, "beats": mine < best if column == "no_error_gap" else mine > best}
    verdict["all"] = all(v["beats"] for v in verdict.values() if isinstance(v, dict))
    return verdict


def dev_choice(pooled: dict[str, dict[str, Any]]) -> str:
    """The teacher with the highest objective on dev, pooled (a tie goes to the one listed first)."""
    return max(pooled, key=lambda name: pooled[name]["objective"])


def agreement_signal(
    teacher: Teacher, rule: ScoreRule, docs: Sequence[SpanDocument], root: Path | str | None = None
) -> dict[str, Any]:
    """Does agreement mark the spans the humans mark? For a vote that keeps every cluster (min_votes 1), each
    kept span's share of the members that mark it against "overlaps a human span": the AUC (0.5: no signal;
    the students' own span confidence reached 0.520) and, per number of votes, how many spans and what share of
    them overlap a human span. Beside it, `auc_place_votes_first`: each span's place when an output's errors are
    written most votes first (ties in the text's order), earlier ranked higher: how far a target so ordered carries
    the votes to a student that reads its spans' confidence from its count decisions (`inference.probabilities`:
    the probability of writing at least that many errors falls along the reply)."""
    gold = {d.id: [(g.start, g.end) for g in d.gold] for d in docs}
    pairs: list[tuple[float, float]] = []
    places: list[tuple[float, float]] = []
    by_votes: dict[int, list[float]] = {}  # votes -> "overlaps a human span" (1/0) of each span
    for doc_id, found in _voted(teacher, rule, docs, root).items():
        entries = (found.merge or {}).get("errors", [])
        order = sorted(range(len(entries)), key=lambda i: -entries[i]["votes"])  # stable: the text's order on ties
        place = {index: rank for rank, index in enumerate(order)}
        for index, (error, entry) in enumerate(zip(found.errors, entries, strict=True)):
            start, end = error.start or 0, error.end or 0  # quintd spans are always placed
            hit = float(any(start < e and s < end for s, e in gold[doc_id]))
            pairs.append((entry["votes"] / len(teacher.members), hit))
            places.append((-float(place[index]), hit))
            by_votes.setdefault(entry["votes"], []).append(hit)
    levels = {
        str(votes): {"spans": len(hits), "overlap_human": sum(hits) / len(hits)}
        for votes, hits in sorted(by_votes.items())
    }
    signal = {"teacher": teacher.name, "spans": len(pairs), "auc": auc(pairs), "auc_place_votes_first": auc(places)}
    return signal | {"by_votes": levels}


def output_agreement_signal(
    teacher: Teacher, rule: ScoreRule, docs: Sequence[SpanDocument], resamples: int, seed: int,
    root: Path | str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Does the members' agreement on an output say how good a vote teacher is there (the signal that
    `data.example_weights: agreement` trains on)? Each output's agreement (`data_gen.vote.agreement`, kept in the
    merge's provenance) against the teacher's character F1 with the humans on it (1 where neither marks anything,
    0 where only one does): Spearman's ρ with a 95 % bootstrap interval over outputs, and the mean F1 of the
    outputs the members agree on wholly, in part and not at all."""
    from scipy.stats import spearmanr

    gold = {d.id: d.gold for d in docs}
    pairs = []
    for doc_id, found in _voted(teacher, rule, docs, root).items():
        marked = {i for e in found.errors for i in range(e.start or 0, e.end or 0)}
        human = {i for g in gold[doc_id] for i in range(g.start, g.end)}
        f1 = 1.0 if not marked and not human else 2 * len(marked & human) / (len(marked) + len(human))
        pairs.append(((found.merge or {})["agreement"], f1))
    agreement, f1s = np.array(pairs).T
    draws = np.random.default_rng(seed).integers(0, len(pairs), size=(resamples, len(pairs)))
    rhos = [spearmanr(agreement[d], f1s[d]).statistic for d in draws]
    low, high = np.nanpercentile(rhos, [2.5, 97.5])
    groups = {"whole": agreement == 1, "part": (agreement > 0) & (agreement < 1), "none": agreement == 0}
    return {
        "teacher": teacher.name,
        "outputs": len(pairs),
        "spearman": float(spearmanr(agreement, f1s).statistic),
        "interval": [float(low), float(high)],
        "f1_by_agreement": {
            name: {"outputs": int(m.sum()), "mean_f1": float(f1s[m].mean()) if m.any() else None}
            for name, m in groups.items()
        },
    }


def _voted(
    teacher: Teacher, rule: ScoreRule, docs: Sequence[SpanDocument], root: Path | str | None
) -> dict[str, QuintdSpans]:
    domains = sorted({d.input_id.split("/")[0] for d in docs})
    wanted = {d.id for d in docs}
    found = teacher_spans(default_root(root) / "spans" / "quintd1", teacher.source(rule, domains))
    return {spans.item.output_id: spans for spans in found if spans.item.output_id in wanted}


def paired_difference(
    docs: Sequence[SpanDocument], merged: Mapping[str, Any], member: Mapping[str, Any], resamples: int, seed: int
) -> dict[str, dict[str, float | None]]:
    """The merge's value minus the member's, per agreement column and for the objective, with a 95 % interval
    over the same input resamples (paired: `agreement_resamples` draws them from the inputs and the seed)."""
    ours = agreement_resamples(docs, merged, n_resamples=resamples, seed=seed)
    theirs = agreement_resamples(docs, member, n_resamples=resamples, seed=seed)
    point_ours, point_theirs = span_agreement(docs, merged, n_resamples=1), span_agreement(docs, member, n_resamples=1)
    ours["objective"] = sum(np.nan_to_num(ours[c]) for c in AGREEMENT) / len(AGREEMENT)
    theirs["objective"] = sum(np.nan_to_num(theirs[c]) for c in AGREEMENT) / len(AGREEMENT)
    point_ours["objective"], point_theirs["objective"] = row_objective(point_ours), row_objective(point_theirs)
    found: dict[str, dict[str, float | None]] = {}
    for column in (*AGREEMENT, "objective"):
        diffs = ours[column] - theirs[column]
        diffs = diffs[~np.isnan(diffs)]
        a, b = point_ours[column], point_theirs[column]
        low, high = np.percentile(diffs, [2.5, 97.5]) if diffs.size else (np.nan, np.nan)
        found[column] = {
            "difference": None if a is None or b is None else a - b,
            "low": None if np.isnan(low) else float(low),
            "high": None if np.isnan(high) else float(high),
        }
    return found
