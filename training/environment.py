"""What the machine and the installed packages allow a training run: an accelerator and its bf16, sharding,
Liger kernels, Unsloth, W&B; each refusal one line naming the setting."""

from __future__ import annotations

import difflib
import os
from types import ModuleType
from typing import TYPE_CHECKING

from spanjudge.core.errors import ConfigError, SpanjudgeError
from spanjudge.inference.hf_models import (
    torch_dtype,
)

from .config import (
    TrainConfig,
)

if TYPE_CHECKING:
    import torch
    from peft import PeftModel


def check_name(value: str, known: list[str], field: str) -> None:
    if value not in known:
        close = difflib.get_close_matches(value, known, n=3)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"known: {', '.join(known)}"
        raise ConfigError(None, field, f"unknown value '{value}'; {hint}")


def accelerator_present() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def gpu_has_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def module_names(folder: str, trust_remote_code: bool) -> list[str] | None:
    """Every module name of the base model, built from its config.json on the meta device (no
    weights, no memory); None when the config cannot be read (a hub id offline)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        model_config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config, trust_remote_code=trust_remote_code)
    return [name for name, _ in model.named_modules() if name]


def count_quantized(model: torch.nn.Module) -> int:
    """bitsandbytes layers in the model: proves a QLoRA run really trained on a 4-bit base."""
    return sum(1 for module in model.modules() if type(module).__module__.startswith("bitsandbytes"))


def check_sharding(on_cpu: bool) -> None:
    """An accelerate config that asks for FSDP or DeepSpeed, on CPU: accelerate turns them on only for
    accelerator devices and would run plain DDP instead, silently; one line instead."""
    for variable, name in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")):
        if on_cpu and os.environ.get(variable, "false").lower() == "true":
            raise SpanjudgeError(
                f"the accelerate config asks for {name}, which accelerate runs on GPUs only: on CPU it would train "
                "plain DDP instead; use configs/accelerate/cpu_ddp.yaml here"
            )


def check_liger(on_cpu: bool) -> None:
    """training.liger_kernel runs Triton kernels: a CUDA GPU and the liger-kernel package, or one line why not."""
    if on_cpu:
        raise ConfigError(
            None,
            "training.liger_kernel",
            "Liger's kernels are Triton kernels for a CUDA GPU and this run trains on CPU; set it to false here "
            "(on CPU the loss is already computed without the logits: training/cpu_memory.py)",
        )
    from transformers.utils import is_liger_kernel_available

    if not is_liger_kernel_available():
        raise ConfigError(
            None, "training.liger_kernel", "the liger-kernel package is not installed: pip install 'spanjudge[liger]'"
        )


def import_unsloth() -> ModuleType:
    try:
        import unsloth
    except ImportError:
        raise SpanjudgeError(
            "model.unsloth is set but Unsloth is not installed (pip install 'spanjudge[unsloth]', GPU only); "
            "set model.unsloth: false to train with plain transformers + peft"
        ) from None
    module: ModuleType = unsloth
    return module


def unsloth_model(folder: str, config: TrainConfig) -> PeftModel:
    """Unsloth's fast path: its own loader and LoRA wrapper (same LoRA settings)."""
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(
        model_name=folder,
        max_seq_length=config.data.max_length,
        dtype=torch_dtype("bfloat16" if config.model.dtype == "auto" else config.model.dtype),  # GPU only
        load_in_4bit=config.model.quantization == "4bit",
    )
    return FastLanguageModel.get_peft_model(
        model,
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=list(config.lora.target_modules),
        bias="none",
        use_gradient_checkpointing="unsloth" if config.training.gradient_checkpointing else False,
        random_state=config.training.seed,
    )


def configure_wandb(config: TrainConfig) -> None:
    """W&B reads its key from the environment or its login store; we only set project and mode."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise SpanjudgeError(
            "logging.report_to is wandb but wandb is not installed: pip install 'spanjudge[wandb]'"
        ) from None
    os.environ.setdefault("WANDB_PROJECT", config.logging.wandb_project)
    if config.logging.wandb_mode:
        os.environ["WANDB_MODE"] = config.logging.wandb_mode
    os.environ.setdefault("WANDB_DIR", str(config.training.output_dir))
