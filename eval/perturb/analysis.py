"""From a judge's scores on a benchmark to statistics: the helpers every kind's analysis shares
(kinds/<kind>.py holds the kind's own, docs/research/benchmarks.md §1-4) and the error-span comparison.

Every function is data in, data out: the benchmark, the scores by (aspect, item id) and the
options; the result is a JSON-ready dict with the counts of texts left unscored, so a
report never hides how much of the benchmark a number rests on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.perturb.benchmark import BenchItem, Benchmark, originals_by_group
from spanjudge.eval.spans.metrics import PRF, micro_total, overlap_span_prf, token_prf

Scores = Mapping[tuple[str, str], Judgment]


def score_of(scores: Scores, aspect: str, item: BenchItem) -> float | None:
    judgment = scores.get((aspect, item.id))
    return None if judgment is None else judgment.score


def num(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def paired_scores(benchmark: Benchmark, scores: Scores, key: str, aspect: str) -> tuple[list[float], list[float], int]:
    """(original scores, perturbed scores, pairs lost to an unscored text) for one set."""
    originals = originals_by_group(benchmark.items)
    kept_o, kept_p, lost = [], [], 0
    for item in benchmark.items:
        if item.perturbation != key or aspect not in item.aspects:
            continue
        original = originals.get(item.group)
        o = None if original is None else score_of(scores, aspect, original)
        p = score_of(scores, aspect, item)
        if o is None or p is None:
            lost += 1
        else:
            kept_o.append(o)
            kept_p.append(p)
    return kept_o, kept_p, lost


# -- spans ------------------------------------------------------------------------------------


def analyze_spans(benchmark: Benchmark, scores: Scores) -> dict[str, Any] | None:
    """The judge's error spans against the characters each perturbation changed; None when the
    judge gives no spans (a metric or a prompted ensemble)."""
    overlap: list[PRF] = []
    tokens: list[PRF] = []
    unscored = 0
    for item in benchmark.items:
        if item.perturbation is None or not item.spans:
            continue
        for aspect in item.aspects:
            judgment = scores.get((aspect, item.id))
            detail = judgment.detail if judgment is not None else None
            if judgment is None or judgment.score is None or not detail or "spans" not in detail:
                unscored += 1
                continue
            predicted = [(int(s), int(e)) for s, e in cast(list[list[int]], detail["spans"])]
            overlap.append(overlap_span_prf(predicted, list(item.spans)))
            tokens.append(token_prf(predicted, list(item.spans), item.output))
    if not overlap:
        return None
    return {"texts": len(overlap), "unscored": unscored, "overlap": micro_total(overlap).as_dict(),
            "token": micro_total(tokens).as_dict()}  # fmt: skip
