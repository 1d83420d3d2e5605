"""Agreement of a judge's error spans with the human ones, as in the quintd-1 paper, with bootstrap intervals.

Kasner & Dušek (2024) compare GPT-4's error spans with the crowd workers' by Pearson
correlation at two grains: the number of errors per output, and per-token binary error
labels pooled over all outputs. We compute both, next to the span P/R/F1 of `metrics.py`,
and give each a percentile interval from resampling *inputs* (`SpanDocument.input_id`)
with replacement: the outputs generated from one input share its difficulty, so they
move together (see `eval/correlation/bootstrap.py`).

Only scored documents count (a prediction that is present and not None, as in
`evaluate_spans`); an unscored document adds nothing to any resample. A coefficient that
does not exist (fewer than two values, or one side constant) is None with the reason, never
nan.

Every statistic here is a function of per-document sums (overlap and token tp/fp/fn; for
the Pearsons n, Σx, Σy, Σxy, Σx², Σy²), so they are computed once per document, summed per
input, and each resample is a weighted sum of the input rows: one matrix product.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spanjudge.eval.correlation.bootstrap import input_weights, percentile_interval
from spanjudge.eval.spans.documents import SpanDocument
from spanjudge.eval.spans.metrics import (
    PRF,
    PartialPRF,
    Span,
    check_spans,
    exact_matches,
    from_matches,
    micro_total,
    mpp,
    overlap_matches,
    token_count,
    token_prf,
)

INTERVAL_METRICS: tuple[str, ...] = ("overlap_f1", "token_f1", "mpp_f1", "count_pearson", "token_pearson")


@dataclass(frozen=True)
class Pearson:
    """A Pearson r over `n` pairs; `value` is None when r does not exist, and `reason` says why."""

    value: float | None
    n: int
    reason: str | None = None


# Columns of the per-document statistics matrix.
_COLUMNS = (
    "o_tp", "o_fp", "o_fn",  # overlap matching
    "t_tp", "t_fp", "t_fn", "t_n",  # token labels; Σx = tp + fp, Σy = tp + fn, Σxy = tp, and x² = x
    "c_n", "c_x", "c_y", "c_xy", "c_xx", "c_yy",  # error counts: x predicted, y gold
    "m_tpp", "m_tpr", "m_pred", "m_gold",  # MPP's partial credits and the spans they are shares of
)  # fmt: skip
_COL = {name: i for i, name in enumerate(_COLUMNS)}


@dataclass(frozen=True)
class _DocStats:
    input_id: str
    exact: PRF
    overlap: PRF
    token: PRF
    n_tokens: int
    n_predicted: float  # the predicted spans, or the judge's expected number of errors (`counts`)
    n_gold: int
    partial: PartialPRF

    def row(self) -> list[float]:
        x, y = self.n_predicted, self.n_gold
        o, t, m = self.overlap, self.token, self.partial
        counts = [1, x, y, x * y, x * x, y * y]
        partial = [m.tp_precision, m.tp_recall, m.predicted, m.gold]
        return [o.tp, o.fp, o.fn, t.tp, t.fp, t.fn, self.n_tokens, *counts, *partial]


StatsMemo = dict[tuple[str, tuple[tuple[int, int], ...], float | None], "_DocStats"]


def _scored(
    docs: Sequence[SpanDocument],
    predictions: Mapping[str, Sequence[Span] | None],
    counts: Mapping[str, float] | None = None,
    memo: StatsMemo | None = None,
) -> list[_DocStats]:
    """Per-document statistics of the scored documents, in document order; `counts` replaces each scored
    document's number of predicted spans in the count Pearson (an expected number of errors). `memo` keeps each
    document's statistics by its id and predictions across calls on the same documents."""
    stats = []
    for doc in docs:
        predicted = predictions.get(doc.id)
        if predicted is None:
            continue
        key = (
            doc.id,
            tuple((int(start), int(end)) for start, end in predicted),
            None if counts is None else counts[doc.id],
        )
        if memo is not None and key in memo:
            stats.append(memo[key])
            continue
        pred = check_spans(predicted, f"{doc.id}: predicted")
        gold = doc.gold_spans
        stats.append(
            _DocStats(
                input_id=doc.input_id,
                exact=from_matches(exact_matches(pred, gold), len(pred)),
                overlap=from_matches(overlap_matches(pred, gold), len(pred)),
                token=token_prf(pred, gold, doc.output),
                n_tokens=token_count(doc.output),
                n_predicted=len(pred) if counts is None else counts[doc.id],
                n_gold=len(gold),
                partial=mpp(pred, gold),
            )
        )
        if memo is not None:
            memo[key] = stats[-1]
    return stats


