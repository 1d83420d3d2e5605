"""User-facing errors: each one is a single line that names what is wrong and where.

The CLI prints `str(error)` and exits with status 2, with no traceback; anything else
that escapes is a bug in spanjudge, not a user mistake.
"""

from __future__ import annotations

from pathlib import Path


class SpanjudgeError(Exception):
    """Base class for problems the user can fix (bad config, bad input, dead server)."""


class ConfigError(SpanjudgeError):
    """A problem in a config file: which file, which field, what is wrong."""

    def __init__(self, path: Path | str | None, field: str | None, message: str) -> None:
        self.path = Path(path) if path is not None else None
        self.field = field or None
        self.message = message
        where = ": ".join(part for part in (_display(self.path), self.field) if part)
        super().__init__(f"{where}: {message}" if where else message)


class InputError(SpanjudgeError):
    """A problem in the data given to a command or function (missing field, unknown task)."""


def _display(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
