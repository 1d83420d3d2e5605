"""`spanjudge meta-eval`: correlate judges with human judgments on the suite's sets, or score
them on a perturbation benchmark (--benchmark) or a human span set (--spans).

One command with three modes (today's flags); each mode is a short function that parses its
options and calls the stage's function in `meta_eval`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from spanjudge.core.options import option, settings_command
from spanjudge.core.registry import one_of
from spanjudge.eval.spans.sets import SPAN_SETS

meta_eval = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _options(values: list[str]) -> dict[str, str]:
    from spanjudge.core.keyvalue import parse_texts  # typed as YAML by the judge (judge_files._judge_options)

    return parse_texts(values, "--judge-option", "engine=openai")


@dataclass(frozen=True)
class MetaEvalSettings:
    """`spanjudge meta-eval`'s options, each declared once (`core.options`): name, type, default, help."""

    out: Path = option(help="Output folder (created; re-running resumes).")
    suite: Path | None = option(None, help="Suite YAML of human-judgment sets (configs/eval/thesis.yaml).")
    benchmark: Path | None = option(
        None, help="Instead of --suite: a perturbation benchmark built by `spanjudge perturb`."
    )
    spans: str | None = option(
        None,
        help="Instead of --suite: error-span P/R/F1 against human spans, a span set of the registry "
        f"(eval/spans/sets.py): {one_of(SPAN_SETS.names())}. quintd1:dev and quintd1:test are the distillation "
        "protocol's splits; factgenie:FOLDER is any factgenie annotation campaign (judges are then scores files or "
        "exported campaigns, matched by id).",
    )
    dhp_weight: list[str] | None = option(
        None,
        help="DHP expert weight PERTURBATION:ASPECT=W, or a YAML file {perturbation: {aspect: w}} (repeatable; "
        "each perturbation's weights sum to 1; default none: no EW variant).",
    )
    normalised_p: bool = option(False, help="DHP: harmonic mean M/sum(1/p) instead of the printed 1/sum(1/p).")
    judge: list[str] | None = option(
        None,
        help="Judge to evaluate (repeatable; the first is paired-tested against the others): "
        "scores:FILE.jsonl | distilled:MODEL_OR_ADAPTER | prompted:ENSEMBLE.yaml[#model,...] | "
        "metric:rouge1|rouge2|rougeL[-recall|-precision]|bleu|chrf | "
        "teacher:ANNOTATOR|IMPORT.yaml (--spans quintd1: a quintd-1 annotator's spans, e.g. teacher:llama3, or "
        "the teacher an import config merges) | factgenie:FOLDER (a campaign `render --to factgenie` exported)",
    )
    data_dir: Path | None = option(None, help="Shared data folder (default ../shared/data or $SPANJUDGE_DATA).")
    dataset: list[str] | None = option(None, help="Only these sets of the suite (repeatable).")
    max_items: int | None = option(
        None,
        help="A quick sample: whole inputs (every system of each) drawn with seed 0, at most N items per "
        "set (at least one input), so input-level correlations stay defined; with --spans, the first N documents.",
        min=1,
    )
    resamples: int | None = option(None, help="Bootstrap resamples (default: the suite's; 0 = none).", min=0)
    judge_option: list[str] | None = option(
        None,
        help="KEY=VALUE for distilled: (Judge.from_pretrained), e.g. engine=openai; engine_arg.KEY=VALUE is an "
        "engine argument (vllm LLM(...), transformers from_pretrained), e.g. engine_arg.max_model_len=8192; "
        "score=expected correlates the judge's expected score (its probabilities: engines transformers, "
        "llamacpp, vllm; with --spans, the spans it writes with probability >= 0.5 and its expected number of "
        "errors), "
        "score=consensus with samples=N the score of N sampled replies merged, instead of the written one "
        "(score=written, the default).",
    )
    endpoint: list[str] | None = option(
        None, help="prompted: point a model at other servers, NAME=URL[,URL...] (repeatable)."
    )
    plots: bool = option(True, help="Write PNG plots.")
    samples: int = option(
        1,
        help="Judge each item N times (sample k decodes with a seed from k; sample 1 of N is today's judgment) "
        "and aggregate as the papers did: mean (human-correlation sets, dhp, attacks, prompt); dual: mode "
        "for global, mean for local. Each sample is stored, so a re-run asks nothing again.",
        min=1,
    )
    gamma: bool = option(
        False,
        flag="--gamma/--no-gamma",
        help="--spans: also factgenie's γ agreement (pygamma-agreement, `pip install spanjudge[agreement]`), "
        "about 0.3 s an output.",
    )
    snap_words: bool = option(
        False,
        flag="--snap-words/--no-snap-words",
        help="--spans: grow every span, predicted and gold, to whole words before scoring (factgenie's "
        "word-boundary snapping); recorded in spans.json.",
    )
    fit_decisions: bool = option(
        False,
        help="--spans: make this span set the distilled judges' dev split: judge it with their written replies and "
        "probabilities, choose each judge's decision thresholds on it (say 'No Error' when P(no error) >= t0, keep "
        "a span at confidence >= t; the best mean of overlap F1, token F1, count r and token r) and store them "
        "with the judge (its folder's spanjudge.json), where score, predict and meta-eval apply them. Report the "
        "judge on other inputs afterwards: a set that shares inputs with the one that chose is refused.",
    )
    export_requests: Path | None = option(
        None,
        help="Write the suite's items as a JSONL for `spanjudge score --data` (ids are ITEM@ASPECT) and stop.",
    )


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


