"""The `spanjudge` command line.

Each stage registers its own commands as entry points of the group `spanjudge.commands`
(pyproject.toml: name = "module:attr" of a typer app or click command), so this root, in the
base layer, names none of the stages above it. Running a command imports only that command's
module (heavy libraries such as torch load inside the commands); `spanjudge --help` imports
them all, since each command's line of help is its own docstring's first line.
"""

from __future__ import annotations

import errno
import json
import signal
import sys
import threading
from importlib.metadata import EntryPoint, distributions
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.table import Table

from .errors import SpanjudgeError

COMMAND_GROUP = "spanjudge.commands"  # the entry-point group every stage registers its commands in


def registered_commands(group: str | None = None) -> dict[str, EntryPoint]:
    """Command name -> its entry point, from the installed package's metadata."""
    group = group or COMMAND_GROUP
    found: dict[str, EntryPoint] = {}
    # Every copy of every distribution's metadata on sys.path, the first one first; unlike
    # entry_points(), which keeps one copy per distribution name, this skips past a stale
    # spanjudge.egg-info left in the working directory by a build (seen first by `python -m`).
    for distribution in distributions():
        for entry in distribution.entry_points.select(group=group):
            found.setdefault(entry.name, entry)
    if not found:
        raise SpanjudgeError(
            f"no spanjudge commands are registered (no '{group}' entry points in the installed metadata): "
            "install the package, e.g. `pip install -e .` in the checkout"
        )
    return found


def load_command(name: str, entry: EntryPoint) -> click.Command:
    """The click command an entry point names (a typer app is converted), called `name`."""
    try:
        target = entry.load()
    except (ImportError, AttributeError) as exc:  # stale metadata: a command moved since the install
        raise SpanjudgeError(
            f"command '{name}' is registered as {entry.value} but cannot be loaded ({exc}); "
            "reinstall the package (`pip install -e .`) if it moved"
        ) from None
    command = target if isinstance(target, click.Command) else typer.main.get_command(target)
    command.name = name
    return command


class LazyGroup(typer.core.TyperGroup):
    """Resolves the registered commands only when they are asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(registered_commands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = registered_commands().get(cmd_name)
        return None if entry is None else load_command(cmd_name, entry)


app = typer.Typer(
    cls=LazyGroup,
    name="spanjudge",
    help=(
        "Distil and run an explainable NLG evaluator: error spans with explanations and "
        "severities, plus a 0-100 score.\n\n"
        "Pipeline: annotate (LLM ensemble + supervisor) -> train (LoRA/QLoRA SFT) -> "
        "score (the distilled judge) -> meta-eval (human correlations, perturbation "
        "benchmarks) -> publish. Start with `spanjudge tasks` to see what can be evaluated."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"spanjudge {version('spanjudge')}")
        raise typer.Exit


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Root options."""


# ---------------------------------------------------------------------------------------
# Commands owned by the base layer

CatalogOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        help="Extra task catalog YAML file or folder (repeatable), loaded after the built-in one "
        "and $SPANJUDGE_CATALOG.",
    ),
]

tasks = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
prompt = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
parse = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@tasks.command()
def tasks_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole catalog as JSON.")] = False,
    task: Annotated[str | None, typer.Option("--task", help="Show one task with its aspect definitions.")] = None,
    catalog: CatalogOption = None,
) -> None:
    """List tasks and their aspects.

    Tasks live in configs/tasks/<category>.yaml: add a task or an aspect by editing YAML,
    or keep your own files and pass them with --catalog.
    """
    from .catalog import load_catalog

    loaded = load_catalog(catalog or ())
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


@prompt.command()
def prompt_command(
    kind: Annotated[str, typer.Option("--kind", help="annotator | judge")] = "judge",
    task: Annotated[str, typer.Option("--task", help="Task id (see `spanjudge tasks`).")] = "news_summarization",
    aspect: Annotated[str, typer.Option("--aspect", help="Aspect name of the task.")] = "consistency",
    input_: Annotated[
        list[str] | None,
        typer.Option("--input", help="An input as HEADER=TEXT (repeatable), e.g. --input 'Article=...'."),
    ] = None,
    output: Annotated[str, typer.Option("--output", help="The evaluated output text.")] = "",
    catalog: CatalogOption = None,
) -> None:
    """Print the prompt spanjudge would send, so you can read exactly what a model sees."""
    from .catalog import load_catalog
    from .errors import InputError
    from .keyvalue import parse_texts
    from .prompts import render_annotator_prompt, render_judge_prompt

    chosen = load_catalog(catalog or ()).task(task)
    inputs = parse_texts(input_ or (), "--input", "'Article=The cat sat.'", "HEADER=TEXT")
    renderers = {"annotator": render_annotator_prompt, "judge": render_judge_prompt}
    if kind not in renderers:
        raise InputError(f"--kind must be one of {', '.join(renderers)}, got {kind!r}")
    typer.echo(renderers[kind](chosen, chosen.aspect(aspect), inputs, output))


