"""Repeated sampling (`meta-eval --samples N`): each item judged N times, the papers' way.

- Sample 0 is the judge exactly as it runs without `--samples` (its greedy / configured
  decoding, its judgment store), so stores written before stay valid and N = 1 is today's run.
- Sample k >= 1 decodes with a seed derived from k (`sample_seed`) and is stored as a judgment
  of its own (the judge's store key plus `|sample=k`, so its own OUT/judgments file): a re-run
  asks for nothing already judged, and raising N later only judges the new samples.
- A judge that cannot sample (a metric, a scores file, the distilled judge's greedy decoding)
  judges once; N copies of one judgment would only pretend to be repeated runs.

Aggregation, per where the numbers go (a benchmark kind states its own: `BenchmarkKind.aggregation`):
- human-correlation sets: the mean of the N scores per item;
- DHP (seed 000 §4: "each model score 5 times on each metric to calculate a final average
  score"): the mean;
- dual (seed 001 §4): global perspective, the mode of the N ratings on the benchmark's scale;
  local perspective, the mean ("average ten evaluation results from multiple samplings");
- attacks (002) and prompt (003) report no repeated sampling: the mean.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from spanjudge.eval.judging.judgment import Judgment, MetaJudge


def sample_seed(k: int) -> int:
    """The decoding seed of sample k >= 1: a hash of k, far from the small seeds parse
    retries use (1, 2, 3 ...), so a sample never replays a retry."""
    if k < 1:
        raise ValueError("sample 0 is the judge's own decoding; seeds start at sample 1")
    return int.from_bytes(hashlib.sha256(f"spanjudge-sample-{k}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def can_sample(judge: MetaJudge) -> bool:
    """Whether the judge samples: it has `for_sample(k)`, the same judge decoding sample k (k >= 1) with seed
    `sample_seed(k)` under its own store key."""
    return callable(getattr(judge, "for_sample", None))


def sample_judges(judge: MetaJudge, samples: int) -> list[MetaJudge]:
    """[sample 0 (the judge itself), sample 1, ...]; one entry for a judge that cannot sample."""
    if samples < 1:
        raise ValueError("samples must be at least 1")
    if samples == 1 or not can_sample(judge):
        return [judge]
    return [judge] + [judge.for_sample(k) for k in range(1, samples)]  # type: ignore[attr-defined]


def deterministic_warning(judge: MetaJudge, samples: int) -> str | None:
    """One line for the report when `--samples` cannot apply to this judge."""
    if samples == 1 or can_sample(judge):
        return None
    return f"{judge.name} decodes deterministically: --samples {samples} uses its one judgment per item"


def mean_scores(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Per item, the mean over the samples that scored it (NaN where none did)."""
    stacked = np.vstack(arrays)
    scored = ~np.isnan(stacked)
    total = np.where(scored, stacked, 0.0).sum(axis=0)
    count = scored.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def mean_judgment(judgments: Sequence[Judgment]) -> Judgment:
    """The mean score of the samples that scored the item; unscored (sample 0's reason) when none did.
    The detail keeps every sample's score, and sample 0's own detail (spans, ratings)."""
    scores = [j.score for j in judgments]
    scored = [s for s in scores if s is not None]
    first = judgments[0]
    detail = {**(first.detail or {}), "samples": scores}
    if not scored:
        return Judgment(None, first.unscored_reason or "unscored in every sample", detail)
    return Judgment(sum(scored) / len(scored), None, detail)


def mode_class(scores: Sequence[float | None], binner: Callable[[float], int]) -> int | None:
    """The most frequent class of the scored samples. A tie goes to the tied class nearest the
    samples' mean class (then the lower one): 001 does not say, and this is the choice that
    moves least from what the samples say on average."""
    classes = [binner(s) for s in scores if s is not None]
    if not classes:
        return None
    counts = Counter(classes)
    top = max(counts.values())
    tied = sorted(c for c, n in counts.items() if n == top)
    centre = sum(classes) / len(classes)
    return min(tied, key=lambda c: (abs(c - centre), c))
