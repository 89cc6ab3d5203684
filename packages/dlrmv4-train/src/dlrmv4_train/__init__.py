"""The DLRMv4 training run, assembled: the Yambda sample store and loader (yambda-data), the HSTU
model, its trainer and checkpoints (hstu-model) and the MLPerf log (mlperf-compliance), wired
into one streaming train-eval run with a run folder.

- What a run is asked to do, resolved once (`dlrmv4_train.run_config`: `RunConfig`,
  `resolve_run`, `flag`; it imports neither torch nor TorchRec, so a command line can parse and
  check its arguments, and answer --help, at once).
- The run (`dlrmv4_train.run`: `train`; `ending(error)`, how a run that raised ended, which
  decides its exit status; `RunInterrupted`), loaded when one of its names is first used.
"""

from __future__ import annotations

from typing import Any

from dlrmv4_train.run_config import (
    ResolvedRun,
    RunConfig,
    RunConfigError,
    field_types,
    flag,
    resolve_run,
)
from hstu_model.config import ConfigError

_RUN = ("Ending", "RunInterrupted", "RunRefused", "ending", "train")
"""The names of `dlrmv4_train.run` (which imports torch) that this package re-exports."""

__all__ = [
    "ConfigError",
    "ResolvedRun",
    "RunConfig",
    "RunConfigError",
    "field_types",
    "flag",
    "resolve_run",
    *_RUN,
]


def __getattr__(name: str) -> Any:
    if name not in _RUN:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from dlrmv4_train import run

    return getattr(run, name)
