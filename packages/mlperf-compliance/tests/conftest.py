"""Shared fixtures: a scripted DLRMv4 run written through MLPerfLogger."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from mlperf_compliance import (
    MLPerfLogger,
    dlrmv4_run_start_keys,
    eval_interval_samples,
    first_eval_samples,
)

CLOSED_GBS = 8192


CLOSED_VALUES: dict[str, object] = {
    "global_batch_size": CLOSED_GBS,
    "learning_rate": 1e-6,
    "micro_batch_size": 1024,
    "config_filename": "configs/closed_8x1024.gin",
    "precision_linear": "bfloat16",
    "precision_attn": "bfloat16",
    "precision_comm": "fp16",
    "seed": 1234,
}


@pytest.fixture
def closed_values() -> dict[str, object]:
    """The run values of the reference closed recipe at global batch 8192 (8 ranks x 1024)."""
    return dict(CLOSED_VALUES)


def write_closed_run(
    path: Path,
    *,
    drop_keys: Iterable[str] = (),
    run_stop: bool = True,
    first_eval_offset: int = 0,
    aucs: Iterable[float] = (0.712, 0.7431, 0.7504),
    values: dict[str, object] | None = None,
) -> Path:
    """Write a closed DLRMv4 run: init, hyperparameters, blocks with evals on the rule grid.

    ``first_eval_offset`` moves every eval off the grid by that many samples; ``values``
    replaces some of the run values (``CLOSED_VALUES``).
    """
    dropped = set(drop_keys)
    interval = eval_interval_samples(CLOSED_GBS)
    first = first_eval_samples(CLOSED_GBS) + first_eval_offset
    with MLPerfLogger(path) as log:
        log.cache_clear(True)
        log.init_start()
        log.submission_info(org="Example Org", platform="8xExampleGPU", division="closed")
        run_values = CLOSED_VALUES | (values or {})
        keys = [kv for kv in dlrmv4_run_start_keys(run_values) if kv[0] not in dropped]
        log.hyperparameters(keys)
        log.init_stop()
        log.run_start()
        seen = 0
        for i, auc in enumerate(aucs):
            at = first + i * interval
            log.block_start(seen)
            log.block_stop(at)
            log.eval_start(at)
            log.eval_stop(at)
            log.eval_accuracy(auc, at)
            seen = at
        if run_stop:
            log.run_stop("success", seen)
    return path


@pytest.fixture(scope="session")
def closed_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Factory: ``closed_run(name, **options)`` writes a run (see ``write_closed_run``)."""
    root = tmp_path_factory.mktemp("runs")

    def make(name: str, **options: object) -> Path:
        return write_closed_run(root / name, **options)  # type: ignore[arg-type]

    return make
