"""Choosing a judge's decision thresholds (`inference.decisions`) on a development split, never on test.

Every pair of τ₀ ("No Error" when P(no error) ≥ τ₀) and τ (keep a written span when its confidence ≥ τ)
on a grid, each also left to the written reply (None), is applied to the judge's written spans and read
against the human spans of the same outputs; the pair with the highest **objective** wins: the mean of
the quintd-1 paper's four agreement measures (overlap F1, token F1, Pearson r of the error counts, Pearson
r of the token labels), an undefined r counting 0. On a tie the written reply wins, then the smaller
change. The result records what chose it (`FittedOn`: the split, the data, the objective with and
without the rule, and the inputs' digests, so that an evaluation on the same inputs is refused:
`check_held_out`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.overlap import RULE as OVERLAP_RULE
from spanjudge.core.overlap import input_digest
from spanjudge.eval.spans.agreement import StatsMemo, span_agreement
from spanjudge.eval.spans.documents import SpanDocument
from spanjudge.inference.decisions import DecisionRule, FittedOn, decide

OBJECTIVE = "mean of overlap F1, token F1, count r and token r (an undefined r counts 0)"
AGREEMENT = ("overlap_f1", "token_f1", "count_pearson", "token_pearson")
NO_ERROR_GRID: tuple[float | None, ...] = (None, *(round(0.05 * k, 2) for k in range(1, 20)))
CONFIDENCE_GRID: tuple[float | None, ...] = (None, *(round(0.1 * k, 1) for k in range(1, 10)))
TEST_SPLITS = frozenset({"test"})

Spans = list[tuple[int, int]] | None


def decided_spans(rows: Mapping[str, Mapping[str, Any] | None], rule: DecisionRule) -> dict[str, Spans]:
    """Document id -> the spans the rule keeps of each judgment row (`spans`, `span_written`, `p_no_error`,
    `errors`: the written reply's count; None: unscored)."""
    decided: dict[str, Spans] = {}
    for doc_id, row in rows.items():
        if row is None:
            decided[doc_id] = None
            continue
        spans = [(int(start), int(end)) for start, end in row["spans"]]
        kept, _ = decide(row["p_no_error"], row["span_written"], rule, written_no_error=row["errors"] == 0)
        decided[doc_id] = [spans[index] for index in kept]
    return decided


def row_objective(row: Mapping[str, Any]) -> float:
    """`OBJECTIVE` of an agreement row (`span_agreement`'s values)."""
    return sum(row.get(key) or 0.0 for key in AGREEMENT) / len(AGREEMENT)


def objective(docs: Sequence[SpanDocument], spans: Mapping[str, Spans], memo: StatsMemo | None = None) -> float:
    """`OBJECTIVE` of `spans` against the documents' human spans (point values, no bootstrap); `memo` as
    `span_agreement`'s, for a search over the same documents."""
    return row_objective(span_agreement(docs, spans, n_resamples=1, memo=memo))


@dataclass(frozen=True)
class Fit:
    """The chosen rule and every pair tried: (τ₀, τ, objective)."""

    rule: DecisionRule
    tried: list[tuple[float | None, float | None, float]]


def check_fit_split(split: str) -> None:
    """Thresholds are chosen on a development split: a test split chooses nothing."""
    if split.lower() in TEST_SPLITS:
        raise InputError(
            f"decision thresholds are chosen on a development split, not on {split!r}: a split that chooses "
            "is no longer a test of the choice"
        )


def fit_decision_rule(
    docs: Sequence[SpanDocument],
    rows: Mapping[str, Mapping[str, Any] | None],
    *,
    split: str,
    data: str,
    no_error_grid: Iterable[float | None] = NO_ERROR_GRID,
    confidence_grid: Iterable[float | None] = CONFIDENCE_GRID,
) -> Fit:
    """The (τ₀, τ) of the grids with the best `objective` on `docs` (the `split` of `data`), see the module."""
    check_fit_split(split)
    scored = [d for d in docs if rows.get(d.id) is not None]
    if not scored:
        raise InputError(f"{data} ({split}): no scored judgment with probabilities to fit decisions on")
    tried: list[tuple[float | None, float | None, float]] = []
    best: tuple[float, float | None, float | None] | None = None
    confidence = list(confidence_grid)
    memo: StatsMemo = {}  # most pairs keep the same spans of most documents
    for tau0 in no_error_grid:
        for tau in confidence:
            rule = DecisionRule(no_error_threshold=tau0, min_confidence=tau)
            value = objective(docs, decided_spans(rows, rule), memo)
            tried.append((tau0, tau, value))
            if best is None or value > best[0] + 1e-12:
                best = (value, tau0, tau)
    assert best is not None
    written = objective(docs, decided_spans(rows, DecisionRule()), memo)
    fitted = FittedOn(
        split=split,
        data=data,
        outputs=len(scored),
        objective=OBJECTIVE,
        value=round(best[0], 6),
        written_value=round(written, 6),
        rule=OVERLAP_RULE,
        sha1=sorted({input_digest(d.inputs) for d in docs}),
    )
    return Fit(DecisionRule(no_error_threshold=best[1], min_confidence=best[2], fitted_on=fitted), tried)


def check_held_out(rule: DecisionRule | None, docs: Sequence[SpanDocument], judge: str, data: str) -> None:
    """A rule fitted on any of these documents' inputs is refused: its result there would not be held out."""
    if rule is None or rule.fitted_on is None or rule.fitted_on.rule != OVERLAP_RULE:
        return
    fitted = set(rule.fitted_on.sha1)
    shared = sum(1 for d in docs if input_digest(d.inputs) in fitted)
    if shared:
        raise InputError(
            f"{judge}: its decision thresholds were fitted on {rule.fitted_on.data} ({rule.fitted_on.split} split), "
            f"which shares inputs with {shared} of {len(docs)} outputs of {data}: evaluate on held-out inputs, "
            "or with the written replies (--judge-option written=true)"
        )
