"""`spanjudge annotate`, `generate`, `import` and `merge`: the data-generation stage from the
command line. The work is done by the functions of `stage` (and `merge.merge_shards`);
these commands parse their options and print what the run did."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from spanjudge.core.options import option, settings_command
from spanjudge.core.sharding import SHARD_HELP

from .config import parse_endpoint_options
from .generate import GenerateSummary
from .merge import merge_shards
from .pipeline import RunSummary, failure_lines
from .stage import StageRun, annotate_outputs, generate_outputs, import_records, model_progress
from .teacher import ImportSummary

annotate = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
import_annotations = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
generate = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
merge = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

__all__ = ["annotate", "generate", "import_annotations", "merge", "model_progress"]

DECONTAMINATE_HELP = (
    "Leave out examples whose inputs occur in these meta-evaluation inputs: a suite YAML (its sets), a sources YAML "
    "or a JSONL with `inputs` (default: configs/eval/thesis.yaml). Inputs match after casefolding, collapsing "
    "whitespace and stripping punctuation at the ends; run.json lists what was left out."
)
ALLOW_OVERLAP_HELP = (
    "Keep inputs that occur in the meta-evaluation sets (counted, with a warning recorded in run.json)."
)
SHARD_OPTION_HELP = SHARD_HELP + " Join the N folders with `spanjudge merge`."
OUT_HELP = "Output folder (created; re-running resumes)."
CACHE_HELP = "SQLite cache of model calls (default: OUT/cache.sqlite)."
DATA_DIR_HELP = "Shared data folder for $DATA/ paths (default ../shared/data)."


def _endpoint_help(what: str) -> str:
    return (
        f"Point {what} at other servers: NAME=URL[,URL...] (repeatable; a list is a pool). "
        "Also SPANJUDGE_ENDPOINT_<NAME>=URL[,URL]."
    )


@dataclass(frozen=True, kw_only=True)
class AnnotateSettings:
    """`spanjudge annotate`'s options."""

    ensemble: Path = option(help="Ensemble YAML (configs/ensemble/*.yaml).")
    sources: Path = option(help="Sources YAML (configs/sources/*.yaml).")
    out: Path = option(help=OUT_HELP)
    endpoint: list[str] = option([], help=_endpoint_help("a model"))
    cache: Path | None = option(None, help=CACHE_HELP)
    data_dir: Path | None = option(None, help=DATA_DIR_HELP)
    refresh_unscored: bool = option(
        False,
        help="Ask the models again for every cached reply that did not parse or was cut off at max_tokens (e.g. "
        "cached from a server that was broken, or whose context was too small), instead of serving it from the cache.",
    )
    decontaminate_against: Path | None = option(None, help=DECONTAMINATE_HELP)
    allow_overlap: bool = option(False, help=ALLOW_OVERLAP_HELP)
    shard: str | None = option(None, metavar="K/N", help=SHARD_OPTION_HELP)


@dataclass(frozen=True, kw_only=True)
class ImportSettings:
    """`spanjudge import`'s options."""

    config: Path = option(help="Import YAML (configs/import/*.yaml).")
    out: Path = option(help="Output folder (train.jsonl, validation.jsonl, hf_dataset/, ...).")
    decontaminate_against: Path | None = option(None, help=DECONTAMINATE_HELP)
    allow_overlap: bool = option(False, help=ALLOW_OVERLAP_HELP)
    data_dir: Path | None = option(None, help=DATA_DIR_HELP)
    ids: Path | None = option(
        None,
        help="Import only the records these ids name: a text file, one id a line (what follows a tab is left out, so "
        "the list `spanjudge select` prints serves as it is). An id that names no record of the import is an error.",
    )


@dataclass(frozen=True, kw_only=True)
class GenerateSettings:
    """`spanjudge generate`'s options."""

    systems: Path = option(help="Systems YAML (configs/generate/systems/*.yaml).")
    sources: Path = option(help="Sources YAML whose inputs get new outputs.")
    out: Path = option(help=OUT_HELP)
    endpoint: list[str] = option([], help=_endpoint_help("a system"))
    cache: Path | None = option(None, help=CACHE_HELP)
    data_dir: Path | None = option(None, help=DATA_DIR_HELP)
    shard: str | None = option(None, metavar="K/N", help=SHARD_OPTION_HELP)


