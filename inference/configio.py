"""Loading YAML configs into typed models, with one clear error line per mistake.

Every config of the project (task catalog, ensembles, training, eval suites) goes through
`load_yaml_model`, so a user who mistypes a key sees the file and the field, not a
pydantic traceback.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def configs_dir() -> Path:
    """The built-in `configs/` folder (the repo's, or the installed package data)."""
    package = importlib.import_module("spanjudge.configs")
    return Path(next(iter(package.__path__)))


def read_yaml(path: Path) -> Any:
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


def validation_to_config_error(path: Path | None, exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    location = tuple(p for p in first["loc"] if p not in ("function-after", "function-before"))
    message = {
        "extra_forbidden": "unknown key",
        "missing": "required key is missing",
    }.get(first["type"], first["msg"])
    if first["type"] not in ("extra_forbidden", "missing") and "input" in first:
        shown = repr(first["input"])
        message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    more = len(exc.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(path, field_path(location), message)


def validate(model: type[ModelT], data: Any, path: Path | None = None) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_to_config_error(path, exc) from None


def load_yaml_model(model: type[ModelT], path: Path) -> ModelT:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, None, "expected a mapping at the top level")
    return validate(model, data, path)
