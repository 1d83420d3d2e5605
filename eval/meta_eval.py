"""The meta-evaluation stage as functions, one per mode of `spanjudge meta-eval`.

- `run_suite`: correlate judges with human judgments on a suite's sets (`--suite`), then
  write the reports and plots; `runner.run_meta_eval` is its correlation core.
- `run_benchmark`: score judges on a perturbation benchmark (`--benchmark`).
- `run_spans`: error-span P/R/F1 of judges on a human span set (`--spans`).
- `export_requests`: a suite's items as a JSONL for `spanjudge score --data`.

`open_judges` makes the judges from `--judge` specs and closes them whatever happens. The
command parses options and prints; the demo calls these functions directly.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_text
from spanjudge.core.progress import labelled_bars
from spanjudge.eval.correlation.plots import bar_plots, scatter_plots
from spanjudge.eval.correlation.reference import load_reference_tables
from spanjudge.eval.correlation.report import write_reports
from spanjudge.eval.correlation.runner import MetaEvalResult, reference_path, run_meta_eval, training_inputs
from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite
from spanjudge.eval.judging.judges import make_judge
from spanjudge.eval.judging.suite import SuiteConfig, load_suite
from spanjudge.eval.perturb.evaluate import evaluate_benchmark
from spanjudge.eval.spans.evaluate import evaluate_span_set


@dataclass
class SuiteRun:
    """A suite's meta-evaluation: the correlations and the files written in `out`."""

    out: Path
    result: MetaEvalResult
    written: list[Path] = field(default_factory=list)

    @property
    def report(self) -> Path:
        return self.out / "report.md"


def load_suite_config(path: Path, resamples: int | None = None, datasets: Sequence[str] | None = None) -> SuiteConfig:
    """The suite YAML, with `resamples` bootstrap resamples when given; names a `datasets`
    entry the suite does not hold."""

    config = load_suite(path)
    if resamples is not None:
        config = config.model_copy(update={"bootstrap": config.bootstrap.model_copy(update={"resamples": resamples})})
    unknown = [d for d in datasets or [] if d not in {s.name for s in config.datasets}]
    if unknown:
        raise InputError(f"--dataset {unknown[0]!r} is not in {path} ({', '.join(s.name for s in config.datasets)})")
    return config


@contextlib.contextmanager
def open_judges(
    specs: Sequence[str], out: Path, options: Mapping[str, str] | None = None, endpoints: Sequence[str] = ()
) -> Iterator[list[Any]]:
    """The judges of `--judge` specs (`options` reach distilled: judges, `endpoints` prompted:
    ones); more may be appended to the list, and every one is closed on the way out."""

    out.mkdir(parents=True, exist_ok=True)  # before the judges: a prompted judge keeps its cache in OUT
    judges: list[Any] = []
    try:
        for spec in specs:
            judges.append(make_judge(spec, out=out, options=options or {}, endpoints=endpoints))
        yield judges
    finally:
        for judge in judges:
            judge.close()


def trained_on(judges: Sequence[Any], specs: Sequence[str]) -> dict[str, frozenset[str]]:
    """Judge name -> digests of its training inputs, for the distilled: specs that record them."""

    return {
        made.name: found
        for made, spec in zip(judges, specs, strict=False)
        if spec.startswith("distilled:") and (found := training_inputs(spec.partition(":")[2])) is not None
    }


def run_suite(
    config: SuiteConfig,
    suite_path: Path,
    judges: Sequence[Any],
    out: Path,
    *,
    data_root: Path | None,
    console: Console | None = None,
    max_items: int | None = None,
    datasets: Sequence[str] | None = None,
    trained: Mapping[str, frozenset[str]] | None = None,
    samples: int = 1,
    plots: bool = True,
) -> SuiteRun:
    """Judge every item of the suite's sets (stored under OUT/judgments/: a re-run only does
    what is missing), correlate with the human scores, write OUT/report.md, OUT/results.json
    and, with `plots`, the PNG plots. Progress goes to `console` (default: standard error)."""

    names = [j.name for j in judges]
    if len(set(names)) != len(names):
        raise InputError(f"the same judge is given twice: {names}")
    out.mkdir(parents=True, exist_ok=True)
    with labelled_bars(28, console) as progress:  # rich bars on a terminal, log lines in a log file
        result = run_meta_eval(
            config, suite_path, judges, out, data_root=data_root, max_items=max_items, datasets=datasets,
            progress=progress, trained_on=trained, samples=samples,
        )  # fmt: skip
    ref_file = reference_path(config, suite_path)
    references = load_reference_tables(ref_file) if ref_file is not None else None
    written = write_reports(result, references, out)
    if plots:
        written += scatter_plots(result, out) + bar_plots(result, references, out)
    return SuiteRun(out, result, written)


def run_benchmark(
    benchmark: Path,
    judges: Sequence[Any],
    out: Path,
    *,
    weights: Mapping[str, Mapping[str, float]] | None = None,
    normalised: bool = False,
    plots: bool = True,
    samples: int = 1,
) -> list[Path]:
    """Score the judges on the perturbation benchmark in `benchmark`; returns each judge's
    report.md (OUT/<judge>/). `weights`: DHP expert weights, perturbation -> aspect -> w
    (`perturb.analysis.parse_weights`), for the expert-weighted variant."""

    if not judges:
        raise InputError("give at least one --judge (e.g. --judge distilled:runs/judge/adapter)")
    out.mkdir(parents=True, exist_ok=True)
    chosen = {k: dict(v) for k, v in weights.items()} if weights else None
    written = evaluate_benchmark(
        benchmark, judges, out, weights=chosen, normalised=normalised, plots=plots, samples=samples
    )
    return [p for p in written if p.name == "report.md"]


def run_spans(
    name: str,
    judges: Sequence[Any],
    out: Path,
    *,
    data_dir: Path | None,
    max_items: int | None = None,
    gamma: bool = False,
    snap_words: bool = False,
    fit_decisions: bool = False,
) -> Path:
    """Error-span P/R/F1 of the judges (and of the mark-every-number baseline) on span set
    `name` (rotowire or quintd1); returns the report."""

    out.mkdir(parents=True, exist_ok=True)
    return evaluate_span_set(
        name, judges, out, data_dir, max_items, gamma=gamma, snap_words=snap_words, fit_decisions=fit_decisions
    )


def export_requests(
    config: SuiteConfig,
    suite_path: Path,
    data_root: Path | None,
    path: Path,
    only: Sequence[str] | None = None,
    max_items: int | None = None,
) -> int:
    """Write the suite's items as score requests (ids ITEM@ASPECT) to `path`; returns how many."""

    data = open_suite(config, suite_path, data_root)
    lines = []
    for spec in config.datasets:
        if only and spec.name not in only:
            continue
        dataset = load_suite_dataset(data, spec.name, max_items)
        for aspect in spec.aspects:
            for item in dataset.items:
                if aspect.name in item.human:
                    row = {
                        "id": f"{item.id}@{aspect.judge_aspect}",
                        "task_id": dataset.task.id,
                        "aspect_name": aspect.judge_aspect,
                        "inputs": item.inputs,
                        "outputs": {dataset.task.output: item.output},
                    }
                    lines.append(json.dumps(row, ensure_ascii=False))
    atomic_write_text(path, "\n".join(lines) + "\n")
    return len(lines)
