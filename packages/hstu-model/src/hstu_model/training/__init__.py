"""Training machinery and the end-to-end run, one import for a command line.

- `Trainer` (`hstu_model.training.trainer`): the optimizer step and evaluation.
- What a run is asked to do, resolved once (`hstu_model.training.run_config`: `RunConfig`,
  `resolve_run`, `flag`; it imports neither torch nor TorchRec, so a command line can parse and
  check its arguments, and answer --help, at once).
- The run (`hstu_model.training.run`: `train` and the errors that decide its exit status,
  `REFUSALS`, `FAILURES`, `RunInterrupted`; it needs yambda-data and mlperf-compliance, the
  `train` extra of this package).

Every name loads its module when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hstu_model.config import ConfigError
    from hstu_model.training.run import FAILURES, REFUSALS, RunInterrupted, RunRefused, train
    from hstu_model.training.run_config import (
        ResolvedRun,
        RunConfig,
        RunConfigError,
        field_types,
        flag,
        resolve_run,
    )
    from hstu_model.training.trainer import Batch, EvalResult, Trainer, seed_everything

_LAZY = {
    **dict.fromkeys(("Batch", "EvalResult", "Trainer", "seed_everything"), "trainer"),
    **dict.fromkeys(
        ("ResolvedRun", "RunConfig", "RunConfigError", "field_types", "flag", "resolve_run"),
        "run_config",
    ),
    **dict.fromkeys(("FAILURES", "REFUSALS", "RunInterrupted", "RunRefused", "train"), "run"),
}
"""Public names -> the module of this package that holds them."""

__all__ = [
    "FAILURES",
    "REFUSALS",
    "Batch",
    "ConfigError",
    "EvalResult",
    "ResolvedRun",
    "RunConfig",
    "RunConfigError",
    "RunInterrupted",
    "RunRefused",
    "Trainer",
    "field_types",
    "flag",
    "resolve_run",
    "seed_everything",
    "train",
]


def __getattr__(name: str) -> Any:
    if name == "ConfigError":
        module = importlib.import_module("hstu_model.config")
    elif name in _LAZY:
        module = importlib.import_module(f"hstu_model.training.{_LAZY[name]}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
