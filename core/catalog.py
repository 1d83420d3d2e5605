"""The task and aspect catalog: data in `configs/tasks/*.yaml`, typed and validated here.

A category file holds an aspect library (name -> definition, label descriptions, the
aspects to tell the model to ignore) and the tasks of that category; each task picks
aspects from the library and may override their fields. Adding a task or an aspect is a
YAML edit: users can also point `SPANJUDGE_CATALOG` (or `load_catalog(extra=...)`) at
their own files or folders, which are loaded after the built-in ones.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from spanjudge.core.configio import configs_dir, load_yaml_model
from spanjudge.core.errors import ConfigError, InputError

CATALOG_ENV = "SPANJUDGE_CATALOG"
Role = Literal["training", "meta_eval"]

_NAME = r"^[a-z][a-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class AspectSpec(_Strict):
    definition: str = Field(min_length=1)
    lowest: str = Field(min_length=1, description="Completes: \"'Unacceptable' means the <output> ...\"")
    highest: str = Field(min_length=1, description="Completes: \"'Excellent' means the <output> ...\"")
    do_not_consider: tuple[str, ...] = ()


class AspectOverride(_Strict):
    definition: str | None = Field(default=None, min_length=1)
    lowest: str | None = Field(default=None, min_length=1)
    highest: str | None = Field(default=None, min_length=1)
    do_not_consider: tuple[str, ...] | None = None


class InputSpec(_Strict):
    header: str = Field(min_length=1)
    optional: bool = False


class TaskSpec(_Strict):
    title: str = Field(min_length=1)
    role: Role = "training"
    datasets: tuple[str, ...] = ()
    description: str = Field(min_length=1)
    inputs: tuple[InputSpec, ...] = Field(min_length=1)
    output: str = Field(min_length=1)
    aspects: dict[str, AspectOverride | None] = Field(min_length=1)

    @field_validator("inputs")
    @classmethod
    def _unique_headers(cls, inputs: tuple[InputSpec, ...]) -> tuple[InputSpec, ...]:
        headers = [i.header for i in inputs]
        if len(set(headers)) != len(headers):
            raise ValueError(f"input headers repeat: {headers}")
        return inputs


class CategoryFile(_Strict):
    category: str = Field(pattern=_NAME)
    title: str = Field(min_length=1)
    seen_in_training: bool = True
    aspects: dict[str, AspectSpec] = Field(min_length=1)
    tasks: dict[str, TaskSpec] = Field(min_length=1)


# ---------------------------------------------------------------------------------------
# Resolved objects, as the rest of the code uses them


class Aspect(_Strict):
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    lowest: str = Field(min_length=1)
    highest: str = Field(min_length=1)
    do_not_consider: tuple[str, ...] = ()

    @classmethod
    def custom(cls, name: str, definition: str, lowest: str | None = None, highest: str | None = None) -> Aspect:
        """An aspect given inline by a user (e.g. `--aspect-definition`), not from the catalog."""
        return cls(
            name=name,
            definition=definition,
            lowest=lowest or f"has severe problems with respect to {name}",
            highest=highest or f"has no problems at all with respect to {name}",
        )


class Task(_Strict):
    id: str
    category: str
    category_title: str
    seen_in_training: bool
    title: str
    role: Role
    datasets: tuple[str, ...]
    description: str
    inputs: tuple[InputSpec, ...]
    output: str
    aspects: dict[str, Aspect]
    source: str = Field(description="The file that defined the task.")

    def aspect(self, name: str) -> Aspect:
        try:
            return self.aspects[name]
        except KeyError:
            raise InputError(_unknown("aspect", name, self.aspects, f" for task '{self.id}'")) from None

    @property
    def input_headers(self) -> tuple[str, ...]:
        return tuple(i.header for i in self.inputs)


class Catalog(_Strict):
    tasks: dict[str, Task]

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise InputError(_unknown("task", task_id, self.tasks)) from None

    def by_category(self) -> dict[str, list[Task]]:
        grouped: dict[str, list[Task]] = {}
        for task in self.tasks.values():
            grouped.setdefault(task.category, []).append(task)
        return grouped

    def training_tasks(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.role == "training"]

    def to_json_dict(self) -> dict[str, Any]:
        """A stable, documented shape for `spanjudge tasks --json`."""
        categories = []
        for category, tasks in self.by_category().items():
            categories.append(
                {
                    "name": category,
                    "title": tasks[0].category_title,
                    "seen_in_training": tasks[0].seen_in_training,
                    "tasks": [
                        {
                            "id": t.id,
                            "title": t.title,
                            "role": t.role,
                            "datasets": list(t.datasets),
                            "description": t.description,
                            "inputs": [i.model_dump() for i in t.inputs],
                            "output": t.output,
                            "aspects": [a.model_dump() for a in t.aspects.values()],
                            "source": t.source,
                        }
                        for t in tasks
                    ],
                }
            )
        return {"categories": categories}


def _unknown(kind: str, name: str, known: Iterable[str], where: str = "") -> str:
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else f"; known: {', '.join(known)}"
    return f"unknown {kind} '{name}'{where}{hint}"


# ---------------------------------------------------------------------------------------
# Loading


def _resolve_file(path: Path, spec: CategoryFile) -> dict[str, Task]:
    """Check the cross-references of one category file and resolve its tasks."""
    library = spec.aspects
    for name, aspect in library.items():
        _check_ignored(path, f"aspects.{name}.do_not_consider", name, aspect.do_not_consider, library)
    tasks: dict[str, Task] = {}
    for task_id, task in spec.tasks.items():
        if not _is_name(task_id):
            raise ConfigError(path, f"tasks.{task_id}", "task ids are snake_case (a-z, 0-9, _)")
        aspects: dict[str, Aspect] = {}
        for name, override in task.aspects.items():
            if name not in library:
                raise ConfigError(
                    path,
                    f"tasks.{task_id}.aspects.{name}",
                    _unknown("aspect", name, library, " (not in this file's aspects)"),
                )
            merged = library[name].model_dump() | (override.model_dump(exclude_none=True) if override else {})
            aspects[name] = Aspect(name=name, **merged)
            field = f"tasks.{task_id}.aspects.{name}.do_not_consider"
            _check_ignored(path, field, name, aspects[name].do_not_consider, library)
        tasks[task_id] = Task(
            id=task_id,
            category=spec.category,
            category_title=spec.title,
            seen_in_training=spec.seen_in_training,
            title=task.title,
            role=task.role,
            datasets=task.datasets,
            description=task.description,
            inputs=task.inputs,
            output=task.output,
            aspects=aspects,
            source=str(path),
        )
    return tasks


def _check_ignored(path: Path, field: str, name: str, ignored: Sequence[str], library: Mapping[str, Any]) -> None:
    """The aspects a prompt tells the model to ignore must exist and differ from `name`."""
    for index, other in enumerate(ignored):
        if other == name:
            raise ConfigError(path, f"{field}[{index}]", f"an aspect cannot tell the model to ignore itself ('{name}')")
        if other not in library:
            raise ConfigError(
                path, f"{field}[{index}]", _unknown("aspect", other, library, " (not in this file's aspects)")
            )


def _is_name(text: str) -> bool:
    return re.match(_NAME, text) is not None


def _yaml_files(location: Path) -> list[Path]:
    if location.is_dir():
        return sorted([*location.glob("*.yaml"), *location.glob("*.yml")])
    if location.exists():
        return [location]
    raise ConfigError(location, None, "catalog file or folder not found")


def catalog_locations(extra: Sequence[Path | str] = (), *, builtin: bool = True) -> list[Path]:
    locations = [configs_dir() / "tasks"] if builtin else []
    from_env = os.environ.get(CATALOG_ENV, "")
    locations += [Path(p) for p in from_env.split(os.pathsep) if p.strip()]
    locations += [Path(p) for p in extra]
    return locations


def load_catalog(extra: Sequence[Path | str] = (), *, builtin: bool = True) -> Catalog:
    """Load the built-in catalog, then `$SPANJUDGE_CATALOG`, then `extra` files/folders."""
    tasks: dict[str, Task] = {}
    for location in catalog_locations(extra, builtin=builtin):
        for path in _yaml_files(location):
            for task_id, task in _resolve_file(path, load_yaml_model(CategoryFile, path)).items():
                if task_id in tasks:
                    raise ConfigError(path, f"tasks.{task_id}", f"task id already defined in {tasks[task_id].source}")
                tasks[task_id] = task
    if not tasks:
        raise ConfigError(None, None, "the task catalog is empty")
    return Catalog(tasks=tasks)


def validate_inputs(task: Task, inputs: Mapping[str, str]) -> dict[str, str]:
    """Inputs keyed by the task's headers, in the task's order; optional empty ones dropped."""
    unknown = [h for h in inputs if h not in task.input_headers]
    if unknown:
        raise InputError(
            f"task '{task.id}' has no input '{unknown[0]}'; its inputs are: {', '.join(task.input_headers)}"
        )
    ordered: dict[str, str] = {}
    for spec in task.inputs:
        text = inputs.get(spec.header)
        if text is None or not str(text).strip():
            if spec.optional:
                continue
            raise InputError(f"task '{task.id}' needs the input '{spec.header}', which is missing or empty")
        ordered[spec.header] = str(text)
    return ordered
