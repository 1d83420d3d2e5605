"""`spanjudge demo`: the whole pipeline, end to end, as a list of named steps.

annotate (ensemble + supervisor, on llama.cpp servers the demo starts) -> train (LoRA SFT)
-> score held-out outputs -> meta-evaluate (human-correlation sets) -> perturbation
benchmark -> publish dry run -> one HTML report. Every step calls the stage's own API and
inherits its resumption (the annotation cache, a finished training run is a no-op, score and
meta-eval stores skip what is done), so a second run redoes nothing and finishes quickly.
eval/ is the last stage, so this is the one place that may import all the others.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from spanjudge.inference.errors import SpanjudgeError
from spanjudge.inference.fileio import atomic_write_json, atomic_write_jsonl, atomic_write_text

from .demo_config import DemoConfig, ServerSpec, default_config_path, load_demo_config
from .demo_report import DemoLayout, StepRecord, render_report
from .suite import resolve_config_path

DISTILLED = "distilled:adapter"  # the meta-eval name of the judge at OUT/train/adapter


class NotBuiltYet(SpanjudgeError):
    """A step whose stage does not exist yet: recorded in the report, the demo goes on."""


@dataclass
class DemoContext:
    config: DemoConfig
    config_path: Path
    layout: DemoLayout
    data_root: Path
    console: Console
    endpoints: dict[str, list[str]] = field(default_factory=dict)  # ensemble role -> URLs of started servers

    def path(self, value: str) -> Path:
        return resolve_config_path(value, self.config_path)


StepOutput = tuple[str, dict[str, Any]]  # a one-line summary, details kept in demo_run.json


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[DemoContext], StepOutput]
    needs_servers: bool = False


# ---------------------------------------------------------------------------------------
# Servers


def _gguf(model: str) -> Path:
    from spanjudge.inference.llamacpp import gemma3_gguf, smollm2_gguf

    return {"@smollm2": smollm2_gguf, "@gemma3": gemma3_gguf}[model]() if model.startswith("@") else Path(model)


@contextlib.contextmanager
def serving(specs: Sequence[ServerSpec], logs: Path, console: Console) -> Iterator[dict[str, list[str]]]:
    """Start one llama.cpp server per spec on a free port (one thread each: two servers
    spinning on two cores slow each other down), yield role -> [URL], stop them all."""
    from spanjudge.inference.llamacpp import LlamaCppServer

    started: list[LlamaCppServer] = []
    try:
        endpoints: dict[str, list[str]] = {}
        for spec in specs:
            with console.status(f"starting llama.cpp with {spec.model} ({spec.alias}) on 127.0.0.1 ..."):
                server = LlamaCppServer(
                    _gguf(spec.model), spec.alias, n_ctx=spec.n_ctx, n_threads=1, log_path=logs / f"{spec.alias}.log"
                )
                started.append(server.start())
            console.print(f"llama.cpp {spec.alias} at {server.base_url} (roles: {', '.join(spec.roles)})")
            endpoints.update({role: [server.base_url] for role in spec.roles})
        yield endpoints
    finally:
        for server in started:
            server.stop()


# ---------------------------------------------------------------------------------------
# Steps


def _limited(sources: Any, limit: int | None) -> Any:
    if limit is None:
        return sources
    specs = tuple(spec.model_copy(update={"limit_inputs": limit}) for spec in sources.sources)
    return sources.model_copy(update={"sources": specs})


def annotate_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.data_gen.cli import model_progress
    from spanjudge.data_gen.config import load_ensemble, load_sources
    from spanjudge.data_gen.pipeline import run_pipeline
    from spanjudge.inference.catalog import load_catalog

    section = ctx.config.annotate
    ensemble = load_ensemble(ctx.path(section.ensemble), ctx.endpoints)
    sources_path = ctx.path(section.sources)
    sources = _limited(load_sources(sources_path), section.limit_inputs)
    with model_progress(ctx.console) as progress:
        summary = run_pipeline(
            ensemble, sources, sources_path, ctx.layout.annotate, load_catalog(), data_root=ctx.data_root,
            progress=progress,
        )  # fmt: skip
    if summary.incomplete:
        raise SpanjudgeError(
            f"annotate: {summary.incomplete} requests are incomplete (a model server did not answer; "
            f"see {ctx.layout.annotate / 'incomplete.jsonl'}); re-run the demo to finish them"
        )
    if not summary.train:
        raise SpanjudgeError(
            f"annotate: no training record was built from {summary.requests} requests "
            f"(see {ctx.layout.annotate / 'unscored.jsonl'} for the reasons)"
        )
    text = (
        f"{summary.records} records ({summary.train} train / {summary.validation} validation) from "
        f"{summary.requests} requests, {summary.unscored} unscored; model calls {summary.total_model_calls}, "
        f"cache hits {sum(summary.cache_hits.values())}"
    )
    return text, summary.as_dict()


def train_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.training.config import load_train_config
    from spanjudge.training.run import TrainingRun

    section = ctx.config.train
    overrides = [
        *section.overrides.items(),
        ("data.train", str(ctx.layout.annotate.resolve())),
        ("training.output_dir", str(ctx.layout.train.resolve())),
    ]
    run = TrainingRun(
        load_train_config(ctx.path(section.config), overrides), say=lambda m: ctx.console.print(f"train: {m}")
    )
    already = run.finished
    run.prepare()
    metrics = run.train()
    loss = metrics.get("train_loss")
    text = ("already trained, nothing to do; " if already else "") + (
        f"{metrics.get('global_step')} steps on {metrics.get('train_examples')} examples"
        + (f", train loss {loss:.3f}" if isinstance(loss, float) else "")
        + (f", {metrics['tokens_per_second']:.0f} tokens/s" if metrics.get("tokens_per_second") else "")
    )
    return text, {"already_trained": already, "metrics": metrics}


def held_out_rows(ctx: DemoContext) -> list[dict[str, Any]]:
    """Outputs the judge never trained on: the validation split, then outputs of the inputs
    that follow the annotated ones in each source, in the annotate record format."""
    from spanjudge.data_gen.config import load_sources
    from spanjudge.data_gen.pipeline import RunSummary, build_requests
    from spanjudge.inference.catalog import load_catalog
    from spanjudge.inference.tabular import iter_jsonl

    wanted = ctx.config.score.held_out
    keys = ("id", "dataset", "input_id", "system", "task_id", "aspect_name", "inputs", "outputs")
    validation = ctx.layout.annotate / "validation.jsonl"
    rows = [{k: row[k] for k in keys} for _, row in iter_jsonl(validation)] if validation.is_file() else []
    limit = ctx.config.annotate.limit_inputs
    if limit is not None and len(rows) < wanted:
        catalog = load_catalog()
        sources_path = ctx.path(ctx.config.annotate.sources)
        sources = load_sources(sources_path)

        def requests(count: int) -> list[Any]:
            return build_requests(
                _limited(sources, count), sources_path, catalog, ctx.data_root, RunSummary(ctx.layout.annotate)
            )

        annotated = {(r.item.dataset, r.item.input_id) for r in requests(limit)}
        for request in requests(limit + wanted):
            item = request.item
            if (item.dataset, item.input_id) in annotated:
                continue
            task = catalog.task(item.task_id)
            rows.append(
                {
                    "id": f"{item.dataset}-{request.id}", "dataset": item.dataset, "input_id": item.input_id,
                    "system": item.system, "task_id": item.task_id, "aspect_name": request.aspect,
                    "inputs": item.inputs, "outputs": {task.output: item.output},
                }
            )  # fmt: skip
    return rows[:wanted]


def _exit_code(exc: BaseException) -> int:
    return int(getattr(exc, "exit_code", 1) or 0)


def score_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.inference.score_cli import score_command
    from spanjudge.inference.score_data import read_results

    section, layout = ctx.config.score, ctx.layout
    rows = held_out_rows(ctx)
    if not rows:
        raise SpanjudgeError("score: no held-out outputs (no validation split, and annotate.limit_inputs is not set)")
    atomic_write_jsonl(layout.held_out, rows)
    try:
        score_command(
            model=str(layout.adapter), data=str(layout.held_out), out=layout.scores,
            max_new_tokens=section.max_new_tokens, batch_size=section.batch_size, retries=section.retries,
            output_format="jsonl",
        )  # fmt: skip
    except typer.Exit as exc:
        if _exit_code(exc):
            raise SpanjudgeError("score: some outputs could not reach the model; re-run the demo to finish") from None
    results = read_results(layout.scores)
    scored = [r for r in results if r["evaluation"]["score"] is not None]
    spans = sum(1 for r in scored for e in r["evaluation"]["errors"] if e.get("start") is not None)
    text = (
        f"{len(results)} held-out outputs: {len(scored)} scored, {len(results) - len(scored)} unscored; {spans} spans"
    )
    return text, {"outputs": len(results), "scored": len(scored), "anchored_spans": spans}


def meta_eval_step(ctx: DemoContext) -> StepOutput:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .judges import make_judge
    from .plots import bar_plots, scatter_plots
    from .reference import load_reference_tables
    from .report import write_reports
    from .runner import reference_path, run_meta_eval
    from .suite import load_suite

    section, layout = ctx.config.meta_eval, ctx.layout
    suite_path = ctx.path(section.suite)
    suite = load_suite(suite_path)
    if section.resamples is not None:
        bootstrap = suite.bootstrap.model_copy(update={"resamples": section.resamples})
        suite = suite.model_copy(update={"bootstrap": bootstrap})
    options = {k: str(v) for k, v in section.judge_options.items()}
    layout.meta_eval.mkdir(parents=True, exist_ok=True)
    judges = []
    try:
        for spec in (f"distilled:{layout.adapter}", *section.baselines):
            judges.append(
                make_judge(spec, out=layout.meta_eval, options=options if spec.startswith("distilled:") else {})
            )
        columns = (TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=ctx.console) as bars:

            def progress(label: str, done: int, total: int) -> Callable[[int], None]:
                task = bars.add_task(label, total=total, completed=done)
                return lambda n: bars.advance(task, n)

            result = run_meta_eval(
                suite, suite_path, judges, layout.meta_eval, data_root=ctx.data_root, max_items=section.max_items,
                datasets=list(section.datasets) or None, progress=progress,
            )  # fmt: skip
    finally:
        for judge in judges:
            judge.close()
    if result.incomplete:
        raise SpanjudgeError("meta-eval: some judgments are incomplete (a model call failed); re-run the demo")
    ref_file = reference_path(suite, suite_path)
    references = load_reference_tables(ref_file) if ref_file is not None else None
    written = write_reports(result, references, layout.meta_eval)
    written += scatter_plots(result, layout.meta_eval) + bar_plots(result, references, layout.meta_eval)
    index = {(c.judge, c.dataset, c.aspect): c for c in result.cells}
    coverage = []
    for name, info in result.datasets.items():
        cells = [index[(DISTILLED, name, a)] for a in info["aspects"] if (DISTILLED, name, a) in index]
        coverage.append(f"{name} {sum(c.scored for c in cells)}/{sum(c.items for c in cells)}")
    text = (
        f"judges {', '.join(result.judges)}; the distilled judge scored {', '.join(coverage)} items; "
        f"{len(written)} files (report.md, results.json, plots)"
    )
    return text, {"judges": result.judges, "unscored_reasons": result.unscored_reasons}


def perturbation_step(ctx: DemoContext) -> StepOutput:
    """Build the configured perturbation benchmark (`spanjudge perturb`; LLM-made sets from the
    demo's own llama.cpp server) and score the trained judge on it (`meta-eval --benchmark`).
    A built benchmark is reused and the judgments resume, like every other step."""
    from spanjudge.inference.configio import load_yaml_model

    from .judge_files import DistilledJudge
    from .perturb.benchmark import MANIFEST, load_benchmark, write_benchmark
    from .perturb.build import build_benchmark
    from .perturb.cli import PerturberConfig, evaluate_benchmark, open_perturber
    from .store import judge_slug

    section = ctx.config.perturbation
    if section is None:
        raise NotBuiltYet("no perturbation section in the demo config")
    folder = ctx.layout.perturbation / "benchmark"
    if not (folder / MANIFEST).is_file():
        llm, info = None, {}
        if section.perturber:
            config_path = ctx.path(section.perturber)
            model = load_yaml_model(PerturberConfig, config_path).backend.model
            # on the demo's own server for that model, when it started one
            llm, info = open_perturber(config_path, folder / "frozen.jsonl", ctx.endpoints.get(model, ()))
        try:
            built = build_benchmark(
                section.benchmark, section.source, data_root=ctx.data_root, n=section.n, seed=0,
                perturbations=list(section.perturbations) or None, aspects=list(section.aspects) or None, llm=llm,
                llm_info=info,
            )  # fmt: skip
        finally:
            if llm is not None:
                llm.close()
        write_benchmark(built, folder)
    benchmark = load_benchmark(folder)
    judge = DistilledJudge(str(ctx.layout.adapter), {k: str(v) for k, v in section.judge_options.items()})
    try:
        evaluate_benchmark(folder, [judge], ctx.layout.perturbation)
    finally:
        judge.close()
    report = ctx.layout.perturbation / judge_slug(judge.name)
    shutil.copyfile(report / "report.md", ctx.layout.perturbation / "report.md")
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    rejected = sum(sum(r.values()) for r in benchmark.info.get("rejected", {}).values())
    unscored = sum(
        j.get("score") is None
        for line in (report.parent / "judgments" / f"{judge_slug(judge.name)}.jsonl").read_text().splitlines()
        if (j := json.loads(line))
    )
    text = f"{benchmark.name}: {len(benchmark.items)} texts ({rejected} perturbations rejected), {unscored} unscored"
    if benchmark.kind == "dhp":
        d_avg = results["metrics"]["summary"]["D_avg"]
        text += f"; D_avg {d_avg:.3f}" if d_avg is not None else "; no D (no scored pair)"
    return text, {"benchmark": benchmark.name, "missing": results["missing"]}


def publish_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.inference.publish import (
        CardOptions,
        card_base_model,
        check_dry_run_target,
        read_eval_results,
        read_run,
        stage,
    )

    section, layout = ctx.config.publish, ctx.layout
    eval_rows = _card_rows(layout.meta_eval / "results.json")
    atomic_write_json(layout.card_rows, eval_rows)
    check_dry_run_target(layout.publish)
    run = read_run(layout.train)
    options = CardOptions(
        repo_id=section.repo_id,
        base_model=card_base_model(run.recorded_base, None),
        license=section.license,
        eval_results=read_eval_results(layout.card_rows) if eval_rows else None,
    )
    names = stage(run, layout.publish, options, say=ctx.console.print)
    return f"{len(names)} files staged for {section.repo_id}; nothing uploaded", {"files": names}


def _card_rows(results_path: Path) -> list[dict[str, Any]]:
    """The distilled judge's measured correlations, as `publish --eval-results` reads them."""
    if not results_path.is_file():
        return []
    results = json.loads(results_path.read_text(encoding="utf-8"))
    return [
        {
            "dataset": c["dataset"],
            "aspect": c["aspect"],
            "level": c["level"],
            "coefficient": c["coefficient"],
            "value": c["value"],
            "ci_low": c["low"],
            "ci_high": c["high"],
            "n": c["scored"] or None,
        }
        for c in results["cells"]
        if c["judge"] == DISTILLED and c["value"] is not None
    ]


STEPS: list[Step] = [
    Step("annotate", "annotate real SummEval outputs with the ensemble, merge, build the dataset", annotate_step, True),
    Step("train", "LoRA-train the judge on the merged data", train_step),
    Step("score", "score held-out outputs with the trained judge", score_step),
    Step("meta_eval", "meta-evaluate against human judgments", meta_eval_step),
    Step("perturbation", "build a perturbation benchmark and score the judge on it", perturbation_step, True),
    Step("publish", "stage a publish dry run (model card + allow-listed files)", publish_step),
]


# ---------------------------------------------------------------------------------------
# Orchestration


def run_steps(ctx: DemoContext, steps: Sequence[Step]) -> list[StepRecord]:
    """Run the steps in order; servers are up from the first step that needs them until the last."""
    records: list[StepRecord] = []
    last_server_step = max((i for i, s in enumerate(steps) if s.needs_servers), default=-1)
    with contextlib.ExitStack() as servers:
        for index, step in enumerate(steps):
            ctx.console.rule(f"[bold][{index + 1}/{len(steps)}] {step.name}[/bold]: {step.title}")
            if step.needs_servers and not ctx.endpoints and ctx.config.annotate.serve:
                ctx.endpoints = servers.enter_context(serving(ctx.config.annotate.serve, ctx.layout.logs, ctx.console))
            started = time.perf_counter()
            try:
                summary, details = step.run(ctx)
                status = "done"
            except NotBuiltYet as exc:
                summary, details, status = str(exc), {}, "not built"
            seconds = time.perf_counter() - started
            if index == last_server_step:
                servers.close()
                ctx.endpoints = {}
            records.append(StepRecord(step.name, step.title, status, round(seconds, 1), summary, details))
            mark = "[green]✓[/green]" if status == "done" else "[yellow]–[/yellow]"
            ctx.console.print(f"{mark} {step.name} ({seconds:.1f} s): {summary}")
    return records


def _machine() -> str:
    import os

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}"


