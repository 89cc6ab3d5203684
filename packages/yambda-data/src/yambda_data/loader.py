"""Multi-worker loading of store batches (torch).

:class:`StoreBatches` is an ``IterableDataset`` of :class:`~yambda_data.batching.HSTUBatch`:
worker ``w`` of ``n`` builds batches ``w, w + n, w + 2n, ...`` of a
:class:`~yambda_data.streaming.BatchPlan`, and ``DataLoader`` takes one batch from each worker
in turn, so the batches arrive in the plan's order whatever the worker count. Each worker opens
the store itself (memory maps are shared by the page cache, not copied into workers).

:func:`make_loader` wraps it in a ``DataLoader`` with persistent workers, a prefetch depth per
worker and pinned memory when CUDA is available. A plan spans several windows, so the workers
build the first batches of the next window while the current one trains.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import multiprocessing.context
import os
import re
import signal
import sys
import traceback
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from yambda_data.batching import HSTUBatch, make_batch
from yambda_data.crosses import CROSS_FEATURES, CrossFeature
from yambda_data.samples import SampleConfig
from yambda_data.store import SampleStore, StoreError
from yambda_data.streaming import BatchPlan

__all__ = ["StoreBatches", "make_loader"]


class _NotTheVerifiedStore(StoreError):
    """A worker opened another store than the one its caller verified. The DataLoader raises
    it again in the calling process, built from "Caught ... in DataLoader worker process N",
    the worker's whole traceback and then its line: that comes back to this one line, which
    says which worker found it."""

    def __init__(self, message: str) -> None:
        worker = re.match(r"Caught \w+ in (DataLoader worker process \d+)\.\n", message)
        if worker is not None:
            last = message.rstrip().rsplit("\n", 1)[-1]
            message = f"{last.split(': ', 1)[-1]} ({worker.group(1)})"
        super().__init__(message)


class StoreBatches(IterableDataset):
    """The batches of ``plan`` cut from the store at ``store_path``."""

    def __init__(
        self,
        store_path: str | Path,
        config: SampleConfig,
        plan: BatchPlan,
        crosses: tuple[CrossFeature, ...] = CROSS_FEATURES,
        fingerprint: str | None = None,
    ) -> None:
        super().__init__()
        self.store_path = Path(store_path)
        self.config = config
        self.plan = plan
        self.crosses = crosses
        self.fingerprint = fingerprint
        """The manifest fingerprint of the store the caller verified (None: any store)."""
        self._store: SampleStore | None = None

    @property
    def store(self) -> SampleStore:
        """The store, opened by path in each process; StoreError when it is not the one the
        caller verified (built again from other inputs or settings since)."""
        if self._store is None:
            store = SampleStore.open(self.store_path)
            found = store.manifest.get("fingerprint")
            if self.fingerprint is not None and found != self.fingerprint:
                raise _NotTheVerifiedStore(
                    f"{self.store_path}: not the store this run verified (built again from "
                    "other inputs or settings since it started); start the run again"
                )
            self._store = store
        return self._store

    def __getstate__(self) -> dict:
        # Workers reopen the store: memory maps must not be pickled (that copies their data).
        return {k: v for k, v in self.__dict__.items() if k != "_store"} | {"_store": None}

    def __len__(self) -> int:
        return self.plan.num_batches(self.store)

    def __iter__(self) -> Iterator[HSTUBatch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i, anchors in enumerate(self.plan.batches(self.store)):
            if i % workers == worker:
                yield make_batch(self.store.samples(anchors, self.config), crosses=self.crosses)

    def anchor_batches(self) -> Iterator[np.ndarray]:
        """The anchor indices of each batch, in order (what a checkpoint needs to count)."""
        return self.plan.batches(self.store)


def _quiet_descriptor_server_resets(
    kind: type[BaseException], error: BaseException, trace: types.TracebackType | None
) -> None:
    """A worker hands each batch's tensors to the trainer as file descriptors, served by a
    thread of its own (``multiprocessing.resource_sharer``). A trainer interrupted while it
    fetches one closes the connection midway, and that thread reports the reset through
    ``sys.excepthook``: a traceback on the user's terminal, though the trainer reports the
    interruption and stops the worker. Only that error of that thread is silenced."""
    in_sharer = any(
        Path(frame.f_code.co_filename).name == "resource_sharer.py"
        for frame, _ in traceback.walk_tb(trace)
    )
    if not (isinstance(error, (ConnectionError, EOFError)) and in_sharer):
        sys.__excepthook__(kind, error, trace)


class _WorkerProcess(multiprocessing.context.ForkProcess):
    """A forked worker that leaves the calling process's group before anything else runs in
    it: before the DataLoader's worker loop replaces its SIGTERM handler (a group signal
    would kill it from then on) and long before `worker_init_fn`."""

    def run(self) -> None:
        os.setpgid(0, 0)
        super().run()


class _WorkerContext(multiprocessing.context.ForkContext):
    Process = _WorkerProcess


def _start_worker(worker_id: int, parent: int) -> None:
    """A worker leaves the calling process's group and dies with it (see `make_loader`)."""
    sys.excepthook = _quiet_descriptor_server_resets
    os.setpgid(0, 0)  # already done by a `_WorkerProcess`; other start methods do it here
    try:  # Linux: the kernel sends SIGKILL when the parent dies, however it dies
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl: the DataLoader's watchdog stops it
        return
    if os.getppid() != parent:  # the parent died before the request was made
        os._exit(0)