@dataclass(frozen=True, kw_only=True)
class MergeSettings:
    """`spanjudge merge`'s options: `--shards DIR1 DIR2 ...` (the folders after the first are arguments)."""

    shards: list[Path] = option(help="The shards' output folders (all N, any order): --shards DIR1 DIR2 ...")
    out: Path = option(help="Output folder of the joined run.")
    more_shards: list[Path] = option(
        [], argument=True, metavar="DIR", help="The folders after --shards' first one (--shards A B C)."
    )


def annotate_command(settings: AnnotateSettings) -> None:
    """Annotate outputs with an LLM ensemble, merge with a supervisor (or by vote), and build training data.

    The ensemble YAML names the annotators and how their errors merge: a `supervisor:` LLM (thesis
    Fig. A.17), or `merge: {method: vote, min_votes: K, extent: union|majority|shortest}` (no model
    call; each kept error's votes and members are in its record's provenance).

    Writes OUT/train.jsonl, OUT/validation.jsonl, OUT/hf_dataset/ (a Hugging Face
    DatasetDict), OUT/unscored.jsonl, OUT/incomplete.jsonl, OUT/stats.{json,md} and
    OUT/score_histogram.png. Every model call is cached: re-running the same command after
    a crash, a kill or a dead server finishes the work without repeating any call.

    With --shard K/N, OUT holds shard K only (OUT/records.jsonl, not yet split, its own
    cache, stats and OUT/shard.json); `spanjudge merge` joins the N shards into what one
    run writes.
    """

    o, out = settings, settings.out
    endpoints = parse_endpoint_options(o.endpoint)
    console = Console(stderr=True, soft_wrap=True)  # never folded inside a path: one greppable line each
    with model_progress(console) as progress:
        run = annotate_outputs(
            o.ensemble, o.sources, out, endpoints=endpoints, cache=o.cache, data_dir=o.data_dir,
            refresh_unscored=o.refresh_unscored, decontaminate_against=o.decontaminate_against,
            allow_overlap=o.allow_overlap, shard=o.shard, progress=progress, warn=lambda line: _warn(console, line),
        )  # fmt: skip
    _print_decontamination(console, run)
    s, part = run.summary, run.shard
    split = f"shard {part.label}, not yet split" if part else f"{s.train} train / {s.validation} validation"
    calls = ", ".join(f"{k} {v}" for k, v in s.model_calls.items())
    console.print(
        f"{s.records} records ({split}) from {s.requests} requests; unscored {s.unscored}; incomplete "
        f"{s.incomplete}; model calls {s.total_model_calls} ({calls}); cache hits {sum(s.cache_hits.values())}"
    )
    _print_skipped(console, run)
    if s.not_sampled or s.beyond_limit_inputs:
        console.print(
            f"left out by the sources config: {s.not_sampled} outputs not drawn (n_systems), "
            f"{s.beyond_limit_inputs} rows past limit_inputs"
        )
    console.print(f"statistics: {out / 'stats.md'}; histogram: {out / 'score_histogram.png'}")
    if part:
        console.print(f"shard {part.label} done; join all {part.count}: spanjudge merge --shards DIR1 ... --out DIR")
    for line in failure_lines(s, out):
        console.print(line)
    if s.incomplete:
        raise typer.Exit(1)


def import_command(settings: ImportSettings) -> None:
    """Build training records from existing annotations, with no model call.

    Formats: quintd-1 / factgenie span annotations (GPT-4 or human spans; span types become
    severities and a 0-100 score by the rule the config declares) and OpeNLGauge's released
    JSON array (evaluations structured or in the judge's text format). Writes what
    `spanjudge annotate` writes: OUT/train.jsonl, OUT/validation.jsonl (split by input),
    OUT/hf_dataset/, OUT/stats.{json,md}, OUT/score_histogram.png and OUT/run.json. Every
    record is checked before anything is written; a bad one is named by file and line.

    --ids FILE imports only the records it names: e.g. the humans' spans of the outputs
    `spanjudge select` chose, as training records for the next round of an active-learning loop.
    """

    console = Console(stderr=True, soft_wrap=True)  # never folded inside a path: one greppable line each
    o, out = settings, settings.out
    run = import_records(
        o.config, out, decontaminate_against=o.decontaminate_against, allow_overlap=o.allow_overlap,
        data_dir=o.data_dir, ids=o.ids, warn=lambda line: _warn(console, line),
    )  # fmt: skip
    _print_decontamination(console, run)
    s = run.summary
    console.print(
        f"{s.records} records ({s.train} train / {s.validation} validation), {s.spans} spans; relocated "
        f"{len(s.relocated)}, dropped {len(s.dropped)}, capped {len(s.capped)}"
    )
    if s.rule:
        console.print(f"rule: {s.rule}")
    for line in [*s.relocated, *s.dropped][:10]:
        console.print(f"  {line}")
    console.print(f"statistics: {out / 'stats.md'}")


