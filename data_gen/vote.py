"""The annotators' error spans merged by vote: a deterministic merge beside the supervisor LLM's.

Each annotator's errors are placed on the output; spans that overlap, by any annotator, form one cluster
(single linkage: a chain of overlaps is one cluster). A cluster is kept when at least `min_votes` distinct
annotators mark it. The kept error takes the cluster's highest severity (its category and location from that
span, the earliest on a tie), the distinct explanations joined in the order of their spans, and an extent:

- `union`: from the cluster's first marked character to its last;
- `majority`: from the first to the last character that more than half of the cluster's annotators mark
  (where none does, the characters the most annotators mark);
- `shortest`: the shortest span in the cluster (the earliest on a tie).

An error the output cannot place (its location not found) clusters with the errors whose location reads
the same, whitespace and case aside; errors without a location (omissions) form one cluster. Every kept
error records its votes and the annotators behind it (in the order the votes were given); `agreement` says how
far the annotators agree on the whole output. Used by
`spanjudge annotate` (the ensemble's `merge: {method: vote}`) and by `spanjudge import` (several quintd-1
annotators as one teacher).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Extent = Literal["union", "majority", "shortest"]
EXPLANATION_SEPARATOR = " | "


class MergeRule(BaseModel):
    """How an ensemble's error sets become one: the supervisor LLM's merge (thesis Fig. A.17, the default)
    or a vote (`min_votes` annotators must mark a cluster of overlapping spans; its `extent`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["supervisor", "vote"] = "supervisor"
    min_votes: int = Field(default=1, ge=1, description="vote: annotators that must mark a cluster to keep it")
    extent: Extent = Field(default="union", description="vote: union, majority or shortest")
    explanations: Literal["join", "most_severe"] = Field(
        default="join",
        description="vote: the kept error's explanation, the cluster's distinct ones joined, or its most severe "
        "span's alone (a teacher whose targets are as long as one annotator's)",
    )

    @model_validator(mode="after")
    def _vote_settings_need_a_vote(self) -> MergeRule:
        if self.method == "supervisor" and self.model_fields_set & {"min_votes", "extent", "explanations"}:
            raise ValueError("min_votes, extent and explanations belong to merge method 'vote', not 'supervisor'")
        return self

    def describe(self) -> str:
        if self.method == "supervisor":
            return "the supervisor LLM's merge"
        said = "explanations joined" if self.explanations == "join" else "the most severe span's explanation"
        return (
            f"vote: clusters of overlapping spans that >= {self.min_votes} annotators mark, {self.extent} extent, "
            f"highest severity, {said}"
        )


@dataclass(frozen=True)
class Vote:
    """One annotator's error: its span on the output (None where it could not be placed), how bad, why."""

    member: str
    start: int | None
    end: int | None
    severity: int
    explanation: str
    location: str | None = None
    label: str | None = None  # a category or aspect the merged error keeps from its most severe span


@dataclass(frozen=True)
class Merged:
    """A kept cluster: its extent (None: not placed on the output), the most severe of its spans (`chosen`,
    whose location and label it keeps), the joined explanations, and who marked it."""

    start: int | None
    end: int | None
    severity: int
    explanation: str
    chosen: Vote
    votes: int
    members: tuple[str, ...]


def _clusters(votes: Sequence[Vote]) -> list[list[Vote]]:
    """Overlapping placed spans (single linkage), then unplaced ones by their location's text, then omissions;
    clusters in order of their first character (placed ones first)."""
    placed = sorted((v for v in votes if v.start is not None), key=lambda v: (v.start, v.end))
    clusters: list[list[Vote]] = []
    reach = 0  # the end of the last cluster's furthest span
    for vote in placed:
        assert vote.start is not None and vote.end is not None
        if clusters and vote.start < reach:
            clusters[-1].append(vote)
            reach = max(reach, vote.end)
        else:
            clusters.append([vote])
            reach = vote.end
    by_text: dict[str | None, list[Vote]] = {}
    for vote in votes:
        if vote.start is None:
            key = None if not vote.location else " ".join(vote.location.split()).casefold()
            by_text.setdefault(key, []).append(vote)
    return clusters + [c for k, c in by_text.items() if k is not None] + ([by_text[None]] if None in by_text else [])


def _extent(cluster: Sequence[Vote], extent: Extent, members: int) -> tuple[int, int]:
    spans = [(v.start, v.end) for v in cluster if v.start is not None and v.end is not None]
    if extent == "union":
        return min(s for s, _ in spans), max(e for _, e in spans)
    if extent == "shortest":
        return min(spans, key=lambda span: (span[1] - span[0], span[0]))
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    if last == first:
        return first, last
    marked_by: list[set[str]] = [set() for _ in range(last - first)]
    for vote in cluster:
        assert vote.start is not None and vote.end is not None
        for offset in range(vote.start - first, vote.end - first):
            marked_by[offset].add(vote.member)
    counts = [len(m) for m in marked_by]
    need = members // 2 + 1
    if max(counts) < need:
        need = max(counts)
    chosen = [i for i, n in enumerate(counts) if n >= need]
    return first + chosen[0], first + chosen[-1] + 1


def agreement(votes: Sequence[Vote], annotators: int) -> float:
    """How far the `annotators` who answered agree on one output: the share of its clusters that every one of
    them marks (1.0 where none marks anything: all call it clean). A training weight (`data.example_weights`)."""
    clusters = _clusters(votes)
    if not clusters:
        return 1.0
    return sum(len({v.member for v in cluster}) >= annotators for cluster in clusters) / len(clusters)


def vote_merge(votes: Sequence[Vote], rule: MergeRule) -> list[Merged]:
    """The errors `rule.min_votes` or more annotators agree on, one per cluster (see the module's doc), in the
    order of their place in the output."""
    if rule.method != "vote":
        raise ValueError(f"vote_merge needs merge method 'vote', not {rule.method!r}")
    rank = {member: i for i, member in reversed(list(enumerate(v.member for v in votes)))}  # first appearance
    kept = []
    for cluster in _clusters(votes):
        members = tuple(sorted({v.member for v in cluster}, key=rank.__getitem__))  # in the order votes were given
        if len(members) < rule.min_votes:
            continue
        chosen = max(cluster, key=lambda v: v.severity)  # max keeps the first of equals: the earliest span
        placed = chosen.start is not None
        start, end = _extent(cluster, rule.extent, len(members)) if placed else (None, None)
        explanations = dict.fromkeys(v.explanation.strip() for v in cluster if v.explanation.strip())
        if rule.explanations == "most_severe":
            explanations = {chosen.explanation.strip(): None}
        kept.append(
            Merged(
                start=start,
                end=end,
                severity=chosen.severity,
                explanation=EXPLANATION_SEPARATOR.join(explanations),
                chosen=chosen,
                votes=len(members),
                members=members,
            )
        )
    return kept