def meta_eval_command(s: MetaEvalSettings) -> None:
    """Correlate judges with human judgments (thesis §4.1, Tables 5.1-5.8).

    For each set of the suite, each judge scores every item for every aspect (stored in
    OUT/judgments/, so a re-run only does what is missing), and its Pearson / Spearman /
    Kendall correlations with the human scores are computed at the level the published table
    used, with bootstrap intervals over inputs. Writes OUT/report.md, OUT/results.json and PNG
    plots; published numbers from the thesis are shown beside the measured ones, labelled.
    """
    from spanjudge.core.errors import InputError

    if sum(x is not None for x in (s.suite, s.benchmark, s.spans)) != 1:
        raise InputError("give exactly one of --suite, --benchmark and --spans")
    if s.spans is None and (s.gamma or s.snap_words or s.fit_decisions):
        raise InputError("--gamma, --snap-words and --fit-decisions apply to --spans only")
    how = _Judging(
        s.out, s.judge or [], _options(s.judge_option or []), s.endpoint or [], s.plots, s.data_dir, s.max_items,
        s.samples,
    )  # fmt: skip
    if s.benchmark is not None:
        _benchmark_mode(s.benchmark, how, s.dhp_weight or [], s.normalised_p)
    elif s.spans is not None:
        _spans_mode(s.spans, how, gamma=s.gamma, snap_words=s.snap_words, fit_decisions=s.fit_decisions)
    elif s.export_requests is not None:
        _export_mode(s.suite, s.export_requests, s.resamples, s.dataset, s.data_dir, s.max_items)  # type: ignore[arg-type]
    else:
        _suite_mode(s.suite, how, s.resamples, s.dataset)  # type: ignore[arg-type]


settings_command(meta_eval, MetaEvalSettings, meta_eval_command)


def _console() -> Console:
    return Console(stderr=True, soft_wrap=True)  # a line names a file and line whole: never folded inside a path


def _suite_mode(suite: Path, how: _Judging, resamples: int | None, datasets: list[str] | None) -> None:
    """--suite: correlations with human judgments; exit 1 when judgments are incomplete."""
    from spanjudge.core.errors import InputError
    from spanjudge.core.paths import optional_data_dir
    from spanjudge.eval.meta_eval import load_suite_config, open_judges, run_suite, trained_on

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
    from spanjudge.core.paths import optional_data_dir
    from spanjudge.eval.meta_eval import export_requests, load_suite_config

    config = load_suite_config(suite, resamples, datasets)
    count = export_requests(config, suite, optional_data_dir(data_dir), path, datasets, max_items)
    _console().print(f"wrote {count} requests to {path}; score them with `spanjudge score --data`")


def _benchmark_mode(benchmark: Path, how: _Judging, weights: list[str], normalised: bool) -> None:
    """--benchmark: score the judges on a perturbation benchmark."""
    from spanjudge.core.errors import InputError
    from spanjudge.eval.meta_eval import open_judges, run_benchmark
    from spanjudge.eval.perturb.kinds.dhp import parse_weights

    if not how.specs:
        raise InputError("give at least one --judge (e.g. --judge distilled:runs/judge/adapter)")
    parsed = parse_weights(weights)
    with open_judges(how.specs, how.out, how.options, how.endpoints) as judges:
        reports = run_benchmark(
            benchmark, judges, how.out, weights=parsed, normalised=normalised, plots=how.plots, samples=how.samples
        )
    _console().print("report: " + ", ".join(str(p) for p in reports))


def _spans_mode(spans: str, how: _Judging, *, gamma: bool, snap_words: bool, fit_decisions: bool) -> None:
    """--spans: error-span P/R/F1 against human spans."""
    from spanjudge.core.errors import InputError
    from spanjudge.eval.meta_eval import open_judges, run_spans
    from spanjudge.eval.spans.decision_fit import check_fit_split
    from spanjudge.eval.spans.sets import choose_set

    if how.samples > 1:
        raise InputError("--samples applies to --suite and --benchmark, not to --spans")
    chosen = choose_set(spans)  # a set it lacks, or judges that cannot judge it: said before any judge loads
    chosen.check_judges(how.specs)
    options = how.options
    if fit_decisions:  # the thresholds are chosen from the written replies and the probabilities along them
        check_fit_split(chosen.fit_split())  # before any judging
        if any(key in options for key in ("no_error_threshold", "min_confidence", "written")):
            raise InputError("--fit-decisions chooses the thresholds: give no --judge-option of its own for them")
        options = {**options, "written": "true", "probabilities": "true"}
    with open_judges(how.specs, how.out, options, how.endpoints) as judges:
        report = run_spans(
            spans, judges, how.out, data_dir=how.data_dir, max_items=how.max_items, gamma=gamma,
            snap_words=snap_words, fit_decisions=fit_decisions,
        )  # fmt: skip
    _console().print(f"report: {report}")
