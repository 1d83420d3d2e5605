"""`spanjudge meta-eval`: correlate judges with human judgments on the suite's sets, or score
them on a perturbation benchmark (--benchmark) or a human span set (--spans).

One command with three modes (today's flags); each mode is a short function that parses its
options and calls the stage's function in `meta_eval`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

meta_eval = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _options(values: list[str]) -> dict[str, str]:
    from spanjudge.inference.keyvalue import parse_texts  # typed as YAML by the judge (judge_files._judge_options)

    return parse_texts(values, "--judge-option", "engine=openai")


# The options of `spanjudge meta-eval`, one alias each, so that the command stays a short read.
OutOption = Annotated[Path, typer.Option("--out", help="Output folder (created; re-running resumes).")]
SuiteOption = Annotated[
    Path | None, typer.Option("--suite", help="Suite YAML of human-judgment sets (configs/eval/thesis.yaml).")
]
BenchmarkOption = Annotated[
    Path | None,
    typer.Option("--benchmark", help="Instead of --suite: a perturbation benchmark built by `spanjudge perturb`."),
]
SpansOption = Annotated[
    str | None,
    typer.Option("--spans", help="Instead of --suite: error-span P/R/F1 on rotowire or quintd1 (human spans)."),
]
DhpWeightOption = Annotated[
    list[str] | None,
    typer.Option(
        "--dhp-weight",
        help="DHP expert weight PERTURBATION:ASPECT=W, or a YAML file {perturbation: {aspect: w}} (repeatable; "
        "each perturbation's weights sum to 1; default none: no EW variant).",
    ),
]
NormalisedOption = Annotated[
    bool, typer.Option("--normalised-p", help="DHP: harmonic mean M/sum(1/p) instead of the printed 1/sum(1/p).")
]
JudgeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--judge",
        help="Judge to evaluate (repeatable; the first is paired-tested against the others): "
        "scores:FILE.jsonl | distilled:MODEL_OR_ADAPTER | prompted:ENSEMBLE.yaml[#model,...] | "
        "metric:rouge1|rouge2|rougeL[-recall|-precision]|bleu|chrf",
    ),
]
DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="Shared data folder (default ../shared/data or $SPANJUDGE_DATA).")
]
DatasetOption = Annotated[
    list[str] | None, typer.Option("--dataset", help="Only these sets of the suite (repeatable).")
]
MaxItemsOption = Annotated[
    int | None,
    typer.Option(
        "--max-items",
        min=1,
        help="A quick sample: whole inputs (every system of each) drawn with seed 0, at most N items per "
        "set (at least one input), so input-level correlations stay defined; with --spans, the first N documents.",
    ),
]
ResamplesOption = Annotated[
    int | None, typer.Option("--resamples", min=0, help="Bootstrap resamples (default: the suite's; 0 = none).")
]
JudgeOptionOption = Annotated[
    list[str] | None,
    typer.Option(
        "--judge-option",
        help="KEY=VALUE for distilled: (Judge.from_pretrained), e.g. engine=openai; engine_arg.KEY=VALUE is an "
        "engine argument (vllm LLM(...), transformers from_pretrained), e.g. engine_arg.max_model_len=8192; "
        "score=expected correlates the judge's expected score (its probabilities, transformers engine), "
        "score=consensus with samples=N the score of N sampled replies merged, instead of the written one "
        "(score=written, the default).",
    ),
]
EndpointOption = Annotated[
    list[str] | None,
    typer.Option("--endpoint", help="prompted: point a model at other servers, NAME=URL[,URL...] (repeatable)."),
]
PlotsOption = Annotated[bool, typer.Option("--plots/--no-plots", help="Write PNG plots.")]
SamplesOption = Annotated[
    int,
    typer.Option(
        "--samples",
        min=1,
        help="Judge each item N times (sample k decodes with a seed from k; sample 1 of N is today's judgment) "
        "and aggregate as the papers did: mean (human-correlation sets, dhp, attacks, prompt); dual: mode "
        "for global, mean for local. Each sample is stored, so a re-run asks nothing again.",
    ),
]
ExportRequestsOption = Annotated[
    Path | None,
    typer.Option(
        "--export-requests",
        help="Write the suite's items as a JSONL for `spanjudge score --data` (ids are ITEM@ASPECT) and stop.",
    ),
]


@dataclass(frozen=True)
class _Judging:
    """The options every mode shares: which judges, made how, written where."""

    out: Path
    specs: list[str]
    options: dict[str, str]
    endpoints: list[str]
    plots: bool
    data_dir: Path | None
    max_items: int | None
    samples: int


@meta_eval.command()
def meta_eval_command(
    out: OutOption,
    suite: SuiteOption = None,
    benchmark: BenchmarkOption = None,
    spans: SpansOption = None,
    dhp_weight: DhpWeightOption = None,
    normalised_p: NormalisedOption = False,
    judge: JudgeOption = None,
    data_dir: DataDirOption = None,
    dataset: DatasetOption = None,
    max_items: MaxItemsOption = None,
    resamples: ResamplesOption = None,
    judge_option: JudgeOptionOption = None,
    endpoint: EndpointOption = None,
    plots: PlotsOption = True,
    samples: SamplesOption = 1,
    export_requests: ExportRequestsOption = None,
) -> None:
    """Correlate judges with human judgments (thesis §4.1, Tables 5.1-5.8).

    For each set of the suite, each judge scores every item for every aspect (stored in
    OUT/judgments/, so a re-run only does what is missing), and its Pearson / Spearman /
    Kendall correlations with the human scores are computed at the level the published table
    used, with bootstrap intervals over inputs. Writes OUT/report.md, OUT/results.json and PNG
    plots; published numbers from the thesis are shown beside the measured ones, labelled.
    """
    from spanjudge.inference.errors import InputError

    if sum(x is not None for x in (suite, benchmark, spans)) != 1:
        raise InputError("give exactly one of --suite, --benchmark and --spans")
    how = _Judging(out, judge or [], _options(judge_option or []), endpoint or [], plots, data_dir, max_items, samples)
    if benchmark is not None:
        _benchmark_mode(benchmark, how, dhp_weight or [], normalised_p)
    elif spans is not None:
        _spans_mode(spans, how)
    elif export_requests is not None:
        _export_mode(suite, export_requests, resamples, dataset, data_dir, max_items)  # type: ignore[arg-type]
    else:
        _suite_mode(suite, how, resamples, dataset)  # type: ignore[arg-type]


def _console() -> Console:
    return Console(stderr=True)


def _suite_mode(suite: Path, how: _Judging, resamples: int | None, datasets: list[str] | None) -> None:
    """--suite: correlations with human judgments; exit 1 when judgments are incomplete."""
    from spanjudge.inference.errors import InputError
    from spanjudge.inference.paths import optional_data_dir

    from .meta_eval import load_suite_config, open_judges, run_suite, trained_on

    config = load_suite_config(suite, resamples, datasets)
    data_root = optional_data_dir(how.data_dir)
    if not how.specs:
        raise InputError("give at least one --judge (e.g. --judge metric:bleu or --judge scores:results.jsonl)")
    console = _console()
    with open_judges(how.specs, how.out, how.options, how.endpoints) as judges:
        run = run_suite(
            config, suite, judges, how.out, data_root=data_root, console=console, max_items=how.max_items,
            datasets=datasets, trained=trained_on(judges, how.specs), samples=how.samples, plots=how.plots,
        )  # fmt: skip
    result = run.result
    console.print(f"report: {run.report} ({len(run.written)} files in {how.out})")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    for name, missing in result.incomplete.items():
        console.print(
            f"[yellow]{name}: {missing} judgments are incomplete[/yellow] (a model call failed); "
            "re-run the same command to finish them"
        )
    if result.incomplete:
        raise typer.Exit(1)


def _export_mode(
    suite: Path,
    path: Path,
    resamples: int | None,
    datasets: list[str] | None,
    data_dir: Path | None,
    max_items: int | None,
) -> None:
    """--suite with --export-requests: the suite's items for `spanjudge score`, no judging."""
    from spanjudge.inference.paths import optional_data_dir

    from .meta_eval import export_requests, load_suite_config

    config = load_suite_config(suite, resamples, datasets)
    count = export_requests(config, suite, optional_data_dir(data_dir), path, datasets, max_items)
    _console().print(f"wrote {count} requests to {path}; score them with `spanjudge score --data`")