def generate_command(settings: GenerateSettings) -> None:
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

    o, out = settings, settings.out
    endpoints = parse_endpoint_options(o.endpoint)
    console = Console(stderr=True, soft_wrap=True)  # never folded inside a path: one greppable line each
    with model_progress(console) as progress:
        run = generate_outputs(
            o.systems, o.sources, out, endpoints=endpoints, cache=o.cache, data_dir=o.data_dir, shard=o.shard,
            progress=progress,
        )  # fmt: skip
    s, part = run.summary, run.shard
    per_source = ", ".join(f"{name} {count}" for name, count in s.per_source.items())
    reasons = ", ".join(f"{reason} {count}" for reason, count in s.rejected_reasons.items())
    console.print(
        f"{s.outputs} outputs ({per_source}) from {s.jobs} prompts; "
        f"rejected {s.rejected}{f' ({reasons})' if reasons else ''}; incomplete {s.incomplete}; "
        f"truncated at max_tokens {s.truncated}; model calls {s.total_model_calls} "
        f"({', '.join(f'{k} {v}' for k, v in s.model_calls.items())}); "
        f"cache hits {sum(s.cache_hits.values())}"
    )
    _print_skipped(console, run)
    if part:
        console.print(f"shard {part.label} done; join all {part.count}: spanjudge merge --shards DIR1 ... --out DIR")
    else:
        console.print(f"annotate them: spanjudge annotate --sources {out / 'sources.yaml'} --ensemble <ensemble.yaml>")
    if s.incomplete:
        console.print(
            f"[yellow]{s.incomplete} prompts are incomplete[/yellow] (see {out / 'incomplete.jsonl'}): "
            "re-run the same command to finish"
        )
        raise typer.Exit(1)


def _warn(console: Console, line: str) -> None:
    console.print(f"[yellow]{line}[/yellow]", highlight=False, soft_wrap=True)


def _print_decontamination(console: Console, run: StageRun[RunSummary] | StageRun[ImportSummary]) -> None:
    if run.decontamination is None:
        return
    for line in run.decontamination.lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def _print_skipped(console: Console, run: StageRun[RunSummary] | StageRun[GenerateSummary]) -> None:
    skipped = run.summary.skipped
    for line in skipped[:10]:
        console.print(f"skipped {line}")
    if len(skipped) > 10:
        console.print(f"... and {len(skipped) - 10} more skipped (see {run.out / 'run.json'})")


def merge_command(settings: MergeSettings) -> None:
    """Join the shards of a `spanjudge annotate --shard K/N` or `generate --shard K/N` run.

    Checks that the folders are one run's parts (every shard 1..N exactly once, finished,
    the same settings and data, no input in two shards), then writes what a single run
    writes from the same records: for annotate OUT/train.jsonl and OUT/validation.jsonl
    (the same split), OUT/hf_dataset/, unscored/incomplete, stats and run.json (with
    `merged_from`); for generate OUT/outputs/, sources.yaml, rejected/incomplete and run.json.
    """

    folders, out = [*settings.shards, *settings.more_shards], settings.out  # --shards A B C: B and C are arguments
    console = Console(stderr=True, soft_wrap=True)  # never folded inside a path: one greppable line each
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


settings_command(annotate, AnnotateSettings, annotate_command)
settings_command(import_annotations, ImportSettings, import_command)
settings_command(generate, GenerateSettings, generate_command)
settings_command(merge, MergeSettings, merge_command)