def _pearson_from_sums(n: int, sx: float, sy: float, sxy: float, sxx: float, syy: float, what: str) -> Pearson:
    """r from sums (exact for integers); None with the reason where it does not exist."""
    if n < 2:
        return Pearson(None, n, f"fewer than 2 {what}")
    var_x, var_y = n * sxx - sx * sx, n * syy - sy * sy
    if var_x <= 0 or var_y <= 0:
        side = "predictions and gold" if var_x <= 0 and var_y <= 0 else "predictions" if var_x <= 0 else "gold"
        return Pearson(None, n, f"constant {side}")
    r = (n * sxy - sx * sy) / (float(var_x) ** 0.5 * float(var_y) ** 0.5)
    return Pearson(min(1.0, max(-1.0, r)), n)


def _count_sums(stats: Sequence[_DocStats]) -> tuple[int, float, float, float, float, float]:
    x = [s.n_predicted for s in stats]
    y = [s.n_gold for s in stats]
    return (
        len(stats),
        sum(x),
        sum(y),
        sum(a * b for a, b in zip(x, y, strict=True)),
        sum(a * a for a in x),
        sum(b * b for b in y),
    )


def _token_sums(stats: Sequence[_DocStats]) -> tuple[int, int, int, int, int, int]:
    token = micro_total(s.token for s in stats)
    sx, sy = token.tp + token.fp, token.tp + token.fn  # binary labels: Σx² = Σx
    return sum(s.n_tokens for s in stats), sx, sy, token.tp, sx, sy


def count_pearson(docs: Sequence[SpanDocument], predictions: Mapping[str, Sequence[Span] | None]) -> Pearson:
    """Pearson r between the number of predicted and of gold spans per scored output."""
    return _pearson_from_sums(*_count_sums(_scored(docs, predictions)), what="scored outputs")


def token_pearson(docs: Sequence[SpanDocument], predictions: Mapping[str, Sequence[Span] | None]) -> Pearson:
    """Pearson r between per-token binary error labels (predicted vs gold), pooled over scored outputs.

    Tokens are the whitespace tokens of `token_spans`; a token is 1 if any of its characters
    lies in a span (the rule of `token_prf`).
    """
    return _pearson_from_sums(*_token_sums(_scored(docs, predictions)), what="tokens")


def _f1_rows(sums: np.ndarray, prefix: str) -> np.ndarray:
    """Micro F1 per resample row, as PRF.f1 (2tp / (2tp + fp + fn), 0 without spans); nan without scored docs."""
    tp, fp, fn = (sums[:, _COL[f"{prefix}_{k}"]] for k in ("tp", "fp", "fn"))
    denominator = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(denominator > 0, 2 * tp / np.where(denominator > 0, denominator, 1), 0.0)
    return np.where(sums[:, _COL["c_n"]] > 0, f1, np.nan)


def _mpp_f1_rows(sums: np.ndarray) -> np.ndarray:
    """MPP's micro F1 per resample row, as PartialPRF.f1 (precision 1 without predictions, recall 1 without gold);
    nan without scored docs."""
    predicted, gold = sums[:, _COL["m_pred"]], sums[:, _COL["m_gold"]]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(predicted > 0, sums[:, _COL["m_tpp"]] / np.where(predicted > 0, predicted, 1), 1.0)
        r = np.where(gold > 0, sums[:, _COL["m_tpr"]] / np.where(gold > 0, gold, 1), 1.0)
        f1 = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1), 0.0)
    return np.where(sums[:, _COL["c_n"]] > 0, f1, np.nan)


