"""Publish an annotated dataset to the Hugging Face Hub: an allow-listed staging folder and its dataset card.

`spanjudge publish --dataset-dir DIR` reads the folder that `spanjudge annotate`, `import` or
`merge` wrote and stages exactly what will be uploaded (with `--dry-run OUT`, into OUT, for
reading):

- `train.jsonl`, `validation.jsonl`: the records, each `provenance` with machine-local paths cut
  to their last component (a record's `source` names the file it came from);
- `hf_dataset/`: the same records as the Arrow DatasetDict annotate saves (`hub_data.to_hub_row`),
  rebuilt from the staged JSONL so both hold the same cleaned records; the card's `configs` point
  the Hub's viewer and `datasets.load_dataset` at its Arrow files;
- `stats.json`, `run.json` (machine-local paths cut), `stats.md`;
- `README.md`: the dataset card written here (licence, task categories, configs/splits; the
  annotators and supervisors, counts, the sources' licences where known, how it was made).

Nothing else is read: no `cache.sqlite`, `unscored.jsonl`, `incomplete.jsonl`, shards or locks.
The same rules as model publishing (`publish.py`) hold: what is read must be a regular file
inside the folder (no symbolic link, nothing resolving outside), and before anything leaves the
machine every staged file is scanned for token-like strings and the metadata and provenance for
the folder's and the home folder's paths.

A source's licence comes from `--source-license NAME=LICENSE`, else from a `license` (or
`licence`) that run.json records beside the source's `name`/`dataset`; otherwise the card says
"unknown".
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, SpanjudgeError
from .fileio import atomic_directory, atomic_write_jsonl
from .hub_data import to_hub_row
from .publish import (
    CARD_FILE,
    _cell,
    _fence,
    _holds_secret,
    _read_json,
    _regular,
    _table,
    category_table,
    check_inside,
    local_path_pattern,
    strip_local_paths,
)
from .tabular import iter_jsonl

SPLITS = ("train", "validation")
RECORD_FILES = tuple(f"{split}.jsonl" for split in SPLITS)
METADATA_FILES = ("stats.json", "stats.md", "run.json")
HF_FOLDER = "hf_dataset"
TAGS = ("spanjudge", "nlg-evaluation", "llm-as-a-judge", "error-spans")
UNKNOWN = "unknown"
_HF_FILE = re.compile(
    rf"^{HF_FOLDER}/(?:dataset_dict\.json|(?:{'|'.join(SPLITS)})/(?:state\.json|dataset_info\.json|"
    r"data-\d{5}-of-\d{5}\.arrow))$"
)
_CHUNK = 8 << 20  # the secret scan reads files in pieces: a dataset can be larger than memory likes
_OVERLAP = 256  # bytes kept between pieces, so a token split across two is still seen


def staged_name(name: str) -> bool:
    """Whether a staged file (its path relative to the staging folder, with /) is on the allow-list."""
    return name in RECORD_FILES or name in METADATA_FILES or name == CARD_FILE or bool(_HF_FILE.match(name))


def staged_entry(path: Path) -> bool:
    """An entry an earlier dataset dry run wrote (for `check_dry_run_target`)."""
    if path.name == HF_FOLDER:
        return path.is_dir() and not path.is_symlink()
    return path.is_file() and staged_name(path.name)


# ---------------------------------------------------------------------------------------
# Reading the folder


@dataclass(frozen=True)
class DatasetFolder:
    """An annotation folder, as far as publishing needs it; records have their paths cut."""

    folder: Path
    splits: dict[str, list[dict[str, Any]]]  # the JSONL files present, by split (may be empty)
    run: dict[str, Any]
    stats: dict[str, Any]
    stats_md: str | None

    @property
    def records(self) -> list[dict[str, Any]]:
        return [record for records in self.splits.values() for record in records]


def _source(folder: Path, name: str) -> Path | None:
    """folder/name when present (checked: a regular file inside the folder), else None."""
    path = folder / name
    if not (path.is_symlink() or path.exists()):
        return None
    check_inside(path, folder)
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    return path


def _clean_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record with machine-local paths in its provenance cut; texts are never touched
    (an output may well begin with '/')."""
    if "provenance" not in record:
        return record
    return {**record, "provenance": strip_local_paths(record["provenance"])}


