"""The steps of `spanjudge demo`, one function each: a list of calls to the stages' own APIs.

Each step takes the `DemoContext` and returns a one-line summary with its details (kept in
demo_run.json and shown in the report); `run.py` runs them in order. A step inherits its
stage's resumption (the annotation cache, a finished training run is a no-op, score and
meta-eval stores skip what is done), so a second demo run redoes nothing.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl
from spanjudge.core.jsonl import read_jsonl
from spanjudge.eval.judging.suite import resolve_config_path

from .compare import as_counts, dataset_coverage, meta_eval_rows, metric, number, parse_row
from .config import DemoConfig
from .layout import DemoLayout

DISTILLED = "distilled:adapter"  # the meta-eval name of the judge at OUT/train/adapter
BASE = "base:untrained"  # the meta-eval name of the untrained base model, judged beside it
# the untrained base never writes the contract's format unaided (0/68 in the measured demo):
# held to its grammar, it writes an evaluation that can be compared with the trained judge's
BASE_DECODING: dict[str, Any] = {"constrained": True}


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


def _limited(sources: Any, limit: int | None) -> Any:
    if limit is None:
        return sources
    specs = tuple(spec.model_copy(update={"limit_inputs": limit}) for spec in sources.sources)
    return sources.model_copy(update={"sources": specs})


def annotate_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.config import load_ensemble, load_sources
    from spanjudge.data_gen.decontaminate import prepare
    from spanjudge.data_gen.pipeline import failure_lines, run_pipeline
    from spanjudge.data_gen.source_run import SourceRun
    from spanjudge.data_gen.stage import model_progress

    section = ctx.config.annotate
    ensemble = load_ensemble(ctx.path(section.ensemble), ctx.endpoints)
    sources_path = ctx.path(section.sources)
    sources = _limited(load_sources(sources_path), section.limit_inputs)
    # the inputs of the sets this demo meta-evaluates stay out of its training data
    clean = prepare(ctx.path(ctx.config.meta_eval.suite), False, ctx.data_root, only=ctx.config.meta_eval.datasets)
    with model_progress(ctx.console) as progress:
        run = SourceRun(sources, sources_path, ctx.layout.annotate, load_catalog(), ctx.data_root, progress=progress)
        summary = run_pipeline(ensemble, run, decontamination=clean)
    # one member of the ensemble never stops the demo: items are merged from the annotators that answered
    for line in failure_lines(summary, ctx.layout.annotate):
        ctx.console.print(f"[yellow]annotate:[/yellow] {line}")
    if not summary.train:
        raise SpanjudgeError(
            f"annotate: no training record was built from {summary.requests} requests "
            f"(see {ctx.layout.annotate / 'unscored.jsonl'} and incomplete.jsonl for the reasons)"
        )
    failed = (
        f" ({summary.failed_call_count} failed; {summary.partial} records made from the annotators that answered)"
        if summary.failed_call_count
        else ""
    )
    text = (
        f"{summary.records} records ({summary.train} train / {summary.validation} validation) from "
        f"{summary.requests} requests, {summary.unscored} unscored, {summary.incomplete} without a record; "
        f"model calls {summary.total_model_calls}{failed}, cache hits {sum(summary.cache_hits.values())}"
    )
    return text, summary.as_dict()


def teacher_step(ctx: DemoContext) -> StepOutput:
    """Teacher records from existing annotations (`spanjudge import`: no model call)."""
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.teacher import import_annotations, load_import_config

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


def _as_options(decoding: dict[str, Any]) -> dict[str, str]:
    """Judge keyword arguments as meta-eval's --judge-option strings (read back as YAML)."""
    return {key: str(value).lower() for key, value in decoding.items()}


def training_data(ctx: DemoContext) -> Path:
    """The records the judge trains on: the ensemble's, the teacher's (its first `limit`), or both."""
    from spanjudge.core.jsonl import iter_jsonl

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
    from spanjudge.inference.judge_location import recorded_base

    return local_folder(resolve_model_source(recorded_base(ctx.layout.adapter)), lambda _: None)


def train_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.training.stage import train_judge

    section = ctx.config.train
    overrides = [
        *section.overrides.items(),
        ("data.train", str(training_data(ctx).resolve())),
        ("training.output_dir", str(ctx.layout.train.resolve())),
    ]
    trained = train_judge(ctx.path(section.config), overrides, say=lambda m: ctx.console.print(f"train: {m}"))
    metrics, already = trained.metrics or {}, trained.already_trained
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
    from spanjudge.core.catalog import load_catalog
    from spanjudge.core.jsonl import iter_jsonl
    from spanjudge.data_gen.config import load_sources
    from spanjudge.data_gen.pipeline import RunSummary, build_requests

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


