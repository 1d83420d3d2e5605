"""Provenance of a results file: which spanjudge, which commit, which seed, which options and
which libraries produced it (as lm-evaluation-harness heads its results files).

`run_info(...)` builds the one dict every results file carries: `spanjudge score` writes it
beside its rows (`<out>.run.json`), `spanjudge meta-eval` into results.json under "run".
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .jsonl import JSONValue

# distribution names; vllm and llama-cpp-python are optional engines (null when not installed)
LIBRARIES = {
    "torch": "torch",
    "transformers": "transformers",
    "peft": "peft",
    "trl": "trl",
    "vllm": "vllm",
    "llama_cpp": "llama-cpp-python",
}
FORMAT = "spanjudge-run/1"


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def library_versions() -> dict[str, str | None]:
    """Installed versions by import name, read from package metadata (importing torch or vLLM
    only to ask would take seconds); None for one that is not installed."""
    return {name: _version(distribution) for name, distribution in LIBRARIES.items()}


PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the spanjudge package (the repository root in a checkout)


def git_hash(root: Path = PACKAGE_ROOT) -> str | None:
    """The commit of the git checkout whose top folder is `root`, or None: an installed wheel
    (which may sit inside some other repository, e.g. a project's .venv), or no git."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
        return None
    return lines[1]


def jsonable(value: object) -> JSONValue:
    """Options as JSON: paths as strings, tuples as lists, anything else unknown by its str()."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def run_info(command: str, options: Mapping[str, Any], seed: int | None) -> dict[str, Any]:
    """What produced a results file. `options`: the configuration as used (made JSON-safe);
    `seed`: the run's random seed, None where nothing is drawn at random."""
    return {
        "format": FORMAT,
        "command": command,
        "spanjudge_version": _version("spanjudge"),
        "git_hash": git_hash(),
        "seed": seed,
        "options": jsonable(options),
        "libraries": library_versions(),
        "python": platform.python_version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
