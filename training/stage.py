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
