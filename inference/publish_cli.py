"""`spanjudge publish`: a trained judge and its model card, or an annotated dataset and its
dataset card, on the Hugging Face Hub."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from .errors import InputError

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
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repository, owner/name (created if missing).")],
    model: Annotated[
        Path | None, typer.Option("--model", help="Run folder of `spanjudge train` (or its adapter/).")
    ] = None,
    dataset_dir: Annotated[
        Path | None,
        typer.Option(
            "--dataset-dir",
            help="Instead of a judge, the folder `spanjudge annotate`/`import`/`merge` wrote: uploaded as a "
            "dataset repo with a dataset card.",
        ),
    ] = None,
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
    source_license: Annotated[
        list[str] | None,
        typer.Option(
            "--source-license",
            help="With --dataset-dir: SOURCE=LICENSE for a source dataset of the records (repeatable), e.g. "
            "xsum=mit; the card says 'unknown' for sources without one.",
        ),
    ] = None,
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

    from .errors import SpanjudgeError
    from .publish import (
        CardOptions,
        card_base_model,
        check_dry_run_target,
        check_repo_id,
        hub_token,
        read_eval_results,
        read_run,
        stage,
    )

    console = Console(stderr=True, soft_wrap=True)
    check_repo_id(repo_id)
    if (model is None) == (dataset_dir is None):
        raise InputError(
            "give --model RUN_FOLDER (a judge) or --dataset-dir FOLDER (an annotated dataset), one of them"
        )
    if dataset_dir is not None:
        given = {"--merged": merged, "--base-model": base_model, "--dataset": dataset, "--eval-results": eval_results,
                 "--judge-name": judge_name}  # fmt: skip
        if stray := [name for name, value in given.items() if value]:
            raise InputError(f"{stray[0]} describes a judge; it does not go with --dataset-dir")
    elif source_license:
        raise InputError("--source-license describes a dataset's sources; it goes with --dataset-dir")
    if judge_name is not None and eval_results is None:
        raise InputError("--judge-name selects rows of --eval-results; give --eval-results FILE too")
    token = None
    if dry_run is None:
        token = hub_token()
        if not token:
            raise SpanjudgeError(
                "no Hugging Face token: set HF_TOKEN or run `hf auth login` (or stage without uploading: --dry-run DIR)"
            )
    elif dataset_dir is not None:
        from .publish_dataset import staged_entry

        check_dry_run_target(dry_run, staged_entry)
    else:
        check_dry_run_target(dry_run)
    if not license_.strip() or any(c.isspace() for c in license_.strip()):
        raise InputError(f"--license must be a license id such as apache-2.0 or other, got '{license_}'")
    if dataset_dir is not None:
        _publish_dataset(dataset_dir, repo_id, license_.strip(), source_license or [], dry_run, token, private)
        return
    assert model is not None
    run = read_run(model)
    options = CardOptions(
        repo_id=repo_id,
        base_model=card_base_model(run.recorded_base, base_model),
        merged=merged,
        license=license_.strip(),
        datasets=tuple(dataset or ()),
        eval_results=read_eval_results(eval_results, judge_name) if eval_results is not None else None,
    )
    _stage_and_upload(
        lambda out, token: stage(run, out, options, say=console.print, token=token),
        repo_id=repo_id,
        dry_run=dry_run,
        token=token,
        private=private,
        message=f"spanjudge publish: {'merged model' if merged else 'LoRA adapter'} and model card",
        repo_type="model",
    )


def _source_licenses(values: list[str]) -> dict[str, str]:
    """--source-license SOURCE=LICENSE options, by source."""
    found: dict[str, str] = {}
    for text in values:
        name, sep, license_ = (part.strip() for part in text.partition("="))
        if not sep or not name or not license_ or any(c.isspace() for c in license_):
            raise InputError(f"--source-license expects SOURCE=LICENSE (e.g. xsum=mit), got {text!r}")
        found[name] = license_
    return found


def _publish_dataset(
    folder: Path,
    repo_id: str,
    license_: str,
    licenses: list[str],
    dry_run: Path | None,
    token: str | None,
    private: bool,
) -> None:
    """Stage the annotated dataset (into --dry-run DIR, else a temporary folder) and upload it."""
    from .publish_dataset import DatasetCardOptions, read_dataset_folder, stage_dataset

    options = DatasetCardOptions(repo_id=repo_id, license=license_, source_licenses=_source_licenses(licenses))
    data = read_dataset_folder(folder)
    _stage_and_upload(
        lambda out, token: stage_dataset(data, out, options, token=token),
        repo_id=repo_id,
        dry_run=dry_run,
        token=token,
        private=private,
        message="spanjudge publish: annotated dataset and dataset card",
        repo_type="dataset",
    )


def _stage_and_upload(
    stage_into: Callable[[Path, str | None], list[str]],
    *,
    repo_id: str,
    dry_run: Path | None,
    token: str | None,
    private: bool,
    message: str,
    repo_type: str,
) -> None:
    """Stage into --dry-run DIR (and stop), or into a temporary folder that is uploaded."""
    from rich.console import Console

    from .publish import upload

    console = Console(stderr=True, soft_wrap=True)
    target = f"the dataset {repo_id}" if repo_type == "dataset" else repo_id
    if dry_run is not None:
        names = stage_into(dry_run, None)
        _list(dry_run, names)
        console.print(f"dry run: {len(names)} files staged in {dry_run} for {target}; nothing uploaded")
        return
    assert token is not None
    with tempfile.TemporaryDirectory(prefix="spanjudge-publish-") as tmp:
        staged = Path(tmp) / "staged"
        names = stage_into(staged, token)
        _list(staged, names)
        console.print(f"uploading {len(names)} files to {target}{' (private)' if private else ''}")
        url = upload(staged, repo_id, private=private, token=token, message=message, repo_type=repo_type)
    typer.echo(url)


def _list(folder: Path, names: list[str]) -> None:
    for name in names:
        typer.echo(f"{_size((folder / name).stat().st_size):>10}  {name}")
