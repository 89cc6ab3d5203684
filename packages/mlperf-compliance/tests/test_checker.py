"""The official compliance checker on logs written through MLPerfLogger.

Each test here runs mlperf_logging.compliance_checker in a subprocess (under a second each).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mlperf_compliance import check_log
from mlperf_compliance.cli import main

WriteRun = Callable[..., Path]


def test_closed_run_passes(closed_run: WriteRun) -> None:
    result = check_log(closed_run("closed.log"))
    assert result.passed, result.output
    assert result.messages == []
    assert result.returncode == 0
    assert "closed_dlrmv4.yaml" in result.output  # the DLRMv4 closed rules were applied


def test_missing_run_stop_fails(closed_run: WriteRun) -> None:
    result = check_log(closed_run("no_run_stop.log", run_stop=False))
    assert not result.passed
    assert result.returncode == 1
    assert any("'run_stop'" in m for m in result.summary()), result.messages


def test_missing_hyperparameter_fails(closed_run: WriteRun) -> None:
    result = check_log(closed_run("no_beta1.log", drop_keys=["opt_adam_beta_1"]))
    assert not result.passed
    assert result.summary() == [
        "Required EXACTLY_ONE occurrence of 'opt_adam_beta_1' but found 0"
    ], result.output


def test_eval_off_the_grid_fails(closed_run: WriteRun) -> None:
    result = check_log(closed_run("off_grid.log", first_eval_offset=8192))
    assert not result.passed
    joined = "\n".join(result.messages)
    assert "eval_accuracy" in joined and "eval_interval_samples" in joined


def test_cli_module_exit_status(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("cli_good.log")
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_compliance", "check", str(good), "--ruleset", "6.1.0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASSED")
    assert list(tmp_path.iterdir()) == []  # the checker left no log file behind


def test_cli_failure_prints_the_problem(
    closed_run: WriteRun, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = closed_run("cli_bad.log", run_stop=False)
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "Required EXACTLY_ONE occurrence of 'run_stop'" in out
    assert "FAILED" in out


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(FileNotFoundError):
        check_log(tmp_path / "absent.log")
    assert main(["check", str(tmp_path / "absent.log")]) == 1
    assert "no MLPerf log" in capsys.readouterr().err