def read_dataset_folder(folder: Path) -> DatasetFolder:
    """The records, run.json and stats of an annotation folder (not a shard: merge those first)."""
    folder = folder.expanduser()
    if not folder.is_dir():
        raise InputError(f"--dataset-dir {folder}: not a folder")
    paths = {name: _source(folder, name) for name in (*RECORD_FILES, *METADATA_FILES)}
    if paths["train.jsonl"] is None:
        hint = " (a shard: join the shards with `spanjudge merge` first)" if (folder / "records.jsonl").exists() else ""
        raise InputError(
            f"--dataset-dir {folder}: no train.jsonl; not a folder written by spanjudge annotate, import or merge{hint}"
        )
    splits = {
        split: [_clean_record(record) for _, record in iter_jsonl(path)]
        for split in SPLITS
        if (path := paths[f"{split}.jsonl"]) is not None
    }
    if not any(splits.values()):
        raise InputError(f"--dataset-dir {folder}: train.jsonl and validation.jsonl hold no records")
    stats_md = paths["stats.md"]
    return DatasetFolder(
        folder=folder,
        splits=splits,
        # cut here, so the card quotes them as they are staged
        run=strip_local_paths(_read_json(paths["run.json"])) if paths["run.json"] else {},
        stats=strip_local_paths(_read_json(paths["stats.json"])) if paths["stats.json"] else {},
        stats_md=stats_md.read_text(encoding="utf-8") if stats_md else None,
    )


# ---------------------------------------------------------------------------------------
# What the card says


@dataclass(frozen=True)
class DatasetCardOptions:
    repo_id: str
    license: str = "other"
    source_licenses: Mapping[str, str] = field(default_factory=dict)


def _licenses_in(data: Any) -> dict[str, str]:
    """Licences that run.json records: {"licenses": {name: id}}, or a `license` beside a
    source's `name`/`dataset` anywhere in it."""
    found: dict[str, str] = {}
    if isinstance(data, Mapping):
        for key in ("licenses", "licences"):
            if isinstance(data.get(key), Mapping):
                found.update({str(k): str(v) for k, v in data[key].items() if isinstance(v, str)})
        license_ = data.get("license", data.get("licence"))
        name = data.get("name", data.get("dataset"))
        if isinstance(license_, str) and isinstance(name, str):
            found[name] = license_
        for value in data.values():
            found = {**_licenses_in(value), **found}
    elif isinstance(data, list):
        for value in data:
            found = {**_licenses_in(value), **found}
    return found


def source_counts(data: DatasetFolder) -> Counter[str]:
    """Records per source dataset (the records' `dataset` field)."""
    return Counter(str(record.get("dataset") or UNKNOWN) for record in data.records)


def source_licenses(data: DatasetFolder, given: Mapping[str, str]) -> dict[str, str]:
    """Each source's licence: --source-license, else run.json, else "unknown"."""
    sources = sorted(source_counts(data))
    stray = sorted(set(given) - set(sources))
    if stray:
        raise InputError(
            f"--source-license {stray[0]}=...: no source of that name in the records (sources: {', '.join(sources)})"
        )
    recorded = _licenses_in(data.run)
    return {name: given.get(name) or recorded.get(name) or UNKNOWN for name in sources}


@dataclass
class Models:
    """The models behind the records: name -> model id (None where not recorded)."""

    annotators: dict[str, str | None] = field(default_factory=dict)
    supervisors: dict[str, str | None] = field(default_factory=dict)
    ensembles: set[str] = field(default_factory=set)


