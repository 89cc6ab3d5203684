"""The process group of a run: one process, or one process per rank under torchrun.

`init_distributed` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT). With more than one rank it starts a gloo group on CPU or an NCCL/RCCL group with one
GPU per local rank, with a timeout on every collective: a rank that dies makes the others fail
within that bound (gloo notices a closed connection at once; the timeout covers a rank that hangs),
instead of waiting forever.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["Distributed", "RankLostError", "device_type", "init_distributed"]

# How gloo and NCCL word the failure of a collective whose peer died or hung.
_LOST_PEER = ("connection closed by peer", "connection reset by peer", "timed out", "timeout")


class RankLostError(RuntimeError):
    """A collective failed because another rank died, hung or left."""


@dataclasses.dataclass(frozen=True)
class Distributed:
    """Where this process stands in the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the logs, the metrics and the summary."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def mean(self, value: float) -> float:
        """The mean of `value` over the ranks (float64)."""
        if not self.active:
            return value
        tensor = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(tensor)
        return float(tensor[0]) / self.world_size

    def sum_array(self, values: np.ndarray) -> np.ndarray:
        """The elementwise sum of an int64 array over the ranks."""
        if not self.active:
            return values
        tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
        dist.all_reduce(tensor)
        return tensor.numpy()

    def concat(self, values: np.ndarray) -> np.ndarray:
        """Every rank's 1-D array, concatenated in rank order (sizes may differ)."""
        if not self.active:
            return values
        gathered: list[np.ndarray | None] = [None] * self.world_size
        dist.all_gather_object(gathered, np.asarray(values))
        return np.concatenate(gathered)


def lost_peer(error: BaseException) -> BaseException | None:
    """The failed collective that says another rank died or hung: `error` itself or one of the
    exceptions it arose from (its __cause__ / __context__ chain), or None."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, RuntimeError) and not isinstance(error, RankLostError):
            text = str(error).lower()
            backend = isinstance(error, getattr(dist, "DistBackendError", ()))
            if backend or any(marker in text for marker in _LOST_PEER):
                return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def backend_words(error: BaseException) -> str:
    """What a failed collective says, in a few words: the first line of its message without
    the source location the backend puts in front and the advice gloo appends (the run's own
    line says what to do)."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    line = re.sub(r"^\[[^\]]*:\d+\]\s*", "", text.splitlines()[0])
    return line.split(". This is typically caused by")[0].rstrip(". ") or type(error).__name__


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def device_type() -> str:
    """The type of device a run trains on: "cuda" when CUDA (or ROCm) devices are visible, else
    "cpu". `init_distributed` picks its devices by it, and the kernel is checked against it
    before the run starts."""
    return "cuda" if torch.cuda.is_available() else "cpu"


_PR_SET_PDEATHSIG = 1


def _stop_with_the_launcher() -> None:
    """A rank of torchrun gets SIGTERM when torchrun dies, however it dies (Linux). Without
    it, a `kill -9` of the launcher leaves its ranks training on, orphaned, holding the run's
    folders: the same command run again could not resume. The ranks are not in the
    launcher's process group, so a signal to that group does not reach them either."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the launcher's SIGTERM still reaches them
        return
    if os.getppid() != parent:  # the launcher died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def init_distributed(timeout_seconds: float = 300.0) -> Iterator[Distributed]:
    """The run's `Distributed`, with a process group while the block runs when WORLD_SIZE > 1.

    The backend is NCCL (RCCL on ROCm) when CUDA devices are visible, each local rank on its own
    device, else gloo. One process without torchrun gets CUDA device 0 when there is one.
    """
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} and WORLD_SIZE={world_size} do not describe a rank")
    use_cuda = device_type() == "cuda"
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world_size == 1:
        yield Distributed(device=device)
        return
    if "TORCHELASTIC_RUN_ID" in os.environ:
        _stop_with_the_launcher()
    dist.init_process_group(
        backend="nccl" if use_cuda else "gloo",
        timeout=datetime.timedelta(seconds=timeout_seconds),
        **({"device_id": device} if use_cuda else {}),
    )
    try:
        yield Distributed(rank, world_size, local_rank, device)
    except BaseException as error:
        # The lost peer may be under what propagates: a launcher's SIGTERM or a loader whose
        # workers it killed can raise while the collective's error unwinds.
        lost = lost_peer(error)
        if lost is None or isinstance(error, RankLostError):
            raise
        raise RankLostError(
            f"rank {rank} of {world_size}: another rank stopped answering "
            f"({backend_words(lost)}); "
            "the run is aborted, see the other ranks' logs for the cause"
        ) from error
    finally:
        dist.destroy_process_group()
