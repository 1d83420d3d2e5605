"""`spanjudge meta-eval`: correlate judges with human judgments on the suite's sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

meta_eval = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _options(values: list[str]) -> dict[str, str]:
    from spanjudge.inference.errors import InputError

    found = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--judge-option expects KEY=VALUE (e.g. engine=openai), got {value!r}")
        found[key.strip()] = setting.strip()
    return found


@meta_eval.command()
def meta_eval_command(
    out: Annotated[Path, typer.Option("--out", help="Output folder (created; re-running resumes).")],
    suite: Annotated[
        Path | None, typer.Option("--suite", help="Suite YAML of human-judgment sets (configs/eval/thesis.yaml).")
    ] = None,
    benchmark: Annotated[
        Path | None,
        typer.Option("--benchmark", help="Instead of --suite: a perturbation benchmark built by `spanjudge perturb`."),
    ] = None,
    spans: Annotated[
        str | None,
        typer.Option("--spans", help="Instead of --suite: error-span P/R/F1 on rotowire or quintd1 (human spans)."),
    ] = None,
    dhp_weight: Annotated[
        list[str] | None,
        typer.Option(
            "--dhp-weight",
            help="DHP expert weight PERTURBATION:ASPECT=W, or a YAML file {perturbation: {aspect: w}} (repeatable; "
            "each perturbation's weights sum to 1; default none: no EW variant).",
        ),
    ] = None,
    normalised_p: Annotated[
        bool, typer.Option("--normalised-p", help="DHP: harmonic mean M/sum(1/p) instead of the printed 1/sum(1/p).")
    ] = False,
    judge: Annotated[
        list[str] | None,
        typer.Option(
            "--judge",
            help="Judge to evaluate (repeatable; the first is paired-tested against the others): "
            "scores:FILE.jsonl | distilled:MODEL_OR_ADAPTER | prompted:ENSEMBLE.yaml[#model,...] | "
            "metric:rouge1|rouge2|rougeL[-recall|-precision]|bleu|chrf",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder (default ../shared/data or $SPANJUDGE_DATA).")
    ] = None,
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="Only these sets of the suite (repeatable).")
    ] = None,
    max_items: Annotated[
        int | None,
        typer.Option(
            "--max-items",
            min=1,
            help="A quick sample: whole inputs (every system of each) drawn with seed 0, at most N items per "
            "set (at least one input), so input-level correlations stay defined; with --spans, the first N documents.",
        ),
    ] = None,
    resamples: Annotated[
        int | None, typer.Option("--resamples", min=0, help="Bootstrap resamples (default: the suite's; 0 = none).")
    ] = None,
    judge_option: Annotated[
        list[str] | None,
        typer.Option(
            "--judge-option",
            help="KEY=VALUE for distilled: (Judge.from_pretrained), e.g. engine=openai; engine_arg.KEY=VALUE is an "
            "engine argument (vllm LLM(...), transformers from_pretrained), e.g. engine_arg.max_model_len=8192.",
        ),
    ] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option("--endpoint", help="prompted: point a model at other servers, NAME=URL[,URL...] (repeatable)."),
    ] = None,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Write PNG plots.")] = True,
    samples: Annotated[
        int,
        typer.Option(
            "--samples",
            min=1,
            help="Judge each item N times (sample k decodes with a seed from k; sample 1 of N is today's judgment) "
            "and aggregate as the papers did: mean (human-correlation sets, dhp, attacks, prompt); dual: mode "
            "for global, mean for local. Each sample is stored, so a re-run asks nothing again.",
        ),
    ] = 1,
    export_requests: Annotated[
        Path | None,
        typer.Option(
            "--export-requests",
            help="Write the suite's items as a JSONL for `spanjudge score --data` (ids are ITEM@ASPECT) and stop.",
        ),
    ] = None,
) -> None:
    """Correlate judges with human judgments (thesis §4.1, Tables 5.1-5.8).

    For each set of the suite, each judge scores every item for every aspect (stored in
    OUT/judgments/, so a re-run only does what is missing), and its Pearson / Spearman /
    Kendall correlations with the human scores are computed at the level the published table
    used, with bootstrap intervals over inputs. Writes OUT/report.md, OUT/results.json and PNG
    plots; published numbers from the thesis are shown beside the measured ones, labelled.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from spanjudge.inference.errors import InputError, SpanjudgeError
    from spanjudge.inference.paths import data_dir as find_data_dir
    from spanjudge.inference.progress_log import progress_bars

    from .judges import make_judge
    from .plots import bar_plots, scatter_plots
    from .reference import load_reference_tables
    from .report import write_reports
    from .runner import reference_path, run_meta_eval, training_inputs
    from .suite import load_suite

    console = Console(stderr=True)
    if sum(x is not None for x in (suite, benchmark, spans)) != 1:
        raise InputError("give exactly one of --suite, --benchmark and --spans")
    if benchmark is not None or spans is not None:
        if spans is not None and samples > 1:
            raise InputError("--samples applies to --suite and --benchmark, not to --spans")
        _perturbation_eval(console, benchmark, spans, judge or [], out, judge_option, endpoint, dhp_weight,
                           normalised_p, plots, data_dir, max_items, samples)  # fmt: skip
        return
    assert suite is not None
    config = load_suite(suite)
    if resamples is not None:
        config = config.model_copy(update={"bootstrap": config.bootstrap.model_copy(update={"resamples": resamples})})
    unknown = [d for d in dataset or [] if d not in {s.name for s in config.datasets}]
    if unknown:
        raise InputError(f"--dataset {unknown[0]!r} is not in {suite} ({', '.join(s.name for s in config.datasets)})")
    try:
        data_root: Path | None = find_data_dir(data_dir)
    except SpanjudgeError:
        if data_dir is not None:
            raise
        data_root = None
    if export_requests is not None:
        count = _export(config, suite, data_root, export_requests, dataset, max_items)
        console.print(f"wrote {count} requests to {export_requests}; score them with `spanjudge score --data`")
        return
    if not judge:
        raise InputError("give at least one --judge (e.g. --judge metric:bleu or --judge scores:results.jsonl)")
    out.mkdir(parents=True, exist_ok=True)
    judges = []
    try:
        for spec in judge:
            judges.append(make_judge(spec, out=out, options=_options(judge_option or []), endpoints=endpoint or []))
        names = [j.name for j in judges]
        if len(set(names)) != len(names):
            raise InputError(f"the same judge is given twice: {names}")
        # progress_bars: rich bars on a terminal, log lines in a log file
        with progress_bars(
            TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        ) as bars:  # fmt: skip

            def progress(label: str, done: int, total: int):  # type: ignore[no-untyped-def]
                task = bars.add_task(label, total=total, completed=done)
                return lambda n: bars.advance(task, n)

            trained_on = {
                made.name: found
                for made, spec in zip(judges, judge, strict=True)
                if spec.startswith("distilled:") and (found := training_inputs(spec.partition(":")[2])) is not None
            }
            result = run_meta_eval(
                config, suite, judges, out, data_root=data_root, max_items=max_items, datasets=dataset,
                progress=progress, trained_on=trained_on, samples=samples,
            )  # fmt: skip
    finally:
        for made in judges:
            made.close()
    ref_file = reference_path(config, suite)
    references = load_reference_tables(ref_file) if ref_file is not None else None
    written = write_reports(result, references, out)
    if plots:
        written += scatter_plots(result, out) + bar_plots(result, references, out)
    console.print(f"report: {out / 'report.md'} ({len(written)} files in {out})")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    for name, missing in result.incomplete.items():
        console.print(
            f"[yellow]{name}: {missing} judgments are incomplete[/yellow] (a model call failed); "
            "re-run the same command to finish them"
        )
    if result.incomplete:
        raise typer.Exit(1)


