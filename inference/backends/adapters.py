"""PEFT adapters given as a local folder or a Hub id, for the in-process engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import BackendError


def check_safetensors_adapter(folder: Path) -> None:
    """A local adapter folder whose weights are only a pickle (`adapter_model.bin`): one line,
    before peft's loader could be asked to unpickle it (loading a pickle can run code)."""
    if (
        folder.is_dir()
        and (folder / "adapter_model.bin").exists()
        and not (folder / "adapter_model.safetensors").exists()
    ):
        raise BackendError(
            f"{folder}: the adapter's weights are adapter_model.bin, a pickle; spanjudge loads only safetensors "
            "adapters (adapter_model.safetensors): convert it where you trust its origin, or use a safetensors copy"
        )


def adapter_config(adapter: str) -> Any:
    """The adapter's `peft.PeftConfig` (read from the folder, the Hub or the Hub cache);
    BackendError in one line when there is none, saying when offline mode is why."""
    import huggingface_hub
    from peft import PeftConfig

    check_safetensors_adapter(Path(adapter).expanduser())
    try:
        return PeftConfig.from_pretrained(adapter)
    except ValueError:  # peft: "Can't find 'adapter_config.json' at ..." (local or Hub)
        local = Path(adapter).expanduser().is_dir()
        where = "that folder" if local else "that folder or Hub repository"
        offline = not local and huggingface_hub.is_offline_mode()
        hint = " (HF_HUB_OFFLINE is set: only adapters already in the Hub cache can be used)" if offline else ""
        raise BackendError(f"adapter {adapter!r}: no adapter_config.json in {where}{hint}") from None


def lora_adapter(adapter: str) -> tuple[str, int]:
    """(a local folder, the LoRA rank) of a LoRA adapter given as a folder or a Hub id; a Hub
    adapter is fetched whole (`snapshot_download`), as engines such as vLLM want a folder."""
    import huggingface_hub

    config = adapter_config(adapter)
    rank = getattr(config, "r", None)
    if not isinstance(rank, int):
        raise BackendError(f"adapter {adapter!r} is a {config.peft_type} adapter, not LoRA")
    local = Path(adapter).expanduser()
    return (str(local) if local.is_dir() else huggingface_hub.snapshot_download(adapter)), rank


def tokenizer_source(adapter: str | None, model: str) -> str:
    """Where a judge's tokenizer and chat template come from: an adapter folder's own copy when it has one
    (saved by training, with its chat template), else the model's."""
    return adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else model
