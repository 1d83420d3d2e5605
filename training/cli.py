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
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Print the memory budget and the time per epoch of this config on the GPU named by --gpu, from the "
            "model's config.json on the meta device (no weights, no GPU, no network for the shipped recipes), then "
            "stop; refuses in one line a config that cannot fit, saying what to change.",
        ),
    ] = False,
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="With --plan: A40, A100-40GB, A100-80GB, H100, L4 or RTX4090."),
    ] = None,
    examples: Annotated[
        int | None,
        typer.Option(
            "--examples",
            min=1,
            help="With --plan: examples per epoch (default: the config's train.jsonl, else the thesis's 37,000).",
        ),
    ] = None,
    mean_tokens: Annotated[
        float | None,
        typer.Option(
            "--mean-tokens",
            min=1,
            help="With --plan: mean tokens per example for the time (default: data.max_length, an upper bound).",
        ),
    ] = None,
    mfu: Annotated[
        float | None,
        typer.Option(
            "--mfu",
            min=0.01,
            max=1.0,
            help="With --plan: the model FLOPs utilisation the time assumes (default: the MFU a GPU row of "
            "bench/results/gpu.json measured for this setup, else 0.4, the goal).",
        ),
    ] = None,
) -> None:
    """Fine-tune the judge: LoRA or QLoRA SFT with TRL, loss on the evaluation only.

    Launch with `accelerate launch [--config_file configs/accelerate/<setup>.yaml] train.py
    --config <train.yaml>` for one GPU, several GPUs (DDP, FSDP, DeepSpeed ZeRO-3) or CPU
    processes; plain `spanjudge train` runs one process. Config, data and lengths are checked
    before the model loads. The run folder (training.output_dir) receives checkpoints, the
    final adapter in adapter/, metrics.json and the resolved config; re-running the same
    command resumes from the last checkpoint, and does nothing once the run has finished.
    """
    from spanjudge.core.errors import SpanjudgeError

    from .config import parse_override
    from .stage import plan_training, train_judge

    overrides = [parse_override(item) for item in set_ or []]
    if plan or gpu is not None:
        if not (plan and gpu):
            raise typer.BadParameter("--plan and --gpu go together: --plan --gpu A40", param_hint="--plan/--gpu")
        outcome = plan_training(config, overrides, gpu, examples=examples, mean_tokens=mean_tokens, mfu=mfu)
        typer.echo(outcome.text)
        if outcome.refusal:
            raise SpanjudgeError(outcome.refusal)
        return
    train_judge(config, overrides, check=check)
