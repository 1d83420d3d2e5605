"""`meta-eval --benchmark DIR`: every judge scored on a built benchmark, analysed and reported
as its kind's paper did."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.progress import labelled_bars


def evaluate_benchmark(
    folder: Path,
    judges: Sequence[Any],
    out: Path,
    *,
    weights: dict[str, dict[str, float]] | None = None,
    normalised: bool = False,
    plots: bool = True,
    samples: int = 1,
) -> list[Path]:
    """Score every judge on the benchmark in `folder`; a report per judge in OUT/<judge>/.
    `samples`: each text judged N times, aggregated as the benchmark's paper did (its kind's `aggregation`)."""
    from spanjudge.eval.judging.sampling import deterministic_warning
    from spanjudge.eval.judging.store import judge_slug
    from spanjudge.eval.perturb.analysis import analyze_spans
    from spanjudge.eval.perturb.benchmark import load_benchmark
    from spanjudge.eval.perturb.judgments import score_benchmark
    from spanjudge.eval.perturb.kind import AnalysisOptions, get_kind
    from spanjudge.eval.perturb.report import write_report

    benchmark = load_benchmark(folder)
    kind = get_kind(benchmark.kind)
    options = AnalysisOptions(weights, normalised)
    written: list[Path] = []
    with labelled_bars() as progress:
        for judge in judges:
            scored = score_benchmark(benchmark, judge, out, progress, samples)
            body = kind.analyse(benchmark, scored, options)
            result = {"metrics": body, "spans": analyze_spans(benchmark, scored.scores), "missing": scored.missing}
            if samples > 1:
                result["samples"] = {"n": len(scored.samples), "aggregation": kind.aggregation,
                                     "note": deterministic_warning(judge, samples)}  # fmt: skip
            written += write_report(benchmark, judge.name, result, out / judge_slug(judge.name), plots)
    return written
