"""The life of one MLPerf run, from ``init_start`` to ``run_stop``, as a state machine.

:class:`RunTracker` sits on top of an :class:`~mlperf_compliance.MLPerfLogger`. It refuses
calls in the wrong order (a second ``run_start``, an eval inside a block, anything after
``run_stop``), decides convergence against the target accuracy, writes ``run_stop`` exactly
once (also when the run dies with an exception or a signal, see :meth:`RunTracker.guard`) and
carries its state through a checkpoint so that a resumed run continues the same log.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Mapping, Sequence
from types import FrameType, TracebackType
from typing import Any, Final

from mlperf_logging.mllog import constants as C

from mlperf_compliance.dlrmv4 import (
    DLRMV4_TARGET_ACCURACY,
    eval_interval_samples,
    first_eval_samples,
)
from mlperf_compliance.logger import MLPerfLogger
from mlperf_compliance.logger import _samples as _count

__all__ = [
    "RUN_STATES",
    "RunInterrupted",
    "RunTracker",
    "TrackerStateError",
    "eval_schedule",
]

NEW: Final = "new"
INITIALIZING: Final = "initializing"
INITIALIZED: Final = "initialized"
RUNNING: Final = "running"
IN_BLOCK: Final = "in_block"
EVALUATING: Final = "evaluating"
STOPPED: Final = "stopped"
#: Every state of a :class:`RunTracker`, in the order a run goes through them.
RUN_STATES: Final = (NEW, INITIALIZING, INITIALIZED, RUNNING, IN_BLOCK, EVALUATING, STOPPED)

_STATE_DICT_VERSION: Final = 1


class TrackerStateError(RuntimeError):
    """A :class:`RunTracker` method was called in a state that does not allow it."""


class RunInterrupted(SystemExit):
    """Raised by :meth:`RunTracker.guard` when the process receives a guarded signal.

    It is a ``SystemExit`` whose code is ``128 + signum`` (143 for SIGTERM, 130 for SIGINT), so
    an uncaught one ends the process with the status a shell reports for that signal, after
    ``finally`` blocks and context managers have run.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"run interrupted by {signal.Signals(self.signum).name}"


def eval_schedule(
    train_samples: int,
    global_batch_size: int,
    eval_every_data_pct: float,
) -> list[int]:
    """The ``samples_count`` of every evaluation a run of ``train_samples`` samples makes.

    Evaluations lie on the grid :func:`~mlperf_compliance.eval_interval_samples` and start
    at :func:`~mlperf_compliance.first_eval_samples`, both for these values; the last one is the
    last grid point not beyond ``train_samples``. With the closed values (2,290,835,423
    samples, 0.001) this is the closed schedule: 57,344,000, 59,637,760, ... at global batch
    8192. For other values it is the schedule the ``dev`` ruleset checks. A run too short to
    reach the first eval gets an empty list.
    """
    interval = eval_interval_samples(
        global_batch_size, train_samples=train_samples, eval_every_data_pct=eval_every_data_pct
    )
    first = first_eval_samples(
        global_batch_size, train_samples=train_samples, eval_every_data_pct=eval_every_data_pct
    )
    return list(range(first, int(train_samples) + 1, interval))