@parse.command()
def parse_command(
    reply: Annotated[Path, typer.Argument(help="File with the model's reply; '-' reads standard input.")],
    kind: Annotated[str, typer.Option("--kind", help="annotator | supervisor | judge")] = "judge",
    output_file: Annotated[
        Path | None,
        typer.Option("--output-file", help="The evaluated output, to anchor error locations to offsets."),
    ] = None,
) -> None:
    """Parse a reply and print the result as JSON (a parse failure prints its reason, exit 1)."""
    from .contract import anchor_errors, parse_annotator, parse_judge, parse_supervisor
    from .contract.model import ParseFailure
    from .errors import InputError

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


def _read_text(path: Path) -> str:
    from .errors import InputError

    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None


# ---------------------------------------------------------------------------------------


# Recent typer vendors its own copy of click, whose exceptions are not click's classes.
try:
    from typer._click import exceptions as _typer_click

    _TYPER_EXIT: tuple[type[BaseException], ...] = tuple(
        e for e in (getattr(_typer_click, "Exit", None),) if isinstance(e, type)
    )
    _TYPER_ABORT: tuple[type[BaseException], ...] = tuple(
        e for e in (getattr(_typer_click, "Abort", None),) if isinstance(e, type)
    )
    _TYPER_CLICK: tuple[type[BaseException], ...] = (_typer_click.ClickException,)
except ImportError:  # typer that uses click itself
    _TYPER_EXIT = _TYPER_ABORT = _TYPER_CLICK = ()


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, `kill`), raised like Ctrl-C so every `finally` runs."""


_SIGNALLED: list[int] = []  # the signal that stopped the command (a library may re-raise it as plain Ctrl-C)


def _raise_terminated(signum: int, _frame: object) -> None:
    _SIGNALLED.append(signum)
    raise Terminated()


# write failures a user can fix (a read-only folder, a full disk): one line, never a traceback
_STORAGE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_RESUME = "what was finished is kept: re-run the same command to resume"


def _storage_error(exc: OSError) -> str:
    where = exc.filename or "a file"
    fix = "free some space" if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else "choose a writable place"
    return f"cannot write {where}: {exc.strerror or exc}; {fix}; {_RESUME}"


def _interrupted(exc: BaseException | None) -> int:
    terminated = isinstance(exc, Terminated) or signal.SIGTERM in _SIGNALLED
    click.echo(f"interrupted ({'SIGTERM' if terminated else 'Ctrl-C'}); {_RESUME}", err=True)
    return 143 if terminated else 130


def main(argv: list[str] | None = None) -> int:
    """Console-script entry: user mistakes print one line and exit 2, never a traceback; SIGTERM
    and Ctrl-C say what was kept and exit 143 and 130."""
    command = typer.main.get_command(app)
    _SIGNALLED.clear()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        returned = command.main(args=argv, prog_name="spanjudge", standalone_mode=False)
    except (click.exceptions.Exit, *_TYPER_EXIT) as done:
        return int(done.exit_code)
    except (click.exceptions.Abort, *_TYPER_ABORT) as abort:  # click's wrapper of Ctrl-C (and of SIGTERM here)
        return _interrupted(abort.__cause__ or abort.__context__)
    except (click.ClickException, *_TYPER_CLICK) as exc:  # usage errors: one message, no traceback
        exc.show()
        return int(exc.exit_code)
    except SpanjudgeError as exc:
        return _error(str(exc))
    except OSError as exc:
        if exc.errno not in _STORAGE_ERRNOS:
            raise
        return _error(_storage_error(exc))
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if returned == 130:  # typer's own answer to Ctrl-C (and so to SIGTERM here) when it does not exit itself
        return _interrupted(None)
    return returned if isinstance(returned, int) else 0


def _error(message: str) -> int:
    click.echo(f"{click.style('error:', fg='red', bold=True)} {message}", err=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