def score_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.inference.score.stage import ScoreSettings, score_file

    section, layout = ctx.config.score, ctx.layout
    rows = held_out_rows(ctx)
    if not rows:
        raise SpanjudgeError("score: no held-out outputs (no validation split, and annotate.limit_inputs is not set)")
    atomic_write_jsonl(layout.held_out, rows)
    # the trained judge also reads its probabilities (expected values, span confidence); the base
    # is held to the contract's grammar, so it too writes an evaluation, not its token limit of text
    judges: list[tuple[str, str, Path, dict[str, Any]]] = [
        ("trained", str(layout.adapter), layout.scores, {"probabilities": True})
    ]
    if ctx.config.compare.base:
        judges.append(("base", base_model(ctx), layout.base_scores, BASE_DECODING))
    counts: dict[str, dict[str, int]] = {}
    for name, model, out, decoding in judges:
        settings = ScoreSettings(
            model=model, out=out, data=str(layout.held_out), max_new_tokens=section.max_new_tokens,
            batch_size=section.batch_size, retries=section.retries, **decoding,
        )  # fmt: skip
        run = score_file(settings, ctx.console)
        if run.failed:
            raise SpanjudgeError("score: some outputs could not reach the model; re-run the demo to finish")
        spans = sum(1 for r in run.rows if r.evaluation.score is not None
                    for e in r.evaluation.errors if e.get("start") is not None)  # fmt: skip
        counts[name] = {"outputs": len(run.rows), "scored": run.scored, "anchored_spans": spans}
    trained = counts["trained"]
    text = (
        f"{trained['outputs']} held-out outputs: trained judge scored {trained['scored']} "
        f"({trained['anchored_spans']} spans)"
        + (f", untrained base scored {counts['base']['scored']}" if "base" in counts else "")
    )
    compare = [parse_row("held-out outputs", counts.get("base"), trained)]
    return text, {**trained, "judges": counts, "compare": compare}


def meta_eval_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.eval.judging.judge_files import DistilledJudge
    from spanjudge.eval.meta_eval import load_suite_config, open_judges, run_suite

    section, layout = ctx.config.meta_eval, ctx.layout
    suite_path = ctx.path(section.suite)
    suite = load_suite_config(suite_path, section.resamples)
    options = {k: str(v) for k, v in section.judge_options.items()}
    with open_judges((f"distilled:{layout.adapter}", *section.baselines), layout.meta_eval, options) as judges:
        if ctx.config.compare.base:
            judges.append(DistilledJudge(base_model(ctx), {**options, **_as_options(BASE_DECODING)}))
            judges[-1].name = BASE
        run = run_suite(
            suite, suite_path, judges, layout.meta_eval, data_root=ctx.data_root, console=ctx.console,
            max_items=section.max_items, datasets=list(section.datasets) or None,
        )  # fmt: skip
    result, written = run.result, run.written
    if result.incomplete:
        raise SpanjudgeError("meta-eval: some judgments are incomplete (a model call failed); re-run the demo")
    coverage = {judge: dataset_coverage(result, judge) for judge in (DISTILLED, BASE) if judge in result.judges}

    def counts(judge: str) -> str:
        return ", ".join(f"{name} {c['scored']}/{c['outputs']}" for name, c in coverage[judge].items())

    text = (
        f"judges {', '.join(result.judges)}; the trained judge scored {counts(DISTILLED)}"
        + (f"; the untrained base {counts(BASE)}" if BASE in coverage else "")
        + f" items; {len(written)} files (report.md, results.json, plots)"
    )
    compare = meta_eval_rows(result, coverage, DISTILLED, BASE)
    return text, {"judges": result.judges, "unscored_reasons": result.unscored_reasons, "compare": compare}


