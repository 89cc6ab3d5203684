"""Logs built to hurt the tools: non-finite numbers, deep nesting, huge records, repeated
names, FIFOs where a log belongs, and a checker that has to be ended with its parent."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mlperf_compliance import check_log, scan_log, score_results
from mlperf_compliance.cli import main
from mlperf_compliance.records import MAX_RECORD_CHARS, MAX_RECORD_DEPTH

WriteRun = Callable[..., Path]
_TIME = re.compile(r'"time_ms": [0-9.e+]+')


def _with_run_stop(src: Path, dst: Path, edit: Callable[[str], str]) -> tuple[Path, int]:
    """``src`` with its run_stop record edited; returns the copy and run_stop's line."""
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"key": "run_stop"' in line)
    lines[at] = edit(lines[at])
    dst.write_text("".join(lines), encoding="utf-8")
    return dst, at + 1


HOSTILE = {
    "nan_time": (lambda r: _TIME.sub('"time_ms": NaN', r), "holds NaN, not a finite number"),
    "nan_string_time": (
        lambda r: _TIME.sub('"time_ms": "NaN"', r),
        'time_ms must be a finite number, got "NaN"',
    ),
    "infinity_value": (
        lambda r: r.replace('"value": null', '"value": -Infinity'),
        "holds -Infinity, not a finite number",
    ),
    "overflowing_float": (
        lambda r: _TIME.sub('"time_ms": 1e400', r),
        "the number 1e400 is not finite as a float",
    ),
    "overflowing_int": (
        lambda r: _TIME.sub('"time_ms": 1' + "0" * 400, r),
        "an integer too large for a float",
    ),
    "too_many_digits": (
        lambda r: r.replace('"value": null', '"value": 1' + "0" * 5000),
        "an integer too large for a float",
    ),
    "nested_2000_deep": (
        lambda r: r.replace('"value": null', '"value": ' + "[" * 2000 + "]" * 2000),
        f"nests deeper than {MAX_RECORD_DEPTH} levels",
    ),
    "nested_past_the_bound": (
        lambda r: r.replace('"value": null', '"value": ' + '{"a": ' * 40 + "1" + "}" * 40),
        f"nests deeper than {MAX_RECORD_DEPTH} levels",
    ),
    "key_twice": (
        lambda r: r.replace('"key": "run_stop"', '"key": "run_start", "key": "run_stop"'),
        "the record gives 'key' twice",
    ),
    "huge_value": (
        lambda r: r.replace('"value": null', '"value": "' + "a" * 1_600_000 + '"'),
        f"the line is longer than {MAX_RECORD_CHARS:,} characters",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_record_is_a_log_format_failure(
    closed_run: WriteRun, tmp_path: Path, case: str
) -> None:
    edit, message = HOSTILE[case]
    log, line = _with_run_stop(closed_run("hostile_src.log"), tmp_path / f"{case}.log", edit)
    result = check_log(log)
    # The checker is not run: nothing reaches its quadratic or recursive parts.
    assert not result.passed and result.returncode is None
    [verdict] = result.rules
    assert verdict.rule == "log_format" and verdict.line == line
    assert message in verdict.message
    assert [p.line for p in scan_log(log).problems] == [line]


def test_hostile_records_exit_1_in_one_line(closed_run: WriteRun, tmp_path: Path) -> None:
    src = closed_run("hostile_cli_src.log")
    for case in ("nan_time", "nested_2000_deep", "overflowing_int"):
        log, line = _with_run_stop(src, tmp_path / f"{case}.log", HOSTILE[case][0])
        proc = subprocess.run(
            [sys.executable, "-m", "mlperf_compliance", "check", str(log)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 1, proc.stderr
        assert f"{log}:{line}: FAIL: log_format: bad MLLOG record:" in proc.stdout
        assert proc.stderr == ""


def test_a_record_at_the_bound_is_checked(closed_run: WriteRun, tmp_path: Path) -> None:
    pad = MAX_RECORD_CHARS - 400
    log, _ = _with_run_stop(
        closed_run("hostile_bound_src.log"),
        tmp_path / "bound.log",
        lambda r: r.replace('"metadata": {', f'"metadata": {{"note": "{"a" * pad}", '),
    )
    assert scan_log(log).ok and check_log(log).passed


def _strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def _three_good_runs(src: Path, folder: Path) -> Path:
    folder.mkdir()
    for i in range(3):
        (folder / f"result_{i}.txt").write_bytes(src.read_bytes())
    return folder


@pytest.mark.slow
def test_score_names_the_nan_run_and_scores_the_rest(
    closed_run: WriteRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = closed_run("hostile_score_src.log")
    folder = _three_good_runs(src, tmp_path / "set")
    _, line = _with_run_stop(src, folder / "result_3.txt", HOSTILE["nan_time"][0])
    report = score_results(folder, check=False)
    nan_run = next(r for r in report.runs if r.name == "result_3.txt")
    assert not nan_run.succeeded and nan_run.minutes is None
    assert any(
        p.startswith(f"{folder / 'result_3.txt'}:{line}: bad MLLOG") for p in nan_run.problems
    )
    assert report.score is not None and report.failed_runs == 1
    assert main(["score", str(folder), "--no-check", "--format", "json"]) == 1
    data = _strict_json(capsys.readouterr().out)
    assert isinstance(data, dict) and data["score_minutes"] == report.score


@pytest.mark.slow
def test_score_counts_a_fifo_and_a_dangling_link_as_runs_that_fail(
    closed_run: WriteRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _three_good_runs(closed_run("hostile_fifo_src.log"), tmp_path / "set")
    os.mkfifo(folder / "result_3.txt")
    (folder / "result_4.txt").symlink_to(tmp_path / "gone.txt")
    report = score_results(folder)  # with the checker: it must not open the FIFO either
    assert len(report.runs) == 5 and report.failed_runs == 2
    assert [p for r in report.runs for p in r.problems] == [
        f"{folder / 'result_3.txt'}: a FIFO, not a log file",
        f"{folder / 'result_4.txt'}: a dangling symbolic link, not a log file",
    ]
    assert main(["check", str(folder / "result_3.txt")]) == 2
    assert f"no MLPerf log at {folder / 'result_3.txt'} (a FIFO)" in capsys.readouterr().err


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_ends_the_checker_with_its_parent(
    closed_run: WriteRun, tmp_path: Path, signum: int
) -> None:
    log = closed_run("hostile_signal.log")
    checker = tmp_path / "slow-checker"
    # Stands in for the interpreter that runs the official checker, and takes its time.
    checker.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 120\n")
    checker.chmod(0o755)
    driver = textwrap.dedent(
        f"""
        import sys, types
        import mlperf_compliance.checker as checker
        from mlperf_compliance.cli import main
        checker.sys = types.SimpleNamespace(executable={str(checker)!r})
        sys.exit(main(["check", {str(log)!r}]))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", driver], stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum
    name = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    assert err.strip() == f"mlperf-compliance check: {name}"
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the checker outlived its parent"
        time.sleep(0.05)
