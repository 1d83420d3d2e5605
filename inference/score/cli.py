"""`spanjudge score`, `spanjudge render` and `spanjudge export`: the distilled judge from the
command line. The work is done by `stage.score_file`; these commands parse and print."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_text, check_overwritable
from spanjudge.core.options import option, settings_command

from ..backends.adapters import check_safetensors_adapter
from ..backends.llamacpp.lora_export import adapter_to_gguf, check_gguf_target
from ..export import check_merge_target, merge_adapter
from ..hf_models import local_folder, resolve_model_source
from ..judge import recorded_base
from ..score_data import read_results
from .stage import ScoreSettings, score_file, summary_lines

if TYPE_CHECKING:
    from rich.console import Console

score = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
render = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
export = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


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


def _summary(console: Console, rows: list[dict[str, Any]], failed: int) -> None:

    for line in summary_lines(rows, failed):
        console.print(line)


RENDER_FORMATS = ("html", "xcomet", "factgenie")


@dataclass(frozen=True, kw_only=True)
class RenderSettings:
    """`spanjudge render`'s arguments and options."""

    results: Path = option(argument=True, help="Results JSONL written by `spanjudge score`.")
    out: Path | None = option(
        None, help="Page, JSONL or campaign folder (default: beside RESULTS, .html, .xcomet.jsonl, -factgenie)."
    )
    to: str = option(
        "html", help="html: the page; xcomet: JSONL with xCOMET-style error_spans; factgenie: a campaign folder."
    )
    dataset: str | None = option(None, help="factgenie: the outputs' dataset id (default: the rows' task).")
    split: str = option("test", help="factgenie: the split of the outputs.")
    setup: str = option("outputs", help="factgenie: the setup id (the system that wrote the outputs).")


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
        from .interchange import factgenie_campaign, write_factgenie_campaign

        target = out or results.with_name(f"{results.stem}-factgenie")
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
settings_command(export, ExportSettings, export_command)
