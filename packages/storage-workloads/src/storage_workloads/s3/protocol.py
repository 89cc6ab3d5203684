"""What the parent and a client process exchange: the client's task, what its threads
measured, and the length-prefixed pickle frames both are sent in."""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from storage_workloads.objects import ObjectWorkload
from storage_workloads.objresults import Recorder
from storage_workloads.s3.target import S3Target


@dataclass(frozen=True)
class _ClientTask:
    """What one client process does: upload ``items`` (``op="PUT"``, prepare) or run the
    workload's mix (``op="MIX"``), for ``ops_per_thread`` or until ``duration_s`` has passed,
    after a warm-up of ``warmup_per_thread`` ops or ``warmup_s`` seconds if one is given."""

    client_id: int
    op: str  # "PUT" or "MIX"
    workload: ObjectWorkload
    target: S3Target
    seed: int
    scheme: str
    duration_s: float | None = None  # MIX: timed run
    ops_per_thread: tuple[int, ...] | None = None  # MIX: op-count run
    warmup_s: float | None = None  # MIX: timed warm-up
    warmup_per_thread: tuple[int, ...] | None = None  # MIX: op-count warm-up
    run_id: str = ""  # MIX: PUT keys go under {effective_put_prefix}{run_id}/
    items: tuple[tuple[int, int], ...] = ()  # PUT: (object index, size)

    @property
    def has_warmup(self) -> bool:
        return self.warmup_s is not None or self.warmup_per_thread is not None


@dataclass
class _Part:
    """What the threads of a phase measured: one recorder per op, the skipped ops, and (for the
    counted phase) how many objects the run put and did not delete."""

    scheme: str
    recorders: dict[str, Recorder] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    put_left: int = 0

    def recorder(self, op: str) -> Recorder:
        rec = self.recorders.get(op)
        if rec is None:
            rec = self.recorders[op] = Recorder(self.scheme)
        return rec

    def merge(self, other: _Part) -> None:
        for op, rec in other.recorders.items():
            self.recorder(op).merge(rec)
        for op, n in other.skipped.items():
            self.skipped[op] = self.skipped.get(op, 0) + n
        self.put_left += other.put_left

    @property
    def ops(self) -> int:
        return sum(rec.ops for rec in self.recorders.values())


def _write_frame(stream: BinaryIO, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream: BinaryIO) -> Any:
    """The next object on ``stream``; EOFError at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)