def perturbation_step(ctx: DemoContext) -> StepOutput:
    """Build the configured perturbation benchmark (`spanjudge perturb`; LLM-made sets from the
    demo's own llama.cpp server) and score the trained judge on it (`meta-eval --benchmark`).
    A built benchmark is reused and the judgments resume, like every other step."""
    from spanjudge.core.configio import load_yaml_model
    from spanjudge.eval.judging.judge_files import DistilledJudge
    from spanjudge.eval.judging.store import judge_slug, judgment_path
    from spanjudge.eval.meta_eval import open_judges, run_benchmark
    from spanjudge.eval.perturb.benchmark import MANIFEST, load_benchmark, write_benchmark
    from spanjudge.eval.perturb.cli import PerturberConfig, open_perturber
    from spanjudge.eval.perturb.kind import build_benchmark, get_kind

    section = ctx.config.perturbation
    if section is None:
        raise NotBuiltYet("no perturbation section in the demo config")
    folder = ctx.layout.perturbation / "benchmark"
    if not (folder / MANIFEST).is_file():
        llm, info = None, dict[str, Any]()
        if section.perturber:
            config_path = ctx.path(section.perturber)
            model = load_yaml_model(PerturberConfig, config_path).backend.model
            # on the demo's own server for that model, when it started one
            served = [f"{model}={url}" for url in ctx.endpoints.get(model, ())]  # as `--endpoint NAME=URL`
            llm, info = open_perturber(config_path, folder / "frozen.jsonl", served)
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
    kind = get_kind(benchmark.kind)
    options = {k: str(v) for k, v in section.judge_options.items()}
    with open_judges([f"distilled:{ctx.layout.adapter}"], ctx.layout.perturbation, options) as judges:
        if ctx.config.compare.base:
            judges.append(DistilledJudge(base_model(ctx), {**options, **_as_options(BASE_DECODING)}))
            judges[-1].name = BASE
        run_benchmark(folder, judges, ctx.layout.perturbation)
    summaries = {}
    for judge in judges:
        report = ctx.layout.perturbation / judge_slug(judge.name)
        results = json.loads((report / "results.json").read_text(encoding="utf-8"))
        judgments = read_jsonl(judgment_path(ctx.layout.perturbation, judge))
        summaries[judge.name] = {
            "outputs": len(judgments),
            "scored": sum(j.get("score") is not None for j in judgments),
            "headline": None if kind.headline is None else kind.headline(results["metrics"])[1],
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
    measure = None if kind.headline is None else kind.headline(results["metrics"])[0]
    if measure is not None:
        value = trained["headline"]
        text += f"; {measure} {value:.3f}" if value is not None else f"; no {measure} (nothing scored to compute it)"
    base = summaries.get(BASE)
    compare = [parse_row(f"{benchmark.name} judgments", base, trained)]
    if measure is not None:
        compare.append(
            {
                "what": f"{benchmark.name}",
                "measure": measure,
                "base": None if base is None else number(base["headline"]),
                "trained": number(trained["headline"]),
            }
        )
    return text, {"benchmark": benchmark.name, "missing": trained["missing"], "judges": summaries, "compare": compare}


def spans_step(ctx: DemoContext) -> StepOutput:
    """Both judges mark errors in held-out quintd-1 outputs; agreement with the human spans."""
    from spanjudge.eval.spans.agreement import span_agreement
    from spanjudge.eval.spans.judging import judge_span_documents, predictions
    from spanjudge.eval.spans.quintd import quintd_tables
    from spanjudge.inference.judge import Judge

    section, layout = ctx.config.compare, ctx.layout
    if section.span_tables is None:
        raise NotBuiltYet("no compare.span_tables in the demo config")
    docs = quintd_tables("human", section.span_tables, section.span_domains, ctx.data_root)
    options = ctx.config.score
    judges = [("trained", str(layout.adapter))] + ([("base", base_model(ctx))] if section.base else [])
    rows: dict[str, dict[str, Any]] = {}
    for name, model in judges:
        decoding: dict[str, Any] = BASE_DECODING if name == "base" else {}
        # the decoding is in the name: judgments made another way (an earlier demo's) are not reused
        path = layout.spans / f"{name}{'+grammar' if decoding else ''}.json"
        judge = None if path.is_file() else Judge.from_pretrained(
            model, batch_size=options.batch_size, max_new_tokens=options.max_new_tokens, retries=options.retries,
            **decoding,
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
    compare = [parse_row("quintd-1 held-out outputs", as_counts(base), as_counts(trained) or {})]
    for key, measure in (("token_f1", "token F1 vs human spans"), ("count_pearson", "error-count Pearson r")):
        compare.append(
            {
                "what": "quintd-1 held-out outputs",
                "measure": measure,
                "base": None if base is None else metric(base, key),
                "trained": metric(trained, key),
                "teacher": metric(rows["teacher (GPT-4)"], key),
            }
        )
    text = (
        f"{len(docs)} held-out quintd-1 outputs: trained judge scored {trained['scored']}, token F1 "
        f"{metric(trained, 'token_f1')}" + (f"; untrained base scored {base['scored']}" if base is not None else "")
    )
    return text, {"rows": rows, "compare": compare}


def publish_step(ctx: DemoContext) -> StepOutput:
    from spanjudge.publish.card import CardOptions
    from spanjudge.publish.model_staging import stage
    from spanjudge.publish.results import read_eval_results
    from spanjudge.publish.run_folder import card_base_model, read_run
    from spanjudge.publish.staging import check_dry_run_target

    section, layout = ctx.config.publish, ctx.layout
    results = layout.meta_eval / "results.json"  # the distilled judge's measured correlations
    eval_results = read_eval_results(results, judge_name=DISTILLED) if results.is_file() else None
    rows = eval_results.rows if eval_results else []
    atomic_write_json(layout.card_rows, [row.model_dump(exclude_none=True) for row in rows])
    run = read_run(layout.train)
    check_dry_run_target(layout.publish, [run.root])
    options = CardOptions(
        repo_id=section.repo_id,
        base_model=card_base_model(run.recorded_base, None),
        license=section.license,
        eval_results=eval_results if rows else None,
    )
    names = stage(run, layout.publish, options, say=ctx.console.print)
    return f"{len(names)} files staged for {section.repo_id}; nothing uploaded", {"files": names}