def _benchmark_mode(benchmark: Path, how: _Judging, weights: list[str], normalised: bool) -> None:
    """--benchmark: score the judges on a perturbation benchmark."""
    from spanjudge.inference.errors import InputError

    from .meta_eval import open_judges, run_benchmark
    from .perturb.kinds.dhp import parse_weights

    if not how.specs:
        raise InputError("give at least one --judge (e.g. --judge distilled:runs/judge/adapter)")
    parsed = parse_weights(weights)
    with open_judges(how.specs, how.out, how.options, how.endpoints) as judges:
        reports = run_benchmark(
            benchmark, judges, how.out, weights=parsed, normalised=normalised, plots=how.plots, samples=how.samples
        )
    _console().print("report: " + ", ".join(str(p) for p in reports))


def _spans_mode(spans: str, how: _Judging) -> None:
    """--spans: error-span P/R/F1 against human spans."""
    from spanjudge.inference.errors import InputError

    from .meta_eval import open_judges, run_spans

    if how.samples > 1:
        raise InputError("--samples applies to --suite and --benchmark, not to --spans")
    with open_judges(how.specs, how.out, how.options, how.endpoints) as judges:
        report = run_spans(spans, judges, how.out, data_dir=how.data_dir, max_items=how.max_items)
    _console().print(f"report: {report}")
