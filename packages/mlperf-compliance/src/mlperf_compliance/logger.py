"""A per-run MLPerf logger on top of ``mlperf_logging.mllog``.

The line format (``:::MLLOG {json}``) and the caller lookup come from ``mllog``; this module adds
what a training loop needs around it: one file per logger with no shared global state, rank
filtering, fresh-or-resume file handling, and typed helpers for the keys the DLRMv4 rules check.
"""

from __future__ import annotations

import itertools
import logging
import numbers
import os
import re
import sys
import threading
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from mlperf_logging.mllog import constants as C
from mlperf_logging.mllog import mllog

__all__ = ["RUN_STATUSES", "SUBMISSION_DIVISIONS", "MLPerfLogger"]

#: Values ``run_stop`` accepts for its ``status`` metadata.
RUN_STATUSES: Final = (C.SUCCESS, C.ABORTED)
#: Values ``submission_info`` accepts for ``division``.
SUBMISSION_DIVISIONS: Final = ("closed", "open")

# Frames between mllog's caller lookup and the code that called a public method of
# MLPerfLogger: mllog's event/start/end, MLPerfLogger._log, the public method itself. mllog
# resolves the call site as ``get_caller(2 + stack_offset)`` from inside ``_log_helper``.
_FRAMES_TO_CALLER: Final = 3

# mllog fills these from the call site.
_RESERVED_METADATA: Final = frozenset({"file", "lineno"})

_logger_ids = itertools.count()


def _samples(name: str, value: object) -> int:
    """Return ``value`` as a non-negative int, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _epoch(name: str, value: object) -> int | float:
    """Epoch numbers may be fractional in streaming runs; they must be finite and >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if isinstance(value, numbers.Integral):
        out: int | float = int(value)
    else:
        out = float(value)
    if not out >= 0 or out == float("inf"):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return out


