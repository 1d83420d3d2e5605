"""Where the shared data lives: `--data-dir`, else `$SPANJUDGE_DATA`, else `../shared/data`.

The data sets are read in place and never copied into the repository (their licences
differ; several are non-commercial), so every reader resolves the folder here.
"""

from __future__ import annotations

import os
from pathlib import Path

from .configio import configs_dir
from .errors import InputError

DATA_ENV = "SPANJUDGE_DATA"


def data_dir(override: Path | str | None = None) -> Path:
    """The shared data folder; a clear error, naming what was tried, when it is missing."""
    if override is not None:
        candidates = [Path(override)]
    elif os.environ.get(DATA_ENV):
        candidates = [Path(os.environ[DATA_ENV])]
    else:
        repo_root = configs_dir().parent
        candidates = [repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    tried = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise InputError(f"data folder not found (tried {tried}); pass --data-dir or set {DATA_ENV}")


def optional_data_dir(override: Path | str | None = None) -> Path | None:
    """The shared data folder, or None when none is found: only an error if one was asked for
    (a run whose inputs need no $DATA/ path works without it)."""
    if override is not None:
        return data_dir(override)
    try:
        return data_dir()
    except InputError:
        return None
