"""`spanjudge perturb` builds a perturbation benchmark; `spanjudge meta-eval --benchmark DIR`
(or `--spans rotowire|quintd1`) scores a judge on it (see `evaluate_benchmark`, `evaluate_span_set`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict

from spanjudge.inference.backends import BackendSpec, SamplingParams
from spanjudge.inference.progress import Tracker

from .kinds import KINDS

if TYPE_CHECKING:
    from .benchmark import Benchmark
    from .build import BuildRequest

perturb = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


class PerturberConfig(BaseModel):
    """configs/perturb/<name>.yaml: the model that makes the LLM perturbations."""

    model_config = ConfigDict(extra="forbid")
    description: str = ""
    backend: BackendSpec
    sampling: SamplingParams = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=1024)


def open_perturber(config_path: Path, store: Path, endpoints: Sequence[str] = ()) -> tuple[Any, dict[str, Any]]:
    """The LLMPerturber a perturber YAML names (optionally on other servers: `--endpoint`
    items, NAME=URL[,URL...] with NAME its backend's model) and its description for the
    benchmark manifest."""
    from spanjudge.inference.configio import load_yaml_model
    from spanjudge.inference.keyvalue import endpoint_urls

    from .llm_perturb import LLMPerturber

    config = load_yaml_model(PerturberConfig, config_path)
    spec = config.backend
    if endpoints:
        spec = spec.model_copy(update={"endpoints": endpoint_urls(endpoints, spec.model)})
    info = {"model": spec.model, "kind": spec.kind, "config": config_path.name, **config.sampling.model_dump()}
    return LLMPerturber(spec, store, sampling=config.sampling), info


@contextmanager
def _bars() -> Iterator[Tracker]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from spanjudge.inference.progress import tracker_bars

    with tracker_bars(  # rich bars on a terminal, log lines in a log file
        TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    ) as tracker:  # fmt: skip
        yield tracker


def _command_help() -> str:
    """The command's help: what it does, then each registered kind's one-line summary."""
    from .kinds import all_kinds

    kinds = "\n\n".join(f"{kind.name} ({', '.join(kind.sources)}): {kind.summary}." for kind in all_kinds())
    return (
        "Build a perturbation benchmark from our source data (BENCHMARKS.md; seeds 000-003).\n\n"
        f"{kinds}\n\n"
        "Rule-based perturbations run here; LLM-made ones need --perturber and are frozen in OUT/frozen.jsonl "
        "with provenance, so a rebuild makes no model call. Rejected perturbations are counted by reason and "
        "printed. Score a judge on the result with `spanjudge meta-eval --benchmark OUT --judge ... --out REPORT`."
    )


@perturb.command(help=_command_help())
def perturb_command(
    benchmark: Annotated[str, typer.Option("--benchmark", help=" | ".join(KINDS))],
    source: Annotated[str, typer.Option("--source", help="The dataset to build from (each kind lists its own).")],
    out: Annotated[Path, typer.Option("--out", help="Benchmark folder (created; re-running reuses frozen LLM texts).")],
    n: Annotated[
        int | None, typer.Option("--n", min=1, help="Sample this many source texts (seeded; default: all).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample and of every perturbation.")] = 0,
    perturbation: Annotated[
        list[str] | None,
        typer.Option("--perturbation", help="Only these perturbation keys (repeatable; default: the benchmark's all)."),
    ] = None,
    perturber: Annotated[
        Path | None,
        typer.Option(
            "--perturber",
            help="YAML naming the model for LLM-made perturbations (configs/perturb/tiny_local.yaml, thesis.yaml).",
        ),
    ] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            help="Point the perturber at other servers: NAME=URL[,URL...] with NAME the model its YAML names "
            "(repeatable; a bare URL still works but is deprecated).",
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option("--steps", min=1, help="dual: errors injected per chain (default: scale size - 1).")
    ] = None,
    aspect: Annotated[
        list[str] | None,
        typer.Option("--aspect", help="dhp, attacks: rate only these aspects (repeatable; default: all of them)."),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder (default ../shared/data or $SPANJUDGE_DATA).")
    ] = None,
) -> None:
    from .build import BuildRequest

    request = BuildRequest(source, data_dir, n, seed, perturbation, None, steps, aspect)
    built, summary = build_folder(benchmark, request, out, perturber, endpoint or ())
    _print_built(built, out, summary)


def build_folder(
    kind: str, request: BuildRequest, out: Path, perturber: Path | None = None, endpoints: Sequence[str] = ()
) -> tuple[Benchmark, str | None]:
    """Build the benchmark `kind` (a `build.BuildRequest` without llm and progress) into `out`;
    LLM-made texts come from the model `perturber` names, frozen in out/frozen.jsonl. Returns
    the benchmark and the perturber's summary (None without one)."""
    from dataclasses import replace

    from spanjudge.inference.errors import InputError

    from .benchmark import write_benchmark
    from .build import build_request

    if kind not in KINDS:
        raise InputError(f"--benchmark must be one of {', '.join(KINDS)}, got {kind!r}")
    llm, info = open_perturber(perturber, out / "frozen.jsonl", endpoints) if perturber else (None, {})
    try:
        with _bars() as progress:
            built = build_request(kind, replace(request, llm=llm, progress=progress), info)
    finally:
        if llm is not None:
            llm.close()
    write_benchmark(built, out)
    return built, str(llm.summary) if llm is not None else None


def _print_built(built: Benchmark, out: Path, summary: str | None) -> None:
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)  # counts stay on one line, for logs and greps
    made = sum(built.info["made"].values())
    rejected = sum(sum(r.values()) for r in built.info["rejected"].values())
    console.print(f"{built.name}: {len(built.items)} texts in {out} ({made} perturbed, {rejected} rejected)")
    for key, reasons in built.info["rejected"].items():
        console.print(f"[yellow]  rejected {key}:[/yellow] " + ", ".join(f"{r} {c}" for r, c in reasons.items()))
    if summary is not None:
        console.print(f"LLM perturbations: {summary}")


