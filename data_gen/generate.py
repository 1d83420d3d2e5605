"""New system outputs made by LLMs (thesis §3.3, Appendix A.1-A.2): every input of every
source, answered by every configured system with its task's prompt template.

sources -> distinct inputs -> (input x system x template) jobs -> prompts -> backends
(through the SQLite cache) -> post-processing -> OUT/outputs/<source>.jsonl, plus
OUT/sources.yaml that points `spanjudge annotate` at them.

Every model call is committed to the cache as it arrives and every file is written
atomically from the cache's answers at the end, so a killed run loses no finished call,
and the same command finishes it: no call is repeated and no output is written twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spanjudge.core.catalog import Catalog, Task
from spanjudge.core.configio import configs_dir
from spanjudge.core.errors import ConfigError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl, atomic_write_text
from spanjudge.core.progress import Tracker
from spanjudge.core.sharding import input_key
from spanjudge.inference.backends import (
    CachedBackend,
    CallFailure,
    CallResult,
    ChatRequest,
    Completion,
    LLMCache,
    make_backend,
)

from .annotate import prompt_hash
from .config import SourcesConfig, SourceSpec, resolve_source_path
from .generate_config import GenerateConfig, SystemSpec
from .generate_post import postprocess
from .generate_prompts import Template, Templates, build_request, load_templates, render_prompt, templates_for
from .pipeline import StageSummary
from .shards import finish_shard, settings_hash, start_shard
from .source_run import SourceRun
from .sources import TaskInput, read_inputs

OUTPUT_FIELDS = {"input_id": "input_id", "system": "system", "output": "output", "inputs_from": "inputs"}
"""How a sources YAML reads the files written here (`format: jsonl`)."""


@dataclass(frozen=True)
class GenJob:
    id: str
    item: TaskInput
    task: Task
    system_index: int
    system_name: str  # the system as written with the output (a variant suffix when a task has several prompts)
    template: Template
    style: str
    request: ChatRequest


@dataclass
class GenerateSummary(StageSummary):
    jobs: int = 0
    outputs: int = 0
    rejected: int = 0
    incomplete: int = 0
    truncated: int = 0
    per_source: dict[str, int] = field(default_factory=dict)
    rejected_reasons: dict[str, int] = field(default_factory=dict)


def job_id(dataset: str, input_id: str, system: str) -> str:
    return hashlib.sha256("\x1f".join((dataset, input_id, system)).encode("utf-8")).hexdigest()[:20]


def _system_templates(
    config: GenerateConfig, config_path: Path, task: Task, templates: Templates
) -> list[tuple[int, str, Template]]:
    """(system index, output system name, template) for every system that answers `task`."""
    chosen: list[tuple[int, str, Template]] = []
    owners: dict[str, str] = {}
    for index, system in enumerate(config.systems):
        own = templates_for(system, task, templates, config_path, index)
        for template in own:
            name = system.name if len(own) == 1 else f"{system.name}-{template.variant}"
            if name in owners:
                raise ConfigError(
                    config_path, f"systems[{index}]", f"output system name '{name}' for task '{task.id}' is also "
                    f"used by {owners[name]}; rename a system or a template variant"
                )  # fmt: skip
            owners[name] = f"system '{system.name}' (template '{template.name}')"
            chosen.append((index, name, template))
    return chosen


def plan_jobs(
    config: GenerateConfig,
    config_path: Path,
    sources: SourcesConfig,
    sources_path: Path,
    catalog: Catalog,
    data_root: Path | None,
    summary: GenerateSummary,
) -> list[GenJob]:
    """Every (input, system, template) with its rendered request, in a stable order.

    All templates are resolved and checked for every source's task before any input is
    read, so a config mistake stops the run before it starts."""
    templates = load_templates(config, config_path)
    tasks = {spec.name: catalog.task(spec.task) for spec in sources.sources}
    plans = {spec.name: _system_templates(config, config_path, tasks[spec.name], templates) for spec in sources.sources}
    jobs: list[GenJob] = []
    for spec in sources.sources:
        task, plan = tasks[spec.name], plans[spec.name]
        if not plan:
            summary.skipped.append(f"source '{spec.name}': no system generates for task '{task.id}'")
            continue
        report = read_inputs(spec, resolve_source_path(spec, sources_path, data_root), task)
        summary.skipped += [f"oversized: {w}" for w in report.oversized]
        for item in report.inputs:
            for index, name, template in plan:
                system = config.systems[index]
                prompt = render_prompt(template, task, item.inputs, system.style)
                request = build_request(prompt, system.style, system, config.sampling_for(system))
                key = job_id(spec.name, item.input_id, name)
                jobs.append(GenJob(key, item, task, index, name, template, system.style, request))
    return jobs


def _run_system(
    system: SystemSpec, jobs: Sequence[GenJob], cache_path: Path, progress: Tracker | None
) -> tuple[list[CallResult], int, int]:
    """One system's jobs through its backend behind the cache: (results, model calls, cache hits)."""
    cache = LLMCache(cache_path)  # one connection per system: systems run in threads
    backend = CachedBackend(make_backend(system.backend), cache)
    advance = progress(system.name, len(jobs), cached=0, failed=0) if progress is not None else None

    def on_result(_: int, result: CallResult) -> None:
        if advance is not None:
            failed = isinstance(result, CallFailure)
            advance(1, cached=int(isinstance(result, Completion) and result.cached), failed=int(failed))

    try:
        results = backend.generate([job.request for job in jobs], on_result)
    finally:
        backend.close()
        cache.close()
    return results, backend.model_calls, backend.cache_hits