def _note(found: dict[str, str | None], entry: Any) -> None:
    if isinstance(entry, Mapping) and entry.get("name"):
        name = str(entry["name"])
        found[name] = found.get(name) or (str(entry["model_id"]) if entry.get("model_id") else None)


def models_of(records: Iterable[Mapping[str, Any]]) -> Models:
    """The annotators and supervisors named in the records' provenance."""
    models = Models()
    for record in records:
        provenance = record.get("provenance")
        if not isinstance(provenance, Mapping):
            continue
        for entry in provenance.get("annotators") or []:
            _note(models.annotators, entry)
        _note(models.supervisors, provenance.get("supervisor"))
        if provenance.get("ensemble"):
            models.ensembles.add(str(provenance["ensemble"]))
    return models


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def _code(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _how_made(data: DatasetFolder, models: Models) -> list[str]:
    run = data.run
    lines = ["## How it was made", ""]
    if run.get("format"):  # only `spanjudge import` records the format it read
        scored = (
            f"the score was computed by a declared rule: {run['rule']}."
            if run.get("rule")
            else "the released scores were kept."
        )
        lines.append(
            f"Imported with `spanjudge import` from existing teacher annotations (format `{run['format']}`): each "
            "annotated error was anchored to character offsets of the output, and " + scored
        )
    else:
        ensemble = f" `{', '.join(sorted(models.ensembles))}`" if models.ensembles else ""
        lines.append(
            f"Annotated with `spanjudge annotate` by the LLM ensemble{ensemble}: each annotator model found the "
            "errors of a system output for one aspect (location, explanation, severity 1-5) and rated it; the score "
            "is the mean rating after dropping outliers, and a supervisor model merged the annotators' error sets "
            "into one (at most 8 errors, the most severe kept, anchored to character offsets of the output). "
            "Outputs whose replies did not parse are left out (`unscored`), never given a made-up score."
        )
    if run.get("merged_from"):
        lines += ["", f"The folder was joined from {len(run['merged_from'])} shards with `spanjudge merge`."]
    lines += _decontamination(run.get("decontamination"))
    lines += [
        "",
        "Records are split into train and validation by input: no input (with all its outputs and aspects) is in both.",
    ]
    return lines


def _decontamination(found: Any) -> list[str]:
    """What annotate did about inputs of the meta-evaluation sets (its run.json `decontamination`)."""
    if not isinstance(found, Mapping):
        return []
    against = f" (`{found['against']}`)" if found.get("against") else ""
    overlapping = _cell(found.get("overlapping_inputs"))
    if found.get("allow_overlap"):
        done = f"{overlapping} inputs that occur in them were kept (`--allow-overlap`)"
    else:
        done = f"{_cell(found.get('excluded_examples'))} examples of {overlapping} such inputs were left out"
    return ["", f"Inputs were checked against the meta-evaluation sets{against}: {done}; run.json lists them."]


def _annotators(data: DatasetFolder, models: Models) -> list[str]:
    lines = ["## Annotators and supervisor", ""]
    failures = data.stats.get("parse_failure_rate") or {}
    rows = [(name, model, "annotator", failures.get(name)) for name, model in models.annotators.items()]
    rows += [(name, model, "supervisor", failures.get(name)) for name, model in models.supervisors.items()]
    for name in failures:  # annotators named only in stats.json
        if name not in models.annotators and name not in models.supervisors:
            rows.append((name, None, "annotator", failures[name]))
    if not rows:
        lines.append("The records name no annotator or supervisor models.")
        return lines
    lines += _table(
        ("name", "model", "role", "parse failure rate"),
        (
            (name, model, role, f"{rate:.2%}" if isinstance(rate, int | float) else None)
            for name, model, role, rate in rows
        ),
    )
    teachers = sorted({str(r["provenance"]["teacher"]) for r in data.records if _teacher(r)})
    if teachers:
        lines += ["", f"Teacher annotations by {_code(teachers)}."]
    return lines


def _teacher(record: Mapping[str, Any]) -> bool:
    provenance = record.get("provenance")
    return isinstance(provenance, Mapping) and bool(provenance.get("teacher"))


def _counts(data: DatasetFolder, licenses: Mapping[str, str]) -> list[str]:
    run, stats = data.run, data.stats
    lines = ["## Counts", ""]
    sizes = [f"{split} {len(records)}" for split, records in data.splits.items()]
    extra = [f"{key} {run[key]}" for key in ("unscored", "incomplete") if isinstance(run.get(key), int)]
    lines.append(f"Records: {', '.join(sizes + extra)} (unscored and incomplete ones are not part of the dataset).")
    lines += category_table(stats, "Examples per task category:")
    aspects = Counter(f"{r.get('task_id')}/{r.get('aspect_name')}" for r in data.records)
    lines += ["", "Records per task and aspect:", ""]
    lines += _table(("task/aspect", "records"), sorted(aspects.items()))
    counts = source_counts(data)
    lines += ["", "## Sources and licences", ""]
    lines += _table(("source dataset", "records", "licence"), ((n, counts[n], licenses[n]) for n in sorted(counts)))
    lines += [
        "",
        "The inputs and system outputs come from these datasets and keep their licences and terms; "
        '"unknown" means none was recorded: check the source before reusing its records. The annotations '
        "were written by the models above, whose terms of use may apply too.",
    ]
    return lines


def _structure(options: DatasetCardOptions, data: DatasetFolder) -> list[str]:
    repo = options.repo_id
    lines = [
        "## Structure and use",
        "",
        "Each record is one system output evaluated for one aspect: `inputs` (the task's headed input texts), "
        "`outputs` (the evaluated text), `task_id`, `aspect_name`, `aspect_definition`, `evaluation` (`errors`, "
        "each with `location`, `explanation`, `severity` and character offsets `start`/`end`, and a 0-100 "
        "`score`) and `provenance` (the models' raw replies and ratings; a JSON string in the Arrow files).",
        "",
        f"`train.jsonl` and `validation.jsonl` hold the records as spanjudge writes them; `{HF_FOLDER}/` holds the "
        "same records as Arrow files (headed texts as `[{header, text}]` lists), which `load_dataset` reads.",
        "",
    ]
    split = next(iter(s for s, r in data.splits.items() if r))
    lines += _fence(
        "\n".join(
            [
                "from datasets import load_dataset",
                "",
                f'data = load_dataset("{repo}")',
                f'print(data["{split}"][0]["evaluation"])',
            ]
        ),
        "python",
    )
    lines += ["", "Train a judge on it with spanjudge (a Hub id works wherever a data path does):", ""]
    lines += _fence(f"# train_config.yaml: data: {{train: {repo}}}\nspanjudge train --config train_config.yaml", "bash")
    return lines


def render_dataset_card(data: DatasetFolder, options: DatasetCardOptions) -> str:
    """The dataset card: YAML metadata (licence, task categories, configs/splits) and the body."""
    from huggingface_hub import DatasetCard, DatasetCardData

    name = options.repo_id.split("/")[-1]
    present = [split for split, records in data.splits.items() if records]
    metadata = DatasetCardData(
        license=options.license,
        language=["en"],
        task_categories=["text-generation"],
        size_categories=[_size_category(len(data.records))],
        pretty_name=name,
        tags=list(TAGS),
        configs=[
            {
                "config_name": "default",
                "data_files": [{"split": split, "path": f"{HF_FOLDER}/{split}/*.arrow"} for split in present],
            }
        ],
    )
    models = models_of(data.records)
    licenses = source_licenses(data, options.source_licenses)
    body = [
        f"# {name}",
        "",
        "Error-span annotations of generated text, made with [spanjudge](https://pypi.org/project/spanjudge/) to "
        "train an explainable evaluator: for each system output and aspect (e.g. factual consistency of a "
        "summary), the errors found — each with its location, an explanation and a severity — and a 0-100 score.",
        "",
        "- **Use**: training and analysing NLG evaluators.",
        "- **Limitations**: the annotations are written by LLMs, not human raters, and inherit their errors and "
        "biases; scores are noisy estimates. The texts are English.",
    ]
    if options.license == "other":
        body.append(
            "- **Licence**: not set at upload (`license: other`); the licences of the sources below and the terms "
            "of the annotating models apply."
        )
    body += ["", *_structure(options, data), "", *_how_made(data, models), "", *_annotators(data, models)]
    body += ["", *_counts(data, licenses), ""]
    return str(DatasetCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(body)))


