"""`spanjudge publish`: a trained judge and its model card, or an annotated dataset and its
dataset card, on the Hugging Face Hub. The command parses options and prints; the work is
`api.publish`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

publish = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


# the options, one type each, so the command's signature stays one line per option
RepoId = Annotated[str, typer.Option("--repo-id", help="Hub repository, owner/name (created if missing).")]
Model = Annotated[Path | None, typer.Option("--model", help="Run folder of `spanjudge train` (or its adapter/).")]
DatasetDir = Annotated[
    Path | None,
    typer.Option(
        "--dataset-dir",
        help="Instead of a judge, the folder `spanjudge annotate`/`import`/`merge` wrote: uploaded as a "
        "dataset repo with a dataset card.",
    ),
]
Private = Annotated[bool, typer.Option("--private", help="Create the repository as private.")]
Merged = Annotated[
    bool, typer.Option("--merged", help="Upload the adapter merged into the base (safetensors) instead.")
]
DryRun = Annotated[
    Path | None,
    typer.Option("--dry-run", help="Write exactly what would be uploaded into this folder; upload nothing."),
]
BaseModelId = Annotated[
    str | None,
    typer.Option("--base-model", help="Hub id of the base for the card (needed when trained on a local folder)."),
]
License = Annotated[str, typer.Option("--license", help="License id for the card metadata, e.g. apache-2.0, llama3.1.")]
Dataset = Annotated[
    list[str] | None, typer.Option("--dataset", help="Hub dataset id for the card metadata (repeatable).")
]
EvalResultsFile = Annotated[
    Path | None,
    typer.Option("--eval-results", help="Results JSON of `spanjudge meta-eval`: the card's table and model-index."),
]
JudgeName = Annotated[
    str | None,
    typer.Option(
        "--judge-name",
        help="The meta-eval judge whose rows go into the card (e.g. distilled:adapter); needed when "
        "--eval-results holds several non-baseline judges.",
    ),
]
SourceLicense = Annotated[
    list[str] | None,
    typer.Option(
        "--source-license",
        help="With --dataset-dir: SOURCE=LICENSE for a source dataset of the records (repeatable), e.g. "
        "xsum=mit; the card says 'unknown' for sources without one.",
    ),
]


@publish.command()
def publish_command(
    repo_id: RepoId,
    model: Model = None,
    dataset_dir: DatasetDir = None,
    private: Private = False,
    merged: Merged = False,
    dry_run: DryRun = None,
    base_model: BaseModelId = None,
    license_: License = "other",
    dataset: Dataset = None,
    eval_results: EvalResultsFile = None,
    judge_name: JudgeName = None,
    source_license: SourceLicense = None,
) -> None:
    """Upload a trained judge (--model) with a generated model card, or an annotated dataset
    (--dataset-dir) with a generated dataset card.

    Only an allow-list is uploaded: adapter weights and config (or merged safetensors with
    --merged), tokenizer files, spanjudge.json, the training config and the card — never
    checkpoints, optimizer or RNG states, pickles or tokens. Symbolic links and files outside
    the run folder are refused, safetensors are verified, and machine-local paths are cut to
    their names. The card's meta-evaluation rows are those of one judge. The token comes from $HF_TOKEN
    or `hf auth login`; it is needed unless --dry-run is given, and checked before any work.

    With --dataset-dir only train.jsonl, validation.jsonl, hf_dataset/ (rebuilt from them),
    stats.json, stats.md, run.json and the card are uploaded, with the same checks.
    """
    from rich.console import Console

    from .api import PublishOptions
    from .api import publish as run_publish

    console = Console(stderr=True, soft_wrap=True)
    options = PublishOptions(
        repo_id=repo_id, model=model, dataset_dir=dataset_dir, private=private, merged=merged, dry_run=dry_run,
        base_model=base_model, license=license_, datasets=tuple(dataset or ()), eval_results=eval_results,
        judge_name=judge_name, source_licenses=tuple(source_license or ()),
    )  # fmt: skip
    result = run_publish(options, say=console.print)
    for name, size in result.files:
        typer.echo(f"{_size(size):>10}  {name}")
    if result.url is None:
        console.print(
            f"dry run: {len(result.files)} files staged in {result.dry_run} for {result.target}; nothing uploaded"
        )
    else:
        typer.echo(result.url)
