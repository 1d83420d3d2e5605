"""The published judge's meta-evaluation as the Hub's evaluation results: YAML files in the model repo's
`.eval_results/` folder (https://huggingface.co/docs/hub/eval-results), beside the card's `model-index`.

The Hub shows a result on the model page, and on the benchmark's leaderboard, by the Hub dataset it names
(`dataset.id`, a registered benchmark for the leaderboard; `dataset.task_id`, a task of its `eval.yaml`).
spanjudge's meta-evaluation sets have local names (summeval, qags_xsum, ...), so a set is written only
when `--hub-dataset NAME=OWNER/DATASET[:TASK_ID]` names its Hub dataset (task id `default` when not
given); the other rows stay in the card's table and `model-index`, and are counted. Nothing is guessed.

One file per result, as the Hub asks of several scores on one benchmark:
`.eval_results/<set>-<aspect>-<level>-<coefficient>.yaml`, a list of one entry built with
huggingface_hub's `EvalResultEntry` (`dataset: {id, task_id}`, `value`, `date` when the meta-evaluation
recorded it, `notes`: which correlation it is, over how many items, with its interval), and checked
against the Hub's documented schema (`schema_problems`) before it is staged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from spanjudge.core.artifacts import ResultRow
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.keyvalue import parse_texts

from .markdown import slug
from .results import EvalResults

FOLDER = ".eval_results"
DEFAULT_TASK = "default"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_TASK_ID = re.compile(r"^[\w.-]+$")
# the documented entry (hub-docs eval_results.yaml and docs/hub/eval-results.md): keys, and required ones
_ENTRY_KEYS = {"dataset", "value", "verifyToken", "date", "source", "evaluation_framework", "notes"}
_DATASET_KEYS = {"id", "task_id", "revision", "config", "split"}
_SOURCE_KEYS = {"url", "name", "user", "org"}


@dataclass(frozen=True)
class HubDataset:
    id: str
    task_id: str = DEFAULT_TASK


def hub_datasets(values: Sequence[str]) -> dict[str, HubDataset]:
    """--hub-dataset NAME=OWNER/DATASET[:TASK_ID] options, by meta-eval set name."""
    found = {}
    for name, target in parse_texts(values, "--hub-dataset", "summeval=owner/summeval", "NAME=OWNER/DATASET").items():
        dataset_id, _, task_id = target.partition(":")
        if not _HUB_ID.match(dataset_id):
            raise InputError(f"--hub-dataset {name}={target}: {dataset_id!r} is not a Hub dataset id (owner/name)")
        if task_id and not _TASK_ID.match(task_id):
            raise InputError(f"--hub-dataset {name}={target}: {task_id!r} is not a task id (letters, digits, _ . -)")
        found[name] = HubDataset(dataset_id, task_id or DEFAULT_TASK)
    return found


@dataclass(frozen=True)
class EvalResultFiles:
    """The `.eval_results/` files (path in the repo -> YAML text), and the rows left without a Hub dataset."""

    files: dict[str, str]
    unmapped: tuple[str, ...]  # the sets whose rows have no --hub-dataset


def eval_result_files(results: EvalResults, datasets: Mapping[str, HubDataset]) -> EvalResultFiles:
    """One file per row of a set named by `datasets`; an unknown name in `datasets` is one InputError."""
    try:
        from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml
    except ImportError:  # older than the Hub's evaluation results (huggingface_hub PR #3633, December 2025)
        raise SpanjudgeError(
            "--hub-dataset writes the Hub's evaluation results, which this huggingface_hub cannot: "
            "pip install -U huggingface_hub"
        ) from None

    names = {row.dataset for row in results.rows}
    unknown = sorted(set(datasets) - names)
    if unknown:
        raise InputError(
            f"--hub-dataset {unknown[0]}: no such set in --eval-results {results.source} "
            f"(its sets: {', '.join(sorted(names)) or 'none'})"
        )
    files: dict[str, str] = {}
    for row in results.rows:
        target = datasets.get(row.dataset)
        if target is None:
            continue
        entry = EvalResultEntry(
            dataset_id=target.id, task_id=target.task_id, value=round(row.value, 4), date=results.date,
            notes=_notes(row),
        )  # fmt: skip
        data = eval_result_entries_to_yaml([entry])
        problems = schema_problems(data)
        if problems:  # built here from validated rows: a bug, never a user mistake
            raise AssertionError(f"an .eval_results entry outside the Hub's schema: {problems[0]}")
        stem = _file_stem(row)
        path = f"{FOLDER}/{stem}.yaml"
        if path in files:
            raise InputError(f"--eval-results {results.source}: two rows for {stem}; keep one")
        files[path] = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return EvalResultFiles(files, tuple(sorted(names - set(datasets))))


def schema_problems(data: object) -> list[str]:
    """What makes `data` (a parsed `.eval_results/*.yaml`) not the Hub's documented format; [] when it is."""
    if not isinstance(data, list) or not data:
        return ["the file must hold a non-empty list of results"]
    problems = []
    for number, entry in enumerate(data, 1):
        where = f"result {number}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not a mapping")
            continue
        problems += [f"{where}: unknown key {key!r}" for key in sorted(set(entry) - _ENTRY_KEYS)]
        dataset = entry.get("dataset")
        if not isinstance(dataset, dict):
            problems.append(f"{where}: `dataset` (with id and task_id) is required")
        else:
            problems += [f"{where}: unknown dataset key {key!r}" for key in sorted(set(dataset) - _DATASET_KEYS)]
            if not isinstance(dataset.get("id"), str) or not _HUB_ID.match(dataset["id"]):
                problems.append(f"{where}: dataset.id must be a Hub dataset id (owner/name)")
            if not isinstance(dataset.get("task_id"), str) or not dataset["task_id"]:
                problems.append(f"{where}: dataset.task_id is required")
        value = entry.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            problems.append(f"{where}: `value` (a number) is required")
        source = entry.get("source")
        if source is not None and (not isinstance(source, dict) or not isinstance(source.get("url"), str)):
            problems.append(f"{where}: a `source` needs its `url`")
        elif isinstance(source, dict):
            problems += [f"{where}: unknown source key {key!r}" for key in sorted(set(source) - _SOURCE_KEYS)]
        problems += [
            f"{where}: `{key}` must be text" for key in ("date", "notes", "verifyToken", "evaluation_framework")
            if key in entry and not isinstance(entry[key], str)
        ]  # fmt: skip
    return problems


def _file_stem(row: ResultRow) -> str:
    parts = (row.dataset, row.task, row.aspect, row.level, row.metric)
    return "-".join(slug(part, "_") for part in parts if part)


def _notes(row: ResultRow) -> str:
    """Which correlation the value is, e.g. "coherence, summary-level kendall correlation with human
    judgments, n=1600, bootstrap interval [0.3700, 0.4500]"."""
    what = ", ".join(part for part in (row.task, row.aspect) if part)
    level = f"{row.level}-level " if row.level else ""
    text = f"{what + ', ' if what else ''}{level}{row.metric} correlation with human judgments"
    if row.n is not None:
        text += f", n={row.n}"
    if row.ci_low is not None and row.ci_high is not None:
        text += f", bootstrap interval [{row.ci_low:.4f}, {row.ci_high:.4f}]"
    return text
