"""Render the three prompts (annotator, supervisor, distilled judge) from the catalog, and a
judge prompt template given by the user (`PromptTemplate`).

The Jinja2 templates live in `configs/prompts/` as data. Every text that comes from a
dataset or a model (inputs, the evaluated output, annotators' error lists) is fenced with
a run of backticks longer than any run inside it, so no evaluated text can close its
fence and pose as prompt structure (for example, an output that contains
"### Instructions" or "Overall score: Excellent" stays inside its fence).
"""

from __future__ import annotations

import hashlib
import re
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from spanjudge.core.catalog import Aspect, Task, validate_inputs
from spanjudge.core.configio import configs_dir
from spanjudge.core.errors import InputError
from spanjudge.core.tabular import read_text

from .contract import MAX_ERRORS, ErrorAnnotation, render_errors

_BACKTICKS = re.compile(r"`+")


def fence(text: str) -> str:
    """Wrap `text` between fence lines that no backtick run inside it can match."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}\n{text}\n{bar}"


def sandboxed_environment(**options: Any) -> SandboxedEnvironment:
    """The one Jinja environment for templates a user may supply (prompt templates, the
    systems of `generate`): Jinja's sandbox, so a template can read its variables but never
    reach Python internals (`''.__class__.__mro__`) to run code; undefined variables are
    errors; plain text, not HTML. Rendering past the sandbox raises `SecurityError`."""
    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, **options)


@lru_cache(maxsize=8)
def _environment(templates_dir: Path) -> jinja2.Environment:
    return sandboxed_environment(
        loader=jinja2.FileSystemLoader(templates_dir), trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False
    )


def _template(name: str, templates_dir: Path | None) -> jinja2.Template:
    return _environment(templates_dir or configs_dir() / "prompts").get_template(name)


def template_source(name: str, templates_dir: Path | None = None) -> str:
    """The raw text of a prompt template (its hash is recorded with a trained judge)."""
    return (templates_dir or configs_dir() / "prompts").joinpath(name).read_text(encoding="utf-8")


def _phrase(words: Sequence[str]) -> str:
    """['Dialogue history', 'Knowledge'] -> 'dialogue history and knowledge'."""
    words = [w.lower() for w in words]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _fenced_inputs(task: Task, inputs: Mapping[str, str]) -> dict[str, str]:
    """The task's inputs, checked against its headers and in its order, each fenced."""
    return {header: fence(text) for header, text in validate_inputs(task, inputs).items()}


def render_annotator_prompt(
    task: Task,
    aspect: Aspect,
    inputs: Mapping[str, str],
    output: str,
    *,
    templates_dir: Path | None = None,
) -> str:
    """The prompt an annotator LLM answers with error blocks and a categorical label."""
    fenced = _fenced_inputs(task, inputs)
    return _template("annotator.jinja", templates_dir).render(
        task=task,
        aspect=aspect,
        ignored=", ".join(aspect.do_not_consider),
        inputs=fenced,
        inputs_phrase=_phrase(list(fenced)),
        output=fence(output),
        output_noun=task.output.lower(),
        max_errors=MAX_ERRORS,
    )


def render_supervisor_prompt(
    output: str,
    annotation_sets: Sequence[Sequence[ErrorAnnotation]],
    *,
    templates_dir: Path | None = None,
) -> str:
    """The prompt the supervisor LLM answers by merging the annotators' errors (no scores)."""
    return _template("supervisor.jinja", templates_dir).render(
        output=fence(output),
        annotation_sets=[
            f"Annotation set {number}:\n{fence(render_errors(errors))}"
            for number, errors in enumerate(annotation_sets, start=1)
        ],
        max_errors=MAX_ERRORS,
    )


def render_judge_prompt(
    task: Task,
    aspect: Aspect,
    inputs: Mapping[str, str],
    output: str,
    *,
    extra_task_info: str | None = None,
    templates_dir: Path | None = None,
) -> str:
    """The distilled judge's prompt (user turn); training and inference both use this."""
    return _template("judge.jinja", templates_dir).render(
        task=task,
        aspect=aspect,
        extra_task_info=task.description if extra_task_info is None else extra_task_info,
        inputs=_fenced_inputs(task, inputs),
        output=fence(output),
        max_errors=MAX_ERRORS,
    )