def run_demo(config_path: Path, out: Path, data_dir: Path | None, console: Console) -> Path:
    from spanjudge.inference.paths import data_dir as find_data_dir

    config = load_demo_config(config_path)
    data_root = find_data_dir(data_dir)
    layout = DemoLayout(out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(config, config_path, layout, data_root, console)
    console.print(f"spanjudge demo: config {config_path} ({config.name}); data {data_root}; output {out}")
    started = time.perf_counter()
    records = run_steps(ctx, STEPS)
    run = {
        "config": str(config_path),
        "config_name": config.name,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "seconds": round(time.perf_counter() - started, 1),
        "steps": [asdict(r) for r in records],
    }
    earlier = _earlier_runs(layout.runs_log)
    atomic_write_jsonl(layout.runs_log, [*earlier, {k: v for k, v in run.items() if k != "steps"} | {
        "steps": {r.name: r.seconds for r in records}
    }])  # fmt: skip
    atomic_write_json(layout.run_file, run)
    with console.status("writing the HTML report ..."):
        atomic_write_text(layout.report, render_report(layout, records, run, earlier))
    return layout.report


def _earlier_runs(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------
# The command

demo = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@demo.command()
def demo_command(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Demo YAML (default: configs/demo/tiny.yaml; the real scale: configs/demo/thesis.yaml)."
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Output folder (re-running reuses everything in it).")] = Path(
        "runs/demo"
    ),
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder (default $SPANJUDGE_DATA or ../shared/data).")
    ] = None,
) -> None:
    """Run the whole pipeline end to end and write one HTML report.

    \b
    Steps (each shows its progress):
      1 annotate      serve SmolLM2-135M + Gemma 3 270M with llama.cpp on
                      127.0.0.1, annotate real SummEval outputs, merge,
                      build the dataset
      2 train         LoRA-train SmolLM2-135M on it (CPU, a few steps)
      3 score         score held-out outputs with the trained judge
      4 meta_eval     correlate the judge with human scores (samples of
                      QAGS-XSum and SFRES), beside the thesis's rows
      5 perturbation  perturbation benchmark (issue #7: not built yet)
      6 publish       stage a publish dry run (card + allow-listed files)
    then OUT/report.html: timings, highlighted error spans, tables,
    plots and the training loss; its path is printed at the end.

    \b
    Time: about 15 minutes on a 2-core CPU the first time. A second run
    reuses the annotation cache, the finished training run and the
    score/meta-eval stores, and takes a minute or two.
    Outputs: OUT (default runs/demo): annotate/, train/, score/,
    meta_eval/, publish/, logs/, demo_run.json, report.html.

    \b
    The tiny models are poor judges: the numbers mean nothing, and what
    they fail to produce is counted as unscored with its reason, never
    given an invented score. The real scale (thesis ensemble on
    Ollama/vLLM, Llama 3.1 8B LoRA on a GPU, all eight sets):
      spanjudge demo --config configs/demo/thesis.yaml --out runs/thesis
    """
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notes would drown the steps
    console = Console(stderr=True, soft_wrap=True)
    report = run_demo(config or default_config_path(), out, data_dir, console)
    console.print(f"[bold]report:[/bold] {report.resolve()}")
    typer.echo(str(report.resolve()))
