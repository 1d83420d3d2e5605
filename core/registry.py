"""One registry for every extension point: a name → "module:attr", imported on first use.

    ENGINES = Registry("engine", "spanjudge.engines", {"openai": "spanjudge.inference.backends.openai_compat:ENGINE"})
    ENGINES.names()          # the built-in names, then those other installed packages add
    ENGINES.load("openai")   # imports that one module only; an unknown name is one InputError listing the names

Engines, benchmark kinds, meta-eval judge kinds and commands are all registries (as
lm-evaluation-harness keeps one `registry.py` for its models, tasks and metrics). A built-in
entry is one line in its registry's table; another installed package adds entries as entry
points of the registry's group (`[project.entry-points."spanjudge.engines"] name = "pkg.mod:ENGINE"`)
without touching spanjudge. A built-in name cannot be taken over by a plugin. Nothing is
imported to list the names, so `--help` and a YAML file's `kind:` check cost no engine import.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, distributions
from typing import Generic, TypeVar, cast

from .errors import InputError

T = TypeVar("T")


@cache
def installed_entry_points() -> dict[str, dict[str, EntryPoint]]:
    """Group → name → entry point, over every installed distribution's metadata, read once for every
    registry (`installed_entry_points.cache_clear()` after installing a package in this process).

    Every copy of every distribution's metadata on sys.path is read, the first one first: unlike
    `importlib.metadata.entry_points()`, which keeps one copy per distribution name, this skips
    past a stale spanjudge.egg-info left in the working directory by a build (seen first by
    `python -m`)."""
    found: dict[str, dict[str, EntryPoint]] = {}
    for distribution in distributions():
        for entry in distribution.entry_points:
            found.setdefault(entry.group, {}).setdefault(entry.name, entry)
    return found


def entry_points(group: str) -> dict[str, EntryPoint]:
    """Name → entry point of `group` (see `installed_entry_points`)."""
    return dict(installed_entry_points().get(group, {}))


def one_of(names: tuple[str, ...] | list[str]) -> str:
    """'a, b or c', for messages and --help."""
    names = tuple(names)
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else (names[0] if names else "(none)")


@dataclass(frozen=True)
class Registry(Generic[T]):
    """Names of one extension point and where each lives (see the module docstring).

    what:      what an entry is, for messages ("engine", "benchmark kind")
    group:     the entry-point group through which other packages add entries
    builtin:   name → "module:attr" of the entries spanjudge ships
    interface: the type every loaded entry must be (None: any object, e.g. a factory function)
    """

    what: str
    group: str
    builtin: Mapping[str, str]
    interface: type[T] | None = None
    _loaded: dict[str, T] = field(default_factory=dict, init=False, repr=False, compare=False)

    def targets(self) -> dict[str, str]:
        """Name → "module:attr": the built-in entries first, then those of other installed packages."""
        added = {name: entry.value for name, entry in entry_points(self.group).items() if name not in self.builtin}
        return {**self.builtin, **added}

    def names(self) -> tuple[str, ...]:
        return tuple(self.targets())

    def check(self, name: str) -> str:
        """`name` if registered; else an InputError naming the registered ones."""
        if name not in self.targets():
            raise InputError(f"unknown {self.what} {name!r}; choose {one_of(self.names())}")
        return name

    def load(self, name: str) -> T:
        """The entry `name`, imported on first use."""
        if name not in self._loaded:
            target = self.targets().get(name)
            if target is None:
                self.check(name)
            module_name, _, attribute = str(target).partition(":")
            loaded: object = importlib.import_module(module_name)
            for part in attribute.split("."):
                loaded = getattr(loaded, part)
            if self.interface is not None and not isinstance(loaded, self.interface):
                raise TypeError(
                    f"{self.what} {name!r} ({target}) is a {type(loaded).__name__}, not a {self.interface.__name__}"
                )
            self._loaded[name] = cast(T, loaded)  # an instance of `interface`, where one is declared
        return self._loaded[name]

    def load_all(self) -> dict[str, T]:
        return {name: self.load(name) for name in self.names()}
