"""The process layout a training run sees, and the gradient accumulation that layout needs."""

from __future__ import annotations

from dataclasses import dataclass

from spanjudge.core.errors import ConfigError

from .config import TrainConfig


@dataclass(frozen=True)
class World:
    """The process layout accelerate/torchrun gave us (1 process when launched plainly)."""

    size: int
    rank: int
    local_rank: int

    @classmethod
    def from_accelerate(cls, use_cpu: bool = False) -> World:
        """The layout as accelerate's `PartialState` sets it up, with the CPU choice the Trainer
        makes (training.use_cpu or ACCELERATE_USE_CPU): the world counted here is the one that
        trains. On CPU, processes launched by torchrun/accelerate join one gloo group."""
        from accelerate import PartialState
        from accelerate.utils import parse_flag_from_env

        state = PartialState(cpu=use_cpu or parse_flag_from_env("ACCELERATE_USE_CPU"))
        # local_process_index is -1 when a launcher sets no LOCAL_RANK: one process, on device 0
        return cls(size=state.num_processes, rank=state.process_index, local_rank=max(state.local_process_index, 0))

    @property
    def main(self) -> bool:
        return self.rank == 0


def gradient_accumulation(config: TrainConfig, world: World) -> int:
    per_step = config.training.per_device_batch_size * world.size
    if config.training.effective_batch_size % per_step:
        raise ConfigError(
            None,
            "training.effective_batch_size",
            f"{config.training.effective_batch_size} is not a multiple of per_device_batch_size × processes "
            f"({config.training.per_device_batch_size} × {world.size})",
        )
    return config.training.effective_batch_size // per_step
