"""Typed configs of `spanjudge generate`: the prompt templates (configs/generate/templates/)
and the systems that answer them (configs/generate/systems/). YAML, strict, one-line errors."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spanjudge.core.configio import configs_dir, load_yaml_model
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.inference.backends.base import SamplingParams
from spanjudge.inference.backends.spec import BackendSpec

from .config import env_endpoint_overrides

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_regexes(patterns: tuple[str, ...]) -> tuple[str, ...]:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {pattern!r} ({exc})") from None
    return patterns


# ---------------------------------------------------------------------------------------
# Templates


class TemplateSpec(_Strict):
    """One prompt (thesis Fig. A.1-A.15 give the intent; the wording is ours).

    Placeholders are the task's input headers in snake case: `{{ article }}`,
    `{{ dialogue_history }}`, `{{ story_summary }}` ... (Jinja2, undefined names are errors).
    """

    description: str = ""
    figure: str | None = Field(default=None, description="The thesis figure this template follows.")
    tasks: tuple[str, ...] = Field(default=(), description="Tasks that use this template by default.")
    variant: str | None = Field(
        default=None,
        pattern=NAME,
        description="Suffix of the system name when a task has several default templates "
        "(short/long stories). Default: the template name.",
    )
    chat: str = Field(min_length=1, description="The user message for chat models.")
    completion: str | None = Field(
        default=None,
        description="The prompt for models without a chat template. Default: the chat text "
        "followed by '<Output header>:' so that a base model continues with the output.",
    )
    for_completion_models: bool = Field(
        default=True, description="False: completion-style systems skip this template (e.g. thesis Fig. A.13)."
    )
    stop: tuple[str, ...] = Field(default=(), description="Cut the output at the first of these (all models).")
    completion_stop: tuple[str, ...] = Field(
        default=(), description="Also cut at these for completion-style models (a base model rambles on)."
    )
    strip: tuple[str, ...] = Field(
        default=(), description="Extra regexes removed from the start of the output (e.g. a speaker tag 'B:')."
    )

    @field_validator("strip")
    @classmethod
    def _regexes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_regexes(value)


class TemplateFile(_Strict):
    family: str = Field(description="Task family (summarization, data_to_text, dialogue, story, question_answering).")
    description: str = ""
    templates: dict[str, TemplateSpec] = Field(min_length=1)

    @field_validator("templates")
    @classmethod
    def _names(cls, value: dict[str, TemplateSpec]) -> dict[str, TemplateSpec]:
        for name in value:
            if not re.match(NAME, name):
                raise ValueError(f"template name {name!r} must match {NAME}")
        return value


# ---------------------------------------------------------------------------------------
# Systems


class SamplingPatch(_Strict):
    """Per-system changes to the run's default sampling (fields left out are inherited)."""

    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: tuple[str, ...] | None = Field(default=None, description="Sent to the server (cuts generation early).")

    def over(self, base: SamplingParams) -> SamplingParams:
        return base.model_copy(update=self.model_dump(exclude_unset=True))


DEFAULT_PREAMBLES: tuple[str, ...] = (
    # "Sure!", "Certainly, here is ...", "Okay!\n" - an affirmation that opens a reply
    r"(?:sure|certainly|of course|absolutely|okay|ok|alright|great)(?:\s+thing)?\s*[!,.]*[ \t]*"
    r"(?:\n|(?=(?:here|below|i (?:have|can|will|'ve|'ll))\b))",
    # "Here is a short summary of the article:", "Below is the response."
    r"(?:here(?:'s| is| are)|below (?:is|are)|the following is|i have (?:written|generated|created))"
    r"\s+(?:a|an|the|my|your|one|some|five|\d+)\b[^\n:]{0,160}?\b(?:summary|summaries|response|reply|answer|story|text|description|statements?|output|"
    r"sentences?|paragraph|list|version|attempt)\b[^\n:]{0,80}?(?::|\.?[ \t]*(?=\n))",
)
DEFAULT_POSTAMBLES: tuple[str, ...] = (
    r"(?:i hope (?:this|that|it)|let me know|feel free|please note|note:|would you like)[^\n]*",
)


