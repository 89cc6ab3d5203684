"""Messages of the libraries under hstu-model that are not a user's business, silenced
narrowly: each by the module that issues it and the start of its text, so that every other
warning of the same libraries still shows."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

__all__ = ["quiet_fx_tracing_notice", "quiet_torchrec_sharding"]


class _DropStartingWith(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


_FX_NOTICE = _DropStartingWith("is_fx_tracing will return true for both fx.symbolic_trace")


def quiet_fx_tracing_notice() -> None:
    """Drop torch.fx's notice that its `is_fx_tracing` also answers for torch.export, which
    TorchRec's jagged tensors trigger once per process (the trainer and each loader worker, which
    inherit the filter when they are forked). Idempotent."""
    logger = logging.getLogger("torch.fx._symbolic_trace")
    if _FX_NOTICE not in logger.filters:
        logger.addFilter(_FX_NOTICE)


@contextlib.contextmanager
def quiet_torchrec_sharding() -> Iterator[None]:
    """Around TorchRec's sharding planner and DistributedModelParallel: their FutureWarnings
    about the planner's default storage reservation and DDP's `broadcast_buffers`, and the
    planner's warning about dense tensor sizes in a dry run, all about TorchRec's own defaults
    (the run passes its memory budget through `ShardingConfig.hbm_cap_gb`)."""
    storage = logging.getLogger("torchrec.distributed.planner.storage_reservations")
    dense_size = _DropStartingWith("There is a known issue with TorchRec's dense tensor size")
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message="HeuristicalStorageReservation is known to cause issues",
            category=FutureWarning,
            module=r"torchrec\.distributed\.planner",
        )
        warnings.filterwarnings(
            "ignore",
            message="`broadcast_buffers` is deprecated",
            category=FutureWarning,
            module=r"torchrec\.distributed\.model_parallel",
        )
        storage.addFilter(dense_size)
        try:
            yield
        finally:
            storage.removeFilter(dense_size)
