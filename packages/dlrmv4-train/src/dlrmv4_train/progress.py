"""The run's progress on stderr: where it stands against its plan, and when the next evaluation
comes. On a terminal a tqdm bar, redrawn as the steps go; elsewhere (a log file, a pipe, CI) one
line each time the metrics get a row. Both tell the same facts: the step of the planned steps,
the loss and lifetime train AUC of the last row, samples/s, the next evaluation and the time
to it, and the time to the planned end (a run stops earlier at the first evaluation that reaches
its target).
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from tqdm import tqdm

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """12s, 3m04s, 2h05m."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Progress of a run of `eval_steps[-1]` planned steps of `batch_size` samples, evaluated
    after each of `eval_steps`. `log` takes the lines (the run's stderr); `bar` (default: when
    `stream` is a terminal) draws a tqdm bar instead, and `write` then prints above it."""

    def __init__(
        self,
        eval_steps: Sequence[int],
        batch_size: int,
        log: Callable[[str], None],
        *,
        first_step: int = 0,
        stream: TextIO | None = None,
        bar: bool | None = None,
    ) -> None:
        self.eval_steps, self.batch_size, self.log = list(eval_steps), batch_size, log
        self.planned = self.eval_steps[-1]
        stream = stream or sys.stderr
        if bar is None:
            bar = stream.isatty()
        self._bar = (
            tqdm(
                total=self.planned,
                initial=first_step,
                unit="step",
                file=stream,
                dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n}/{total} steps{postfix}",
            )
            if bar
            else None
        )
        self._row = ""

    def write(self, message: str) -> None:
        """A line for the user (an evaluation, a checkpoint) that does not break the bar."""
        if self._bar is not None:
            self._bar.write(message, file=self._bar.fp)
        else:
            self.log(message)

    def step(self, step: int, seconds: float, row: dict[str, float] | None = None) -> None:
        """Step `step` (1-based) is done after `seconds` of training; `row`: the metrics row
        written at this step (its loss and lifetime AUC), if any."""
        rate = step * self.batch_size / seconds if seconds > 0 else float("nan")
        if row is not None:
            auc = row.get("lifetime_auc", float("nan"))
            self._row = f"loss {row['loss']:.4f} · train auc {auc:.4f} · {rate:.0f} samples/s"
        after = min(bisect.bisect_right(self.eval_steps, step), len(self.eval_steps) - 1)
        upcoming = self.eval_steps[after]

        def time_to(target: int) -> str:
            seconds = (target - step) * self.batch_size / rate if rate > 0 else math.nan
            return format_duration(max(seconds, 0.0))

        plan = f"next eval at step {upcoming} in {time_to(upcoming)}"
        if upcoming != self.planned:
            plan += f" · planned end in {time_to(self.planned)}"
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix_str(f"{self._row} · {plan}", refresh=False)
        elif row is not None:
            self.log(f"step {step}/{self.planned} · {self._row} · {plan}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
