"""MPP (match with partial overlap and partial credit, micro; Perrella, Morales Agostinho and Zaragoza 2026,
arXiv 2603.19921) on the worked cases of the authors' released code (its tests of the character-proportion
measure, `tppc_for_precision` / `tppc_for_recall`: the paper's own figures were not available here), and on a
case where the optimal matching its code uses differs from a greedy one."""

from __future__ import annotations

import pytest

from spanjudge.eval.spans.agreement import span_agreement
from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.eval.spans.metrics import MATCHING, evaluate_spans, mpp


def test_the_authors_cases() -> None:
    # no errors on either side: nothing to credit, and nothing missed
    none = mpp([], [])
    assert (none.tp_precision, none.tp_recall, none.precision, none.recall, none.f1) == (0.0, 0.0, 1.0, 1.0, 1.0)
    # one span marked exactly
    exact = mpp([(10, 15)], [(10, 15)])
    assert (exact.tp_precision, exact.tp_recall, exact.f1) == (1.0, 1.0, 1.0)
    # auto [0,10) and [10,20) against gold [0,10) and [5,20): the pairs' F are 1.0, 0.4, 0, 0.8, so the matching is
    # [0,10)-[0,10) and [10,20)-[5,20); precision's credit 1 + 10/10, recall's 1 + 10/15
    case = mpp([(0, 10), (10, 20)], [(0, 10), (5, 20)])
    assert case.tp_precision == pytest.approx(2.0) and case.tp_recall == pytest.approx(1 + 10 / 15)
    assert (case.precision, case.recall) == (pytest.approx(1.0), pytest.approx((1 + 10 / 15) / 2))
    # nothing overlaps: no credit on either side
    apart = mpp([(0, 3)], [(5, 9)])
    assert (apart.tp_precision, apart.tp_recall, apart.precision, apart.recall, apart.f1) == (0, 0, 0, 0, 0)


def test_the_matching_maximises_the_sum_not_the_best_pair() -> None:
    # gold [0,10) and [10,20); predicted [3,13) (F 0.7 with the first, 0.3 with the second) and [0,4) (F 8/14 with
    # the first only). A greedy matching takes the best pair, 0.7, and leaves [0,4) unmatched (total 0.7); the
    # optimal one pairs [3,13)-[10,20) and [0,4)-[0,10) (total 0.87)
    found = mpp([(3, 13), (0, 4)], [(0, 10), (10, 20)])
    assert found.tp_precision == pytest.approx(3 / 10 + 4 / 4)
    assert found.tp_recall == pytest.approx(3 / 10 + 4 / 10)
    assert (found.precision, found.recall) == (pytest.approx(0.65), pytest.approx(0.35))


def test_a_span_set_reports_mpp_micro_over_its_scored_documents() -> None:
    def doc(name: str, gold: list[tuple[int, int]]) -> SpanDocument:
        spans = tuple(GoldSpan(start, end, "Incorrect") for start, end in gold)
        return SpanDocument(name, "set", "quintd1", {}, "x" * 40, spans)

    docs = [doc("a", [(0, 10), (5, 20)]), doc("b", [(0, 4)]), doc("c", [(0, 4)])]
    predictions = {"a": [(0, 10), (10, 20)], "b": [(0, 2), (30, 35)], "c": None}  # c unscored: left out
    found = evaluate_spans(docs, predictions)["mpp"]
    # a: credits 2 and 1 + 10/15 (above); b: [0,2) earns 2/2 toward precision and 2/4 toward recall, [30,35) nothing
    assert (found["predicted"], found["gold"]) == (4, 3)
    assert found["precision"] == pytest.approx(3 / 4) and found["recall"] == pytest.approx((1 + 10 / 15 + 0.5) / 3)
    assert "Perrella" in MATCHING["mpp"] and set(MATCHING) == {"exact", "overlap", "token", "mpp"}
    # the agreement row (the distillation report's and the ensemble tables') reads the same, with its interval
    row = span_agreement(docs, predictions, n_resamples=200)
    assert row["mpp_f1"] == pytest.approx(found["f1"]) and row["mpp_precision"] == pytest.approx(3 / 4)
    assert row["mpp_f1_low"] <= row["mpp_f1"] <= row["mpp_f1_high"]
