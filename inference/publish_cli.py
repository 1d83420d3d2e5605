"""`spanjudge publish`: a trained judge and its model card on the Hugging Face Hub."""

from __future__ import annotations

import tempfile
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


@publish.command()
def publish_command(
    model: Annotated[Path, typer.Option("--model", help="Run folder of `spanjudge train` (or its adapter/).")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repository, owner/name (created if missing).")],
    private: Annotated[bool, typer.Option("--private", help="Create the repository as private.")] = False,
    merged: Annotated[
        bool, typer.Option("--merged", help="Upload the adapter merged into the base (safetensors) instead.")
    ] = False,
    dry_run: Annotated[
        Path | None,
        typer.Option("--dry-run", help="Write exactly what would be uploaded into this folder; upload nothing."),
    ] = None,
    base_model: Annotated[
        str | None,
        typer.Option("--base-model", help="Hub id of the base for the card (needed when trained on a local folder)."),
    ] = None,
    license_: Annotated[
        str, typer.Option("--license", help="License id for the card metadata, e.g. apache-2.0, llama3.1.")
    ] = "other",
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="Hub dataset id for the card metadata (repeatable).")
    ] = None,
    eval_results: Annotated[
        Path | None,
        typer.Option("--eval-results", help="Results JSON of `spanjudge meta-eval`: the card's table and model-index."),
    ] = None,
    judge_name: Annotated[
        str | None,
        typer.Option(
            "--judge-name",
            help="The meta-eval judge whose rows go into the card (e.g. distilled:adapter); needed when "
            "--eval-results holds several non-baseline judges.",
        ),
    ] = None,
) -> None:
    """Upload a trained judge with a generated model card.

    Only an allow-list is uploaded: adapter weights and config (or merged safetensors with
    --merged), tokenizer files, spanjudge.json, the training config and the card — never
    checkpoints, optimizer or RNG states, pickles or tokens. Symbolic links and files outside
    the run folder are refused, safetensors are verified, and machine-local paths are cut to
    their names. The card's meta-evaluation rows are those of one judge. The token comes from $HF_TOKEN
    or `hf auth login`; it is needed unless --dry-run is given, and checked before any work.
    """
    from rich.console import Console

    from .errors import InputError, SpanjudgeError
    from .publish import (
        CardOptions,
        card_base_model,
        check_dry_run_target,
        check_repo_id,
        hub_token,
        read_eval_results,
        read_run,
        stage,
        upload,
    )

    console = Console(stderr=True, soft_wrap=True)
    check_repo_id(repo_id)
    if judge_name is not None and eval_results is None:
        raise InputError("--judge-name selects rows of --eval-results; give --eval-results FILE too")
    token = None
    if dry_run is None:
        token = hub_token()
        if not token:
            raise SpanjudgeError(
                "no Hugging Face token: set HF_TOKEN or run `hf auth login` (or stage without uploading: --dry-run DIR)"
            )
    else:
        check_dry_run_target(dry_run)
    if not license_.strip() or any(c.isspace() for c in license_.strip()):
        raise InputError(f"--license must be a license id such as apache-2.0 or other, got '{license_}'")
    run = read_run(model)
    options = CardOptions(
        repo_id=repo_id,
        base_model=card_base_model(run.recorded_base, base_model),
        merged=merged,
        license=license_.strip(),
        datasets=tuple(dataset or ()),
        eval_results=read_eval_results(eval_results, judge_name) if eval_results is not None else None,
    )
    say = console.print
    if dry_run is not None:
        names = stage(run, dry_run, options, say=say)
        _list(dry_run, names)
        console.print(f"dry run: {len(names)} files staged in {dry_run} for {repo_id}; nothing uploaded")
        return
    assert token is not None
    with tempfile.TemporaryDirectory(prefix="spanjudge-publish-") as tmp:
        folder = Path(tmp) / "staged"
        names = stage(run, folder, options, say=say, token=token)
        _list(folder, names)
        console.print(f"uploading {len(names)} files to {repo_id}{' (private)' if private else ''}")
        url = upload(
            folder,
            repo_id,
            private=private,
            token=token,
            message=f"spanjudge publish: {'merged model' if merged else 'LoRA adapter'} and model card",
        )
    typer.echo(url)


def _list(folder: Path, names: list[str]) -> None:
    for name in names:
        typer.echo(f"{_size((folder / name).stat().st_size):>10}  {name}")
