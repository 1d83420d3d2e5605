"""`publish(PublishOptions) -> Published`: the one function behind `spanjudge publish`.

It checks the options together (a judge or a dataset, never both; the token before any work),
stages into `--dry-run DIR` (and stops) or into a temporary folder that is uploaded as one
commit, and returns what was staged and where it went; printing is the caller's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.keyvalue import parse_texts
from spanjudge.core.options import option

from .benchmark import BenchmarkOptions, stage_benchmark
from .card import CardOptions
from .dataset import read_dataset_folder
from .dataset_card import DatasetCardOptions
from .dataset_staging import stage_dataset
from .eval_results import FOLDER, HubDataset, eval_result_files, hub_datasets
from .hub import check_repo_id, hub_token, is_hub_benchmark, upload
from .model_staging import stage
from .results import read_eval_results
from .run_folder import card_base_model, read_run
from .staging import check_dry_run_target

Say = Callable[[str], None]
# stages into a folder with a token (None for a dry run); returns the staged file names
StageInto = Callable[[Path, str | None], list[str]]
# a stager, and the folders it reads from (a dry run never writes into or over them)
Stager = tuple[StageInto, list[Path]]


@dataclass(frozen=True, kw_only=True)
class PublishOptions:
    """What `spanjudge publish` was asked for: each field is also its option (`core.options`)."""

    repo_id: str = option(help="Hub repository, owner/name (created if missing).")
    model: Path | None = option(None, help="Run folder of `spanjudge train` (or its adapter/).")
    dataset_dir: Path | None = option(
        None,
        help="Instead of a judge, the folder `spanjudge annotate`/`import`/`merge` wrote: uploaded as a dataset repo "
        "with a dataset card.",
    )
    benchmark: str | None = option(
        None,
        help="Instead of a judge or a dataset, a span set with inputs (eval/spans/sets.py: quintd1, quintd1:dev, "
        "quintd1:test, rotowire) "
        "as a Hub Benchmark: a dataset repo with the data, a dataset card, an eval.yaml (inspect-ai) and the inspect "
        "task that scores a judge's spans with MPP.",
    )
    data_dir: Path | None = option(
        None, help="--benchmark: the shared data folder (default ../shared/data or $SPANJUDGE_DATA)."
    )
    max_items: int | None = option(None, help="--benchmark: the set's first N outputs only.")
    private: bool = option(False, help="Create the repository as private.")
    merged: bool = option(False, help="Upload the adapter merged into the base (safetensors) instead.")
    dry_run: Path | None = option(None, help="Write exactly what would be uploaded into this folder; upload nothing.")
    base_model: str | None = option(
        None, help="Hub id of the base for the card (needed when trained on a local folder)."
    )
    license: str = option("other", help="License id for the card metadata, e.g. apache-2.0, llama3.1.")
    datasets: list[str] = option([], flag="--dataset", help="Hub dataset id for the card metadata (repeatable).")
    eval_results: Path | None = option(
        None, help="Results JSON of `spanjudge meta-eval`: the card's table and model-index."
    )
    hub_datasets: list[str] = option(
        [],
        flag="--hub-dataset",
        help="NAME=OWNER/DATASET[:TASK_ID]: the Hub benchmark dataset of the meta-eval set NAME of --eval-results, "
        "for the Hub's evaluation results (.eval_results/*.yaml; task id 'default' when not given; repeatable). "
        "Sets without one stay in the card's table and model-index only.",
    )
    judge_name: str | None = option(
        None,
        help="The meta-eval judge whose rows go into the card (e.g. distilled:adapter); needed when --eval-results "
        "holds several non-baseline judges.",
    )
    source_licenses: list[str] = option(
        [],
        flag="--source-license",
        help="With --dataset-dir: SOURCE=LICENSE for a source dataset of the records (repeatable), e.g. xsum=mit; "
        "the card says 'unknown' for sources without one.",
    )


@dataclass(frozen=True)
class Published:
    target: str  # the repo, as a message names it
    files: list[tuple[str, int]]  # staged file names (relative to the staged folder) and sizes
    dry_run: Path | None  # where the files were left, for a dry run
    url: str | None  # the commit, after an upload


def _check_options(options: PublishOptions) -> None:
    """Options that contradict each other, before anything is read."""
    if sum(x is not None for x in (options.model, options.dataset_dir, options.benchmark)) != 1:
        raise InputError(
            "give --model RUN_FOLDER (a judge), --dataset-dir FOLDER (an annotated dataset) or --benchmark SET "
            "(a span set as a Hub Benchmark), one of them"
        )
    if options.benchmark is None and (options.data_dir is not None or options.max_items is not None):
        raise InputError("--data-dir and --max-items choose a --benchmark's outputs; give --benchmark SET too")
    if options.benchmark is not None:
        given = {"--merged": options.merged, "--base-model": options.base_model, "--dataset": options.datasets,
                 "--eval-results": options.eval_results, "--judge-name": options.judge_name,
                 "--hub-dataset": options.hub_datasets, "--source-license": options.source_licenses}  # fmt: skip
        if stray := [name for name, value in given.items() if value]:
            raise InputError(f"{stray[0]} does not go with --benchmark (a span set's repository)")
        if options.max_items is not None and options.max_items < 1:
            raise InputError(f"--max-items must be at least 1, got {options.max_items}")
    elif options.dataset_dir is not None:
        given = {"--merged": options.merged, "--base-model": options.base_model, "--dataset": options.datasets,
                 "--eval-results": options.eval_results, "--judge-name": options.judge_name,
                 "--hub-dataset": options.hub_datasets}  # fmt: skip
        if stray := [name for name, value in given.items() if value]:
            raise InputError(f"{stray[0]} describes a judge; it does not go with --dataset-dir")
    elif options.source_licenses:
        raise InputError("--source-license describes a dataset's sources; it goes with --dataset-dir")
    for flag, value in (("--judge-name", options.judge_name), ("--hub-dataset", options.hub_datasets)):
        if value and options.eval_results is None:
            raise InputError(f"{flag} describes rows of --eval-results; give --eval-results FILE too")


def _token(options: PublishOptions) -> str | None:
    """The Hub token for an upload (checked before any work); None for a dry run."""
    if options.dry_run is not None:
        return None
    token = hub_token()
    if not token:
        raise SpanjudgeError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login` (or stage without uploading: --dry-run DIR)"
        )
    return token


def _license(value: str) -> str:
    license_ = value.strip()
    if not license_ or any(c.isspace() for c in license_):
        raise InputError(f"--license must be a license id such as apache-2.0 or other, got '{value}'")
    return license_


def source_licenses(values: Sequence[str]) -> dict[str, str]:
    """--source-license SOURCE=LICENSE options, by source."""
    found = parse_texts(values, "--source-license", "xsum=mit", "SOURCE=LICENSE")
    spaced = [name for name, license_ in found.items() if any(c.isspace() for c in license_)]
    if spaced:
        raise InputError(f"--source-license {spaced[0]}: a license id has no spaces (e.g. cc-by-4.0)")
    return found


def _say_unknown_benchmarks(datasets: Iterable[HubDataset], say: Say) -> None:
    """A line for each --hub-dataset not known to be a Hub Benchmark: its results show on the model page, but on a
    leaderboard only once the dataset has an eval.yaml (`spanjudge publish --benchmark SET` stages one)."""
    for dataset in datasets:
        known = is_hub_benchmark(dataset.id, hub_token())
        if known:
            continue
        why = "has no eval.yaml on the Hub" if known is False else "could not be checked here (offline or not found)"
        say(
            f"warning: --hub-dataset {dataset.id} {why}, so it is not known to be a Hub Benchmark: its results "
            "show on the model page, and on a leaderboard only once the dataset is one (`spanjudge publish "
            "--benchmark SET` stages a span set as one)"
        )


def _judge_stager(options: PublishOptions, license_: str, say: Say) -> Stager:
    assert options.model is not None
    run = read_run(options.model)
    if run.full and options.merged:
        raise InputError(
            f"--merged merges a LoRA adapter into its base; {run.adapter} was fully fine-tuned, its weights are the "
            "whole model already: leave --merged out"
        )
    results = read_eval_results(options.eval_results, options.judge_name) if options.eval_results else None
    card = CardOptions(
        repo_id=options.repo_id,
        base_model=card_base_model(run.recorded_base, options.base_model),
        merged=options.merged,
        full=run.full,
        license=license_,
        datasets=tuple(options.datasets),
        eval_results=results,
    )
    named = hub_datasets(options.hub_datasets)
    listed = eval_result_files(results, named) if results else None
    _say_unknown_benchmarks(named.values(), say)
    if listed is not None and listed.unmapped:
        say(
            f"{FOLDER}/: no --hub-dataset for {', '.join(listed.unmapped)}; their rows are in the card's table and "
            "model-index only"
        )
    files = listed.files if listed is not None else {}
    sources = [run.adapter, *([run.run_dir] if run.run_dir is not None else [])]
    return (lambda out, token: stage(run, out, card, files, say=say, token=token)), sources


def _dataset_stager(options: PublishOptions, license_: str) -> Stager:
    assert options.dataset_dir is not None
    card = DatasetCardOptions(
        repo_id=options.repo_id, license=license_, source_licenses=source_licenses(options.source_licenses)
    )
    data = read_dataset_folder(options.dataset_dir)
    return (lambda out, token: stage_dataset(data, out, card, token=token)), [data.folder]


def _benchmark_stager(options: PublishOptions, license_: str) -> Stager:
    assert options.benchmark is not None
    benchmark = BenchmarkOptions(options.benchmark, options.repo_id, license_, options.data_dir, options.max_items)
    return (lambda out, token: stage_benchmark(benchmark, out)), []


def _sizes(folder: Path, names: list[str]) -> list[tuple[str, int]]:
    return [(name, (folder / name).stat().st_size) for name in names]


def publish(options: PublishOptions, say: Say = print) -> Published:
    """Stage a judge (--model), an annotated dataset (--dataset-dir) or a benchmark (--benchmark) and upload it,
    or leave it in the dry-run folder."""
    check_repo_id(options.repo_id)
    _check_options(options)
    token = _token(options)
    license_ = _license(options.license)
    is_dataset = options.dataset_dir is not None or options.benchmark is not None
    if options.benchmark is not None:
        stage_into, sources = _benchmark_stager(options, license_)
    elif options.dataset_dir is not None:
        stage_into, sources = _dataset_stager(options, license_)
    else:
        stage_into, sources = _judge_stager(options, license_, say)
    target = f"the dataset {options.repo_id}" if is_dataset else options.repo_id
    if options.dry_run is not None:
        check_dry_run_target(options.dry_run, sources)
        names = stage_into(options.dry_run, None)
        return Published(target, _sizes(options.dry_run, names), options.dry_run, None)
    assert token is not None
    if options.benchmark is not None:
        message = f"spanjudge publish: the benchmark {options.benchmark} (data, card, eval.yaml, inspect task)"
    elif is_dataset:
        message = "spanjudge publish: annotated dataset and dataset card"
    with tempfile.TemporaryDirectory(prefix="spanjudge-publish-") as tmp:
        staged = Path(tmp) / "staged"
        files = _sizes(staged, stage_into(staged, token))
        if not is_dataset:  # what the weights staged are: an adapter, merged weights or a fully fine-tuned model
            adapter = (staged / "adapter_model.safetensors").is_file()
            what = "LoRA adapter" if adapter else "merged model" if options.merged else "fully fine-tuned model"
            message = f"spanjudge publish: {what} and model card"
        say(f"uploading {len(files)} files to {target}{' (private)' if options.private else ''}")
        url = upload(
            staged,
            options.repo_id,
            private=options.private,
            token=token,
            message=message,
            repo_type="dataset" if is_dataset else "model",
        )
    return Published(target, files, None, url)
