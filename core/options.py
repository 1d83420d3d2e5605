"""One definition per option: a command's settings are a dataclass whose fields declare name, type,
default and help once (`option(...)`), and the command line is derived from it with typer.

    @dataclass(frozen=True)
    class ScoreSettings:
        model: str = option(help="Adapter folder, merged model folder or hub id.")
        batch_size: int = option(8, help="transformers: batch size.", min=1)

    settings_command(score, ScoreSettings, run_score)   # `--model`, `--batch-size`, ...

Why typer over the dataclass (not tyro, jsonargparse or HfArgumentParser): every spanjudge
command is a typer app already (the root loads them lazily as click commands, one-line errors,
rich help), and the settings stay the plain dataclasses the stage functions take from Python;
the bridge is this one function over typer's documented `Annotated[..., typer.Option(...)]`.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

Settings = TypeVar("Settings")
_REQUIRED = dataclasses.MISSING


def option(
    default: object = _REQUIRED,
    *,
    help: str,
    flag: str | None = None,
    min: float | None = None,
    max: float | None = None,
    metavar: str | None = None,
    cli: bool = True,
    argument: bool = False,
    more_help: Callable[[], str] | None = None,
) -> Any:
    """A settings field that is also a command-line option: `--field-name` (or `flag`), its help,
    optional bounds and metavar. Without a default the option is required. `argument=True`: a
    positional argument instead of an option. `cli=False`: a field for Python callers only (a
    mapping, say), left at its default by the command line. `more_help`: the rest of the help, read
    when the command is built (what a registry declares, say, which importing this module should not load)."""
    metadata = {
        "help": help,
        "more_help": more_help,
        "flag": flag,
        "min": min,
        "max": max,
        "metavar": metavar,
        "cli": cli,
        "argument": argument,
    }
    if isinstance(default, list):  # a mutable default: one fresh copy per settings object
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_flag(field: dataclasses.Field[Any]) -> str:
    """The command-line flag of a settings field."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def unwrapped(doc: str) -> str:
    """A docstring's paragraphs each on one line, as a terminal of any width wraps them (typer keeps a paragraph's
    line breaks after the first, so source-wrapped help came out ragged); a paragraph that is a list or indented
    (an example) keeps its lines."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(
        p if any(line.startswith(("- ", "* ", " ", "|")) for line in p.splitlines()) else " ".join(p.split("\n"))
        for p in paragraphs
    )


def settings_command(
    app: typer.Typer, settings: type[Settings], run: Callable[[Settings], None], help: str | None = None
) -> None:
    """Register on `app` a command whose options are the fields of `settings` (the required ones first,
    then in their order; `cli=False` fields left out) and that calls `run(settings(...))`; its help is
    `run`'s docstring (or `help`). A command of its own app (`typer.Typer()` per command) is the usual shape."""
    hints = typing.get_type_hints(settings)
    parameters = []
    fields = dataclasses.fields(settings)  # type: ignore[arg-type]
    required = [f for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for field in [*required, *(f for f in fields if f not in required)]:
        if "help" not in field.metadata:
            raise TypeError(f"{settings.__name__}.{field.name} is not declared with option(...)")
        if not field.metadata["cli"]:
            continue
        bound = {key: field.metadata[key] for key in ("min", "max") if field.metadata.get(key) is not None}
        more = field.metadata.get("more_help")
        text = f"{field.metadata['help']} {more()}" if more else field.metadata["help"]
        if field.metadata.get("argument"):
            info = typer.Argument(help=text, metavar=field.metadata["metavar"], **bound)
        else:
            flag = option_flag(field)
            if hints[field.name] is bool and field.default is True and "/" not in flag:  # on: --no- turns it off
                flag = f"{flag}/--no-{flag.removeprefix('--')}"
            info = typer.Option(flag, help=text, metavar=field.metadata["metavar"], **bound)
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        parameters.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if default is dataclasses.MISSING else default,
                annotation=Annotated[hints[field.name], info],
            )
        )

    def command(**values: object) -> None:
        run(settings(**values))

    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__doc__ = unwrapped(help or run.__doc__ or "")
    command.__name__ = f"{settings.__name__}_command"
    command.__settings__ = settings  # type: ignore[attr-defined]  # which dataclass declares the options
    app.command()(command)