def _template_file(template: Template) -> str:
    try:
        return str(template.path.resolve().relative_to(configs_dir().resolve().parent))
    except ValueError:
        return str(template.path)


def _provenance(config: GenerateConfig, job: GenJob, result: Completion, steps: Sequence[str]) -> dict[str, Any]:
    system = config.systems[job.system_index]
    return {
        "generator": "spanjudge generate",
        "systems_config": config.name,
        "system": system.name,
        "model": system.backend.model,
        "model_id": system.backend.model_id,
        "backend": system.backend.kind,
        "prompt_style": job.style,
        "template": job.template.name,
        "template_file": _template_file(job.template),
        "figure": job.template.spec.figure,
        "template_hash": job.template.source_hash(job.style, job.task.output),
        "prompt_hash": prompt_hash("\x1f".join(m.content for m in job.request.messages)),
        "params": job.request.params.model_dump(mode="json"),
        "finish_reason": result.finish_reason,
        "completion_tokens": result.completion_tokens,
        "postprocess": list(steps),
        "source": job.item.where,
    }


def _base(job: GenJob) -> dict[str, Any]:
    item = job.item
    return {
        "id": job.id,
        "dataset": item.dataset,
        "input_id": item.input_id,
        "system": job.system_name,
        "task": job.task.id,
    }


def run_generate(config: GenerateConfig, config_path: Path, run: SourceRun) -> GenerateSummary:
    """Every system's outputs for the sources' inputs (only the shard's, given one)."""
    sources, out_dir, shard = run.sources, run.out_dir, run.shard
    start_shard(out_dir, shard, "generate")
    summary = GenerateSummary(out_dir=out_dir)
    jobs = plan_jobs(config, config_path, sources, run.sources_path, run.catalog, run.data_root, summary)
    order = {job.id: index for index, job in enumerate(jobs)}  # the single run's order, for merge
    plan = settings_hash((job.id, job.system_name, _job_settings(config, job)) for job in jobs)
    if shard is not None:
        jobs = [job for job in jobs if shard.holds(input_key(job.item.dataset, job.item.input_id))]
    summary.jobs = len(jobs)
    cache_path = run.make_cache_folder()
    by_system: dict[int, list[int]] = {}
    for position, job in enumerate(jobs):
        by_system.setdefault(job.system_index, []).append(position)
    results: list[CallResult | None] = [None] * len(jobs)

    def one(index: int) -> None:
        system = config.systems[index]
        positions = by_system[index]
        answers, calls, hits = _run_system(system, [jobs[p] for p in positions], cache_path, run.progress)
        summary.model_calls[system.name], summary.cache_hits[system.name] = calls, hits
        for position, answer in zip(positions, answers, strict=True):
            results[position] = answer

    if by_system:  # systems side by side: they usually sit on different servers
        with ThreadPoolExecutor(max_workers=len(by_system)) as pool:
            list(pool.map(one, sorted(by_system)))
    names = [s.name for s in config.systems]  # in config order, whatever thread finished first
    summary.model_calls = {n: summary.model_calls.get(n, 0) for n in names}
    summary.cache_hits = {n: summary.cache_hits.get(n, 0) for n in names}
    _write(config, sources, jobs, results, out_dir, summary)
    if shard is not None:
        inputs = [(job.item.dataset, job.item.input_id) for job in jobs]
        finish_shard(out_dir, shard, "generate", plan, inputs, {job.id: order[job.id] for job in jobs})
    return summary


