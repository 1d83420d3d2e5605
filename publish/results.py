"""The published judge's meta-evaluation rows, read through one validating reader.

`--eval-results FILE` is either the `results.json` that `spanjudge meta-eval` writes (its
`judges` and `cells`, typed by `MetaEvalFile`) or, as written by hand or by `spanjudge demo`, a
JSON list of rows, or an object holding that list under "rows", "results", "correlations" or
"metrics"::

    [{"dataset": "SummEval", "aspect": "coherence", "level": "summary",
      "coefficient": "kendall", "value": 0.41, "ci_low": 0.37, "ci_high": 0.45, "n": 1600}, ...]

Each row becomes a `ResultRow` (core/artifacts.py: `dataset` and a numeric `value` are
required, `metric` may stand for `coefficient`, `low`/`high` for `ci_low`/`ci_high`); rows that
do not validate are skipped and counted. The card holds the rows of one judge only: the one
named by `--judge-name`, else the only judge that is not a baseline (`metric:`, `prompted:`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spanjudge.core.artifacts import MetaEvalFile, ResultRow, validated
from spanjudge.core.errors import InputError

# the meta-eval judges that are references, never the judge being published
BASELINE_KINDS = ("metric:", "prompted:")


@dataclass(frozen=True)
class EvalResults:
    source: str
    rows: list[ResultRow] = field(default_factory=list)
    skipped: int = 0
    judge: str | None = None  # the meta-eval judge the rows are of, when the file names judges
    date: str | None = None  # when the meta-evaluation ran (results.json's `run.created`), when it says


def select_judge(judges: Sequence[str], requested: str | None, source: Path) -> str:
    """The judge whose rows go into the card: `--judge-name`, else the only non-baseline one."""
    listed = ", ".join(judges) or "none"
    if requested is not None:
        if requested in judges:
            return requested
        raise InputError(f"--judge-name {requested!r} is not a judge of {source} (judges: {listed})")
    candidates = [name for name in judges if not name.startswith(BASELINE_KINDS)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise InputError(f"{source} holds only baseline judges ({listed}); name the published judge with --judge-name")
    raise InputError(
        f"{source} holds results of several judges ({', '.join(candidates)}); name the published one with --judge-name"
    )


def read_eval_results(path: Path, judge_name: str | None = None) -> EvalResults:
    """The published judge's rows of a meta-eval results file (see the module docstring)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--eval-results file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON ({exc.__class__.__name__}: {exc})") from None
    if isinstance(data, dict) and "cells" in data and "judges" in data:
        run = data.get("run")
        created = run.get("created") if isinstance(run, dict) else None
        results = _read_meta_eval(path, validated(MetaEvalFile, data, path), judge_name)
        return replace(results, date=created) if isinstance(created, str) else results
    return _read_rows(path, data, judge_name)


def _read_meta_eval(path: Path, results: MetaEvalFile, judge_name: str | None) -> EvalResults:
    judge = select_judge(results.judges, judge_name, path)
    cells = [cell for cell in results.cells if cell.judge == judge]
    if not cells:
        raise InputError(f"{path}: no result cells for judge {judge!r}")
    for cell in cells:
        problem = ResultRow.implausible(cell.model_dump())
        if problem:
            raise InputError(f"{path}: the cell of {cell.dataset} / {cell.aspect}: {problem}")
    rows = [row for cell in cells if (row := cell.row()) is not None]
    return EvalResults(source=path.name, rows=rows, skipped=len(cells) - len(rows), judge=judge)


def _candidate_rows(data: object) -> list[Any]:
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in ("rows", "results", "correlations", "metrics"):
            if isinstance(data.get(key), list):
                return list(data[key])
        for value in data.values():  # any other list of objects
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return value
    return []


def _read_rows(path: Path, data: object, judge_name: str | None) -> EvalResults:
    """A hand-written (or `spanjudge demo`) list of rows; rows that do not validate are counted."""
    candidates = [item for item in _candidate_rows(data) if isinstance(item, dict)]
    if not candidates:
        raise InputError(f"{path}: no result rows found (expected a list of {{dataset, aspect, level, value, ...}})")
    judges = list(dict.fromkeys(name for item in candidates if (name := ResultRow.judge_of(item))))
    judge = None
    if judges:  # rows of several judges: the same choice as for meta-eval's own file
        judge = select_judge(judges, judge_name, path)
        candidates = [item for item in candidates if ResultRow.judge_of(item) == judge]
    elif judge_name is not None:
        raise InputError(f"--judge-name {judge_name!r}: the rows of {path} name no judge")
    for number, item in enumerate(candidates, 1):
        problem = ResultRow.implausible(item)
        if problem:
            raise InputError(f"{path}: result row {number} ({item.get('dataset')}): {problem}")
    rows = [row for item in candidates if (row := ResultRow.parse(item)) is not None]
    return EvalResults(source=path.name, rows=rows, skipped=len(candidates) - len(rows), judge=judge)
