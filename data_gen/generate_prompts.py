"""Prompt templates for generating system outputs: which template a system uses for a task,
and the prompt it renders (chat message or completion-style text).

Placeholders are the task's input headers in snake case ("Dialogue history" ->
`{{ dialogue_history }}`), plus `{{ next_speaker }}` for dialogues; every template is
checked against every task it may be used for before the first model call, so a typo is
one config error, not a failed run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2
import jinja2.meta
from jinja2.sandbox import SecurityError

from spanjudge.core.catalog import Task
from spanjudge.core.errors import ConfigError
from spanjudge.inference.backends.base import ChatRequest, Message, SamplingParams
from spanjudge.inference.prompts import sandboxed_environment

from .generate_config import GenerateConfig, SystemSpec, TemplateSpec, load_template_file, template_paths

# the systems' templates are the user's: rendered in the judge prompt's sandbox
_ENV = sandboxed_environment(keep_trailing_newline=False)


_SPEAKER = re.compile(r"^\s*([A-Za-z][\w ]{0,30}?)\s*:", re.MULTILINE)
DIALOGUE_HEADER = "Dialogue history"


def slug(header: str) -> str:
    """'Dialogue history' -> 'dialogue_history' (the placeholder name of an input)."""
    return re.sub(r"[^a-z0-9]+", "_", header.lower()).strip("_")


def next_speaker(history: str) -> str:
    """Who speaks next in an 'A: ...' / 'B: ...' history: the other of the last two speakers
    (B when the history does not say; thesis Fig. A.9 answers as participant B)."""
    speakers = _SPEAKER.findall(history)
    if not speakers:
        return "B"
    last = speakers[-1]
    others = [s for s in dict.fromkeys(reversed(speakers)) if s != last]
    if others:
        return str(others[0])
    return {"A": "B", "B": "A"}.get(last, "B")


def placeholders(task: Task) -> set[str]:
    """The names a template may use for a task: its inputs, and `next_speaker` for dialogues."""
    names = {slug(h) for h in task.input_headers}
    if DIALOGUE_HEADER in task.input_headers:
        names.add("next_speaker")
    return names


def template_values(inputs: Mapping[str, str]) -> dict[str, str]:
    values = {slug(header): text.strip() for header, text in inputs.items()}
    if DIALOGUE_HEADER in inputs:
        values["next_speaker"] = next_speaker(inputs[DIALOGUE_HEADER])
    return values


@dataclass(frozen=True)
class Template:
    name: str
    spec: TemplateSpec
    path: Path  # the file it came from

    @property
    def variant(self) -> str:
        return self.spec.variant or self.name

    def text(self, style: str, output_header: str) -> str:
        """The template source for a prompt style (a derived one for completion models)."""
        if style == "chat":
            return self.spec.chat
        if self.spec.completion is not None:
            return self.spec.completion
        return self.spec.chat.rstrip() + f"\n\n{output_header}:"

    def stops(self, style: str) -> tuple[str, ...]:
        return self.spec.stop + (self.spec.completion_stop if style == "completion" else ())

    def source_hash(self, style: str, output_header: str) -> str:
        return hashlib.sha256(self.text(style, output_header).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Templates:
    by_name: dict[str, Template]
    defaults: dict[str, tuple[str, ...]]  # task id -> template names, in file order


def load_templates(config: GenerateConfig, config_path: Path) -> Templates:
    """Built-in templates, then the config's own (same name: the later file wins)."""
    by_name: dict[str, Template] = {}
    for path in template_paths(config, config_path):
        for name, spec in load_template_file(path).templates.items():
            by_name[name] = Template(name, spec, path)
    defaults: dict[str, list[str]] = {}
    for template in by_name.values():
        for task in template.spec.tasks:
            defaults.setdefault(task, []).append(template.name)
    return Templates(by_name, {task: tuple(names) for task, names in defaults.items()})


def _used_names(text: str, where: Path, name: str) -> set[str]:
    try:
        return set(jinja2.meta.find_undeclared_variables(_ENV.parse(text)))
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(where, f"templates.{name}", f"line {exc.lineno}: {exc.message}") from None


def _check_fits(template: Template, task: Task, style: str) -> None:
    given = placeholders(task)
    used = _used_names(template.text(style, task.output), template.path, template.name)
    unknown = sorted(used - given)
    if unknown:
        raise ConfigError(
            template.path,
            f"templates.{template.name}",
            f"uses {{{{ {unknown[0]} }}}} but task '{task.id}' has inputs: {', '.join(sorted(given))}",
        )


def system_wants(system: SystemSpec, task: Task) -> bool:
    return not system.tasks or task.id in system.tasks or task.category in system.tasks


def templates_for(
    system: SystemSpec, task: Task, templates: Templates, config_path: Path, index: int
) -> list[Template]:
    """The templates a system uses for a task (checked against the task's inputs);
    empty when the system does not generate for this task."""
    if not system_wants(system, task):
        return []
    field = f"systems[{index}].templates.{task.id}"
    if task.id in system.templates:
        names = system.templates[task.id]
        missing = [n for n in names if n not in templates.by_name]
        if missing:
            raise ConfigError(config_path, field, f"unknown template '{missing[0]}'")
        chosen = [templates.by_name[n] for n in names]
    else:
        names = templates.defaults.get(task.id, ())
        if not names:
            raise ConfigError(
                config_path,
                f"systems[{index}]",
                f"no template for task '{task.id}': list one under `templates: {{{task.id}: [...]}}`, or give a "
                f"template `tasks: [{task.id}]` (known templates: {', '.join(sorted(templates.by_name))})",
            )
        chosen = [templates.by_name[n] for n in names]
        if system.style == "completion":  # e.g. the concise-answer prompt is for chat models only
            chosen = [t for t in chosen if t.spec.for_completion_models] or chosen
    for template in chosen:
        _check_fits(template, task, system.style)
    return chosen


def render_prompt(template: Template, task: Task, inputs: Mapping[str, str], style: str) -> str:
    source = template.text(style, task.output)
    try:
        return _ENV.from_string(source).render(**template_values(inputs)).strip()
    except SecurityError as exc:
        raise ConfigError(
            template.path, f"templates.{template.name}", f"the template is refused by the sandbox: {exc}"
        ) from None


def build_request(prompt: str, style: str, system: SystemSpec, params: SamplingParams) -> ChatRequest:
    """A chat request (one user message, a system message if configured) or, for a
    completion-style system, the prompt as the only message: the backend's `completions`
    API sends it as plain text."""
    messages: Sequence[Message] = [Message(role="user", content=prompt)]
    if style == "chat" and system.system_message:
        messages = [Message(role="system", content=system.system_message), *messages]
    return ChatRequest(messages=tuple(messages), params=params)
