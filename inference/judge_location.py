"""Where a distilled judge's files are: its adapter and the base it loads (`adapter_and_model`, `recorded_base`)
and the prompt template stored with it (`resolve_prompt_template`)."""

from __future__ import annotations

import json
from pathlib import Path

from spanjudge.core.artifacts import read_adapter_metadata
from spanjudge.core.errors import SpanjudgeError

from .hf_models import local_folder, resolve_model_source
from .judge_conversation import stored_template
from .prompts import PromptTemplate


def resolve_prompt_template(location: str, given: PromptTemplate | Path | str | None) -> PromptTemplate | None:
    """The judge's prompt template: the one given (a file is loaded), else the one a local
    adapter folder stores, else None (the built-in prompt)."""
    if isinstance(given, PromptTemplate):
        return given
    if given is not None:
        return PromptTemplate.load(given)
    folder = Path(location).expanduser()
    return stored_template(folder) if folder.is_dir() else None


def adapter_and_model(location: str, base: str | None) -> tuple[str | None, str]:
    """(adapter folder or None, the model to load) for a judge location."""
    path = Path(location).expanduser()
    if (path / "adapter_config.json").is_file():
        base_spec = base or recorded_base(path)
        return str(path.resolve()), local_folder(resolve_model_source(base_spec))
    if base is not None:  # an adapter on the hub, with its base named
        return location, local_folder(resolve_model_source(base))
    return None, local_folder(resolve_model_source(location))


def recorded_base(adapter: Path) -> str:
    """The base a spanjudge adapter was trained on (as the user named it), else PEFT's record."""
    meta = read_adapter_metadata(adapter)
    if meta is not None and meta.base_model:
        return meta.base_model
    recorded = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not recorded:
        raise SpanjudgeError(f"{adapter}: the adapter does not name its base model; pass base=...")
    return str(recorded)
