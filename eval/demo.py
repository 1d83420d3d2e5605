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
BASE = "base:untrained"  # the meta-eval name of the untrained base model, judged beside it


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
    from spanjudge.data_gen.decontaminate import prepare
    from spanjudge.data_gen.pipeline import run_pipeline
    from spanjudge.inference.catalog import load_catalog

    section = ctx.config.annotate
    ensemble = load_ensemble(ctx.path(section.ensemble), ctx.endpoints)
    sources_path = ctx.path(section.sources)
    sources = _limited(load_sources(sources_path), section.limit_inputs)
    # the inputs of the sets this demo meta-evaluates stay out of its training data
    clean = prepare(ctx.path(ctx.config.meta_eval.suite), False, ctx.data_root, only=ctx.config.meta_eval.datasets)
    with model_progress(ctx.console) as progress:
        summary = run_pipeline(
            ensemble, sources, sources_path, ctx.layout.annotate, load_catalog(), data_root=ctx.data_root,
            progress=progress, decontamination=clean,
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


def teacher_step(ctx: DemoContext) -> StepOutput:
    """Teacher records from existing annotations (`spanjudge import`: no model call)."""
    from spanjudge.data_gen.teacher import import_annotations, load_import_config
    from spanjudge.inference.catalog import load_catalog

    section, layout = ctx.config.teacher, ctx.layout
    if section is None:
        raise NotBuiltYet("no teacher section in the demo config: the judge trains on the ensemble's records alone")
    if (layout.teacher / "run.json").is_file():
        summary = json.loads((layout.teacher / "run.json").read_text(encoding="utf-8"))
    else:
        path = ctx.path(section.config)
        summary = import_annotations(load_import_config(path), path.parent, layout.teacher, load_catalog()).as_dict()
    used = min(summary["train"], section.limit or summary["train"])
    text = (
        f"{summary['records']} records imported from {summary['name']} ({summary['train']} train, "
        f"{used} used), {summary['spans']} teacher spans; rule: {summary['rule']}"
    )
    return text, {"summary": summary, "used": used}


def training_data(ctx: DemoContext) -> Path:
    """The records the judge trains on: the ensemble's, the teacher's (its first `limit`), or both."""
    from spanjudge.inference.tabular import iter_jsonl

    layout, choice = ctx.layout, ctx.config.train.data
    if choice == "ensemble":
        return layout.annotate
    limit = ctx.config.teacher.limit if ctx.config.teacher else None

    def rows(folder: Path, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        path = folder / f"{name}.jsonl"
        found = [row for _, row in iter_jsonl(path)] if path.is_file() else []
        return found[:limit]

    for name in ("train", "validation"):
        combined = rows(layout.annotate, name) if choice == "both" else []
        combined += rows(layout.teacher, name, limit if name == "train" else None)
        atomic_write_jsonl(layout.train_data / f"{name}.jsonl", combined)
    return layout.train_data


def base_model(ctx: DemoContext) -> str:
    """The trained judge's base model as a local transformers folder (the untrained comparison)."""
    from spanjudge.inference.hf_models import local_folder, resolve_model_source
    from spanjudge.inference.judge import recorded_base

    return local_folder(resolve_model_source(recorded_base(ctx.layout.adapter)), lambda _: None)


def train_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.training.config import load_train_config
    from spanjudge.training.run import TrainingRun

    section = ctx.config.train
    overrides = [
        *section.overrides.items(),
        ("data.train", str(training_data(ctx).resolve())),
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
    judges = [("trained", str(layout.adapter), layout.scores)]
    if ctx.config.compare.base:
        judges.append(("base", base_model(ctx), layout.base_scores))
    counts: dict[str, dict[str, int]] = {}
    for name, model, out in judges:
        try:
            score_command(
                model=model, data=str(layout.held_out), out=out, max_new_tokens=section.max_new_tokens,
                batch_size=section.batch_size, retries=section.retries, output_format="jsonl",
            )  # fmt: skip
        except typer.Exit as exc:
            if _exit_code(exc):
                raise SpanjudgeError(
                    "score: some outputs could not reach the model; re-run the demo to finish"
                ) from None
        results = read_results(out)
        scored = [r for r in results if r["evaluation"]["score"] is not None]
        spans = sum(1 for r in scored for e in r["evaluation"]["errors"] if e.get("start") is not None)
        counts[name] = {"outputs": len(results), "scored": len(scored), "anchored_spans": spans}
    trained = counts["trained"]
    text = (
        f"{trained['outputs']} held-out outputs: trained judge scored {trained['scored']} "
        f"({trained['anchored_spans']} spans)"
        + (f", untrained base scored {counts['base']['scored']}" if "base" in counts else "")
    )
    compare = [_parse_row("held-out outputs", counts.get("base"), trained)]
    return text, {**trained, "judges": counts, "compare": compare}


def _parse_row(what: str, base: dict[str, Any] | None, trained: dict[str, Any]) -> dict[str, Any]:
    def rate(counts: dict[str, Any] | None) -> str | None:
        return None if counts is None else f"{counts['scored']}/{counts['outputs']}"

    return {"what": what, "measure": "parsed (scored / asked)", "base": rate(base), "trained": rate(trained)}


def meta_eval_step(ctx: DemoContext) -> StepOutput:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .judge_files import DistilledJudge
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
        if ctx.config.compare.base:
            base = DistilledJudge(base_model(ctx), options)
            base.name = BASE
            judges.append(base)
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
    coverage = {judge: _coverage(result, judge) for judge in (DISTILLED, BASE) if judge in result.judges}

    def counts(judge: str) -> str:
        return ", ".join(f"{name} {c['scored']}/{c['outputs']}" for name, c in coverage[judge].items())

    text = (
        f"judges {', '.join(result.judges)}; the trained judge scored {counts(DISTILLED)}"
        + (f"; the untrained base {counts(BASE)}" if BASE in coverage else "")
        + f" items; {len(written)} files (report.md, results.json, plots)"
    )
    compare = [
        _parse_row(f"{name} (meta-eval items)", coverage.get(BASE, {}).get(name), coverage[DISTILLED][name])
        for name in result.datasets
    ]
    cells = {(c.judge, c.dataset, c.aspect, c.level, c.coefficient): c for c in result.cells}
    for (judge, dataset, aspect, level, coefficient), cell in cells.items():
        if judge != DISTILLED or not cell.items:
            continue
        base_cell = cells.get((BASE, dataset, aspect, level, coefficient))
        compare.append(
            {
                "what": f"{dataset} {aspect}",
                "measure": f"{coefficient} ({level}) with human scores",
                "base": _value(base_cell),
                "trained": _value(cell),
            }
        )
    return text, {"judges": result.judges, "unscored_reasons": result.unscored_reasons, "compare": compare}


def _coverage(result: Any, judge: str) -> dict[str, dict[str, int]]:
    """Scored and asked items per dataset for one judge (one cell per aspect, so items count once)."""
    cells = {(c.dataset, c.aspect): c for c in result.cells if c.judge == judge}
    return {
        name: {
            "scored": sum(c.scored for (dataset, _), c in cells.items() if dataset == name),
            "outputs": sum(c.items for (dataset, _), c in cells.items() if dataset == name),
        }
        for name in result.datasets
    }


def _value(cell: Any) -> str | None:
    if cell is None:
        return None
    if cell.value is None:
        why = "nothing scored" if not cell.scored else "undefined: too few scored items or constant scores"
        return f"– ({cell.scored}/{cell.items} scored; {why})"
    return f"{cell.value:+.3f} [{cell.low:+.2f}, {cell.high:+.2f}]" if cell.low is not None else f"{cell.value:+.3f}"


def perturbation_step(ctx: DemoContext) -> StepOutput:
    """Build the configured perturbation benchmark (`spanjudge perturb`; LLM-made sets from the
    demo's own llama.cpp server) and score the trained judge on it (`meta-eval --benchmark`).
    A built benchmark is reused and the judgments resume, like every other step."""
    from spanjudge.inference.configio import load_yaml_model

    from .judge_files import DistilledJudge
    from .perturb.benchmark import MANIFEST, load_benchmark, write_benchmark
    from .perturb.build import build_benchmark
    from .perturb.cli import PerturberConfig, evaluate_benchmark, open_perturber
    from .store import judge_slug, judgment_path

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
    options = {k: str(v) for k, v in section.judge_options.items()}
    judges = [DistilledJudge(str(ctx.layout.adapter), options)]
    if ctx.config.compare.base:
        judges.append(DistilledJudge(base_model(ctx), options))
        judges[-1].name = BASE
    try:
        evaluate_benchmark(folder, judges, ctx.layout.perturbation)
    finally:
        for judge in judges:
            judge.close()
    summaries = {}
    for judge in judges:
        report = ctx.layout.perturbation / judge_slug(judge.name)
        results = json.loads((report / "results.json").read_text(encoding="utf-8"))
        lines = judgment_path(ctx.layout.perturbation, judge).read_text().splitlines()
        judgments = [json.loads(line) for line in lines if line.strip()]
        d_avg = results["metrics"]["summary"]["D_avg"] if benchmark.kind == "dhp" else None
        summaries[judge.name] = {
            "outputs": len(judgments),
            "scored": sum(j.get("score") is not None for j in judgments),
            "d_avg": d_avg,
            "missing": results["missing"],
        }
    trained = summaries[judges[0].name]
    shutil.copyfile(
        ctx.layout.perturbation / judge_slug(judges[0].name) / "report.md", ctx.layout.perturbation / "report.md"
    )
    rejected = sum(sum(r.values()) for r in benchmark.info.get("rejected", {}).values())
    text = (
        f"{benchmark.name}: {len(benchmark.items)} texts ({rejected} perturbations rejected); trained judge "
        f"{trained['outputs'] - trained['scored']} unscored"
        + (
            f", untrained base {summaries[BASE]['outputs'] - summaries[BASE]['scored']} unscored"
            if BASE in summaries
            else ""
        )
    )
    if benchmark.kind == "dhp":
        text += f"; D_avg {trained['d_avg']:.3f}" if trained["d_avg"] is not None else "; no D (no scored pair)"
    base = summaries.get(BASE)
    compare = [_parse_row(f"{benchmark.name} judgments", base, trained)]
    if benchmark.kind == "dhp":
        compare.append(
            {
                "what": f"{benchmark.name}",
                "measure": "discernment D_avg",
                "base": None if base is None else _number(base["d_avg"]),
                "trained": _number(trained["d_avg"]),
            }
        )
    return text, {"benchmark": benchmark.name, "missing": trained["missing"], "judges": summaries, "compare": compare}


def _number(value: float | None) -> str:
    return "– (no scored pair)" if value is None else f"{value:.3f}"


def spans_step(ctx: DemoContext) -> StepOutput:
    """Both judges mark errors in held-out quintd-1 outputs; agreement with the human spans."""
    from spanjudge.inference.judge import Judge

    from .perturb.span_agreement import span_agreement
    from .perturb.span_judging import judge_span_documents, predictions, quintd_tables

    section, layout = ctx.config.compare, ctx.layout
    if section.span_tables is None:
        raise NotBuiltYet("no compare.span_tables in the demo config")
    docs = quintd_tables("human", section.span_tables, section.span_domains, ctx.data_root)
    options = ctx.config.score
    judges = [("trained", str(layout.adapter))] + ([("base", base_model(ctx))] if section.base else [])
    rows: dict[str, dict[str, Any]] = {}
    for name, model in judges:
        path = layout.spans / f"{name}.json"
        judge = None if path.is_file() else Judge.from_pretrained(
            model, batch_size=options.batch_size, max_new_tokens=options.max_new_tokens, retries=options.retries
        )  # fmt: skip
        try:
            judged = judge_span_documents(judge, docs, path)
        finally:
            if judge is not None:
                judge.close()
        rows[name] = span_agreement(docs, predictions(judged), n_resamples=200)
    teacher = {
        d.id: d.gold_spans for d in quintd_tables("gpt-4", section.span_tables, section.span_domains, ctx.data_root)
    }
    rows["teacher (GPT-4)"] = span_agreement(docs, teacher, n_resamples=200)
    atomic_write_json(layout.spans / "agreement.json", rows)
    trained, base = rows["trained"], rows.get("base")
    compare = [_parse_row("quintd-1 held-out outputs", _as_counts(base), _as_counts(trained))]
    for key, measure in (("token_f1", "token F1 vs human spans"), ("count_pearson", "error-count Pearson r")):
        compare.append(
            {
                "what": "quintd-1 held-out outputs",
                "measure": measure,
                "base": None if base is None else _metric(base, key),
                "trained": _metric(trained, key),
                "teacher": _metric(rows["teacher (GPT-4)"], key),
            }
        )
    text = (
        f"{len(docs)} held-out quintd-1 outputs: trained judge scored {trained['scored']}, token F1 "
        f"{_metric(trained, 'token_f1')}" + (f"; untrained base scored {base['scored']}" if base is not None else "")
    )
    return text, {"rows": rows, "compare": compare}


def _as_counts(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {"scored": row["scored"], "outputs": row["n_outputs"]}


def _metric(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return f"– ({row.get(f'{key}_reason') or 'nothing scored'})"
    return f"{value:.3f}"


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
    Step("teacher", "import a strong teacher's error spans from files (GPT-4 on quintd-1)", teacher_step),
    Step("train", "LoRA-train the judge (on the records `train.data` names)", train_step),
    Step("score", "score held-out outputs with the trained judge and the untrained base", score_step),
    Step("spans", "both judges mark errors in held-out quintd-1 outputs, against human spans", spans_step),
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
      2 teacher       import GPT-4's quintd-1 error spans (no model call)
      3 train         LoRA-train SmolLM2-135M on the teacher's records (CPU)
      4 score         score held-out outputs: trained judge and untrained base
      5 spans         both mark errors in held-out quintd-1 outputs, compared
                      with the human spans (quintd-1's agreement measure)
      6 meta_eval     correlate both with human scores (samples of SFRES
                      and SFHOT), beside the thesis's rows
      7 perturbation  a small DHP benchmark, rated by both
      8 publish       stage a publish dry run (card + allow-listed files)
    then OUT/report.html: timings, base vs trained side by side,
    highlighted error spans, tables, plots and the training loss; its
    path is printed at the end.

    \b
    Time: about 20 minutes on a 2-core CPU the first time. A second run
    reuses the annotation cache, the imported records, the finished
    training run and every judgment store, and takes under a minute.
    Outputs: OUT (default runs/demo): annotate/, teacher/, train_data/,
    train/, score/, spans/, meta_eval/, perturbation/, publish/, logs/,
    demo_run.json, report.html.

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