# -- a judge prompt template given by the user ----------------------------------------------
#
# A foreign judge (OpeNLGauge's released adapter, or a judge trained with `data.prompt_template`)
# reads its own prompt: the template it was trained with, word for word. The template is the
# user's file, so it renders in a sandbox and an undefined variable is an error, never a blank.

TEMPLATE_VARIABLES = {
    "task_name": "the task's title from the catalog, e.g. 'dialogue response generation'",
    "aspect_name": "the aspect's name, e.g. 'groundedness'",
    "aspect_definition": "the aspect's definition",
    "extra_task_info": "the record's extra_task_info, else the task's description",
    "inputs": "the task's inputs, header -> text (in the task's order; an absent optional input is left out)",
    "outputs": "the evaluated output, output header -> text (one entry)",
}


@dataclass(frozen=True)
class PromptTemplate:
    """A judge prompt template from a Jinja file; renders `TEMPLATE_VARIABLES` (texts unfenced,
    as the user wrote the template; the `fence` filter fences one) with Jinja's default
    whitespace handling, as OpeNLGauge's own scripts (`jinja2.Template(text)`) render it."""

    path: Path
    source: str
    template: jinja2.Template = field(compare=False, hash=False, repr=False)

    @classmethod
    def load(cls, path: Path | str) -> PromptTemplate:
        """The template at `path`, checked: InputError naming the file and line of a syntax
        error or of a variable the judge does not provide."""

        path = Path(path)
        if not path.is_file():
            raise InputError(f"prompt template not found: {path}")
        return cls.from_source(read_text(path), path)

    @classmethod
    def from_source(cls, source: str, path: Path) -> PromptTemplate:
        environment = sandboxed_environment(
            loader=jinja2.FunctionLoader(lambda _name: (source, str(path), lambda: True))
        )
        environment.filters["fence"] = fence
        try:
            tree = environment.parse(source, filename=str(path))
            template = environment.get_template(path.name)
        except jinja2.TemplateSyntaxError as exc:
            raise InputError(f"{path}:{exc.lineno}: template syntax error: {exc.message}") from None
        unknown = sorted(jinja2.meta.find_undeclared_variables(tree) - TEMPLATE_VARIABLES.keys())
        if unknown:
            line = next(
                (n.lineno for n in tree.find_all(jinja2.nodes.Name) if n.name == unknown[0] and n.ctx == "load"), 1
            )
            raise InputError(
                f"{path}:{line}: unknown variable '{unknown[0]}'; a judge prompt template can use "
                + ", ".join(TEMPLATE_VARIABLES)
            )
        return cls(path, source, template)

    def __reduce__(self) -> tuple[Any, tuple[str, Path]]:
        # made again from its source where it is unpickled (a judging worker process): the compiled template's
        # loader is a closure, which pickle cannot carry
        return PromptTemplate.from_source, (self.source, self.path)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()[:16]

    def render(
        self,
        task: Task,
        aspect: Aspect,
        inputs: Mapping[str, str],
        output: str,
        *,
        extra_task_info: str | None = None,
    ) -> str:
        """The prompt; InputError naming the template's file and line when a variable the
        template reads is undefined for this item (e.g. an input header the task lacks)."""
        try:
            return self.template.render(
                task_name=task.title,
                aspect_name=aspect.name,
                aspect_definition=aspect.definition,
                extra_task_info=task.description if extra_task_info is None else extra_task_info,
                inputs=dict(validate_inputs(task, inputs)),
                outputs={task.output: output},
            )
        except (jinja2.UndefinedError, SecurityError) as exc:
            raise InputError(f"{self.path}:{_template_line(exc, self.path)}: {exc.message}") from None
        except TypeError as exc:  # a filter given the wrong kind of value, e.g. `outputs | fence` (a mapping)
            raise InputError(f"{self.path}:{_template_line(exc, self.path)}: {exc}") from None


def _template_line(exc: BaseException, path: Path) -> int | str:
    """The line of the template where rendering failed (Jinja rewrites its traceback so that the
    template's own frames carry its file name and line)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    return lines[-1] if lines and lines[-1] is not None else "?"


def template_sha256(template: PromptTemplate | None) -> str:
    """The hash of the judge prompt template's text: a user's template, else the built-in one
    (a spanjudge upgrade that edits it changes the hash too). Keys stored results."""
    if template is not None:
        return template.sha256
    return hashlib.sha256(template_source("judge.jinja").encode("utf-8")).hexdigest()[:16]