def _job_settings(config: GenerateConfig, job: GenJob) -> list[Any]:
    """What decides a job's output: the model, the exact request, the post-processing; not the
    server (shards of one run may use other hosts)."""
    system = config.systems[job.system_index]
    return [
        system.backend.model_id,
        job.request.model_dump(mode="json"),
        config.postprocess_for(system).model_dump(mode="json"),
        list(job.template.stops(job.style)),
        list(job.template.spec.strip),
    ]


def _write(
    config: GenerateConfig,
    sources: SourcesConfig,
    jobs: Sequence[GenJob],
    results: Sequence[CallResult | None],
    out_dir: Path,
    summary: GenerateSummary,
) -> None:
    outputs: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in sources.sources}
    rejected, incomplete = [], []
    for job, result in zip(jobs, results, strict=True):
        if result is None or isinstance(result, CallFailure):
            reason = f"{result.kind}: {result.reason}" if result is not None else "not run"
            incomplete.append({**_base(job), "reason": f"model call failed ({reason})"})
            continue
        system = config.systems[job.system_index]
        processed = postprocess(
            result.text,
            config.postprocess_for(system),
            output_header=job.task.output,
            stops=job.template.stops(job.style),
            strip=job.template.spec.strip,
        )
        record = {**_base(job), "inputs": job.item.inputs}
        provenance = _provenance(config, job, result, processed.steps)
        summary.truncated += int(result.finish_reason == "length")
        if processed.rejected:
            summary.rejected_reasons[processed.rejected] = summary.rejected_reasons.get(processed.rejected, 0) + 1
            why = {"reject_reason": processed.rejected, "raw_output": result.text}
            rejected.append({**record, **why, "provenance": provenance})
            continue
        outputs[job.item.dataset].append(
            {**record, "output": processed.text, "raw_output": result.text, "provenance": provenance}
        )
    (out_dir / "outputs").mkdir(parents=True, exist_ok=True)
    for name, rows in outputs.items():
        atomic_write_jsonl(out_dir / "outputs" / f"{name}.jsonl", rows)
        summary.per_source[name] = len(rows)
    atomic_write_text(out_dir / "sources.yaml", generated_sources_yaml(sources, config))
    atomic_write_jsonl(out_dir / "rejected.jsonl", rejected)
    atomic_write_jsonl(out_dir / "incomplete.jsonl", incomplete)
    summary.outputs = sum(summary.per_source.values())
    summary.rejected, summary.incomplete = len(rejected), len(incomplete)
    atomic_write_json(out_dir / "run.json", summary.as_dict())


def _generated_source(spec: SourceSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": spec.name,
        "format": "jsonl",
        "path": f"outputs/{spec.name}.jsonl",
        "task": spec.task,
        "fields": dict(OUTPUT_FIELDS),
    }
    if spec.aspects:
        entry["aspects"] = list(spec.aspects)
    for key in ("n_systems", "n_aspects"):
        if getattr(spec, key) is not None:
            entry[key] = getattr(spec, key)
    if spec.max_chars != SourceSpec.model_fields["max_chars"].default:
        entry["max_chars"] = spec.max_chars
    return entry


def generated_sources_yaml(sources: SourcesConfig, config: GenerateConfig) -> str:
    """A sources YAML over the generated files: `spanjudge annotate --sources OUT/sources.yaml`."""
    data = {
        "seed": sources.seed,
        "n_systems": sources.n_systems,
        "n_aspects": sources.n_aspects,
        "validation_fraction": sources.validation_fraction,
        "sources": [_generated_source(spec) for spec in sources.sources],
    }
    header = (
        f"# Outputs generated by `spanjudge generate` (systems config '{config.name}').\n"
        "# Annotate them with: spanjudge annotate --ensemble <ensemble.yaml> --sources <this file> --out <dir>\n"
    )
    return header + str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
