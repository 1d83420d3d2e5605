"""The registry of benchmark kinds: one line per kind in `BENCHMARKS`, one module per kind in `kinds/`.

A kind's module (`kinds/<name>.py`) defines `KIND = BenchmarkKind(...)`: the datasets it is
built from, and its build, analyse, report and plots functions. Everything else (the CLI's
`--benchmark` choices, the demo config, the published-numbers file, the manifest reader)
takes the kind list from `KINDS`; modules are imported only when a kind is used, so reading
the list costs nothing. Another package adds a kind as an entry point of the group
`spanjudge.benchmarks` (`core.registry`). See the package docstring for how to add a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator

from spanjudge.core.errors import InputError
from spanjudge.core.registry import Registry

if TYPE_CHECKING:  # the steps' types only: the registry imports no step at run time
    from spanjudge.eval.perturb.benchmark import Benchmark
    from spanjudge.eval.perturb.build import BuildRequest, Built
    from spanjudge.eval.perturb.judgments import ScoringResult


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


# The registry: name -> its module's KIND
BENCHMARKS: Registry[BenchmarkKind] = Registry(
    "benchmark kind",
    "spanjudge.benchmarks",
    {
        "dhp": "spanjudge.eval.perturb.kinds.dhp:KIND",  # 000: discernment of hierarchical perturbation
        "dual": "spanjudge.eval.perturb.kinds.dual:KIND",  # 001: dual perspective, error-injection chains
        "attacks": "spanjudge.eval.perturb.kinds.attacks:KIND",  # 002: aspect-targeted perturbation attacks
        "prompt": "spanjudge.eval.perturb.kinds.prompt:KIND",  # 003: a misleading expert rating in the prompt
    },
    BenchmarkKind,
)
KINDS: tuple[str, ...] = BENCHMARKS.names()


def get_kind(name: str) -> BenchmarkKind:
    """The registered kind `name` (its module imported on first use); an InputError lists the kinds."""
    kind = BENCHMARKS.load(name)
    if kind.name != name:  # a copied module that kept its old name would report as the wrong kind
        raise AssertionError(f"{BENCHMARKS.targets()[name]} registers kind {kind.name!r}")
    return kind


def all_kinds() -> list[BenchmarkKind]:
    return [get_kind(name) for name in KINDS]


def _check_kind(name: str) -> str:
    try:
        return BENCHMARKS.check(name)
    except InputError as error:
        raise ValueError(str(error)) from None


KindName = Annotated[str, AfterValidator(_check_kind)]
"""A benchmark kind in a pydantic model (config files, published numbers): one of `KINDS`."""


def no_plots(result: Mapping[str, Any], out: Path) -> list[Path]:
    """The plots of a kind that draws none."""
    return []


__all__ = ["BENCHMARKS", "KINDS", "AnalysisOptions", "BenchmarkKind", "KindName", "all_kinds", "get_kind", "no_plots"]