class RunTracker:
    """Drives an :class:`MLPerfLogger` through one run and enforces the order of its records.

    States (``tracker.state``): ``new`` -> ``init_start()`` -> ``initializing`` ->
    ``init_stop()`` -> ``initialized`` -> ``run_start()`` -> ``running``; then
    ``block_start()`` -> ``in_block`` -> ``block_stop()`` -> ``running``; ``eval_start()`` ->
    ``evaluating`` -> ``eval()`` -> ``running`` (or ``eval()`` alone while ``running``, for an
    evaluation timed by the caller); ``run_stop()`` from any state after ``init_start`` ->
    ``stopped``. A call in
    any other state raises :class:`TrackerStateError` naming the state and the call, before
    anything is written.

    Args:
        logger: the run's logger. The tracker never closes it.
        target_accuracy: the ``eval_accuracy`` that makes the run converge (0.75 for DLRMv4).

    Methods take ``time_ms=None`` and ``stack_offset=0`` like the logger's: each record names
    the code that called the tracker.
    """

    def __init__(
        self,
        logger: MLPerfLogger,
        *,
        target_accuracy: float = DLRMV4_TARGET_ACCURACY,
    ) -> None:
        if not isinstance(logger, MLPerfLogger):
            raise TypeError(f"logger must be an MLPerfLogger, got {type(logger).__name__}")
        target = float(target_accuracy)
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"target_accuracy must be in [0, 1], got {target_accuracy}")
        self.logger = logger
        self.target_accuracy = target
        self._state = NEW
        self._samples_count = 0
        self._converged = False
        self._best_accuracy: float | None = None
        self._evals = 0
        self._evaluating: int | None = None
        """The samples_count of the evaluation that eval_start opened."""
        self._status: str | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> str:
        """The current state, one of :data:`RUN_STATES`."""
        return self._state

    @property
    def samples_count(self) -> int:
        """The largest ``samples_count`` logged so far by this run."""
        return self._samples_count

    @property
    def converged(self) -> bool:
        """Whether some eval reached ``target_accuracy``."""
        return self._converged

    @property
    def best_accuracy(self) -> float | None:
        """The highest eval accuracy so far, ``None`` before the first eval."""
        return self._best_accuracy

    @property
    def num_evals(self) -> int:
        """How many evals this run has logged."""
        return self._evals

    @property
    def in_block(self) -> bool:
        """Whether a block is open (after ``block_start``, before ``block_stop``)."""
        return self._state == IN_BLOCK

    @property
    def stopped(self) -> bool:
        """Whether ``run_stop`` was logged."""
        return self._state == STOPPED

    @property
    def status(self) -> str | None:
        """The status ``run_stop`` logged, ``None`` before it."""
        return self._status

    def __repr__(self) -> str:
        return (
            f"RunTracker(state={self._state!r}, samples_count={self._samples_count}, "
            f"converged={self._converged}, target_accuracy={self.target_accuracy})"
        )

    def _expect(self, call: str, *allowed: str) -> None:
        if self._state not in allowed:
            raise TrackerStateError(
                f"{call} is not allowed in state {self._state!r} (allowed in: {', '.join(allowed)})"
            )

    def _advance(self, call: str, samples_count: object) -> int:
        count = _count("samples_count", samples_count)
        if count < self._samples_count:
            raise ValueError(
                f"{call}: samples_count {count} is below {self._samples_count}, "
                "already logged by this run"
            )
        return count

    # ------------------------------------------------------------------ transitions

    def init_start(self, *, time_ms: int | None = None, stack_offset: int = 0) -> None:
        """Log ``init_start``; ``new`` -> ``initializing``."""
        with self._lock:
            self._expect("init_start()", NEW)
            self.logger.init_start(time_ms=time_ms, stack_offset=stack_offset + 1)
            self._state = INITIALIZING

    def init_stop(self, *, time_ms: int | None = None, stack_offset: int = 0) -> None:
        """Log ``init_stop``; ``initializing`` -> ``initialized``."""
        with self._lock:
            self._expect("init_stop()", INITIALIZING)
            self.logger.init_stop(time_ms=time_ms, stack_offset=stack_offset + 1)
            self._state = INITIALIZED

    def run_start(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``run_start``; ``initialized`` -> ``running``."""
        with self._lock:
            self._expect("run_start()", INITIALIZED)
            self.logger.run_start(metadata=metadata, time_ms=time_ms, stack_offset=stack_offset + 1)
            self._state = RUNNING

    def block_start(
        self,
        samples_count: int,
        *,
        first_epoch_num: int | float | None = None,
        epoch_count: int | float | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``block_start`` at ``samples_count``; ``running`` -> ``in_block``."""
        with self._lock:
            self._expect(f"block_start({samples_count})", RUNNING)
            count = self._advance("block_start", samples_count)
            self.logger.block_start(
                count,
                first_epoch_num=first_epoch_num,
                epoch_count=epoch_count,
                time_ms=time_ms,
                stack_offset=stack_offset + 1,
            )
            self._samples_count = count
            self._state = IN_BLOCK

    def block_stop(
        self,
        samples_count: int,
        *,
        first_epoch_num: int | float | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``block_stop`` at ``samples_count``; ``in_block`` -> ``running``."""
        with self._lock:
            self._expect(f"block_stop({samples_count})", IN_BLOCK)
            count = self._advance("block_stop", samples_count)
            self.logger.block_stop(
                count,
                first_epoch_num=first_epoch_num,
                time_ms=time_ms,
                stack_offset=stack_offset + 1,
            )
            self._samples_count = count
            self._state = RUNNING

    def eval_start(
        self,
        samples_count: int,
        epoch_num: int | float | None = None,
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``eval_start`` as the evaluation begins; ``running`` -> ``evaluating``.

        :meth:`eval` then logs its ``eval_accuracy`` and ``eval_stop``, so that the records
        bracket the evaluation as the reference's do.
        """
        with self._lock:
            self._expect(f"eval_start(samples_count={samples_count})", RUNNING)
            count = self._advance("eval_start", samples_count)
            self.logger.eval_start(
                count, epoch_num=epoch_num, time_ms=time_ms, stack_offset=stack_offset + 1
            )
            self._samples_count = count
            self._evaluating = count
            self._state = EVALUATING

    def eval(
        self,
        accuracy: float,
        samples_count: int,
        epoch_num: int | float | None = None,
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> bool:
        """Log ``eval_accuracy`` and ``eval_stop`` of the evaluation :meth:`eval_start` opened
        (at the same ``samples_count``), or all three records at once while ``running``.

        ``accuracy`` must be a finite number in [0, 1] (the rules reject anything else).
        Returns whether this eval reached ``target_accuracy``; :attr:`converged` stays
        ``True`` once any eval did.
        """
        with self._lock:
            self._expect(f"eval(samples_count={samples_count})", RUNNING, EVALUATING)
            if isinstance(accuracy, bool):
                raise TypeError(f"accuracy must be a number, got {accuracy!r}")
            value = float(accuracy)
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"accuracy must be a finite number in [0, 1], got {accuracy!r}")
            count = self._advance("eval", samples_count)
            if self._evaluating is not None and count != self._evaluating:
                raise ValueError(
                    f"eval: samples_count {count} is not the {self._evaluating} of eval_start"
                )
            offset = stack_offset + 1
            if self._evaluating is None:
                self.logger.eval_start(
                    count, epoch_num=epoch_num, time_ms=time_ms, stack_offset=offset
                )
            self.logger.eval_accuracy(value, count, epoch_num, time_ms=time_ms, stack_offset=offset)
            self.logger.eval_stop(count, epoch_num=epoch_num, time_ms=time_ms, stack_offset=offset)
            self._samples_count = count
            self._evaluating = None
            self._state = RUNNING
            self._evals += 1
            if self._best_accuracy is None or value > self._best_accuracy:
                self._best_accuracy = value
            reached = value >= self.target_accuracy
            self._converged = self._converged or reached
            return reached

    def run_stop(
        self,
        status: str | None = None,
        samples_count: int | None = None,
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> str:
        """Log ``run_stop`` once; any state after ``init_start`` -> ``stopped``.

        ``status`` defaults to ``"success"`` if the run converged and ``"aborted"`` otherwise;
        ``"success"`` for a run that did not converge raises ``ValueError``. ``samples_count``
        defaults to :attr:`samples_count`. Returns the status logged.
        """
        with self._lock:
            self._expect("run_stop()", INITIALIZING, INITIALIZED, RUNNING, IN_BLOCK, EVALUATING)
            if status is None:
                status = C.SUCCESS if self._converged else C.ABORTED
            if status == C.SUCCESS and not self._converged:
                raise ValueError(
                    f"run_stop('success') but no eval reached target_accuracy "
                    f"{self.target_accuracy} (best: {self._best_accuracy})"
                )
            count = self._samples_count if samples_count is None else samples_count
            count = self._advance("run_stop", count)
            self.logger.run_stop(status, count, time_ms=time_ms, stack_offset=stack_offset + 1)
            self._samples_count = count
            self._status = status
            self._state = STOPPED
            return status

    def abort(self, *, stack_offset: int = 0) -> bool:
        """Log ``run_stop`` with status ``aborted`` unless the run already stopped.

        Returns whether it logged. Does nothing before ``init_start`` (there is no run yet).
        """
        with self._lock:
            if self._state in (NEW, STOPPED) or self.logger.run_stopped:
                return False
            self.run_stop(C.ABORTED, stack_offset=stack_offset + 1)
            return True

    # ------------------------------------------------------------------ failure handling

    def guard(
        self,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
    ) -> _Guard:
        """Context manager: the run ends with ``run_stop`` aborted if the block dies.

        Inside the block, each of ``signals`` raises :class:`RunInterrupted` (a
        ``SystemExit`` with code ``128 + signum``). When the block exits with any exception,
        this one included, ``run_stop`` with status ``aborted`` is logged unless the run
        already stopped, and the exception propagates. The previous signal handlers are
        restored on exit. Signal handlers can only be set in the main thread; elsewhere the
        signals are left alone. A normal exit logs nothing. Pass ``signals=()`` for a run that
        a scheduler preempts with SIGTERM and later resumes: its log must not stop there.
        """
        return _Guard(self, tuple(signals))

    def __enter__(self) -> RunTracker:
        self._default_guard = self.guard()
        self._default_guard.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._default_guard._exit(exc_type, stack_offset=1)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The tracker state as plain data, to save in the training checkpoint (not during an
        evaluation: a resumed run repeats a whole evaluation, from its ``eval_start``)."""
        with self._lock:
            self._expect("state_dict()", NEW, INITIALIZING, INITIALIZED, RUNNING, IN_BLOCK, STOPPED)
            return {
                "version": _STATE_DICT_VERSION,
                "state": self._state,
                "samples_count": self._samples_count,
                "converged": self._converged,
                "best_accuracy": self._best_accuracy,
                "num_evals": self._evals,
                "status": self._status,
                "target_accuracy": self.target_accuracy,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the run saved by :meth:`state_dict` (call before any other method).

        A run saved after ``init_start`` continues without a second ``init_start`` or
        ``run_start``, so its logger must append (``MLPerfLogger(..., resume=True)``);
        otherwise ``ValueError``. A run saved inside a block resumes inside it: check
        :attr:`in_block` and skip ``block_start``. A stopped run cannot be resumed.
        """
        with self._lock:
            self._expect("load_state_dict()", NEW)
            if not isinstance(state, Mapping):
                raise TypeError(f"state must be a mapping, got {type(state).__name__}")
            if state.get("version") != _STATE_DICT_VERSION:
                raise ValueError(f"unsupported RunTracker state version {state.get('version')!r}")
            saved = state.get("state")
            if saved not in RUN_STATES:
                raise ValueError(f"unknown RunTracker state {saved!r}")
            if saved == STOPPED:
                raise TrackerStateError("the saved run already logged run_stop; start a new run")
            if saved != NEW and not self.logger.resume:
                raise ValueError(
                    f"resuming a run in state {saved!r} needs a logger opened with resume=True "
                    "(a fresh logger truncated the log)"
                )
            target = float(state.get("target_accuracy", self.target_accuracy))
            if target != self.target_accuracy:
                raise ValueError(
                    f"the saved run targets accuracy {target}, this tracker {self.target_accuracy}"
                )
            best = state.get("best_accuracy")
            self._samples_count = _count("samples_count", state.get("samples_count", 0))
            self._converged = bool(state.get("converged", False))
            self._best_accuracy = None if best is None else float(best)
            self._evals = _count("num_evals", state.get("num_evals", 0))
            self._status = None
            self._state = saved


class _Guard:
    """See :meth:`RunTracker.guard`."""

    def __init__(self, tracker: RunTracker, signals: tuple[int, ...]) -> None:
        self._tracker = tracker
        self._signals = signals
        self._previous: dict[int, Any] = {}
        self._exiting = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        # A signal that arrives while the guard is already writing run_stop is dropped, so
        # the record is not cut short.
        if not self._exiting:
            raise RunInterrupted(signum)

    def __enter__(self) -> RunTracker:
        if self._signals and threading.current_thread() is threading.main_thread():
            try:
                for signum in self._signals:
                    self._previous[signum] = signal.signal(signum, self._handler)
            except BaseException:
                self._restore()
                raise
        return self._tracker

    def _restore(self) -> None:
        while self._previous:
            signum, handler = self._previous.popitem()
            signal.signal(signum, handler)

    def _exit(self, exc_type: type[BaseException] | None, *, stack_offset: int) -> None:
        self._exiting = True
        try:
            if exc_type is not None:
                self._tracker.abort(stack_offset=stack_offset + 1)
        finally:
            self._restore()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc_type, stack_offset=1)
