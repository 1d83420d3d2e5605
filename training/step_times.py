"""Each optimizer step's wall time and input tokens, so speed is read after the warm-up.

The Trainer's own `train_runtime` covers the whole run: the first steps (CUDA context, cuBLAS and
Triton autotuning, `torch.compile`, the allocator growing) can take many times a steady step, and a
short benchmark run would report them as the training speed. `metrics.json` keeps every step's
seconds and the non-padding input tokens it saw; `steady_speed` reads tokens/s from the steps after
the warm-up.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


def _synchronize() -> None:
    """Wait for the GPU's queued work, so a step's time is the GPU's and not only the launches'."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class StepTimes(TrainerCallback):
    """Records (step, seconds, input tokens seen so far) at every optimizer step of this process."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.steps: list[dict[str, float | int]] = []
        self._started: float | None = None

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> TrainerControl:
        _synchronize()
        self._started = self.clock()
        return control

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> TrainerControl:
        if self._started is not None:
            _synchronize()
            self.steps.append(
                {
                    "step": state.global_step,
                    "seconds": round(self.clock() - self._started, 4),
                    "tokens_seen": int(state.num_input_tokens_seen),
                }
            )
            self._started = None
        return control


def steady_speed(steps: Sequence[Mapping[str, Any]], warmup: int) -> dict[str, Any] | None:
    """Tokens/s and the median step time over the steps after the first `warmup` ones of this process
    (None when no step is left). Tokens of a step are the growth of `tokens_seen` at that step."""
    timed = [
        (step["seconds"], step["tokens_seen"] - previous["tokens_seen"])
        for previous, step in itertools.pairwise(steps)
        if step["step"] > previous["step"]
    ][max(warmup - 1, 0) :]  # the first step has no previous count: it is always warm-up
    if not timed:
        return None
    seconds = sum(s for s, _ in timed)
    return {
        "timed_steps": len(timed),
        "warmup_steps": len(steps) - len(timed),
        "median_step_s": round(statistics.median(s for s, _ in timed), 4),
        "tokens_per_second": round(sum(t for _, t in timed) / seconds, 2) if seconds > 0 else None,
    }
