"""When to save, and saving on that schedule.

`CheckpointSchedule` says when: every N steps and/or every T seconds, the time decision taken
on rank 0 and broadcast. `Checkpointer` saves a trainer into a directory on its schedule, keeps
the newest checkpoints and restores one.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch.distributed as dist

from hstu_model.checkpoint.directory import CheckpointInfo, latest
from hstu_model.checkpoint.format import _distributed, load_checkpoint, save_checkpoint
from hstu_model.checkpoint.state import CheckpointableTrainer


class CheckpointSchedule:
    """When to save: every `every_steps` steps and/or every `every_seconds` seconds (0 = off).

    `due(step)` is called after each step, on every rank. The time decision is taken on rank 0
    and broadcast when a process group exists, so all ranks save at the same step.
    `saved()` restarts the timer.
    """

    def __init__(
        self,
        every_steps: int = 0,
        every_seconds: float = 0.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_steps < 0 or not every_seconds >= 0 or math.isinf(every_seconds):
            raise ValueError(
                f"every_steps and every_seconds must be >= 0, got {every_steps}, {every_seconds}"
            )
        self.every_steps = int(every_steps)
        self.every_seconds = float(every_seconds)
        self._clock = clock
        self._last = clock()

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0 or self.every_seconds > 0

    def due(self, step: int) -> bool:
        by_steps = self.every_steps > 0 and step % self.every_steps == 0
        by_time = False
        if self.every_seconds > 0:
            by_time = self._clock() - self._last >= self.every_seconds
            if _distributed():
                decision = [by_time]
                dist.broadcast_object_list(decision, src=0)
                by_time = bool(decision[0])
        return by_steps or by_time

    def saved(self) -> None:
        self._last = self._clock()


class Checkpointer:
    """Saves a trainer into `directory` on a `CheckpointSchedule` and keeps the newest `keep`.

    `config`: the effective config saved with every checkpoint (default: the trainer's).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        every_steps: int = 0,
        every_seconds: float = 0.0,
        keep: int | None = None,
        config: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.schedule = CheckpointSchedule(every_steps, every_seconds, clock=clock)
        self.keep = keep
        self.config = config

    def latest(self) -> CheckpointInfo | None:
        return latest(self.directory)

    def save(self, trainer: CheckpointableTrainer, extra: Mapping[str, Any] | None = None) -> Path:
        path = save_checkpoint(
            self.directory, trainer, extra=extra, config=self.config, keep=self.keep
        )
        self.schedule.saved()
        return path

    def maybe_save(
        self, trainer: CheckpointableTrainer, extra: Callable[[], Mapping[str, Any]] | None = None
    ) -> Path | None:
        """Save if the schedule says so at `trainer.step`; `extra` is called only then."""
        if not self.schedule.due(trainer.step):
            return None
        return self.save(trainer, extra() if extra is not None else None)

    def restore(self, checkpoint: CheckpointInfo, trainer: CheckpointableTrainer) -> CheckpointInfo:
        info = load_checkpoint(checkpoint, trainer)
        self.schedule.saved()
        return info