def evaluate_benchmark(
    folder: Path,
    judges: Sequence[Any],
    out: Path,
    *,
    weights: dict[str, dict[str, float]] | None = None,
    normalised: bool = False,
    plots: bool = True,
    samples: int = 1,
) -> list[Path]:
    """Score every judge on the benchmark in `folder`; a report per judge in OUT/<judge>/.
    `samples`: each text judged N times, aggregated as the benchmark's paper did (its kind's `aggregation`)."""
    from ..sampling import deterministic_warning
    from ..store import judge_slug
    from .analysis import analyze_spans
    from .benchmark import load_benchmark
    from .kinds import AnalysisOptions, get_kind
    from .report import write_report
    from .scoring import score_benchmark

    benchmark = load_benchmark(folder)
    kind = get_kind(benchmark.kind)
    options = AnalysisOptions(weights, normalised)
    written: list[Path] = []
    with _bars() as progress:
        for judge in judges:
            scored = score_benchmark(benchmark, judge, out, progress, samples)
            body = kind.analyse(benchmark, scored, options)
            result = {"metrics": body, "spans": analyze_spans(benchmark, scored.scores), "missing": scored.missing}
            if samples > 1:
                result["samples"] = {"n": len(scored.samples), "aggregation": kind.aggregation,
                                     "note": deterministic_warning(judge, samples)}  # fmt: skip
            written += write_report(benchmark, judge.name, result, out / judge_slug(judge.name), plots)
    return written