_PR_SET_PDEATHSIG = 1

_FILES_PER_BATCH = 16
"""Open files that one batch in flight between a worker and the calling process may take:
torch passes each of its tensors (two KeyedJaggedTensors' values, lengths and offsets, and
the labels) as a descriptor that both the sending and the receiving process hold, with a
margin."""
_FILES_MARGIN = 32
"""Open files the calling process needs beside its loaders' (a checkpoint, a log)."""


def _check_open_files(num_workers: int, prefetch_factor: int) -> None:
    """Make room for the open files of ``num_workers`` workers with ``prefetch_factor``
    batches in flight each: the soft limit is raised towards the hard one where it is too
    low, and where even the hard one is, ValueError naming the limit (past it, torch fails
    in its own threads, with a traceback from each of them and none from the loader)."""
    import dlrmv4_cli

    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: nothing counts them
        return
    import resource

    need = open_now + num_workers * prefetch_factor * _FILES_PER_BATCH + _FILES_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise ValueError(
        f"num_workers: {num_workers} loader worker(s) with {prefetch_factor} batches in "
        f"flight each need about {need:,} open files ({open_now:,} open now); "
        f"{dlrmv4_cli.open_files_limit()}, or use fewer workers (0: none)"
    )


def make_loader(
    store_path: str | Path,
    config: SampleConfig,
    plan: BatchPlan,
    *,
    num_workers: int = 2,
    prefetch_factor: int = 4,
    pin_memory: bool | None = None,
    crosses: tuple[CrossFeature, ...] = CROSS_FEATURES,
    fingerprint: str | None = None,
) -> DataLoader:
    """A ``DataLoader`` over :class:`StoreBatches` (batches arrive in the plan's order).

    ``num_workers=0`` builds batches in the calling process. ``pin_memory`` defaults to
    whether CUDA is available. ``crosses``: the cross features of the batches. With
    ``fingerprint`` (the manifest's, of the store the caller verified), each process that
    opens the store checks it is that store (StoreError otherwise).

    Each worker runs in a process group of its own: a signal sent to the calling process's
    group (Ctrl-C, a launcher such as torchrun stopping its ranks) is the calling process's to
    handle. Had a worker died of it first, the DataLoader would have raised "worker killed" in
    its place. The workers still stop when the loader shuts down, when the calling process
    exits (it terminates them) or, on Linux, when it dies, even by SIGKILL (the kernel kills
    them: `PR_SET_PDEATHSIG`; elsewhere the DataLoader's watchdog, within seconds).

    Workers pass batches as open files: where the limit on open files is too low for them,
    it is raised towards its hard limit, and where that is too low, ValueError naming it.
    """
    if num_workers < 0:
        raise ValueError(f"num_workers: must be >= 0, got {num_workers}")
    if prefetch_factor < 1:
        raise ValueError(f"prefetch_factor: must be >= 1, got {prefetch_factor}")
    if num_workers > 0:
        _check_open_files(num_workers, prefetch_factor)
    dataset = StoreBatches(store_path, config, plan, crosses, fingerprint)
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    extra = {}
    if num_workers > 0:
        extra = {
            "persistent_workers": True,
            "prefetch_factor": prefetch_factor,
            "worker_init_fn": functools.partial(_start_worker, parent=os.getpid()),
        }
        # only where workers are forked anyway (the first start method listed is the default)
        chosen = multiprocessing.get_start_method(allow_none=True)
        if (chosen or multiprocessing.get_all_start_methods()[0]) == "fork":
            extra["multiprocessing_context"] = _WorkerContext()
    return DataLoader(
        dataset, batch_size=None, num_workers=num_workers, pin_memory=pin_memory, **extra
    )
