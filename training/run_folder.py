"""What a training run folder holds and is checked against: the adapter a run continues (`init_adapter_metadata`),
the config it was made with (`check_same_run`), the step it resumed from and its whole-run loss."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from spanjudge.core.artifacts import ADAPTER_METADATA, read_adapter_metadata
from spanjudge.core.errors import ConfigError
from spanjudge.inference.backends.adapters import check_safetensors_adapter

from .config import LoraSection, TrainConfig, field_default


def init_adapter_metadata(folder: Path, lora: LoraSection, base: str) -> dict[str, Any]:
    """The spanjudge.json of the adapter in lora.init_from, checked against this run: the same base model and
    LoRA shape (one ConfigError naming what differs, before any weights load)."""
    check_safetensors_adapter(folder)
    metadata = read_adapter_metadata(folder)
    if metadata is None:
        raise ConfigError(None, "lora.init_from", f"{folder} has no {ADAPTER_METADATA}: give a judge spanjudge trained")
    if metadata.base_model != base:
        raise ConfigError(
            None, "lora.init_from", f"{folder} was trained on {metadata.base_model!r}, not on model.base {base!r}"
        )
    adapter = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    targets = adapter.get("target_modules") or []
    shapes = {  # this config's value, the adapter's
        "r": (lora.r, adapter.get("r")),
        "alpha": (lora.alpha, adapter.get("lora_alpha")),
        "target_modules": (sorted(lora.target_modules), sorted([targets] if isinstance(targets, str) else targets)),
    }
    for key, (ours, theirs) in shapes.items():
        if ours != theirs:
            raise ConfigError(
                None, f"lora.{key}", f"{ours!r}, but the adapter in lora.init_from ({folder}) has {theirs!r}"
            )
    return metadata.record()


def short_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def check_same_run(config: TrainConfig, output_dir: Path) -> None:
    """A run folder belongs to one config: resuming with another would mix two runs."""
    saved = output_dir / "train_config.yaml"
    if not saved.is_file():
        return
    before = yaml.safe_load(saved.read_text(encoding="utf-8"))
    now = config.model_dump(mode="json")
    for section, values in now.items():
        for key, value in values.items():
            if key not in before.get(section, {}) and value == field_default(section, key):
                continue  # a setting newer than the saved run, left at its default: the same run
            if before.get(section, {}).get(key) != value:
                raise ConfigError(
                    None,
                    f"{section}.{key}",
                    f"{output_dir} holds a run made with {section}.{key} = {before.get(section, {}).get(key)!r}, "
                    f"not {value!r}; choose another training.output_dir (or delete that folder) to start a new run",
                )


PRECISION_FILE = "precision.json"  # the precision a run began in (`TrainingPrecision.record`), which resuming keeps


def began_in(output_dir: Path, resuming: bool) -> dict[str, str] | None:
    """The precision the run in `output_dir` began in, when it is resuming from a checkpoint and recorded one (runs
    begun before it was recorded have none: they go on in what this machine chooses, as they always did)."""
    path = output_dir / PRECISION_FILE
    if not resuming or not path.is_file():
        return None
    return dict(json.loads(path.read_text(encoding="utf-8")))


def checkpoint_step(checkpoint: str | None) -> int:
    """The global step a run resumed from (Trainer checkpoints are named checkpoint-<step>)."""
    return int(Path(checkpoint).name.rsplit("-", 1)[-1]) if checkpoint else 0


def whole_run_train_loss(
    history: Sequence[Mapping[str, Any]], resumed_at: int, since_resume: float | None, global_step: int
) -> float | None:
    """The mean training loss per step over the whole run, not only since the last resume.

    The Trainer's own `train_loss` averages only the steps this process trained. The steps
    before `resumed_at` are in the log history restored from the checkpoint: each logged
    `loss` is the mean over the steps since the previous log, so it weighs by that many steps
    (steps trained but never logged before the kill are lost and not counted)."""
    if since_resume is None:
        return None
    total, covered, previous = 0.0, 0, 0
    for entry in history:
        step = entry.get("step")
        if "loss" not in entry or not isinstance(step, int) or step <= previous or step > resumed_at:
            continue
        total += float(entry["loss"]) * (step - previous)
        covered += step - previous
        previous = step
    after = global_step - resumed_at
    if covered + after <= 0:
        return since_resume
    return (total + since_resume * after) / (covered + after)
