"""Render the three prompts (annotator, supervisor, distilled judge) from the catalog.

The Jinja2 templates live in `configs/prompts/` as data. Every text that comes from a
dataset or a model (inputs, the evaluated output, annotators' error lists) is fenced with
a run of backticks longer than any run inside it, so no evaluated text can close its
fence and pose as prompt structure (for example, an output that contains
"### Instructions" or "Overall score: Excellent" stays inside its fence).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import jinja2

from .catalog import Aspect, Task, validate_inputs
from .configio import configs_dir
from .contract import MAX_ERRORS, ErrorAnnotation, render_errors

_BACKTICKS = re.compile(r"`+")


def fence(text: str) -> str:
    """Wrap `text` between fence lines that no backtick run inside it can match."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}\n{text}\n{bar}"


@lru_cache(maxsize=8)
def _environment(templates_dir: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,  # plain-text prompts, not HTML
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
