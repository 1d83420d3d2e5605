"""The README's and the docs' examples: every fenced `bash` or `python` block, in reading order,
and running them as a reader would (from a folder laid out like the repository root).

A block runs unless the line before it says why it cannot, as an HTML comment that neither
GitHub nor the site shows: `<!-- not run: needs a GPU -->`. Other fences (text, yaml, console
output) are not examples. Consecutive Python blocks share one interpreter, as a reader's session
would; each shell block is its own `bash -euo pipefail`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RUNNABLE = ("bash", "python")
_FENCE = re.compile(r"^```(?P<language>\w*)[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
_NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+?) -->$")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # of the opening fence
    language: str
    code: str
    not_run: str | None  # the reason it is not run, or None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def examples(page: Path) -> list[Example]:
    """The page's bash and python blocks (a snippet include, `--8<--`, is its source's, not its own)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for fence in _FENCE.finditer(text):
        if fence["language"] not in RUNNABLE:
            continue
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        reason = _NOT_RUN.match(before)
        found.append(
            Example(
                page=page,
                line=text.count("\n", 0, fence.start()) + 1,
                language=fence["language"],
                code=fence["code"],
                not_run=reason["reason"] if reason else None,
            )
        )
    return found


def fenced(page: Path, language: str) -> list[str]:
    """The code of every block of `language` on the page (yaml too): what a test runs exactly as the page shows it."""
    return [f["code"] for f in _FENCE.finditer(page.read_text(encoding="utf-8")) if f["language"] == language]


def pages_in_reading_order() -> list[Path]:
    """README.md, then the site's pages on disk in the order of mkdocs.yml's nav."""

    def walk(entries: list) -> list[str]:
        found: list[str] = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += walk(value) if isinstance(value, list) else [value]
        return found

    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    pages = [REPO / "docs" / name for name in walk(config["nav"])]
    return [REPO / "README.md", *(page for page in pages if page.exists())]  # not reference/cli.md: generated


def run_page(
    page: Path, work: Path, env: dict[str, str], timeout: float = 900, interpreter: str = sys.executable
) -> list[str]:
    """Runs the page's runnable examples in `work`, in the page's order (consecutive Python blocks
    in one `interpreter`); returns what each run printed. A failing example fails with its place,
    its code and its output."""
    outputs: list[str] = []
    python: list[Example] = []

    def flush() -> None:
        if python:
            script = "\n".join(f"# --- {e.where} ---\n{e.code}" for e in python)
            where = ", ".join(e.where for e in python)
            outputs.append(_run([interpreter, "-c", script], where, work, env, timeout))
            python.clear()

    for example in examples(page):
        if example.not_run is not None:
            continue
        if example.language == "python":
            python.append(example)
            continue
        flush()
        outputs.append(_run(["bash", "-euo", "pipefail", "-c", example.code], example.where, work, env, timeout))
    flush()
    return outputs


def _run(command: list[str], where: str, work: Path, env: dict[str, str], timeout: float) -> str:
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(
            f"the example at {where} failed (exit {result.returncode}):\n{command[-1]}\n"
            f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
        )
    return result.stdout


def reader_env(shared_data: Path, bin_dir: Path = Path(sys.executable).parent) -> dict[str, str]:
    """A reader's shell: the project's commands (those in `bin_dir`) on PATH, the shared data, no network."""
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPANJUDGE_DATA": str(shared_data),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
