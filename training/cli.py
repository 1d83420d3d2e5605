"""`spanjudge train` (and `accelerate launch train.py`, which calls it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

train = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@train.command()
def train_command(
    config: Annotated[Path, typer.Option("--config", help="Training YAML (configs/train/*.yaml).")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override one config value: KEY=VALUE with a dotted key, e.g. training.max_steps=20 "
            "or data.train=runs/annotate (repeatable; the value is read as YAML).",
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Validate the config and the data (tokenizes everything), then stop.")
    ] = False,
) -> None:
    """Fine-tune the judge: LoRA or QLoRA SFT with TRL, loss on the evaluation only.

    Launch with `accelerate launch [--config_file configs/accelerate/<setup>.yaml] train.py
    --config <train.yaml>` for one GPU, several GPUs (DDP, FSDP, DeepSpeed ZeRO-3) or CPU
    processes; plain `spanjudge train` runs one process. Config, data and lengths are checked
    before the model loads. The run folder (training.output_dir) receives checkpoints, the
    final adapter in adapter/, metrics.json and the resolved config; re-running the same
    command resumes from the last checkpoint, and does nothing once the run has finished.
    """
    from .config import parse_override
    from .stage import train_judge

    train_judge(config, [parse_override(item) for item in set_ or []], check=check)