# ---------------------------------------------------------------------------------------
# Staging


def _write_hf_dataset(scratch: Path, splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    import datasets

    datasets.disable_progress_bars()
    parts = {split: records for split, records in splits.items() if records}
    dataset = datasets.DatasetDict(
        {split: datasets.Dataset.from_list([to_hub_row(r) for r in records]) for split, records in parts.items()}
    )
    dataset.save_to_disk(str(scratch / HF_FOLDER))


def _holds_secret_file(path: Path, token: str | None) -> bool:
    """The secret scan of publish.py, over a whole file of any size, piece by piece."""
    tail = b""
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            text = (tail + chunk).decode("utf-8", errors="replace")
            if _holds_secret(text, token):
                return True
            tail = chunk[-_OVERLAP:]
    return False


def check_dataset_secrets(folder: Path, names: Sequence[str], token: str | None) -> None:
    holding = [name for name in names if _holds_secret_file(folder / name, token)]
    if holding:
        raise SpanjudgeError(f"refusing to publish: token-like strings (hf_...) in {', '.join(holding)}")


def check_dataset_local_paths(folder: Path, data: DatasetFolder) -> None:
    """No metadata file, and no record's provenance, names the dataset folder or the home
    folder (texts are not searched: a story may mention /home)."""
    pattern = local_path_pattern(data.folder)
    holding = [
        name
        for name in (*METADATA_FILES, CARD_FILE)
        if (folder / name).is_file() and pattern.search((folder / name).read_text(encoding="utf-8", errors="replace"))
    ]
    for split, records in data.splits.items():
        if any(pattern.search(json.dumps(r.get("provenance"), ensure_ascii=False)) for r in records):
            holding.append(f"{split}.jsonl (provenance)")
    if holding:
        raise SpanjudgeError(
            f"refusing to publish: a machine-local path (the dataset or home folder) in {', '.join(holding)}; "
            "remove it from the folder's file"
        )


def stage_dataset(
    data: DatasetFolder, out: Path, options: DatasetCardOptions, *, token: str | None = None
) -> list[str]:
    """Write exactly what will be uploaded into `out` (replaced as a whole); returns the file
    names, relative to `out`."""
    with atomic_directory(out) as scratch:
        for split, records in data.splits.items():
            atomic_write_jsonl(scratch / f"{split}.jsonl", records)
        _write_hf_dataset(scratch, data.splits)
        for name, payload in (("run.json", data.run), ("stats.json", data.stats)):
            if (data.folder / name).is_file():
                text = json.dumps(payload, indent=2, ensure_ascii=False)
                (scratch / name).write_text(text + "\n", encoding="utf-8")
        if data.stats_md is not None:
            (scratch / "stats.md").write_text(data.stats_md, encoding="utf-8")
        (scratch / CARD_FILE).write_text(render_dataset_card(data, options), encoding="utf-8")
        names = sorted(p.relative_to(scratch).as_posix() for p in scratch.rglob("*") if not p.is_dir())
        stray = [n for n in names if not staged_name(n) or not _regular(scratch / n)]
        if stray:  # a bug here, never a user mistake: stop before anything is uploaded
            raise SpanjudgeError(f"staging produced files outside the allow-list: {', '.join(stray)}")
        check_dataset_secrets(scratch, names, token)
        check_dataset_local_paths(scratch, data)
    return names