def _perturbation_eval(  # type: ignore[no-untyped-def]
    console,
    benchmark,
    spans,
    judge_specs,
    out,
    judge_option,
    endpoint,
    dhp_weight,
    normalised_p,
    plots,
    data_dir,
    max_items,
    samples=1,
) -> None:
    from spanjudge.inference.errors import InputError

    from .judges import make_judge
    from .perturb.cli import evaluate_benchmark, evaluate_span_set

    if not judge_specs and benchmark is not None:
        raise InputError("give at least one --judge (e.g. --judge distilled:runs/judge/adapter)")
    from .perturb.analysis import parse_weights

    weights = parse_weights(dhp_weight or [])
    out.mkdir(parents=True, exist_ok=True)
    judges = []
    try:
        for spec in judge_specs:
            judges.append(make_judge(spec, out=out, options=_options(judge_option or []), endpoints=endpoint or []))
        if benchmark is not None:
            written = evaluate_benchmark(benchmark, judges, out, weights=weights or None, normalised=normalised_p,
                                         plots=plots, samples=samples)  # fmt: skip
            reports = [p for p in written if p.name == "report.md"]
            console.print("report: " + ", ".join(str(p) for p in reports))
        else:
            console.print(f"report: {evaluate_span_set(spans, judges, out, data_dir, max_items)}")
    finally:
        for made in judges:
            made.close()


def _export(config, suite_path, data_root, path, only, max_items) -> int:  # type: ignore[no-untyped-def]
    from spanjudge.inference.fileio import atomic_write_text

    from .datasets import load_suite_dataset, open_suite

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
