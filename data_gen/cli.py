"""`spanjudge annotate`: the ensemble annotation pipeline from the command line."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from spanjudge.inference.progress_log import progress_bars
from spanjudge.inference.sharding import SHARD_HELP

annotate = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

DecontaminateOption = Annotated[
    Path | None,
    typer.Option(
        "--decontaminate-against",
        help="Leave out examples whose inputs occur in these meta-evaluation inputs: a suite YAML (its sets), a "
        "sources YAML or a JSONL with `inputs` (default: configs/eval/thesis.yaml). Inputs match after casefolding, "
        "collapsing whitespace and stripping punctuation at the ends; run.json lists what was left out.",
    ),
]
AllowOverlapOption = Annotated[
    bool,
    typer.Option(
        "--allow-overlap",
        help="Keep inputs that occur in the meta-evaluation sets (counted, with a warning recorded in run.json).",
    ),
]

ShardOption = Annotated[
    str | None,
    typer.Option("--shard", metavar="K/N", help=SHARD_HELP + " Join the N folders with `spanjudge merge`."),
]


@annotate.command()
def annotate_command(
    ensemble: Annotated[Path, typer.Option("--ensemble", help="Ensemble YAML (configs/ensemble/*.yaml).")],
    sources: Annotated[Path, typer.Option("--sources", help="Sources YAML (configs/sources/*.yaml).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder (created; re-running resumes).")],
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            help="Point a model at other servers: NAME=URL[,URL...] (repeatable; a list is a pool). "
            "Also SPANJUDGE_ENDPOINT_<NAME>=URL[,URL].",
        ),
    ] = None,
    cache: Annotated[
        Path | None, typer.Option("--cache", help="SQLite cache of model calls (default: OUT/cache.sqlite).")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder for $DATA/ paths (default ../shared/data).")
    ] = None,
    refresh_unscored: Annotated[
        bool,
        typer.Option(
            "--refresh-unscored",
            help="Ask the models again for every cached reply that did not parse (e.g. cached from a "
            "server that was broken), instead of serving it from the cache.",
        ),
    ] = False,
    decontaminate_against: DecontaminateOption = None,
    allow_overlap: AllowOverlapOption = False,
    shard: ShardOption = None,
) -> None:
    """Annotate outputs with an LLM ensemble, merge with a supervisor, and build training data.

    Writes OUT/train.jsonl, OUT/validation.jsonl, OUT/hf_dataset/ (a Hugging Face
    DatasetDict), OUT/unscored.jsonl, OUT/incomplete.jsonl, OUT/stats.{json,md} and
    OUT/score_histogram.png. Every model call is cached: re-running the same command after
    a crash, a kill or a dead server finishes the work without repeating any call.

    With --shard K/N, OUT holds shard K only (OUT/records.jsonl, not yet split, its own
    cache, stats and OUT/shard.json); `spanjudge merge` joins the N shards into what one
    run writes.
    """
    from spanjudge.inference.catalog import load_catalog
    from spanjudge.inference.sharding import parse_shard, shard_path

    from .config import load_ensemble, load_sources, parse_endpoint_options
    from .decontaminate import prepare
    from .pipeline import run_pipeline

    part = parse_shard(shard)  # a bad K/N is one line before anything is read
    console = Console(stderr=True)
    ensemble_config = load_ensemble(ensemble, parse_endpoint_options(endpoint or []))
    sources_config = load_sources(sources)
    data_root = _data_root(data_dir)
    decontamination = prepare(decontaminate_against, allow_overlap, data_root)
    if allow_overlap:  # loudly, before the run as well as after it
        console.print(f"[yellow]{decontamination.lines()[-1]}[/yellow]", highlight=False, soft_wrap=True)
    with model_progress(console) as progress:
        summary = run_pipeline(
            ensemble_config,
            sources_config,
            sources,
            out,
            load_catalog(),
            data_root=data_root,
            cache_path=shard_path(cache, part) if cache is not None else None,
            progress=progress,
            refresh_unscored=refresh_unscored,
            decontamination=decontamination,
            shard=part,
        )
    for line in decontamination.lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    split = f"shard {part.label}, not yet split" if part else f"{summary.train} train / {summary.validation} validation"
    console.print(
        f"{summary.records} records ({split}) from "
        f"{summary.requests} requests; unscored {summary.unscored}; incomplete {summary.incomplete}; "
        f"model calls {summary.total_model_calls} ({', '.join(f'{k} {v}' for k, v in summary.model_calls.items())}); "
        f"cache hits {sum(summary.cache_hits.values())}"
    )
    for line in summary.skipped[:10]:
        console.print(f"skipped {line}")
    if len(summary.skipped) > 10:
        console.print(f"... and {len(summary.skipped) - 10} more skipped (see {out / 'run.json'})")
    if summary.not_sampled or summary.beyond_limit_inputs:
        console.print(
            f"left out by the sources config: {summary.not_sampled} outputs not drawn (n_systems), "
            f"{summary.beyond_limit_inputs} rows past limit_inputs"
        )
    console.print(f"statistics: {out / 'stats.md'}; histogram: {out / 'score_histogram.png'}")
    if part:
        console.print(f"shard {part.label} done; join all {part.count}: spanjudge merge --shards DIR1 ... --out DIR")
    if summary.incomplete:
        console.print(
            f"[yellow]{summary.incomplete} requests are incomplete[/yellow]: re-run the same command to finish"
        )
        raise typer.Exit(1)


import_annotations = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@import_annotations.command()
def import_command(
    config: Annotated[Path, typer.Option("--config", help="Import YAML (configs/import/*.yaml).")],
    out: Annotated[
        Path, typer.Option("--out", help="Output folder (train.jsonl, validation.jsonl, hf_dataset/, ...).")
    ],
    decontaminate_against: DecontaminateOption = None,
    allow_overlap: AllowOverlapOption = False,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder for $DATA/ paths (default ../shared/data).")
    ] = None,
) -> None:
    """Build training records from existing annotations, with no model call.

    Formats: quintd-1 / factgenie span annotations (GPT-4 or human spans; span types become
    severities and a 0-100 score by the rule the config declares) and OpeNLGauge's released
    JSON array (evaluations structured or in the judge's text format). Writes what
    `spanjudge annotate` writes: OUT/train.jsonl, OUT/validation.jsonl (split by input),
    OUT/hf_dataset/, OUT/stats.{json,md}, OUT/score_histogram.png and OUT/run.json. Every
    record is checked before anything is written; a bad one is named by file and line.
    """
    from spanjudge.inference.catalog import load_catalog

    from .decontaminate import prepare
    from .teacher import import_annotations as run_import
    from .teacher import load_import_config

    console = Console(stderr=True)
    import_config = load_import_config(config)
    catalog = load_catalog()
    decontamination = prepare(decontaminate_against, allow_overlap, _data_root(data_dir), catalog)
    if allow_overlap:
        console.print(f"[yellow]{decontamination.lines()[-1]}[/yellow]", highlight=False, soft_wrap=True)
    summary = run_import(import_config, config.parent, out, catalog, decontamination)
    for line in decontamination.lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"{summary.records} records ({summary.train} train / {summary.validation} validation), "
        f"{summary.spans} spans; relocated {len(summary.relocated)}, dropped {len(summary.dropped)}, "
        f"capped {len(summary.capped)}"
    )
    if summary.rule:
        console.print(f"rule: {summary.rule}")
    for line in [*summary.relocated, *summary.dropped][:10]:
        console.print(f"  {line}")
    console.print(f"statistics: {out / 'stats.md'}")


generate = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@generate.command()
def generate_command(
    systems: Annotated[Path, typer.Option("--systems", help="Systems YAML (configs/generate/systems/*.yaml).")],
    sources: Annotated[Path, typer.Option("--sources", help="Sources YAML whose inputs get new outputs.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder (created; re-running resumes).")],
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            help="Point a system at other servers: NAME=URL[,URL...] (repeatable; a list is a pool). "
            "Also SPANJUDGE_ENDPOINT_<NAME>=URL[,URL].",
        ),
    ] = None,
    cache: Annotated[
        Path | None, typer.Option("--cache", help="SQLite cache of model calls (default: OUT/cache.sqlite).")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder for $DATA/ paths (default ../shared/data).")
    ] = None,
    shard: ShardOption = None,
) -> None:
    """Generate new system outputs with LLMs for every input of the sources.

    Each system answers each input with its task's prompt template (configs/generate/templates/;
    chat models get a chat message, models without a chat template a completion-style prompt).
    Outputs are post-processed (chat openers stripped, cut at stop sequences, empty ones
    rejected) and written with their raw text and provenance to OUT/outputs/<source>.jsonl;
    OUT/sources.yaml points `spanjudge annotate --sources` at them. Also OUT/rejected.jsonl,
    OUT/incomplete.jsonl and OUT/run.json. Every model call is cached: re-running the same
    command after a crash or a kill finishes the work without repeating any call.

    With --shard K/N, OUT holds the outputs of shard K's inputs (and OUT/shard.json);
    `spanjudge merge` joins the N shards into what one run writes.
    """
    from spanjudge.inference.catalog import load_catalog
    from spanjudge.inference.sharding import parse_shard, shard_path

    from .config import load_sources, parse_endpoint_options
    from .generate import run_generate
    from .generate_config import load_generate_config

    part = parse_shard(shard)
    console = Console(stderr=True)
    generate_config = load_generate_config(systems, parse_endpoint_options(endpoint or []))
    sources_config = load_sources(sources)
    data_root = _data_root(data_dir)
    with model_progress(console) as progress:
        summary = run_generate(
            generate_config,
            systems,
            sources_config,
            sources,
            out,
            load_catalog(),
            data_root=data_root,
            cache_path=shard_path(cache, part) if cache is not None else None,
            progress=progress,
            shard=part,
        )
    per_source = ", ".join(f"{name} {count}" for name, count in summary.per_source.items())
    reasons = ", ".join(f"{reason} {count}" for reason, count in summary.rejected_reasons.items())
    console.print(
        f"{summary.outputs} outputs ({per_source}) from {summary.jobs} prompts; "
        f"rejected {summary.rejected}{f' ({reasons})' if reasons else ''}; incomplete {summary.incomplete}; "
        f"truncated at max_tokens {summary.truncated}; model calls {summary.total_model_calls} "
        f"({', '.join(f'{k} {v}' for k, v in summary.model_calls.items())}); "
        f"cache hits {sum(summary.cache_hits.values())}"
    )
    for line in summary.skipped[:10]:
        console.print(f"skipped {line}")
    if len(summary.skipped) > 10:
        console.print(f"... and {len(summary.skipped) - 10} more skipped (see {out / 'run.json'})")
    if part:
        console.print(f"shard {part.label} done; join all {part.count}: spanjudge merge --shards DIR1 ... --out DIR")
    else:
        console.print(f"annotate them: spanjudge annotate --sources {out / 'sources.yaml'} --ensemble <ensemble.yaml>")
    if summary.incomplete:
        console.print(
            f"[yellow]{summary.incomplete} prompts are incomplete[/yellow] (see {out / 'incomplete.jsonl'}): "
            "re-run the same command to finish"
        )
        raise typer.Exit(1)


merge = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@merge.command(context_settings={"allow_extra_args": True})
def merge_command(
    ctx: typer.Context,
    shards: Annotated[
        list[Path],
        typer.Option("--shards", help="The shards' output folders (all N, any order): --shards DIR1 DIR2 ..."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output folder of the joined run.")],
) -> None:
    """Join the shards of a `spanjudge annotate --shard K/N` or `generate --shard K/N` run.

    Checks that the folders are one run's parts (every shard 1..N exactly once, finished,
    the same settings and data, no input in two shards), then writes what a single run
    writes from the same records: for annotate OUT/train.jsonl and OUT/validation.jsonl
    (the same split), OUT/hf_dataset/, unscored/incomplete, stats and run.json (with
    `merged_from`); for generate OUT/outputs/, sources.yaml, rejected/incomplete and run.json.
    """
    from spanjudge.inference.errors import InputError

    from .shards import merge_shards

    folders = [*shards, *(Path(arg) for arg in ctx.args)]  # --shards A B C: B and C arrive as extra args
    stray = [arg for arg in ctx.args if arg.startswith("-")]
    if stray:
        raise InputError(f"merge: unknown option {stray[0]}")
    console = Console(stderr=True)
    run = merge_shards(folders, out)
    if "records" in run:
        console.print(
            f"{run['records']} records ({run['train']} train / {run['validation']} validation) from "
            f"{len(folders)} shards; unscored {run['unscored']}; incomplete {run['incomplete']}; written to {out}"
        )
    else:
        console.print(f"{run['outputs']} outputs from {len(folders)} shards; incomplete {run['incomplete']}; {out}")
    if run["incomplete"]:
        console.print(
            f"[yellow]{run['incomplete']} are incomplete[/yellow]: re-run their shards' commands, then merge again"
        )
        raise typer.Exit(1)


def _data_root(data_dir: Path | None) -> Path | None:
    """The shared data folder; only an error if one was asked for (or a source uses $DATA/)."""
    from spanjudge.inference.errors import SpanjudgeError
    from spanjudge.inference.paths import data_dir as find_data_dir

    try:
        return find_data_dir(data_dir)
    except SpanjudgeError:
        if data_dir is not None:
            raise
        return None


@contextlib.contextmanager
def model_progress(console: Console) -> Iterator[Callable[[str, int, int, int, int], None]]:
    """One progress row per model: done/total, cached and failed calls."""
    columns = (
        TextColumn("{task.description:<18}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("cached {task.fields[cached]}  failed {task.fields[failed]}"),
        TimeElapsedColumn(),
    )
    with progress_bars(*columns, console=console) as bar:  # log lines when not a terminal
        rows: dict[str, int] = {}

        def progress(name: str, done: int, total: int, cached: int, failed: int) -> None:
            if name not in rows:
                rows[name] = bar.add_task(name, total=total, cached=0, failed=0)
            bar.update(rows[name], completed=done, total=total, cached=cached, failed=failed)

        yield progress
