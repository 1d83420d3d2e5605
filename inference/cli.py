"""The commands of the inference layer: `spanjudge tasks`, `prompt` and `parse` (the catalog,
the prompt a model sees, and the output contract's parser, from the command line)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.core.keyvalue import parse_texts
from spanjudge.core.options import option, settings_command

from .contract import anchor_errors, parse_annotator, parse_judge, parse_supervisor
from .contract.model import ParseFailure
from .prompts import render_annotator_prompt, render_judge_prompt

tasks = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
prompt = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
parse = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

CATALOG_HELP = (
    "Extra task catalog YAML file or folder (repeatable), loaded after the built-in one and $SPANJUDGE_CATALOG."
)


@dataclass(frozen=True, kw_only=True)
class TasksSettings:
    """`spanjudge tasks`'s options."""

    as_json: bool = option(False, flag="--json", help="Print the whole catalog as JSON.")
    task: str | None = option(None, help="Show one task with its aspect definitions.")
    catalog: list[Path] = option([], help=CATALOG_HELP)


@dataclass(frozen=True, kw_only=True)
class PromptSettings:
    """`spanjudge prompt`'s options."""

    kind: str = option("judge", help="annotator | judge")
    task: str = option("news_summarization", help="Task id (see `spanjudge tasks`).")
    aspect: str = option("consistency", help="Aspect name of the task.")
    input_: list[str] = option(
        [], flag="--input", help="An input as HEADER=TEXT (repeatable), e.g. --input 'Article=...'."
    )
    output: str = option("", help="The evaluated output text.")
    catalog: list[Path] = option([], help=CATALOG_HELP)


@dataclass(frozen=True, kw_only=True)
class ParseSettings:
    """`spanjudge parse`'s arguments and options."""

    reply: Path = option(argument=True, help="File with the model's reply; '-' reads standard input.")
    kind: str = option("judge", help="annotator | supervisor | judge")
    output_file: Path | None = option(None, help="The evaluated output, to anchor error locations to offsets.")


def tasks_command(settings: TasksSettings) -> None:
    """List tasks and their aspects.

    Tasks live in configs/tasks/<category>.yaml: add a task or an aspect by editing YAML,
    or keep your own files and pass them with --catalog.
    """

    as_json, task = settings.as_json, settings.task
    loaded = load_catalog(settings.catalog)
    if as_json:
        data = loaded.to_json_dict()
        if task is not None:
            chosen = loaded.task(task)
            data = {"categories": [c for c in data["categories"] if c["name"] == chosen.category]}
            data["categories"][0]["tasks"] = [t for t in data["categories"][0]["tasks"] if t["id"] == task]
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    console = Console()
    if task is not None:
        chosen = loaded.task(task)
        console.print(f"[bold]{chosen.id}[/bold] - {chosen.title} ({chosen.category_title}, {chosen.role})")
        console.print(chosen.description)
        console.print(f"inputs: {', '.join(chosen.input_headers)} -> output: {chosen.output}")
        for aspect in chosen.aspects.values():
            console.print(f"\n[bold]{aspect.name}[/bold]: {aspect.definition}")
            console.print(f"  lowest: the {chosen.output.lower()} {aspect.lowest}")
            console.print(f"  highest: the {chosen.output.lower()} {aspect.highest}")
            if aspect.do_not_consider:
                console.print(f"  not considered: {', '.join(aspect.do_not_consider)}")
        return
    table = Table(title="spanjudge task catalog", show_lines=False)
    for column in ("category", "task", "role", "inputs -> output", "aspects"):
        table.add_column(column, overflow="fold")
    for category, members in loaded.by_category().items():
        for t in members:
            table.add_row(category, t.id, t.role, f"{', '.join(t.input_headers)} -> {t.output}", ", ".join(t.aspects))
    console.print(table)
    training = loaded.training_tasks()
    console.print(
        f"{len(training)} training tasks in {len({t.category for t in training})} categories, "
        f"{len(loaded.tasks) - len(training)} meta-evaluation tasks. "
        "`spanjudge tasks --task <id>` shows the aspect definitions."
    )


def prompt_command(settings: PromptSettings) -> None:
    """Print the prompt spanjudge would send, so you can read exactly what a model sees."""

    s = settings
    chosen = load_catalog(s.catalog).task(s.task)
    inputs = parse_texts(s.input_, "--input", "'Article=The cat sat.'", "HEADER=TEXT")
    renderers = {"annotator": render_annotator_prompt, "judge": render_judge_prompt}
    if s.kind not in renderers:
        raise InputError(f"--kind must be one of {', '.join(renderers)}, got {s.kind!r}")
    typer.echo(renderers[s.kind](chosen, chosen.aspect(s.aspect), inputs, s.output))


def parse_command(settings: ParseSettings) -> None:
    """Parse a reply and print the result as JSON (a parse failure prints its reason, exit 1)."""

    reply, kind, output_file = settings.reply, settings.kind, settings.output_file
    parsers = {"annotator": parse_annotator, "supervisor": parse_supervisor, "judge": parse_judge}
    if kind not in parsers:
        raise InputError(f"--kind must be one of {', '.join(parsers)}, got {kind!r}")
    text = sys.stdin.read() if str(reply) == "-" else _read_text(reply)
    result = parsers[kind](text)
    if isinstance(result, ParseFailure):
        typer.echo(json.dumps({"ok": False, "reason": result.reason}))
        raise typer.Exit(1)
    errors = result if isinstance(result, list) else result.errors
    if output_file is not None:
        errors = anchor_errors(errors, _read_text(output_file))
    payload: dict[str, object] = {"ok": True, "errors": [e.model_dump() for e in errors]}
    if not isinstance(result, list):
        payload.update({k: v for k, v in result.model_dump().items() if k != "errors"})
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False, default=str))


settings_command(tasks, TasksSettings, tasks_command)
settings_command(prompt, PromptSettings, prompt_command)
settings_command(parse, ParseSettings, parse_command)


def _read_text(path: Path) -> str:

    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None
