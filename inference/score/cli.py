"""`spanjudge score`, `spanjudge render`, `spanjudge select` and `spanjudge export`: the distilled judge
from the command line. The work is done by `stage.score_file` and `select.select_rows`; these commands
parse and print."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spanjudge.core.artifacts import read_adapter_metadata
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_text, check_overwritable
from spanjudge.core.options import option, settings_command

from ..backends.adapters import check_safetensors_adapter
from ..backends.llamacpp.lora_export import adapter_to_gguf, check_gguf_target
from ..export import check_merge_target, merge_adapter
from ..hf_models import local_folder, resolve_model_source
from ..judge_location import recorded_base
from .rows import ScoreRow, read_results
from .stage import ScoreSettings, score_file, summary_lines

if TYPE_CHECKING:
    from rich.console import Console

score = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
render = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
export = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
select = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def score_command(settings: ScoreSettings) -> None:
    """Score outputs with a distilled judge: error spans (anchored to character offsets),
    explanations, severities and a 0-100 score per output.

    Decoding is greedy; a reply that does not parse is retried with light sampling up to 3
    times, then reported as unscored (never given a made-up score). --probabilities adds the
    judge's own probabilities (expected score and error count, each span's confidence) and
    --samples N a consensus of N sampled replies, beside the written evaluation. Inputs too long for the
    context are cut from the end (the evaluated output never is) and flagged in the results.
    Each result is appended as soon as it is final: re-running the same command skips finished
    rows; re-running into the same --out with another task, aspect, model, decoding or data is
    refused (each row records what it was scored with).

    Rows come from --data (JSONL, JSON, CSV, a saved HF dataset, or with --data-format lm-eval
    the samples lm-evaluation-harness logs) or from plain text files (--src/--hyp, one item per
    line). A judge trained on its own prompt reads it: --prompt-template, or the copy its
    adapter folder stores. OUT.run.json records what produced the results.
    """
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)  # log lines stay whole (greppable)
    run = score_file(settings, console)
    _summary(console, run.rows, run.failed)
    if run.page is not None:
        console.print(f"HTML report: {run.page}")
    if run.failed:
        console.print(f"[red]{run.failed} rows could not reach the model; re-run the same command to finish them[/red]")
        raise typer.Exit(1)


settings_command(score, ScoreSettings, score_command)


def _summary(console: Console, rows: list[ScoreRow], failed: int) -> None:

    for line in summary_lines(rows, failed):
        console.print(line)


RENDER_FORMATS = ("html", "xcomet", "factgenie")


@dataclass(frozen=True, kw_only=True)
class RenderSettings:
    """`spanjudge render`'s arguments and options."""

    results: Path = option(argument=True, help="Results JSONL written by `spanjudge score`.")
    out: Path | None = option(
        None,
        help="Page, JSONL or campaign folder (default: beside RESULTS, .html, .xcomet.jsonl, -factgenie); "
        "a campaign folder's name is a slug, as factgenie opens it.",
    )
    to: str = option(
        "html", help="html: the page; xcomet: JSONL with xCOMET-style error_spans; factgenie: a campaign folder."
    )
    dataset: str | None = option(None, help="factgenie: the outputs' dataset id (default: the rows' task; slugified).")
    split: str = option("test", help="factgenie: the split of the outputs (slugified).")
    setup: str = option("outputs", help="factgenie: the setup id, the system that wrote the outputs (slugified).")


@dataclass(frozen=True, kw_only=True)
class SelectSettings:
    """`spanjudge select`'s arguments and options."""

    results: list[Path] = option(
        argument=True, metavar="RESULTS...", help="Results JSONL of `spanjudge score` (several with --by seeds)."
    )
    n: int = option(20, min=1, help="How many outputs to select.")
    by: str = option(
        "confidence",
        help="confidence: the least believed span (or P(no error)); no-error: P(no error) nearest 0.5; seeds: "
        "disagreement between the judges of the results files; random: a uniform draw (the control arm).",
    )
    seed: int = option(0, help="--by random: the draw's seed.")
    out: Path | None = option(
        None, help="Campaign folder, named by a slug (default: beside the first RESULTS, -select-BY)."
    )
    dataset: str | None = option(None, help="The outputs' dataset id (default: the rows' task).")
    split: str = option("test", help="The split of the outputs.")
    setup: str = option("outputs", help="The setup id (the system that wrote the outputs).")


@dataclass(frozen=True, kw_only=True)
class ExportSettings:
    """`spanjudge export`'s options."""

    model: Path = option(help="Adapter folder from `spanjudge train`.")
    out: Path = option(help="Output folder (--merge) or .gguf file (--gguf-lora).")
    merge: bool = option(False, help="Fold the adapter into the base: safetensors folder.")
    gguf_lora: bool = option(False, help="Write the adapter as a llama.cpp GGUF LoRA (Llama bases).")
    base: str | None = option(None, help="Base model (default: recorded in the adapter).")


