"""The vote merge (`data_gen.vote`) on hand-made spans whose clusters and votes are known, and the rule's checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spanjudge.data_gen.vote import MergeRule, Vote, agreement, vote_merge


def vote(member: str, start: int | None, end: int | None, severity: int = 2, why: str = "", **kw) -> Vote:
    return Vote(member, start, end, severity, why or f"{member} says so", **kw)


def rule(min_votes: int, extent: str = "union", **kw) -> MergeRule:
    return MergeRule(method="vote", min_votes=min_votes, extent=extent, **kw)


# three annotators on one output: cluster A = a[10,20) b[15,25) c[12,18); cluster B = a[40,50) alone;
# cluster C = b[60,70) c[65,80) (two votes); cluster D = a[90,95) a[93,99) (one annotator twice: one vote)
SPANS = [
    vote("a", 10, 20, 2, "a: wrong year"),
    vote("b", 15, 25, 4, "b: contradicts the table"),
    vote("c", 12, 18, 3, "c: wrong year"),
    vote("a", 40, 50),
    vote("b", 60, 70, 1, "b: vague"),
    vote("c", 65, 80, 1, "c: vague"),
    vote("a", 90, 95),
    vote("a", 93, 99),
]


def test_clusters_votes_and_members_are_counted_by_distinct_annotators() -> None:
    merged = vote_merge(SPANS, rule(1))
    assert [(m.start, m.end, m.votes, m.members) for m in merged] == [
        (10, 25, 3, ("a", "b", "c")),
        (40, 50, 1, ("a",)),
        (60, 80, 2, ("b", "c")),
        (90, 99, 1, ("a",)),
    ]


def test_agreement_is_the_share_of_clusters_every_annotator_marks() -> None:
    assert agreement(SPANS, 3) == 1 / 4  # only cluster A has all three
    assert agreement(SPANS, 2) == 2 / 4  # A and C have two or more
    assert agreement([], 3) == 1.0  # nobody marks anything: all call the output clean
    assert agreement([vote("a", 0, 5)], 2) == 0.0  # one calls it clean, the other does not


@pytest.mark.parametrize(("min_votes", "kept"), [(1, [10, 40, 60, 90]), (2, [10, 60]), (3, [10]), (4, [])])
def test_a_cluster_is_kept_when_min_votes_annotators_mark_it(min_votes: int, kept: list[int]) -> None:
    assert [m.start for m in vote_merge(SPANS, rule(min_votes))] == kept


def test_highest_severity_wins_and_the_explanations_are_joined_once_each() -> None:
    first = vote_merge(SPANS, rule(3))[0]
    assert first.severity == 4 and first.chosen.member == "b"
    assert first.explanation == "a: wrong year | c: wrong year | b: contradicts the table"
    assert vote_merge([vote("a", 0, 5, 2, "same"), vote("b", 1, 4, 2, "same")], rule(2))[0].explanation == "same"
    only = vote_merge(SPANS, rule(3, explanations="most_severe"))[0]
    assert only.explanation == "b: contradicts the table"


@pytest.mark.parametrize(
    ("extent", "span"),
    [("union", (10, 25)), ("shortest", (12, 18)), ("majority", (12, 20))],  # majority: >= 2 of 3 mark [12, 20)
)
def test_extents(extent: str, span: tuple[int, int]) -> None:
    merged = vote_merge(SPANS, rule(3, extent))[0]
    assert (merged.start, merged.end) == span


def test_majority_of_a_chain_without_a_majority_takes_the_most_marked_characters() -> None:
    # four annotators in a chain: no character is marked by 3 of them; [4, 6), [9, 11) and [14, 15) by two each
    chain = [vote("a", 0, 6), vote("b", 4, 11), vote("c", 9, 15), vote("d", 14, 20)]
    merged = vote_merge(chain, rule(4, "majority"))
    assert len(merged) == 1 and merged[0].votes == 4
    assert (merged[0].start, merged[0].end) == (4, 15)  # from the first to the last character two annotators mark


def test_touching_spans_are_not_overlapping() -> None:
    merged = vote_merge([vote("a", 0, 5), vote("b", 5, 9)], rule(1))
    assert [(m.start, m.end, m.votes) for m in merged] == [(0, 5, 1), (5, 9, 1)]


def test_unplaced_errors_cluster_by_their_text_and_omissions_together() -> None:
    unplaced = [
        vote("a", None, None, 2, location="The  Sky"),
        vote("b", None, None, 3, location="the sky"),
        vote("c", None, None, 1, location="elsewhere"),
        vote("a", None, None, 2),  # omissions: no location
        vote("c", None, None, 5),
    ]
    merged = vote_merge([*unplaced, vote("b", 3, 7)], rule(2))
    assert [(m.start, m.chosen.location, m.votes, m.severity) for m in merged] == [
        (None, "the sky", 2, 3),
        (None, None, 2, 5),
    ]


def test_the_rule_is_checked() -> None:
    with pytest.raises(ValidationError, match="belong to merge method 'vote'"):
        MergeRule(method="supervisor", min_votes=2)
    with pytest.raises(ValidationError):
        MergeRule(method="vote", min_votes=0)
    with pytest.raises(ValueError, match="needs merge method 'vote'"):
        vote_merge(SPANS, MergeRule())
    assert "2 annotators" in rule(2).describe() and "supervisor" in MergeRule().describe()