class PostProcess(_Strict):
    """What real outputs need before they are evaluated (the raw text is always kept)."""

    strip_preamble: bool = Field(
        default=True, description="Remove chat openers ('Sure! Here is ...:') and closers ('Let me know if ...')."
    )
    preamble_patterns: tuple[str, ...] = DEFAULT_PREAMBLES
    postamble_patterns: tuple[str, ...] = DEFAULT_POSTAMBLES
    strip_label: bool = Field(default=True, description="Remove a leading '<Output header>:' ('Summary:').")
    strip_fences: bool = Field(default=True, description="Remove code fences / quotes wrapping the whole output.")
    stop: tuple[str, ...] = Field(default=(), description="Cut at the first of these (added to the template's).")
    min_chars: int = Field(default=1, ge=1, description="Shorter outputs (letters and digits) are rejected.")

    @field_validator("preamble_patterns", "postamble_patterns")
    @classmethod
    def _regexes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_regexes(value)


PromptStyle = Literal["auto", "chat", "completion"]


class SystemSpec(_Strict):
    name: str = Field(pattern=NAME, description="The system name written with each output.")
    description: str = ""
    backend: BackendSpec
    prompt_style: PromptStyle = Field(
        default="auto",
        description="auto: chat for api 'chat', completion-style prompts for api 'completions'/'prompt' "
        "(models without a chat template).",
    )
    tasks: tuple[str, ...] = Field(default=(), description="Task ids or categories it generates for (default: all).")
    templates: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="task id -> template names, instead of the tasks' default templates."
    )
    system_message: str | None = Field(default=None, description="Chat models only: a system message first.")
    sampling: SamplingPatch = SamplingPatch()
    postprocess: PostProcess | None = Field(default=None, description="Default: the run's postprocess.")

    @property
    def style(self) -> Literal["chat", "completion"]:
        if self.prompt_style != "auto":
            return self.prompt_style
        return "chat" if self.backend.api == "chat" else "completion"

    @model_validator(mode="after")
    def _style_fits_backend(self) -> SystemSpec:
        if self.system_message and self.style == "completion":
            raise ValueError("system_message is for chat-style systems only")
        return self


class GenerateConfig(_Strict):
    name: str
    description: str = ""
    definitions: dict[str, Any] = Field(default_factory=dict, description="Free space for YAML anchors.")
    template_files: tuple[str, ...] = Field(
        default=(),
        description="Extra template YAML files or folders (relative to this file), loaded after "
        "the built-in configs/generate/templates/; a template of the same name replaces a built-in one.",
    )
    sampling: SamplingParams = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=512, seed=0)
    postprocess: PostProcess = PostProcess()
    systems: tuple[SystemSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_unique(self) -> GenerateConfig:
        names = [s.name for s in self.systems]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"system names repeat: {', '.join(repeated)}")
        return self

    def sampling_for(self, system: SystemSpec) -> SamplingParams:
        return system.sampling.over(self.sampling)

    def postprocess_for(self, system: SystemSpec) -> PostProcess:
        return system.postprocess or self.postprocess

    def with_endpoints(self, overrides: Mapping[str, Sequence[str]]) -> GenerateConfig:
        """Point systems at other servers: {system name: [url, ...]}."""
        names = [s.name for s in self.systems]
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise InputError(f"endpoint override for unknown system '{unknown[0]}'; systems: {', '.join(names)}")

        def swap(system: SystemSpec) -> SystemSpec:
            urls = overrides.get(system.name)
            if not urls:
                return system
            backend = system.backend.model_copy(update={"endpoints": tuple(urls)})
            return system.model_copy(update={"backend": backend})

        return self.model_copy(update={"systems": tuple(swap(s) for s in self.systems)})


def load_generate_config(path: Path, endpoint_overrides: Mapping[str, Sequence[str]] | None = None) -> GenerateConfig:
    config = load_yaml_model(GenerateConfig, path)
    merged = env_endpoint_overrides([s.name for s in config.systems]) | dict(endpoint_overrides or {})
    return config.with_endpoints(merged) if merged else config


def builtin_templates_dir() -> Path:
    return configs_dir() / "generate" / "templates"


def template_paths(config: GenerateConfig, config_path: Path) -> list[Path]:
    """Built-in template files first, then the config's own (files, or folders of *.yaml)."""
    paths = sorted(builtin_templates_dir().glob("*.yaml"))
    for index, entry in enumerate(config.template_files):
        path = Path(entry).expanduser()
        path = path if path.is_absolute() else config_path.parent / path
        if path.is_dir():
            paths += sorted(path.glob("*.yaml"))
        elif path.is_file():
            paths.append(path)
        else:
            raise ConfigError(config_path, f"template_files[{index}]", f"{path} not found")
    return paths


def load_template_file(path: Path) -> TemplateFile:
    return load_yaml_model(TemplateFile, path)
