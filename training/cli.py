"""`spanjudge train` (and `accelerate launch train.py`, which calls it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.options import option, settings_command

from .config import parse_override
from .stage import plan_training, train_judge

train = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """`spanjudge train`'s options, each declared once (`core.options`)."""

    config: Path = option(help="Training YAML (configs/train/*.yaml).")
    set_: list[str] = option(
        [],
        flag="--set",
        help="Override one config value: KEY=VALUE with a dotted key, e.g. training.max_steps=20 "
        "or data.train=runs/annotate (repeatable; the value is read as YAML).",
    )
    check: bool = option(False, help="Validate the config and the data (tokenizes everything), then stop.")
    plan: bool = option(
        False,
        help="Print the memory budget and the time per epoch of this config on the GPU named by --gpu, from the "
        "model's config.json on the meta device (no weights, no GPU, no network for the shipped recipes), then "
        "stop; refuses in one line a config that cannot fit, saying what to change.",
    )
    gpu: str | None = option(None, help="With --plan: A40, A100-40GB, A100-80GB, H100, L4 or RTX4090.")
    examples: int | None = option(
        None,
        min=1,
        help="With --plan: examples per epoch (default: the config's train.jsonl, else the thesis's 37,000).",
    )
    mean_tokens: float | None = option(
        None,
        min=1,
        help="With --plan: mean tokens per example for the time (default: data.max_length, an upper bound).",
    )
    mfu: float | None = option(
        None,
        min=0.01,
        max=1.0,
        help="With --plan: the model FLOPs utilisation the time assumes (default: the MFU a GPU row of "
        "bench/results/gpu.json measured for this setup, else 0.4, the goal).",
    )


def train_command(settings: TrainSettings) -> None:
    """Fine-tune the judge: LoRA or QLoRA SFT with TRL, loss on the evaluation only (or every weight of a small
    base: training.finetuning full, its whole model saved in adapter/).

    Launch with `accelerate launch [--config_file configs/accelerate/<setup>.yaml] train.py
    --config <train.yaml>` for one GPU, several GPUs (DDP, FSDP, DeepSpeed ZeRO-3) or CPU
    processes; plain `spanjudge train` runs one process. Config, data and lengths are checked
    before the model loads. The run folder (training.output_dir) receives checkpoints, the
    final adapter in adapter/, metrics.json and the resolved config; re-running the same
    command resumes from the last checkpoint, and does nothing once the run has finished.
    """

    s = settings
    overrides = [parse_override(item) for item in s.set_]
    if s.plan or s.gpu is not None:
        if not (s.plan and s.gpu):
            raise typer.BadParameter("--plan and --gpu go together: --plan --gpu A40", param_hint="--plan/--gpu")
        outcome = plan_training(s.config, overrides, s.gpu, examples=s.examples, mean_tokens=s.mean_tokens, mfu=s.mfu)
        typer.echo(outcome.text)
        if outcome.refusal:
            raise SpanjudgeError(outcome.refusal)
        return
    train_judge(s.config, overrides, check=s.check)


settings_command(train, TrainSettings, train_command)
