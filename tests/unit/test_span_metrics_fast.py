"""The span metrics in (n + m) log time equal their quadratic definitions."""

from __future__ import annotations

import random

from spanjudge.eval.spans import metrics


def _quadratic_overlap(predicted: list, gold: list) -> list[bool]:
    remaining, matched = sorted(predicted), [False] * len(gold)
    for g in sorted(range(len(gold)), key=lambda i: gold[i]):
        for p, (start, end) in enumerate(remaining):
            if start < gold[g][1] and gold[g][0] < end:
                del remaining[p]
                matched[g] = True
                break
    return matched


def test_the_fast_span_metrics_equal_their_definitions() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        size = rng.randint(1, 50)

        def spans(count: int, size: int = size) -> list[tuple[int, int]]:
            starts = [rng.randint(0, size) for _ in range(count)]
            return [(s, rng.randint(s + 1, size + 2)) for s in starts]

        predicted, gold = spans(rng.randint(0, 9)), spans(rng.randint(0, 9))
        text = "".join(rng.choice("ab  ") for _ in range(size + 2))
        assert metrics.overlap_matches(predicted, gold) == _quadratic_overlap(predicted, gold)
        tokens = metrics.token_spans(text)
        marked = {i for i, (ts, te) in enumerate(tokens) for s, e in predicted if s < te and ts < e}
        assert metrics._marked_tokens(predicted, tokens) == marked
