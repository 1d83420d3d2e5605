"""Loading YAML configs into typed models, with one clear error line per mistake.

Every config of the project (task catalog, ensembles, training, eval suites) goes through
`load_yaml_model`, so a user who mistypes a key sees the file and the field, not a
pydantic traceback.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from pathlib import Path
from typing import TypeVar, get_args

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def configs_dir() -> Path:
    """The built-in `configs/` folder (the repo's, or the installed package data)."""
    package = importlib.import_module("spanjudge.configs")
    return Path(next(iter(package.__path__)))


_NOTED: set[Path] = set()  # the shipped configs a note was printed for, once each


def shipped_config(path: Path) -> Path | None:
    """The config spanjudge ships that a relative `configs/...` path names, where no such file is here: the
    README's commands name `configs/...` as in a checkout, and a wheel keeps them in `spanjudge.configs`."""
    if path.is_absolute() or path.parts[:1] != ("configs",) or path.exists():
        return None
    shipped = configs_dir().joinpath(*path.parts[1:])
    return shipped if shipped.is_file() else None


def resolve_config(path: Path) -> Path:
    """`path`, or the shipped config it names when it is not here (said once on stderr, with which is used)."""
    shipped = shipped_config(path)
    if shipped is None:
        return path
    if shipped not in _NOTED:
        _NOTED.add(shipped)
        print(f"note: no {path} in this folder; using the one spanjudge ships: {shipped}", file=sys.stderr)
    return shipped


def read_yaml(path: Path) -> object:
    path = resolve_config(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, f"cannot read file ({exc})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(path, None, f"{line}invalid YAML ({problem})") from None


def field_path(location: tuple[int | str, ...]) -> str:
    """('tasks', 'x', 'aspects', 0) -> 'tasks.x.aspects[0]'."""
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _submodel(annotation: object) -> type[BaseModel] | None:
    """The model a field holds: itself, or inside Optional / tuple / list / dict / Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def _keys_at(model: type[BaseModel] | None, location: tuple[int | str, ...]) -> list[str]:
    """The keys allowed at `location` (list positions skipped); [] where that cannot be told."""
    current = model
    for part in location:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if current is not None else None
        current = _submodel(field.annotation) if field is not None else None
        if current is None:
            return []
    return list(current.model_fields) if current is not None else []


def validation_to_config_error(
    path: Path | None, exc: ValidationError, model: type[BaseModel] | None = None
) -> ConfigError:
    first = exc.errors()[0]
    location = tuple(p for p in first["loc"] if p not in ("function-after", "function-before"))
    message = {
        "extra_forbidden": "unknown key",
        "missing": "required key is missing",
    }.get(first["type"], first["msg"])
    if first["type"] == "extra_forbidden" and location and isinstance(location[-1], str):
        close = difflib.get_close_matches(location[-1], _keys_at(model, location[:-1]), n=1)
        if close:
            message += f"; did you mean '{close[0]}'?"
    if first["type"] not in ("extra_forbidden", "missing") and "input" in first:
        shown = repr(first["input"])
        message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    more = len(exc.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(path, field_path(location), message)


def validate(model: type[ModelT], data: object, path: Path | None = None) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_to_config_error(path, exc, model) from None


def load_yaml_model(model: type[ModelT], path: Path) -> ModelT:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, None, "expected a mapping at the top level")
    return validate(model, data, path)
