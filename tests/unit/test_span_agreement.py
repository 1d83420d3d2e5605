"""The quintd-1 paper's span agreement (count and token Pearson) with input-bootstrap intervals."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr

from spanjudge.core.errors import InputError
from spanjudge.eval.spans.agreement import (
    INTERVAL_METRICS,
    Pearson,
    _resampled,
    _scored,
    count_pearson,
    metric_interval,
    span_agreement,
    token_pearson,
)
from spanjudge.eval.spans.documents import SPAN_INPUT_HEADER, SPAN_TASK_ID, GoldSpan, SpanDocument
from spanjudge.eval.spans.metrics import Span, evaluate_spans, token_spans
from spanjudge.eval.spans.quintd import load_quintd1


def doc(doc_id: str, output: str, gold: Sequence[Span], input_id: str = "") -> SpanDocument:
    spans = tuple(GoldSpan(s, e, "X") for s, e in gold)
    return SpanDocument(doc_id, "toy", SPAN_TASK_ID, {SPAN_INPUT_HEADER: "x"}, output, spans, input_id=input_id)


# --- hand-worked ---------------------------------------------------------------------------------

# a: gold "b c" (one span); predicted "b" and "c" (two spans)    -> counts (2, 1), tokens x 0110, y 0110
# b: gold "e", "f"; nothing predicted                              -> counts (0, 2), tokens x 00,   y 11
# c: no gold; predicted "g"                                        -> counts (1, 0), tokens x 100,  y 000
# d: unscored (None), e: missing — neither counts anywhere
HAND_DOCS = [
    doc("a", "a b c d", [(2, 5)], "i1"),
    doc("b", "e f", [(0, 1), (2, 3)], "i1"),
    doc("c", "g h i", [], "i2"),
    doc("d", "j k", [(0, 1)], "i3"),
    doc("e", "l m", [(0, 1)], "i3"),
]
HAND_PREDICTIONS: dict[str, list[Span] | None] = {"a": [(2, 3), (4, 5)], "b": [], "c": [(0, 1)], "d": None}


def test_count_pearson_by_hand() -> None:
    # x = (2, 0, 1), y = (1, 2, 0): both means 1; cov = 0 - 1 + 0 = -1, var x = var y = 2, so r = -1/2
    result = count_pearson(HAND_DOCS, HAND_PREDICTIONS)
    assert result.value == pytest.approx(-0.5)
    assert (result.n, result.reason) == (3, None)


def test_token_pearson_by_hand() -> None:
    # 9 pooled tokens: x = 0110 00 100, y = 0110 11 000; Σx = 3, Σy = 4, Σxy = 2
    # r = (9*2 - 3*4) / sqrt((9*3 - 9) * (9*4 - 16)) = 6 / sqrt(360) = 1 / sqrt(10)
    result = token_pearson(HAND_DOCS, HAND_PREDICTIONS)
    assert result.value == pytest.approx(1 / math.sqrt(10))
    assert result.n == 9


def test_span_agreement_row_by_hand() -> None:
    row = span_agreement(HAND_DOCS, HAND_PREDICTIONS, n_resamples=200)
    assert (row["n_outputs"], row["n_inputs"], row["asked"], row["scored"]) == (5, 3, 4, 3)
    assert row["parse_rate"] == pytest.approx(0.75)
    # overlap: a tp 1 fp 1, b fn 2, c fp 1 -> P = R = F1 = 1/3; tokens tp 2 fp 1 fn 2 -> F1 = 4/7
    assert (row["overlap_precision"], row["overlap_recall"], row["overlap_f1"]) == pytest.approx((1 / 3,) * 3)
    assert (row["token_precision"], row["token_recall"], row["token_f1"]) == pytest.approx((2 / 3, 1 / 2, 4 / 7))
    assert row["exact_f1"] == 0.0  # "b" and "c" are predicted apart, gold has "b c" as one span
    assert row["count_pearson"] == pytest.approx(-0.5) and row["count_pearson_reason"] is None
    assert row["token_pearson"] == pytest.approx(1 / math.sqrt(10))
    # the same P/R/F1 as evaluate_spans
    spans = evaluate_spans(HAND_DOCS, HAND_PREDICTIONS)
    assert row["token_f1"] == pytest.approx(spans["token"]["f1"]) and row["exact_f1"] == spans["exact"]["f1"]
    interval = metric_interval(row, "count_pearson")
    assert interval["value"] == row["count_pearson"] and interval["undefined_resamples"] > 0  # 3 inputs only
    for metric in INTERVAL_METRICS:
        assert {f"{metric}_low", f"{metric}_high", f"{metric}_undefined"} <= row.keys()


# --- undefined -----------------------------------------------------------------------------------


def test_undefined_pearsons_are_none_with_a_reason() -> None:
    docs = [doc("a", "x y", [(0, 1)]), doc("b", "z w", [])]
    assert count_pearson(docs, {"a": [], "b": []}) == Pearson(None, 2, "constant predictions")
    assert token_pearson(docs, {"a": [], "b": []}).reason == "constant predictions"
    flat = [doc("a", "x y", [(0, 1)]), doc("b", "z w", [(2, 3)])]
    assert count_pearson(flat, {"a": [(0, 1)], "b": []}) == Pearson(None, 2, "constant gold")
    assert count_pearson(flat, {"a": [], "b": []}).reason == "constant predictions and gold"
    assert count_pearson(docs, {"a": [(0, 1)], "b": None}) == Pearson(None, 1, "fewer than 2 scored outputs")
    assert count_pearson(docs, {}) == Pearson(None, 0, "fewer than 2 scored outputs")
    assert token_pearson([doc("a", "word", [(0, 1)])], {"a": [(0, 2)]}) == Pearson(None, 1, "fewer than 2 tokens")


def test_an_undefined_row_has_no_nan() -> None:
    docs = [doc("a", "x y", [(0, 1)]), doc("b", "z w", [])]
    row = span_agreement(docs, {"a": [], "b": []}, n_resamples=50)
    assert row["count_pearson"] is None and row["count_pearson_reason"] == "constant predictions"
    assert row["count_pearson_low"] is None and row["count_pearson_high"] is None
    assert row["count_pearson_undefined"] == 50
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())
    nothing = span_agreement(docs, {}, n_resamples=10)
    assert (nothing["scored"], nothing["parse_rate"], nothing["token_pearson"]) == (0, None, None)
    assert not any(isinstance(v, float) and math.isnan(v) for v in nothing.values())
    assert span_agreement([], {}, n_resamples=10)["overlap_f1_low"] is None
    # a judge that parsed nothing has undefined P/R/F1, not 0: it did not "find no errors"
    unparsed = span_agreement(docs, {"a": None, "b": None}, n_resamples=10)
    assert (unparsed["asked"], unparsed["scored"], unparsed["parse_rate"]) == (2, 0, 0.0)
    assert unparsed["token_f1"] is None and unparsed["overlap_precision"] is None and unparsed["exact_f1"] is None


# --- random data against scipy -------------------------------------------------------------------


def random_spans(rng: random.Random, length: int, k: int) -> list[Span]:
    spans = []
    for _ in range(k):
        start = rng.randrange(length)
        spans.append((start, min(length, start + rng.randint(1, 12))))
    return spans


def random_set(seed: int, n_inputs: int = 40, per_input: int = 4) -> tuple[list[SpanDocument], dict]:
    rng = random.Random(seed)
    words = ["the", "team", "won", "107", "-", "99", "on", "Monday", "scoring", "12", "points", "and"]
    docs, predictions = [], {}
    for i in range(n_inputs):
        for j in range(per_input):
            output = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
            n_gold = rng.choice([0, 0, 1, 2, 3, 5])
            docs.append(doc(f"{i}/{j}", output, sorted(random_spans(rng, len(output), n_gold)), f"in{i}"))
            fate = rng.random()
            if fate < 0.1:
                predictions[f"{i}/{j}"] = None
            elif fate < 0.9:  # else missing
                predictions[f"{i}/{j}"] = random_spans(rng, len(output), max(0, n_gold + rng.randint(-2, 2)))
    return docs, predictions


def labels(text: str, spans: Sequence[Span]) -> list[int]:
    """1 per whitespace token with a character inside a span (computed character by character)."""
    marked = {c for s, e in spans for c in range(s, e)}
    return [int(any(c in marked for c in range(s, e))) for s, e in token_spans(text)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_pearsons_match_scipy_on_random_data(seed: int) -> None:
    docs, predictions = random_set(seed)
    scored = [d for d in docs if predictions.get(d.id) is not None]
    assert 0 < len(scored) < len(docs)
    x = [len(predictions[d.id]) for d in scored]
    y = [len(d.gold) for d in scored]
    assert count_pearson(docs, predictions).value == pytest.approx(pearsonr(x, y).statistic, abs=1e-12)
    tx = [v for d in scored for v in labels(d.output, predictions[d.id])]
    ty = [v for d in scored for v in labels(d.output, d.gold_spans)]
    result = token_pearson(docs, predictions)
    assert result.n == len(tx)
    assert result.value == pytest.approx(pearsonr(tx, ty).statistic, abs=1e-12)


# --- bootstrap -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_intervals_contain_the_value_and_are_deterministic(seed: int) -> None:
    docs, predictions = random_set(seed)
    row = span_agreement(docs, predictions, seed=7)
    for metric in INTERVAL_METRICS:
        assert row[f"{metric}_low"] <= row[metric] <= row[f"{metric}_high"], metric
        assert row[f"{metric}_low"] < row[f"{metric}_high"]
    assert span_agreement(docs, predictions, seed=7) == row
    other = span_agreement(docs, predictions, seed=8)
    assert other["count_pearson"] == row["count_pearson"] and other["count_pearson_low"] != row["count_pearson_low"]
    narrow = span_agreement(docs, predictions, seed=7, confidence=0.5)
    assert row["token_f1_low"] <= narrow["token_f1_low"] <= narrow["token_f1_high"] <= row["token_f1_high"]


def test_the_bootstrap_resamples_inputs() -> None:
    """Four identical outputs per input move together: the intervals equal those of one output per
    input (every weighted sum is scaled by 4, which no statistic sees), and are wider than when
    each output is resampled on its own."""
    single, predictions = random_set(11, n_inputs=60, per_input=1)
    predictions = {k: v if v is not None else [] for k, v in predictions.items()}
    predictions |= {d.id: [] for d in single if d.id not in predictions}
    copies, copied = [], {}
    for d in single:
        for c in range(4):
            copies.append(doc(f"{d.id}#{c}", d.output, d.gold_spans, d.input_id))
            copied[f"{d.id}#{c}"] = predictions[d.id]
    alone = [doc(d.id, d.output, d.gold_spans) for d in copies]  # input_id defaults to the own id
    assert alone[0].input_id == alone[0].id
    one, grouped, split = (span_agreement(*args) for args in ((single, predictions), (copies, copied), (alone, copied)))
    assert grouped["n_inputs"] == 60 and split["n_inputs"] == 240
    for metric in INTERVAL_METRICS:
        assert grouped[metric] == pytest.approx(one[metric]) == pytest.approx(split[metric])
        assert (grouped[f"{metric}_low"], grouped[f"{metric}_high"]) == pytest.approx(
            (one[f"{metric}_low"], one[f"{metric}_high"])
        )
        assert grouped[f"{metric}_high"] - grouped[f"{metric}_low"] > split[f"{metric}_high"] - split[f"{metric}_low"]


def test_the_bootstrap_resamples_every_metric_at_once() -> None:
    docs, predictions = random_set(3, n_inputs=100, per_input=4)
    row = span_agreement(docs, predictions, n_resamples=1000)
    assert row["n_resamples"] == 1000
    stats = _scored(docs, predictions)
    ids = list(dict.fromkeys(d.input_id for d in docs))
    samples = _resampled(stats, ids, 1000, 0)
    assert all(s.shape == (1000,) for s in samples.values())


# --- real data -----------------------------------------------------------------------------------


def test_gpt4_agrees_with_the_crowd_on_wikidata(shared_data: Path) -> None:
    human = load_quintd1(shared_data, annotator="human", domains=["wikidata"])
    gpt4 = {d.id: d.gold_spans for d in load_quintd1(shared_data, annotator="gpt-4", domains=["wikidata"])}
    assert {d.input_id for d in human} < {f"wikidata/{i}" for i in range(1000)}
    assert len({d.input_id for d in human}) < len(human)  # the four systems' outputs share their table
    row = span_agreement(human, gpt4)
    print(
        f"\nquintd-1 wikidata, GPT-4 vs human: {row['scored']} outputs, {row['n_inputs']} inputs; count r "
        f"{row['count_pearson']:.3f} [{row['count_pearson_low']:.3f}, {row['count_pearson_high']:.3f}], token r "
        f"{row['token_pearson']:.3f} [{row['token_pearson_low']:.3f}, {row['token_pearson_high']:.3f}], token F1 "
        f"{row['token_f1']:.3f} [{row['token_f1_low']:.3f}, {row['token_f1_high']:.3f}], overlap F1 "
        f"{row['overlap_f1']:.3f}"
    )
    assert row["scored"] > 0.9 * len(human)
    for metric in ("count_pearson", "token_pearson"):
        assert isinstance(row[metric], float) and np.isfinite(row[metric])
        assert 0.0 < row[metric] < 1.0
        assert row[f"{metric}_low"] <= row[metric] <= row[f"{metric}_high"]


def test_expected_counts_take_the_place_of_the_span_counts_in_the_count_pearson() -> None:
    # a judge's expected number of errors per scored output, correlated with the gold counts (1, 2, 0)
    expected = {"a": 1.4, "b": 1.9, "c": 0.2}
    row = span_agreement(HAND_DOCS, HAND_PREDICTIONS, n_resamples=50, counts=expected)
    assert row["count_pearson"] == pytest.approx(pearsonr([1.4, 1.9, 0.2], [1, 2, 0]).statistic)
    # the spans still decide everything else
    assert row["token_f1"] == span_agreement(HAND_DOCS, HAND_PREDICTIONS, n_resamples=50)["token_f1"]


def test_the_probability_aware_reading_keeps_the_spans_the_judge_likely_writes() -> None:
    from spanjudge.eval.spans.judging import expected_predictions

    def judged(spans: list[list[int]] | None, written: list[float], expected: float) -> dict:
        reading = {"p_no_error": 0.1, "expected_errors": expected, "expected_score": 70.0, "span_written": written}
        return {"spans": spans} if spans is None else {"spans": spans, "probabilities": reading}

    rows = {"a": judged([[0, 1], [2, 3]], [0.9, 0.4], 1.3), "b": judged(None, [], 0.0)}
    spans, counts = expected_predictions({"rows": rows})
    assert spans == {"a": [(0, 1)], "b": None}  # the second span is written with probability 0.4 < 0.5
    assert counts == {"a": 1.3}  # unscored outputs have no count


def test_the_self_consistency_reading_keeps_the_spans_most_sampled_replies_mark() -> None:
    from spanjudge.eval.spans.judging import consensus_predictions

    merged = {"samples": 3, "parsed": 3, "score": 70.0, "spans": [[4, 9]], "confidence": [0.667]}
    rows = {"a": {"spans": [[0, 1], [4, 9]], "consensus": merged}, "b": {"spans": None}}
    assert consensus_predictions({"rows": rows}) == {"a": [(4, 9)], "b": None}  # not the greedy reply's spans
    with pytest.raises(InputError, match="judgment of c has no consensus: judge again with samples=N"):
        consensus_predictions({"rows": {"c": {"spans": []}}})


def test_meta_eval_reads_a_judge_with_its_probabilities_as_the_protocol_does() -> None:
    """`--judge-option score=expected`: the spans written with probability ≥ 0.5 along the reply
    (the product of the blocks' confidences up to each) and the expected number of errors."""
    from spanjudge.eval.judging.judge_files import _expected_detail
    from spanjudge.inference.contract import ErrorAnnotation
    from spanjudge.inference.judged import JudgedEvaluation
    from spanjudge.inference.probabilities import ErrorProbabilities, ReplyProbabilities

    def error(start: int | None, confidence: float) -> tuple[ErrorAnnotation, ErrorProbabilities]:
        written = ErrorAnnotation(location="x", explanation="e", severity=2, start=start, end=None if start is None
                                  else start + 1)  # fmt: skip
        return written, ErrorProbabilities(confidence=confidence, expected_severity=2.0, severity_distribution={2: 1})

    # at least 1, 2, 3 errors written with probability 0.9, 0.9 × 0.8 = 0.72 (unanchored), 0.72 × 0.6 = 0.43
    errors = [error(0, 0.9), error(None, 0.8), error(4, 0.6)]
    reading = ReplyProbabilities(p_no_error=0.1, expected_errors=2.1, errors=[p for _, p in errors],
                                 expected_score=55.0, score_distribution={55: 1.0})  # fmt: skip
    assert reading.written() == pytest.approx([0.9, 0.72, 0.432])
    evaluation = JudgedEvaluation(errors=[e for e, _ in errors], score=50, probabilities=reading)
    assert _expected_detail(evaluation) == {"errors": 2, "spans": [[0, 1]], "expected_errors": 2.1}
