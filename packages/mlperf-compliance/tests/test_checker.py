"""The official compliance checker on logs written through MLPerfLogger.

Each test here runs mlperf_logging.compliance_checker in a subprocess (under a second each).
"""

from __future__ import annotations

import json
import os
import re
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


@pytest.mark.parametrize("value", ["0.7504", None])
def test_an_accuracy_that_is_no_number_is_named_by_its_line(
    closed_run: WriteRun, tmp_path: Path, value: object
) -> None:
    """The official rules compare eval_accuracy with the target and crash on a string or
    null: the verdict names that line, and every rule file the checker ran."""
    lines = closed_run("closed.log").read_text(encoding="utf-8").splitlines(keepends=True)
    at = max(i for i, line in enumerate(lines) if '"eval_accuracy"' in line)
    record = json.loads(lines[at].split(":::MLLOG ", 1)[1])
    record["value"] = value
    lines[at] = ":::MLLOG " + json.dumps(record) + "\n"
    log = tmp_path / "accuracy.log"
    log.write_text("".join(lines), encoding="utf-8")
    result = check_log(log)
    assert not result.passed
    [failed] = result.failed_rules
    assert (failed.rule, failed.line) == ("eval_accuracy", at + 1)
    assert failed.message == f"eval_accuracy must be a number, got {json.dumps(value)}"
    assert "Traceback" in failed.detail  # the crash is kept as its detail
    assert [Path(c).name for c in result.configs][-1] == "closed_dlrmv4.yaml"


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


@pytest.mark.parametrize(
    "key",
    [
        "eval_samples",
        "lowest_numerical_precision_in_attn",
        "tensor_parallelism",
        "micro_batch_size",
        "config_filename",
    ],
)
def test_each_required_key_is_enforced(closed_run: WriteRun, key: str) -> None:
    result = check_log(closed_run(f"no_{key}.log", drop_keys=[key]))
    assert not result.passed
    assert result.summary() == [f"Required EXACTLY_ONE occurrence of '{key}' but found 0"], (
        result.output
    )


def test_second_run_start_fails(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("two_run_starts_source.log")
    lines = good.read_text().splitlines(keepends=True)
    run_start = next(line for line in lines if '"key": "run_start"' in line)
    doubled = tmp_path / "two_run_starts.log"
    at = lines.index(run_start) + 1
    doubled.write_text("".join([*lines[:at], run_start, *lines[at:]]))
    result = check_log(doubled)
    # The official checker only warns about the repeated equal record; this package fails it.
    assert result.returncode == 0
    assert not result.passed
    [verdict] = [r for r in result.failed_rules if r.rule == "one_run_per_log"]
    assert verdict.key == "run_start" and verdict.line == at + 1


@pytest.mark.parametrize("learning_rate", [1e-7, 2e-6])
def test_learning_rate_outside_the_band_fails(closed_run: WriteRun, learning_rate: float) -> None:
    # The closed band at global batch 8192 is 0.5x..1.5x of 1e-6.
    result = check_log(
        closed_run(f"lr_{learning_rate}.log", values={"learning_rate": learning_rate})
    )
    assert not result.passed
    assert any("opt_base_learning_rate" in m for m in result.messages), result.output


def test_learning_rate_inside_the_band_passes(closed_run: WriteRun) -> None:
    result = check_log(closed_run("lr_ok.log", values={"learning_rate": 1.4e-6}))
    assert result.passed, result.output


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
    """No log, no verdict: exit status 2 (a FAIL verdict is 1), one line on stderr."""
    with pytest.raises(FileNotFoundError):
        check_log(tmp_path / "absent.log")
    absent = tmp_path / "absent.log"
    assert main(["check", str(absent)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"mlperf-compliance check: error: no MLPerf log at {absent}\n"
    assert captured.out == ""
    # JSON on stdout says the same; a directory is not a log either
    assert main(["check", str(absent), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == f"no MLPerf log at {absent}"
    assert main(["check", str(tmp_path)]) == 2
    assert f"no MLPerf log at {tmp_path}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("ruleset", "usage", "message"),
    [
        ("9.9.9", "training", "ruleset '9.9.9': the compliance checker has no training ruleset"),
        ("6.1.0", "inference", "usage 'inference': the compliance checker knows"),
        ("6.1.0", "hpc", "ruleset '6.1.0': the compliance checker has no hpc ruleset"),
        ("dev", "hpc", "the dev ruleset is for usage 'training', not 'hpc'"),
    ],
)
def test_unknown_ruleset_or_usage_is_a_usage_error(
    closed_run: WriteRun,
    ruleset: str,
    usage: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before the checker runs: no verdict, status 2, one line naming the value."""
    good = closed_run("ruleset.log")
    assert main(["check", str(good), "--ruleset", ruleset, "--usage", usage]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mlperf-compliance check: error: {message}") and err.count("\n") == 1
    with pytest.raises(ValueError, match=re.escape(message)):
        check_log(good, ruleset=ruleset, usage=usage)
    assert main(["score", str(good.parent), "--ruleset", ruleset, "--usage", usage]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["check"], "LOG"),
        (["check", "x.log", "--division", "both"], "--division"),
        (["check", "x.log", "--format", "xml"], "--format"),
        (["score"], "DIR"),
        (["grade", "x"], "grade"),
    ],
)
def test_argument_errors_are_one_line_with_status_2(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and "error:" in err, err


def test_debug_prints_the_traceback_only_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLRMV4_DEBUG", raising=False)
    argv = ["check", str(tmp_path / "absent.log")]
    assert main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main([*argv, "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.splitlines()[-1].startswith("mlperf-compliance")
    monkeypatch.setenv("DLRMV4_DEBUG", "1")
    assert main(argv) == 2
    assert "FileNotFoundError" in capsys.readouterr().err
    for off in ("false", "0", "no", "off", ""):
        monkeypatch.setenv("DLRMV4_DEBUG", off)
        assert main(argv) == 2
        assert "Traceback" not in capsys.readouterr().err, off


def test_module_exit_status_of_a_missing_log(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_compliance", "check", str(tmp_path / "none.log")],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ | {"DLRMV4_DEBUG": ""},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr == f"mlperf-compliance check: error: no MLPerf log at {tmp_path / 'none.log'}\n"
    )