def evaluate_span_set(
    name: str, judges: Sequence[Any], out: Path, data_root: Path | None, max_items: int | None
) -> Path:
    """Error-span P/R/F1 of each judge, and of the mark-every-number baseline, on a span set.

    Each system also gets the quintd-1 paper's agreement (Pearson r of per-output error
    counts and of per-token error labels) with input-bootstrap intervals: `count_pearson` and
    `token_pearson` as {value, low, high, undefined_resamples, reason}, and the whole
    `span_agreement` row under `agreement`.
    """
    import json

    from spanjudge.inference.catalog import load_catalog
    from spanjudge.inference.errors import InputError
    from spanjudge.inference.fileio import atomic_write_text

    from ..datasets import MetaDataset, MetaItem
    from ..spans.agreement import metric_interval, span_agreement
    from ..spans.metrics import evaluate_spans, mark_numbers
    from ..spans.quintd import load_quintd1
    from ..spans.rotowire import load_rotowire
    from ..store import JudgmentStore, judgment_path
    from ..suite import AspectSpec, DatasetSpec
    from .scoring import judge_missing

    def with_agreement(predictions: dict[str, Any]) -> dict[str, Any]:
        result = evaluate_spans(docs, predictions)
        row = span_agreement(docs, predictions)
        return result | {
            "count_pearson": metric_interval(row, "count_pearson"),
            "token_pearson": metric_interval(row, "token_pearson"),
            "agreement": row,
        }

    loaders = {"rotowire": load_rotowire, "quintd1": load_quintd1}
    if name not in loaders:
        raise InputError(f"--spans must be one of {', '.join(loaders)}, got {name!r}")
    docs = loaders[name](data_root, limit=max_items)  # type: ignore[operator]
    task = load_catalog().task(docs[0].task_id)
    aspect = AspectSpec(name=next(iter(task.aspects)), human="-")  # faithfulness (RotoWire), accuracy (quintd-1)
    spec = DatasetSpec(name=f"spans-{name}", level="global", aspects=(aspect,))
    items = [MetaItem(d.id, spec.name, d.id, "output", task.id, d.inputs, d.output, {}) for d in docs]
    dataset = MetaDataset(spec, task, items, Path(name))
    baseline = with_agreement({d.id: mark_numbers(d.output) for d in docs})
    results: dict[str, Any] = {"baseline: mark every number": baseline}
    for judge in judges:
        store = JudgmentStore(judgment_path(out, judge))
        todo = [i for i in items if (spec.name, aspect.name, i.id) not in store.found]
        with _bars() as bars:
            judge_missing(judge, store, dataset, aspect, todo, bars(f"{name}/{judge.name}", len(todo)))
        predictions: dict[str, Any] = {}
        for item in items:
            found = store.found.get((spec.name, aspect.name, item.id))
            if found is None:
                continue
            spans = (found.detail or {}).get("spans") if found.score is not None else None
            predictions[item.id] = None if spans is None else [tuple(s) for s in spans]
        results[judge.name] = with_agreement(predictions)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Error-span precision / recall on {name} ({len(docs)} documents)",
        "",
        "Count r / token r: Pearson r with the gold spans of the number of errors per output and of the"
        " per-token error labels (the quintd-1 paper's agreement), with 95% input-bootstrap intervals.",
        "",
        "| system | variant | precision | recall | F1 | scored | unscored | count r | token r |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def shown(interval: dict[str, Any]) -> str:
        if interval["value"] is None:
            return f"n/a ({interval['reason']})"
        if interval["low"] is None:
            return f"{interval['value']:.3f}"
        return f"{interval['value']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"

    for system, r in results.items():
        for variant in ("exact", "overlap", "token"):
            v = r[variant]
            lines.append(f"| {system} | {variant} | {v['precision']:.3f} | {v['recall']:.3f} | {v['f1']:.3f} | "
                         f"{r['scored']} | {r['unscored'] + r['missing']} | {shown(r['count_pearson'])} | "
                         f"{shown(r['token_pearson'])} |")  # fmt: skip
    atomic_write_text(out / "spans.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / "spans.md", "\n".join(lines) + "\n")
    return out / "spans.md"