class MLPerfLogger:
    """Writes MLPerf compliance records for one run to one file.

    Args:
        path: the log file. Its parent directory is created if needed.
        enabled: ``False`` makes every method a no-op that writes nothing (the run-stop
            bookkeeping still applies, so a misuse fails the same way on every setting).
        rank: the process rank; only rank 0 writes, other ranks validate arguments and
            keep state but never touch the file.
        resume: ``False`` (a fresh run) truncates ``path`` when the logger is created;
            ``True`` appends to it.
        benchmark: the MLPerf benchmark name logged by :meth:`submission_info`.
        namespace: the ``namespace`` field of every record.
        root_dir: if given, this prefix is trimmed from the ``metadata.file`` of records.
        echo_stdout: also print every record to standard output.

    Every record's ``metadata`` carries ``file`` and ``lineno`` of the code that called the
    public method (not of this module). Code that wraps these methods in its own helper passes
    ``stack_offset=1`` (one per extra frame) so that the record points at its own caller.

    Each instance owns a private :class:`logging.Logger` that is not registered with the
    ``logging`` module, so several loggers (to different files) coexist in one process and
    nothing reaches the root logger or the ``mllog`` default logger.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        enabled: bool = True,
        rank: int = 0,
        resume: bool = False,
        benchmark: str = C.DLRMV4,
        namespace: str = "",
        root_dir: str | os.PathLike[str] | None = None,
        echo_stdout: bool = False,
    ) -> None:
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 0:
            raise ValueError(f"rank must be a non-negative integer, got {rank!r}")
        if not isinstance(benchmark, str) or not benchmark:
            raise ValueError(f"benchmark must be a non-empty string, got {benchmark!r}")
        self.path = Path(path)
        self.rank = int(rank)
        self.enabled = bool(enabled)
        self.resume = bool(resume)
        self.benchmark = benchmark
        self._lock = threading.Lock()
        self._run_stopped = False
        self._closed = False
        self._mllog: mllog.MLLogger | None = None
        self._handlers: list[logging.Handler] = []

        if not self.writes:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A Logger built directly (not via logging.getLogger) is invisible to the logging
        # manager: no name clash with other instances, no inherited handlers, no propagation.
        base = logging.Logger(f"mlperf_compliance.{next(_logger_ids)}", level=logging.INFO)
        base.propagate = False
        file_handler = logging.FileHandler(
            self.path, mode="a" if self.resume else "w", encoding="utf-8"
        )
        self._handlers.append(file_handler)
        if echo_stdout:
            self._handlers.append(logging.StreamHandler(sys.stdout))
        for handler in self._handlers:
            handler.setLevel(logging.INFO)
            handler.setFormatter(logging.Formatter("%(message)s"))
            base.addHandler(handler)
        self._mllog = mllog.MLLogger(
            logger=base,
            default_namespace=namespace,
            default_stack_offset=_FRAMES_TO_CALLER,
            default_clear_line=False,
            # mllog strips the regex "^<root_dir>/": escape the path, drop a trailing separator.
            root_dir=re.escape(os.fspath(root_dir).rstrip("/" + os.sep)) if root_dir else None,
        )
        self._finalizer = weakref.finalize(self, _close_handlers, list(self._handlers))

    # ------------------------------------------------------------------ state

    @property
    def writes(self) -> bool:
        """Whether this logger writes records (enabled and rank 0)."""
        return self.enabled and self.rank == 0

    @property
    def run_stopped(self) -> bool:
        """Whether :meth:`run_stop` has been called."""
        return self._run_stopped

    def close(self) -> None:
        """Flush and close the file. Logging after ``close`` raises ``RuntimeError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._handlers:
                self._finalizer()

    def __enter__(self) -> MLPerfLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"MLPerfLogger(path={str(self.path)!r}, rank={self.rank}, enabled={self.enabled}, "
            f"resume={self.resume}, benchmark={self.benchmark!r})"
        )

    # ------------------------------------------------------------------ core

    def _log(
        self,
        kind: str,
        key: str,
        value: Any,
        metadata: Mapping[str, Any] | None,
        time_ms: int | None,
        stack_offset: int,
    ) -> None:
        """Emit one record. Must be called directly from a public method."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        if isinstance(stack_offset, bool) or not isinstance(stack_offset, int) or stack_offset < 0:
            raise ValueError(f"stack_offset must be a non-negative integer, got {stack_offset!r}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
        if metadata and _RESERVED_METADATA.intersection(metadata):
            raise ValueError(f"metadata keys {sorted(_RESERVED_METADATA)} are set by the logger")
        if time_ms is not None and (
            isinstance(time_ms, bool) or not isinstance(time_ms, numbers.Real)
        ):
            raise TypeError(f"time_ms must be a number, got {time_ms!r}")
        value = _plain(value, f"value of {key!r}")
        meta = _plain(dict(metadata), f"metadata of {key!r}") if metadata else None
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self._mllog is None:
            return
        emit = {
            C.POINT_IN_TIME: self._mllog.event,
            C.INTERVAL_START: self._mllog.start,
            C.INTERVAL_END: self._mllog.end,
        }[kind]
        emit(
            key,
            value,
            metadata=meta,
            time_ms=time_ms,
            stack_offset=_FRAMES_TO_CALLER + stack_offset,
        )

    def event(
        self,
        key: str,
        value: Any = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log a point-in-time record (``POINT_IN_TIME``)."""
        self._log(C.POINT_IN_TIME, key, value, metadata, time_ms, stack_offset)

    def start(
        self,
        key: str,
        value: Any = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log the start of an interval (``INTERVAL_START``)."""
        self._log(C.INTERVAL_START, key, value, metadata, time_ms, stack_offset)

    def end(
        self,
        key: str,
        value: Any = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log the end of an interval (``INTERVAL_END``)."""
        self._log(C.INTERVAL_END, key, value, metadata, time_ms, stack_offset)

    # ------------------------------------------------------------------ run structure

    def submission_info(
        self,
        *,
        org: str,
        platform: str,
        division: str = "closed",
        status: str = C.ONPREM,
        poc_name: str | None = None,
        poc_email: str | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log the ``submission_*`` records (benchmark, org, division, status, platform)."""
        if division not in SUBMISSION_DIVISIONS:
            raise ValueError(f"division must be one of {SUBMISSION_DIVISIONS}, got {division!r}")
        for name, text in (("org", org), ("platform", platform), ("status", status)):
            if not isinstance(text, str) or not text:
                raise ValueError(f"{name} must be a non-empty string, got {text!r}")
        records: list[tuple[str, str]] = [
            (C.SUBMISSION_BENCHMARK, self.benchmark),
            (C.SUBMISSION_ORG, org),
            (C.SUBMISSION_DIVISION, division),
            (C.SUBMISSION_STATUS, status),
            (C.SUBMISSION_PLATFORM, platform),
        ]
        if poc_name is not None:
            records.append((C.SUBMISSION_POC_NAME, poc_name))
        if poc_email is not None:
            records.append((C.SUBMISSION_POC_EMAIL, poc_email))
        for key, value in records:
            self._log(C.POINT_IN_TIME, key, value, None, time_ms, stack_offset)

    def cache_clear(
        self, value: bool = True, *, time_ms: int | None = None, stack_offset: int = 0
    ) -> None:
        """Log ``cache_clear`` (the rules need at least one, carrying a value)."""
        self._log(C.POINT_IN_TIME, C.CACHE_CLEAR, bool(value), None, time_ms, stack_offset)

    def init_start(self, *, time_ms: int | None = None, stack_offset: int = 0) -> None:
        """Log ``init_start``."""
        self._log(C.INTERVAL_START, C.INIT_START, None, None, time_ms, stack_offset)

    def init_stop(self, *, time_ms: int | None = None, stack_offset: int = 0) -> None:
        """Log ``init_stop`` (the rules allow 30 minutes after the first init_start in closed)."""
        self._log(C.INTERVAL_END, C.INIT_STOP, None, None, time_ms, stack_offset)

    def run_start(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``run_start``: the timed part of the run begins."""
        self._log(C.INTERVAL_START, C.RUN_START, None, metadata, time_ms, stack_offset)

    def run_stop(
        self,
        status: str,
        samples_count: int | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``run_stop`` with ``status`` ("success" or "aborted").

        Raises ``RuntimeError`` on a second call: a run stops once.
        """
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
        meta: dict[str, Any] = dict(metadata or {})
        meta[C.STATUS] = status
        if samples_count is not None:
            meta[C.SAMPLES_COUNT] = _samples("samples_count", samples_count)
        with self._lock:
            if self._run_stopped:
                raise RuntimeError("run_stop was already logged for this run")
            self._log(C.INTERVAL_END, C.RUN_STOP, None, meta, time_ms, stack_offset)
            self._run_stopped = True

    def hyperparameters(
        self,
        items: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log each ``(key, value)`` as a point-in-time record, in the given order.

        ``items`` is a mapping or an iterable of pairs (such as the list returned by
        :func:`mlperf_compliance.dlrmv4_run_start_keys`). A key given twice raises
        ``ValueError`` before anything is written.
        """
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        seen: set[str] = set()
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"hyperparameters expects (key, value) pairs, got {pair!r}")
            key = pair[0]
            if not isinstance(key, str) or not key:
                raise ValueError(f"hyperparameter keys must be non-empty strings, got {key!r}")
            if key in seen:
                raise ValueError(f"hyperparameter {key!r} is given more than once")
            seen.add(key)
        for key, value in pairs:
            self._log(C.POINT_IN_TIME, key, value, None, time_ms, stack_offset)

    # ------------------------------------------------------------------ blocks and evaluation

    def block_start(
        self,
        samples_count: int,
        *,
        first_epoch_num: int | float | None = None,
        epoch_count: int | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``block_start``. ``samples_count`` is the number of training samples seen so far.

        ``epoch_count`` requires ``first_epoch_num`` (a rule of the checker).
        """
        meta = dict(metadata or {})
        meta[C.SAMPLES_COUNT] = _samples("samples_count", samples_count)
        if epoch_count is not None:
            if first_epoch_num is None:
                raise ValueError("epoch_count needs first_epoch_num")
            count = _epoch("epoch_count", epoch_count)
            if count <= 0:
                raise ValueError(f"epoch_count must be > 0, got {epoch_count}")
            meta[C.EPOCH_COUNT] = count
        if first_epoch_num is not None:
            meta[C.FIRST_EPOCH_NUM] = _epoch("first_epoch_num", first_epoch_num)
        self._log(C.INTERVAL_START, C.BLOCK_START, None, meta, time_ms, stack_offset)

    def block_stop(
        self,
        samples_count: int,
        *,
        first_epoch_num: int | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``block_stop`` at ``samples_count`` training samples."""
        meta = dict(metadata or {})
        meta[C.SAMPLES_COUNT] = _samples("samples_count", samples_count)
        if first_epoch_num is not None:
            meta[C.FIRST_EPOCH_NUM] = _epoch("first_epoch_num", first_epoch_num)
        self._log(C.INTERVAL_END, C.BLOCK_STOP, None, meta, time_ms, stack_offset)

    def eval_start(
        self,
        samples_count: int,
        *,
        epoch_num: int | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``eval_start`` for the evaluation after ``samples_count`` training samples."""
        meta = self._eval_metadata(metadata, samples_count, epoch_num)
        self._log(C.INTERVAL_START, C.EVAL_START, None, meta, time_ms, stack_offset)

    def eval_stop(
        self,
        samples_count: int,
        *,
        epoch_num: int | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``eval_stop`` for the evaluation after ``samples_count`` training samples."""
        meta = self._eval_metadata(metadata, samples_count, epoch_num)
        self._log(C.INTERVAL_END, C.EVAL_STOP, None, meta, time_ms, stack_offset)

    def eval_accuracy(
        self,
        value: float,
        samples_count: int,
        epoch_num: int | float | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        stack_offset: int = 0,
    ) -> None:
        """Log ``eval_accuracy`` (for DLRMv4 the AUC) measured after ``samples_count`` samples.

        ``value`` is converted with ``float()`` so numpy and 0-d tensor scalars are accepted.
        """
        meta = self._eval_metadata(metadata, samples_count, epoch_num)
        self._log(C.POINT_IN_TIME, C.EVAL_ACCURACY, float(value), meta, time_ms, stack_offset)

    @staticmethod
    def _eval_metadata(
        metadata: Mapping[str, Any] | None,
        samples_count: int,
        epoch_num: int | float | None,
    ) -> dict[str, Any]:
        meta = dict(metadata or {})
        meta[C.SAMPLES_COUNT] = _samples("samples_count", samples_count)
        if epoch_num is not None:
            meta[C.EPOCH_NUM] = _epoch("epoch_num", epoch_num)
        return meta


def _close_handlers(handlers: list[logging.Handler]) -> None:
    # FileHandler.close closes the file; StreamHandler.close leaves sys.stdout open.
    for handler in handlers:
        handler.flush()
        handler.close()


def _plain(value: Any, what: str) -> Any:
    """Return ``value`` as plain JSON data (numpy and 0-d tensor scalars are unwrapped).

    ``mllog`` swallows encoding errors and writes an error line instead of the record; checking
    here turns that into an exception at the call site.
    """
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{what} has a non-string key {k!r}")
            out[k] = _plain(v, f"{what}[{k!r}]")
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, f"{what}[{i}]") for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _plain(tolist(), what)
    raise TypeError(f"{what} is not JSON-serialisable: {type(value).__name__}")
