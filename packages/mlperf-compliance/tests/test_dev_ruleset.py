"""The dev ruleset: official engine and 6.1.0 structure rules, dataset pins from the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_compliance import (
    DLRMv4RunConfig,
    MLPerfLogger,
    RunTracker,
    check_log,
    dev_rules_dir,
    dlrmv4_run_start_keys,
    eval_schedule,
)
from mlperf_compliance.cli import main

BATCH = 128
STEPS = 1000
EVALS = 4


def write_dev_run(
    path: Path, *, offset: int = 0, run_stop: bool = True, aucs=(0.61, 0.63, 0.64, 0.645)
) -> Path:
    """A run written the way tools/train.py writes one: open division, small train_samples,
    a learning rate far from the reference band, AUC below 0.75, status aborted."""
    run = DLRMv4RunConfig(
        global_batch_size=BATCH,
        learning_rate=1e-3,
        sparse_learning_rate=5e-3,
        micro_batch_size=BATCH,
        config_filename="runs/x/config.json",
        precision_linear="fp32",
        precision_attn="fp32",
        precision_comm="fp32",
        train_samples=STEPS * BATCH,
        eval_samples=2000,
        max_sequence_length=200,
        eval_every_data_pct=1.0 / EVALS,
        warmup_steps=100,
        seed=1,
    )
    with MLPerfLogger(path) as log:
        tracker = RunTracker(log)
        tracker.init_start()
        log.submission_info(org="reference", platform="2xCPU", division="open")
        log.cache_clear()
        log.hyperparameters(dlrmv4_run_start_keys(run))
        tracker.init_stop()
        tracker.run_start()
        schedule = eval_schedule(run.train_samples, BATCH, run.eval_every_data_pct)
        for at, auc in zip(schedule, aucs, strict=True):
            tracker.block_start(tracker.samples_count, first_epoch_num=0)
            tracker.block_stop(at + offset, first_epoch_num=0)
            tracker.eval(auc, at + offset, epoch_num=0)
        if run_stop:
            assert tracker.run_stop() == "aborted"
    return path


def test_rules_are_shipped() -> None:
    names = sorted(p.name for p in dev_rules_dir().glob("*.yaml"))
    assert names == ["common.yaml", "defer.yaml", "dlrmv4.yaml"]


def test_small_run_passes_dev_but_not_official(tmp_path: Path) -> None:
    path = write_dev_run(tmp_path / "dev.log")
    dev = check_log(path, ruleset="dev")
    assert dev.passed, dev.output
    assert dev.ruleset == "dev" and "dev ruleset" in dev.ruleset_note
    assert "open_common.yaml" in dev.output  # the official division rules ran
    assert "open_dlrmv4.yaml" not in dev.output  # replaced by the dev file
    official = check_log(path)
    assert not official.passed
    joined = "\n".join(official.messages)
    assert "train_samples" in joined and "eval_accuracy" in joined


def test_dev_keeps_grid_and_structure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    off_grid = check_log(write_dev_run(tmp_path / "off.log", offset=BATCH), ruleset="dev")
    assert not off_grid.passed
    assert any("eval_interval_samples" in m for m in off_grid.messages), off_grid.output
    no_stop = write_dev_run(tmp_path / "nostop.log", run_stop=False)
    assert main(["check", str(no_stop), "--ruleset", "dev"]) == 1
    out = capsys.readouterr().out
    assert "Required EXACTLY_ONE occurrence of 'run_stop'" in out
    assert out.strip().splitlines()[-1].startswith("FAILED") and "dev ruleset" in out


def test_dev_rejects_other_usage(tmp_path: Path) -> None:
    path = write_dev_run(tmp_path / "u.log")
    with pytest.raises(ValueError, match="usage 'training'"):
        check_log(path, ruleset="dev", usage="hpc")
