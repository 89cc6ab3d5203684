"""A checkpoint mechanism for DLIO 2.0.0 (``checkpoint.checkpoint_mechanism_classname``).

DLIO 2.0.0 checkpoints only during training, and its own mechanisms save framework tensors
from rank 0 without fsync and never read them back. The MLPerf Storage checkpointing workload
writes each rank's share of the model and optimizer state, with fsync, ``N`` times, then reads
it back. This mechanism does that inside DLIO's training loop: each call of ``checkpoint()``
(one per step, ``checkpoint.steps_between_checkpoints: 1``) writes one checkpoint, and
``finalize()`` reads the last ``num_checkpoints_read`` back. Keys it reads from the
``checkpoint`` section:

- ``model_bytes_per_rank``, ``optimizer_bytes_per_rank``: the bytes of this rank's two files;
- ``num_checkpoints_write``, ``num_checkpoints_read`` (at most the writes);
- ``fsync`` (default true): fsync every file before the write counts as done.

Every rank writes ``<checkpoint_folder>/ckpt<k>-{model,optimizer}-rank<r>.bin``. A write or read
phase is timed between two barriers over all ranks. After the fsync the file's pages are
dropped from the page cache (``posix_fadvise(DONTNEED)``), and again before each read, so the
reads come from storage. Rank 0 writes the timings to ``checkpoint_timings.json`` in DLIO's
output folder.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from dlio_benchmark.checkpointing.base_checkpointing import BaseCheckpointing
from dlio_benchmark.utils.config import ConfigArguments
from dlio_benchmark.utils.utility import DLIOMPI
from sw_dlio_ext import CHECKPOINT_TIMINGS
from sw_dlio_ext._dlio import SEED, raw_config, require_local_storage

_CHUNK = 8 << 20


def _count(section: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"checkpoint.{key} must be an integer >= 0, got {value!r}")
    return value


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class ShardCheckpointing(BaseCheckpointing):
    __instance: ShardCheckpointing | None = None

    @staticmethod
    def get_instance() -> ShardCheckpointing:
        if ShardCheckpointing.__instance is None:
            ShardCheckpointing.__instance = ShardCheckpointing()
        return ShardCheckpointing.__instance

    def __init__(self) -> None:
        # BaseCheckpointing.__init__ is not called: it allocates DLIO's own model tensors.
        self.ext = "bin"
        self.args = ConfigArguments.get_instance()
        require_local_storage(self.args, "the checkpoint mechanism")
        section = raw_config(self.args).get("checkpoint") or {}
        self.model_bytes = _count(section, "model_bytes_per_rank")
        self.optimizer_bytes = _count(section, "optimizer_bytes_per_rank")
        self.num_write = _count(section, "num_checkpoints_write", 10)
        self.num_read = _count(section, "num_checkpoints_read", self.num_write)
        if self.num_read > self.num_write:
            raise ValueError(
                f"checkpoint.num_checkpoints_read {self.num_read} > num_checkpoints_write "
                f"{self.num_write}: only written checkpoints can be read"
            )
        fsync = section.get("fsync", True)
        if not isinstance(fsync, bool):
            raise ValueError(f"checkpoint.fsync must be true or false, got {fsync!r}")
        self.fsync = fsync
        mpi = DLIOMPI.get_instance()
        self.comm = mpi.comm()
        self.rank = mpi.rank()
        self.size = mpi.size()
        self.folder = self.args.checkpoint_folder
        os.makedirs(self.folder, exist_ok=True)
        import numpy as np

        self.block = np.random.default_rng((SEED, self.rank)).bytes(
            min(_CHUNK, max(self.model_bytes, self.optimizer_bytes, 1))
        )
        self.writes: list[float] = []
        self.reads: list[float] = []

    def _files(self, index: int) -> list[tuple[str, int]]:
        return [
            (os.path.join(self.folder, f"ckpt{index}-{part}-rank{self.rank}.{self.ext}"), n)
            for part, n in (("model", self.model_bytes), ("optimizer", self.optimizer_bytes))
            if n > 0
        ]

    def get_tensor(self, size: int) -> bytes:
        return self.block[: min(size, len(self.block))]

    def save_state(self, suffix: str, state: Any) -> None:
        raise NotImplementedError("ShardCheckpointing writes its own files")

    def _write(self, path: str, nbytes: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(self.block)
            left = nbytes
            while left:
                left -= os.write(fd, view[: min(left, len(view))])
            if self.fsync:
                os.fsync(fd)
            _drop_cache(fd)
        finally:
            os.close(fd)

    def _read(self, path: str, nbytes: int) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            _drop_cache(fd)
            buf = bytearray(min(_CHUNK, max(nbytes, 1)))
            got = 0
            while True:
                n = os.readv(fd, [buf])
                if n == 0:
                    break
                got += n
            if got != nbytes:
                raise OSError(f"{path}: read {got} bytes, wrote {nbytes}")
        finally:
            os.close(fd)

    def _timed(self, files: list[tuple[str, int]], op: Any) -> float:
        self.comm.barrier()
        start = time.perf_counter()
        for path, nbytes in files:
            op(path, nbytes)
        self.comm.barrier()
        return time.perf_counter() - start

    def checkpoint(self, epoch: int, step_number: int) -> None:
        if len(self.writes) >= self.num_write:
            return
        self.writes.append(self._timed(self._files(len(self.writes)), self._write))

    def finalize(self) -> None:
        first = len(self.writes) - min(self.num_read, len(self.writes))
        for index in range(first, len(self.writes)):
            self.reads.append(self._timed(self._files(index), self._read))
        rank_bytes = self.model_bytes + self.optimizer_bytes
        total = self.comm.allreduce(rank_bytes)
        if self.rank == 0:
            report = {
                "processes": self.size,
                "bytes_per_checkpoint": total,
                "model_bytes_per_rank": self.model_bytes,
                "optimizer_bytes_per_rank": self.optimizer_bytes,
                "fsync": self.fsync,
                "writes_s": self.writes,
                "reads_s": self.reads,
                "checkpoints_requested": {"write": self.num_write, "read": self.num_read},
            }
            path = os.path.join(self.args.output_folder, CHECKPOINT_TIMINGS)
            tmp = f"{path}.partial"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
            os.replace(tmp, path)
