"""A benchmark kind: its declaration (`BenchmarkKind`), the registered kind of a name (`get_kind`), and a
benchmark built by one (`build_benchmark`).

A kind's module (`kinds/<name>.py`) ends in `KIND = BenchmarkKind(...)`; `registry.BENCHMARKS` names them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.progress import Tracker
from spanjudge.eval.perturb.benchmark import Benchmark
from spanjudge.eval.perturb.build import BuildRequest, Built, LLMMaker
from spanjudge.eval.perturb.judgments import ScoringResult
from spanjudge.eval.perturb.registry import BENCHMARKS, KINDS


@dataclass(frozen=True)
class AnalysisOptions:
    """What `meta-eval --benchmark` passes to every kind's analysis (each uses what it needs)."""

    weights: Mapping[str, Mapping[str, float]] | None = None  # dhp: expert weights per perturbation
    normalised: bool = False  # dhp: M / sum(1/p) instead of the printed 1 / sum(1/p)


@dataclass(frozen=True)
class BenchmarkKind:
    """One benchmark kind: what it is built from and the four steps from sources to report."""

    name: str
    summary: str  # one line: what the benchmark measures (CLI help)
    sources: tuple[str, ...]  # the datasets it can be built from
    build: Callable[[BuildRequest], Built]
    analyse: Callable[[Benchmark, ScoringResult, AnalysisOptions], dict[str, Any]]
    report: Callable[[Mapping[str, Any], Benchmark], list[str]]  # the metrics' markdown lines
    plots: Callable[[Mapping[str, Any], Path], list[Path]]  # PNGs written into the folder
    undefined_why: str  # why a table cell can be undefined ("–")
    aggregation: str  # how `--samples N` aggregates the N judgments of a text
    wrong_source_hint: str = ""  # appended to the error for a dataset outside `sources`
    # the one number a summary shows (the demo's base-vs-trained row): (what it measures, its value)
    headline: Callable[[Mapping[str, Any]], tuple[str, float | None]] | None = None


def get_kind(name: str) -> BenchmarkKind:
    """The registered kind `name` (its module imported on first use); an InputError lists the kinds."""
    kind = BENCHMARKS.load(name)
    if not isinstance(kind, BenchmarkKind):
        raise TypeError(f"benchmark kind {name!r} ({BENCHMARKS.targets()[name]}) is a {type(kind).__name__}, not a "
                        "BenchmarkKind")  # fmt: skip
    if kind.name != name:  # a copied module that kept its old name would report as the wrong kind
        raise AssertionError(f"{BENCHMARKS.targets()[name]} registers kind {kind.name!r}")
    return kind


def all_kinds() -> list[BenchmarkKind]:
    return [get_kind(name) for name in KINDS]


def no_plots(result: Mapping[str, Any], out: Path) -> list[Path]:
    """The plots of a kind that draws none."""
    return []


def build_benchmark(
    kind: str,
    dataset: str,
    *,
    data_root: Path | None,
    n: int | None,
    seed: int = 0,
    perturbations: Sequence[str] | None = None,
    llm: LLMMaker | None = None,
    llm_info: Mapping[str, Any] | None = None,
    steps: int | None = None,
    aspects: Sequence[str] | None = None,
    progress: Tracker | None = None,
) -> Benchmark:
    """The benchmark `kind` from `dataset`; `aspects` narrows what the judge rates (dhp, attacks)."""
    request = BuildRequest(dataset, data_root, n, seed, perturbations, llm, steps, aspects, progress)
    return build_request(kind, request, llm_info)


def build_request(kind: str, request: BuildRequest, llm_info: Mapping[str, Any] | None = None) -> Benchmark:
    """`build_benchmark` for a request made already; `llm_info` describes `request.llm` for the manifest."""
    plugin = get_kind(kind)
    dataset = request.dataset
    if dataset not in plugin.sources:
        raise InputError(
            f"benchmark '{kind}' is built from {', '.join(plugin.sources)}, not '{dataset}'" + plugin.wrong_source_hint
        )
    built = plugin.build(request)
    collected = built.collected
    info: dict[str, Any] = {"source": dataset, "sample": request.n, "built_with": dict(llm_info or {}) or None}
    info |= built.info
    info["made"] = dict(collected.made)
    info["rejected"] = {k: dict(v) for k, v in collected.rejected.items()}
    return Benchmark(
        kind, f"{kind}-{dataset}", dataset, built.task, collected.items, collected.table, request.seed, info
    )
