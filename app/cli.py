"""The `spanjudge` command line: the application's root.

Each stage registers its own commands as entry points of the group `spanjudge.commands`
(pyproject.toml: name = "module:attr" of a typer app or click command; read as every registry
reads its plugins, `core.registry.entry_points`), so this root names none of them. Running a
command imports only that command's module (heavy libraries such as
torch load inside the commands); `spanjudge --help` imports them all, since each command's
line of help is its own docstring's first line. `run(command, argv)` gives any one command the
same handling (train.py starts training with it).
"""

from __future__ import annotations

import asyncio
import errno
import signal
import sys
import threading
from importlib.metadata import EntryPoint
from typing import Annotated, cast

import click
import typer

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.registry import entry_points

COMMAND_GROUP = "spanjudge.commands"  # the entry-point group every stage registers its commands in


def registered_commands(group: str | None = None) -> dict[str, EntryPoint]:
    """Command name -> its entry point, from the installed package's metadata."""
    group = group or COMMAND_GROUP
    found = entry_points(group)  # the registries' reader (core.registry): a stale egg-info does not hide the install
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
    # typer converts an app with the click it vendors (typer >= 0.25), whose Command is not click's own class:
    # both run alike, so either is typed as click's
    command = target if isinstance(target, click.Command) else cast(click.Command, typer.main.get_command(target))
    command.name = name
    return command


class LazyGroup(typer.core.TyperGroup):
    """Resolves the registered commands only when they are asked for."""

    def list_commands(self, ctx: object) -> list[str]:
        return sorted(registered_commands())

    def get_command(self, ctx: object, cmd_name: str) -> typer.core.TyperCommand | None:
        entry = registered_commands().get(cmd_name)
        # the group is typer's (its click); a command may be click's own (a plugin's): they run alike
        return None if entry is None else cast(typer.core.TyperCommand, load_command(cmd_name, entry))


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
_EXITS: tuple[type[BaseException], ...] = (click.exceptions.Exit, *_TYPER_EXIT)
_ABORTS: tuple[type[BaseException], ...] = (click.exceptions.Abort, *_TYPER_ABORT)
_USAGE: tuple[type[BaseException], ...] = (click.ClickException, *_TYPER_CLICK)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, `kill`), raised like Ctrl-C so every `finally` runs."""


_SIGNALLED: list[int] = []  # the signal that stopped the command (a library may re-raise it as plain Ctrl-C)


def _raise_terminated(signum: int, _frame: object) -> None:
    _SIGNALLED.append(signum)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None and asyncio.current_task(loop) is not None:
        # Raised inside a task's step, the stop would become that task's exception, which
        # asyncio.run's shutdown then logs as an unhandled traceback. A callback's
        # KeyboardInterrupt leaves the loop instead, as a signal that lands in select() does;
        # the task's step (e.g. a row being written) finishes first.
        loop.call_soon(_raise_terminated_now)
        return
    raise Terminated()


def _raise_terminated_now() -> None:
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
    return run(app, argv, prog_name="spanjudge")


def run(command: click.Command | typer.Typer, argv: list[str] | None, prog_name: str | None = None) -> int:
    """Run one command (the root, or a stage's typer app or click command) with `main`'s handling of
    mistakes and signals."""
    if isinstance(command, typer.Typer):
        command = cast(click.Command, typer.main.get_command(command))
    _SIGNALLED.clear()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        returned = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except _EXITS as done:
        return int(getattr(done, "exit_code", 0))
    except _ABORTS as abort:  # click's wrapper of Ctrl-C (and of SIGTERM here)
        return _interrupted(abort.__cause__ or abort.__context__)
    except _USAGE as exc:  # usage errors: one message, no traceback
        usage = cast(click.ClickException, exc)  # click's or typer's copy of it: the same methods
        usage.show()
        return int(usage.exit_code)
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
