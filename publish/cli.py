"""`spanjudge publish`: a trained judge and its model card, or an annotated dataset and its
dataset card, on the Hugging Face Hub. The command parses options and prints; the work is
`api.publish`."""

from __future__ import annotations

import typer

from spanjudge.core.options import settings_command

from .api import PublishOptions
from .api import publish as run_publish

publish = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def publish_command(options: PublishOptions) -> None:
    """Upload a trained judge (--model) with a generated model card, an annotated dataset
    (--dataset-dir) with a generated dataset card, or a span set as a Hub Benchmark (--benchmark SET:
    the data, a dataset card, an eval.yaml and the inspect task that scores a judge's spans with MPP).

    Only an allow-list is uploaded: adapter weights and config (or merged safetensors with
    --merged), tokenizer files, spanjudge.json, the training config and the card — never
    checkpoints, optimizer or RNG states, pickles or tokens. Symbolic links and files outside
    the run folder are refused, safetensors are verified, and machine-local paths are cut to
    their names. The card's meta-evaluation rows are those of one judge; with --hub-dataset they are also
    written as the Hub's evaluation results (.eval_results/*.yaml), which the model page and the benchmark's
    leaderboard list; a --hub-dataset not known to be a Hub Benchmark (no eval.yaml) is warned about. The token
    comes from $HF_TOKEN
    or `hf auth login`; it is needed unless --dry-run is given, and checked before any work.

    With --dataset-dir only train.jsonl, validation.jsonl, hf_dataset/ (rebuilt from them),
    stats.json, stats.md, run.json and the card are uploaded, with the same checks.
    """
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)
    result = run_publish(options, say=console.print)
    for name, size in result.files:
        typer.echo(f"{_size(size):>10}  {name}")
    if result.url is None:
        console.print(
            f"dry run: {len(result.files)} files staged in {result.dry_run} for {result.target}; nothing uploaded"
        )
    else:
        typer.echo(result.url)


settings_command(publish, PublishOptions, publish_command)
