"""Checkpoints that a kill cannot spoil: resume from the newest complete one, save by time as well.

- A run killed while the Trainer writes `checkpoint-N/` leaves a folder without `trainer_state.json`
  (the Trainer writes it last). Resuming from it would fail on every re-run; `resume_point` takes the
  newest checkpoint that holds it, and sets a torn one aside (renamed `torn-checkpoint-N`, which the
  Trainer neither resumes from nor rotates away) with one line saying so.
- `TimedSaves` asks the Trainer for a checkpoint whenever `training.save_minutes` have passed since the
  last one, besides every `save_steps`: a run killed (out of memory, a lost machine) loses at most that
  much. In a multi-process run the main process decides and the others follow, so that every process
  saves at the same step.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from spanjudge.core.fileio import widen_to_umask

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

TRAINER_STATE = "trainer_state.json"  # written last into a checkpoint: its presence marks a complete one
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def resume_point(output_dir: Path, main: bool, say: Callable[[str], None]) -> str | None:
    """The newest complete checkpoint of the run folder, or None. The main process sets aside each newer
    torn checkpoint (no trainer_state.json), saying so; other processes only skip them."""
    if not output_dir.is_dir():
        return None
    found = sorted(
        ((int(match.group(1)), path) for path in output_dir.iterdir() if (match := _CHECKPOINT.match(path.name))),
        reverse=True,
    )
    for _, path in found:
        if path.is_dir() and (path / TRAINER_STATE).is_file():
            return str(path)
        if main:
            aside = path.with_name(f"torn-{path.name}")
            if aside.exists():
                aside = path.with_name(f"torn-{path.name}-{time.strftime('%Y%m%d-%H%M%S')}")
            path.rename(aside)
            say(f"{path.name} is incomplete (no {TRAINER_STATE}: the run was stopped while saving it); set aside as "
                f"{aside.name}, resuming from an earlier checkpoint")  # fmt: skip
    return None


class TimedSaves(TrainerCallback):
    """Save a checkpoint every `minutes` of training, besides the Trainer's own steps (see the module)."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = minutes * 60
        self.clock = clock
        self.last = clock()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> TrainerControl:
        due = self.clock() - self.last >= self.seconds
        if _agreed(due):
            control.should_save = True
        return control

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> TrainerControl:
        self.last = self.clock()
        return control


def _agreed(due: bool) -> bool:
    """The main process's `due`, in every process of a multi-process run (a save is collective)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return due
    decision = [due]
    dist.broadcast_object_list(decision, src=0)
    return bool(decision[0])


class CheckpointModes(TrainerCallback):
    """After each checkpoint is saved, its files get the modes of the umask (`fileio.widen_to_umask`): a team
    sharing a run folder can read every checkpoint, whatever mode a library wrote a file with."""

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> TrainerControl:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            widen_to_umask(folder)
        return control
