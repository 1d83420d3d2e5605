"""The data-generation stage as functions, one per command: `annotate_outputs`,
`generate_outputs` and `import_records` (with `merge_shards` in `merge`).

Each takes the command's inputs already parsed (paths, endpoint overrides as a mapping) and
returns what the run left behind; the commands print it, the demo calls these directly.
Every model call is cached, so calling one again after a crash repeats none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from spanjudge.core.catalog import load_catalog
from spanjudge.core.paths import optional_data_dir
from spanjudge.core.progress import Tracker, tracker_bars
from spanjudge.core.sharding import Shard, parse_shard, shard_path

from .config import load_ensemble, load_sources
from .decontaminate import Decontamination, prepare
from .generate import GenerateSummary, run_generate
from .generate_config import load_generate_config
from .pipeline import RunSummary, run_pipeline
from .source_run import SourceRun
from .teacher import IdList, ImportSummary, import_annotations, load_import_config

Say = Callable[[str], None]


Summary = TypeVar("Summary", RunSummary, GenerateSummary, ImportSummary)  # one per stage


@dataclass(frozen=True)
class StageRun(Generic[Summary]):
    """A finished (or incomplete) run: its stage's summary, the decontamination it applied, its shard."""

    out: Path
    summary: Summary
    decontamination: Decontamination | None = None  # for annotate and import
    shard: Shard | None = None  # with --shard K/N


def annotate_outputs(
    ensemble: Path,
    sources: Path,
    out: Path,
    *,
    endpoints: Mapping[str, Sequence[str]] | None = None,
    cache: Path | None = None,
    data_dir: Path | None = None,
    refresh_unscored: bool = False,
    decontaminate_against: Path | None = None,
    allow_overlap: bool = False,
    shard: str | None = None,
    progress: Tracker | None = None,
    warn: Say | None = None,
) -> StageRun[RunSummary]:
    """Annotate the sources' outputs with the ensemble, merge with its supervisor (or by vote) and build the
    training data in `out` (see `spanjudge annotate --help`). `warn` hears, before the run,
    that `allow_overlap` keeps meta-evaluation inputs."""

    part = parse_shard(shard)  # a bad K/N is one line before anything is read
    ensemble_config = load_ensemble(ensemble, endpoints or {})
    sources_config = load_sources(sources)
    root = optional_data_dir(data_dir)  # only an error if asked for (or a source uses $DATA/)
    decontamination = prepare(decontaminate_against, allow_overlap, root)
    if allow_overlap and warn is not None:  # loudly, before the run as well as after it
        warn(decontamination.lines()[-1])
    run = SourceRun(
        sources_config, sources, out, load_catalog(), root,
        shard_path(cache, part) if cache is not None else None, progress, part,
    )  # fmt: skip
    summary = run_pipeline(ensemble_config, run, refresh_unscored=refresh_unscored, decontamination=decontamination)
    return StageRun(out, summary, decontamination, part)


def generate_outputs(
    systems: Path,
    sources: Path,
    out: Path,
    *,
    endpoints: Mapping[str, Sequence[str]] | None = None,
    cache: Path | None = None,
    data_dir: Path | None = None,
    shard: str | None = None,
    progress: Tracker | None = None,
) -> StageRun[GenerateSummary]:
    """New outputs from the systems for every input of the sources, in `out` (see
    `spanjudge generate --help`)."""

    part = parse_shard(shard)
    generate_config = load_generate_config(systems, endpoints or {})
    sources_config = load_sources(sources)
    run = SourceRun(
        sources_config, sources, out, load_catalog(), optional_data_dir(data_dir),
        shard_path(cache, part) if cache is not None else None, progress, part,
    )  # fmt: skip
    summary = run_generate(generate_config, systems, run)
    return StageRun(out, summary, shard=part)


def import_records(
    config: Path,
    out: Path,
    *,
    decontaminate_against: Path | None = None,
    allow_overlap: bool = False,
    data_dir: Path | None = None,
    ids: Path | None = None,
    warn: Say | None = None,
) -> StageRun[ImportSummary]:
    """Training records from existing annotations (no model call), in `out` (see
    `spanjudge import --help`)."""

    id_list = None if ids is None else IdList.read(ids)
    import_config = load_import_config(config)
    catalog = load_catalog()
    decontamination = prepare(decontaminate_against, allow_overlap, optional_data_dir(data_dir), catalog)
    if allow_overlap and warn is not None:
        warn(decontamination.lines()[-1])
    summary = import_annotations(import_config, config.parent, out, catalog, decontamination, data_dir, id_list)
    return StageRun(out, summary, decontamination)


@contextlib.contextmanager
def model_progress(console: Console) -> Iterator[Tracker]:
    """One progress row per model: done/total, cached and failed calls."""
    columns = (
        TextColumn("{task.description:<18}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("cached {task.fields[cached]}  failed {task.fields[failed]}"),
        TimeElapsedColumn(),
    )
    with tracker_bars(*columns, console=console) as tracker:  # log lines when not a terminal
        yield tracker
