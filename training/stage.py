"""The training stage as a function: `train_judge(config, overrides) -> TrainOutcome`.

`spanjudge train` (and `accelerate launch train.py`) parse their options and print; the demo
calls `train_judge` directly. Checks run before any model loads (`TrainingRun.prepare`), and
a finished run is a no-op that returns its recorded metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TrainOutcome:
    adapter_dir: Path
    already_trained: bool  # the run folder held a finished run: nothing was trained
    metrics: dict[str, Any] | None  # None when only checked

    def summary(self) -> str:
        """The headline metrics, e.g. 'train_loss 1.25, eval_loss 1.1'."""
        metrics = self.metrics or {}
        keys = ("train_loss", "eval_loss", "tokens_per_second")
        return ", ".join(f"{key} {metrics[key]:.4g}" for key in keys if metrics.get(key))


def train_judge(
    config: Path,
    overrides: Sequence[tuple[str, Any]] = (),
    *,
    check: bool = False,
    say: Callable[[str], None] | None = None,
) -> TrainOutcome:
    """Load the training YAML with dotted-key `overrides`, check config and data (tokenizes
    everything), then train unless `check`. `say` receives the progress lines (main process)."""
    from .config import load_train_config
    from .run import TrainingRun

    run = TrainingRun(load_train_config(config, list(overrides)), say=say)
    already = run.finished
    run.prepare()
    if check:
        run.log("config and data are valid")
        return TrainOutcome(run.adapter_dir, already, None)
    metrics = run.train()
    outcome = TrainOutcome(run.adapter_dir, already, metrics)
    run.log(f"done: {run.adapter_dir} ({outcome.summary()})")
    return outcome


@dataclass(frozen=True)
class PlanOutcome:
    text: str  # the budget and the epoch time, as `--plan` prints them
    refusal: str | None  # one line saying what to change, when the run cannot fit the GPU


def plan_training(
    config: Path,
    overrides: Sequence[tuple[str, Any]],
    gpu_name: str,
    *,
    examples: int | None = None,
    mean_tokens: float | None = None,
    mfu: float | None = None,
) -> PlanOutcome:
    """The plan of a training config on one named GPU (training/plan.py); no weights are loaded
    and the training data is read only when it is there."""
    from . import plan
    from .config import load_train_config

    train_config = load_train_config(config, list(overrides), data_needed=False)
    gpu = plan.find_gpu(gpu_name)
    lora, trust = train_config.lora, train_config.model.trust_remote_code  # off unless the config asks
    shape = plan.model_shape(plan.model_config(train_config.model.base, trust), lora.r, lora.target_modules, trust)
    count, tokens, assumptions = plan.epoch_size(train_config, examples, mean_tokens)
    if mfu is None:
        measured = plan.measured_mfu(train_config)
        if measured is None:
            mfu = plan.DEFAULT_MFU
            assumptions.append(
                f"{mfu:.0%} MFU: the goal, not a measurement (no GPU row of this setup in bench/results/gpu.json; "
                "give --mfu, or run bench/gpu/run.sh)"
            )
        else:
            mfu, source = measured
            assumptions.append(source)
    result = plan.plan(
        train_config, shape, gpu, examples=count, mean_tokens=tokens, mfu=mfu, assumptions=assumptions
    )  # fmt: skip
    # the thesis's own figure is for its recipe's architecture on an A40
    thesis = plan.THESIS_HOURS if gpu.name == "A40" and train_config.model.base in plan.SHIPPED_CONFIGS else None
    refusal = None
    if not result.fits:
        refusal = (
            f"does not fit one {gpu.name}: needs {result.total_bytes / plan.GIB:.1f} GiB of {gpu.memory_gib:g}; "
            f"{plan.advice(train_config, shape, gpu)}"
        )
    text = plan.render(train_config, result, thesis_hours=thesis)
    if result.fits and train_config.training.gradient_checkpointing:
        without = train_config.model_copy(
            update={"training": train_config.training.model_copy(update={"gradient_checkpointing": False})}
        )
        need = plan.plan(without, shape, gpu, examples=1, mean_tokens=1).total_bytes
        if need <= gpu.memory_gib * plan.GIB:
            text += (
                f"\n  faster: with training.gradient_checkpointing: false this run needs {need / plan.GIB:.1f} GiB and "
                "still fits; the backward then runs no second forward (about a quarter of a step's FLOPs)"
            )
    return PlanOutcome(text, refusal)