def render_command(settings: RenderSettings) -> None:
    """Render score results: as one self-contained HTML page (spans highlighted by severity,
    explanations on hover or focus), as xCOMET-style `error_spans` (severity 1-2 minor, 3-4 major,
    5 critical) or as a factgenie annotation campaign (one span category per severity)."""

    results, out, to = settings.results, settings.out, settings.to
    if to not in RENDER_FORMATS:
        raise InputError(f"--to must be one of {', '.join(RENDER_FORMATS)}, not '{to}'")
    if not results.is_file():
        raise InputError(f"results file not found: {results}")
    if to == "html":
        from .html import is_our_page, render_html
        from .stage import page_path

        target = out or page_path(results)
        check_overwritable(target, "page", is_our_page, "--out" if out else "RESULTS", inputs=[results])
        rows = read_results(results, required=("output",), complete=True)
        atomic_write_text(target, render_html(rows, title=f"spanjudge: {results.stem}"))
    elif to == "xcomet":
        from .interchange import is_xcomet_file, xcomet_rows

        target = out or results.with_suffix(".xcomet.jsonl")
        check_overwritable(target, "xCOMET file", is_xcomet_file, "--out" if out else "RESULTS", inputs=[results])
        rows = xcomet_rows(read_results(results, required=("task", "aspect", "output"), complete=True))
        atomic_write_text(target, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:
        from .interchange import campaign_folder, factgenie_campaign, write_factgenie_campaign

        target = campaign_folder(out, results, "factgenie")
        rows = read_results(results, required=("task", "aspect", "output"), complete=True)
        tasks = sorted({str(r["task"]) for r in rows})
        metadata, records = factgenie_campaign(
            rows,
            campaign_id=target.name,
            dataset=settings.dataset or "+".join(tasks),
            split=settings.split,
            setup_id=settings.setup,
        )
        write_factgenie_campaign(target, metadata, records, file_name=results.stem)
    typer.echo(str(target))


def select_command(settings: SelectSettings) -> None:
    """Select the outputs the judge is least sure of and write them as a factgenie campaign, the
    judge's spans as pre-annotations, most uncertain first: the first step of an active-learning loop
    (annotate them, import the human spans as training records, train again).

    --by confidence ranks by the least believed span (1 - its confidence; an output without spans by
    1 - P(no error)) and --by no-error by how near P(no error) is to 0.5: both need results scored
    with --probabilities. --by seeds ranks by how much judges scoring the same outputs disagree (one
    results file each: the mean over pairs of 1 - the Jaccard overlap of the characters their spans
    cover); --by random draws uniformly (--seed), the control arm. Unscored outputs are left out and
    counted. Each record's metadata holds its uncertainty; the chosen ids are printed.
    """
    from .interchange import campaign_folder, factgenie_campaign, write_factgenie_campaign
    from .select import select_rows

    s = settings
    for path in s.results:
        if not path.is_file():
            raise InputError(f"results file not found: {path}")
    results = [read_results(path, required=("task", "aspect", "output"), complete=True) for path in s.results]
    chosen = select_rows(results, s.n, s.by, s.seed)
    target = campaign_folder(s.out, s.results[0], f"select-{s.by}")
    tasks = sorted({str(row["task"]) for row in chosen.rows})
    metadata, records = factgenie_campaign(
        chosen.rows, campaign_id=target.name, dataset=s.dataset or "+".join(tasks), split=s.split, setup_id=s.setup
    )
    if chosen.uncertainty:  # every chosen row is scored, so each has its record
        for record, uncertainty in zip(records, chosen.uncertainty, strict=True):
            record["metadata"]["uncertainty"] = round(uncertainty, 6)
    write_factgenie_campaign(target, metadata, records, file_name=s.results[0].stem)
    measured = [f"\t{u:.4f}" for u in chosen.uncertainty] or [""] * len(chosen.rows)
    for row, shown in zip(chosen.rows, measured, strict=True):
        typer.echo(f"{row['id']}{shown}")
    unscored = f"; {chosen.unscored} unscored outputs left out" if chosen.unscored else ""
    typer.echo(f"{len(chosen.rows)} outputs selected by {s.by} into the campaign {target}{unscored}", err=True)


def export_command(settings: ExportSettings) -> None:
    """Export a trained judge for serving.

    --merge writes merged weights (serve with vLLM, TGI, SGLang, or convert to GGUF with
    llama.cpp's convert_hf_to_gguf.py). --gguf-lora writes a llama.cpp adapter for a GGUF of
    the same base: `llama-server -m base.gguf --lora judge.gguf`. vLLM and Ollama can also
    serve the adapter folder itself (docs: Score with the judge, "Serving the judge").
    """

    model, out, merge, base = settings.model, settings.out, settings.merge, settings.base
    if merge == settings.gguf_lora:
        raise InputError("choose one of --merge or --gguf-lora")
    if not (model / "adapter_config.json").is_file():
        meta = read_adapter_metadata(model)
        if meta is not None and meta.full:
            raise InputError(
                f"{model} was fully fine-tuned: it is a whole model already, nothing to merge or to make a LoRA of; "
                "serve the folder itself (vLLM, TGI, SGLang) or convert it with llama.cpp's convert_hf_to_gguf.py"
            )
        raise InputError(f"{model} is not an adapter folder (no adapter_config.json)")
    check_safetensors_adapter(model)
    if merge:  # the target is checked before any weights load
        check_merge_target(out)
    else:
        check_gguf_target(out)
    base_folder = local_folder(resolve_model_source(base or recorded_base(model)))
    if merge:
        merge_adapter(model, base_folder, out, say=typer.echo)
    else:
        config = json.loads((Path(base_folder) / "config.json").read_text(encoding="utf-8"))
        typer.echo(str(adapter_to_gguf(model, config, out)))


settings_command(render, RenderSettings, render_command)
settings_command(select, SelectSettings, select_command)
settings_command(export, ExportSettings, export_command)