def _pearson_rows(
    n: np.ndarray, sx: np.ndarray, sy: np.ndarray, sxy: np.ndarray, sxx: np.ndarray, syy: np.ndarray
) -> np.ndarray:
    """r per resample row from weighted sums; nan where it does not exist (n < 2 or a constant side)."""
    var_x, var_y = n * sxx - sx * sx, n * syy - sy * sy
    ok = (n >= 2) & (var_x > 0) & (var_y > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (n * sxy - sx * sy) / np.sqrt(np.where(ok, var_x * var_y, 1.0))
    return np.where(ok, np.clip(r, -1.0, 1.0), np.nan)


def _resampled(stats: Sequence[_DocStats], input_ids: Sequence[str], n_resamples: int, seed: int) -> dict[str, Any]:
    """Each metric of INTERVAL_METRICS on `n_resamples` input resamples (nan where undefined)."""
    index = {input_id: i for i, input_id in enumerate(input_ids)}
    per_input = np.zeros((len(input_ids), len(_COLUMNS)))
    if stats:
        rows = np.array([s.row() for s in stats], dtype=float)
        np.add.at(per_input, np.array([index[s.input_id] for s in stats]), rows)
    sums = input_weights(len(input_ids), n_resamples, seed) @ per_input  # (n_resamples, columns)

    def col(name: str) -> np.ndarray:
        return sums[:, _COL[name]]

    t_x, t_y = col("t_tp") + col("t_fp"), col("t_tp") + col("t_fn")
    return {
        "overlap_f1": _f1_rows(sums, "o"),
        "token_f1": _f1_rows(sums, "t"),
        "mpp_f1": _mpp_f1_rows(sums),
        "count_pearson": _pearson_rows(col("c_n"), col("c_x"), col("c_y"), col("c_xy"), col("c_xx"), col("c_yy")),
        "token_pearson": _pearson_rows(col("t_n"), t_x, t_y, col("t_tp"), t_x, t_y),
    }


def agreement_resamples(
    docs: Sequence[SpanDocument],
    predictions: Mapping[str, Sequence[Span] | None],
    *,
    n_resamples: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """Each metric of INTERVAL_METRICS on `n_resamples` input resamples of `docs` (nan where undefined). The
    resamples depend only on the docs' input ids and `seed`, so two judges of the same docs share them: their
    differences are paired."""
    input_ids = list(dict.fromkeys(doc.input_id for doc in docs))
    return _resampled(_scored(docs, predictions, None), input_ids, n_resamples, seed)


def _finite(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def span_agreement(
    docs: Sequence[SpanDocument],
    predictions: Mapping[str, Sequence[Span] | None],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    counts: Mapping[str, float] | None = None,
    memo: StatsMemo | None = None,
) -> dict[str, Any]:
    """One row of agreement between predicted and gold spans, with input-bootstrap intervals.

    `counts` (document id -> a number for every scored document): the predicted error counts the count
    Pearson correlates, in place of the number of predicted spans (a judge's expected number of errors).
    `memo`: a dict kept across calls on the same documents (a threshold search), so that a document's
    statistics are computed once per distinct prediction.

    Keys: n_outputs (documents), n_inputs (distinct input ids), asked (documents with an entry
    in `predictions`), scored (entry not None), parse_rate (scored / asked; None if none
    asked); overlap_/token_/mpp_ precision, recall, f1; exact_f1; count_pearson and token_pearson
    (None where undefined, with count_pearson_reason / token_pearson_reason); for each metric
    M of INTERVAL_METRICS, M_low and M_high (percentile interval; None if no resample defines
    it) and M_undefined (resamples where it did not exist); n_resamples, confidence, seed.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    stats = _scored(docs, predictions, counts, memo)
    asked = sum(doc.id in predictions for doc in docs)
    overlap, token = micro_total(s.overlap for s in stats), micro_total(s.token for s in stats)
    partial = sum((s.partial for s in stats), PartialPRF(0.0, 0.0, 0, 0))
    count_r = _pearson_from_sums(*_count_sums(stats), what="scored outputs")
    token_r = _pearson_from_sums(*_token_sums(stats), what="tokens")
    row: dict[str, Any] = {
        "n_outputs": len(docs),
        "n_inputs": len({doc.input_id for doc in docs}),
        "asked": asked,
        "scored": len(stats),
        "parse_rate": len(stats) / asked if asked else None,
        "overlap_precision": overlap.precision,
        "overlap_recall": overlap.recall,
        "overlap_f1": overlap.f1,
        "token_precision": token.precision,
        "token_recall": token.recall,
        "token_f1": token.f1,
        "mpp_precision": partial.precision,
        "mpp_recall": partial.recall,
        "mpp_f1": partial.f1,
        "exact_f1": micro_total(s.exact for s in stats).f1,
        "count_pearson": count_r.value,
        "count_pearson_reason": count_r.reason,
        "token_pearson": token_r.value,
        "token_pearson_reason": token_r.reason,
    }
    if not stats:  # P/R/F1 of nothing are undefined, not 0: an unscored judge did not "find no errors"
        spans = ("overlap_", "token_", "mpp_", "exact_")
        row |= {key: None for key in row if key.startswith(spans) and "pearson" not in key}
    input_ids = list(dict.fromkeys(doc.input_id for doc in docs))
    samples = _resampled(stats, input_ids, n_resamples, seed) if input_ids else {}
    for metric in INTERVAL_METRICS:
        if metric not in samples:
            row |= {f"{metric}_low": None, f"{metric}_high": None, f"{metric}_undefined": n_resamples}
            continue
        interval = percentile_interval(np.nan, samples[metric], confidence)
        row |= {
            f"{metric}_low": _finite(interval.low),
            f"{metric}_high": _finite(interval.high),
            f"{metric}_undefined": interval.undefined,
        }
    return row | {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}


def metric_interval(row: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """One metric of a `span_agreement` row as {value, low, high, undefined_resamples, reason}."""
    return {
        "value": row[metric],
        "low": row[f"{metric}_low"],
        "high": row[f"{metric}_high"],
        "undefined_resamples": row[f"{metric}_undefined"],
        "reason": row.get(f"{metric}_reason"),
    }
