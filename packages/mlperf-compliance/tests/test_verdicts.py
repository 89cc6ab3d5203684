"""Per-rule verdicts of ``check``, and malformed or truncated logs (no tracebacks)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mlperf_compliance import check_log, scan_log
from mlperf_compliance.cli import main

WriteRun = Callable[..., Path]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _rewrite(src: Path, dst: Path, edit: Callable[[list[str]], list[str]]) -> Path:
    dst.write_text("".join(edit(_lines(src))), encoding="utf-8")
    return dst


def _index_of(lines: list[str], key: str, nth: int = 0) -> int:
    """0-based index of the ``nth`` line whose record has ``key``."""
    hits = [i for i, line in enumerate(lines) if f'"key": "{key}"' in line]
    return hits[nth]


def _cli_json(args: list[str], cwd: Path) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_compliance", *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_passing_log_lists_every_rule(closed_run: WriteRun, tmp_path: Path) -> None:
    log = closed_run("verdict_good.log")
    result = check_log(log)
    assert result.passed and result.division == "closed"
    assert result.configs == [
        "training_6.1.0/common.yaml",
        "training_6.1.0/closed_common.yaml",
        "training_6.1.0/closed_dlrmv4.yaml",
    ]
    names = [r.rule for r in result.rules]
    assert len(names) == len(set(names)) > 30  # one verdict per rule when nothing is reported
    assert {"run_start", "run_stop", "eval_accuracy", "opt_adam_beta_1"} <= set(names)
    assert all(r.passed and r.severity is None and r.line is None for r in result.rules)
    run_stop = next(r for r in result.rules if r.rule == "run_stop")
    assert run_stop.requirement == "EXACTLY_ONE"
    assert run_stop.configs == ("training_6.1.0/common.yaml",)

    code, data, _ = _cli_json(["check", str(log)], tmp_path)
    assert code == 0
    assert data["passed"] is True
    assert data["ruleset"] == "6.1.0" and data["division"] == "closed"
    assert data["rules_failed"] == 0 and data["rules_checked"] == len(names)
    rules = data["rules"]
    assert isinstance(rules, list) and len(rules) == len(names)
    assert set(rules[0]) >= {"rule", "key", "passed", "message", "line"}


def test_check_failure_names_the_log_line(closed_run: WriteRun, tmp_path: Path) -> None:
    log = closed_run("verdict_off_grid.log", first_eval_offset=8192)
    result = check_log(log)
    assert not result.passed
    [failed] = result.failed_rules
    assert failed.rule == failed.key == "eval_accuracy"
    assert "eval_interval_samples" in failed.message
    # The checker counts MLLOG lines from 0; the verdict names the file's own line, which holds
    # the last eval_accuracy record (the checker keeps one message per key: the last).
    lines = _lines(log)
    assert failed.line == _index_of(lines, "eval_accuracy", nth=-1) + 1
    assert "CHECK for 'eval_accuracy' failed in line" in failed.detail

    code, data, _ = _cli_json(["check", str(log)], tmp_path)
    assert code == 1 and data["passed"] is False
    bad = [r for r in data["rules"] if not r["passed"]]  # type: ignore[union-attr]
    assert [(r["rule"], r["line"]) for r in bad] == [("eval_accuracy", failed.line)]


def test_missing_keys_have_no_line(
    closed_run: WriteRun, capsys: pytest.CaptureFixture[str]
) -> None:
    log = closed_run("verdict_missing.log", run_stop=False, drop_keys=["opt_adam_beta_1"])
    result = check_log(log)
    failed = {r.rule: r for r in result.failed_rules}
    assert set(failed) == {"run_stop", "opt_adam_beta_1"}
    assert failed["run_stop"].line is None
    assert failed["run_stop"].message == "Required EXACTLY_ONE occurrence of 'run_stop' but found 0"
    assert main(["check", str(log)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert (
        f"{log}: FAIL: run_stop: Required EXACTLY_ONE occurrence of 'run_stop' but found 0" in out
    )
    assert out[-1].startswith(f"FAILED: {log} (training ruleset 6.1.0, closed division; 2 of ")


def test_repeated_key_is_a_warning(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("verdict_dup_src.log")

    def duplicate(lines: list[str]) -> list[str]:
        at = _index_of(lines, "opt_adam_beta_1")
        return [*lines[: at + 1], lines[at], *lines[at + 1 :]]

    log = _rewrite(good, tmp_path / "dup.log", duplicate)
    result = check_log(log)
    assert result.passed, result.output
    [warning] = result.warnings
    assert warning.rule == "opt_adam_beta_1" and warning.severity == "warning"
    assert "but found 2" in warning.message
    assert result.messages == [warning.detail]


def test_failed_rule_code_names_the_record(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("verdict_code_src.log")

    def null_metadata(lines: list[str]) -> list[str]:
        at = _index_of(lines, "eval_accuracy")
        record = json.loads(lines[at][len(":::MLLOG ") :])
        record["metadata"] = None
        return [*lines[:at], ":::MLLOG " + json.dumps(record) + "\n", *lines[at + 1 :]]

    log = _rewrite(good, tmp_path / "code.log", null_metadata)
    result = check_log(log)
    assert not result.passed
    failed = [r for r in result.failed_rules if r.rule == "eval_accuracy"]
    assert failed and failed[0].message.startswith("failed executing CHECK code for")
    assert failed[0].line == _index_of(_lines(log), "eval_accuracy") + 1


def test_malformed_line_is_named_not_a_traceback(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("verdict_bad_src.log")
    at = _index_of(_lines(good), "train_samples")
    log = _rewrite(
        good, tmp_path / "bad.log", lambda ls: [*ls[:at], ls[at][:40] + "\n", *ls[at + 1 :]]
    )
    result = check_log(log)
    assert not result.passed
    fmt = [r for r in result.failed_rules if r.rule == "log_format"]
    assert [(r.line, r.message.split(":")[0]) for r in fmt] == [(at + 1, "malformed MLLOG record")]
    assert any(m.startswith(f"{log}:{at + 1}: malformed MLLOG record") for m in result.messages)
    # The checker still ran: without that line, train_samples is missing.
    assert any(r.rule == "train_samples" for r in result.failed_rules)

    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_compliance", "check", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"{log}:{at + 1}: FAIL: log_format: malformed MLLOG record" in proc.stdout


def test_truncated_last_line(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("verdict_trunc_src.log")
    n = len(_lines(good))
    log = _rewrite(good, tmp_path / "trunc.log", lambda ls: [*ls[:-1], ls[-1][:70]])
    scan = scan_log(log)
    [problem] = scan.problems
    assert problem.line == n and not problem.fatal
    assert problem.message.startswith("truncated MLLOG record (the file ends inside it)")
    assert str(problem).startswith(f"{log}:{n}: truncated")
    code, data, stderr = _cli_json(["check", str(log)], tmp_path)
    assert code == 1 and "Traceback" not in stderr
    failed = {(r["rule"], r["line"]) for r in data["rules"] if not r["passed"]}  # type: ignore[union-attr]
    assert failed == {("log_format", n), ("run_stop", None)}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('{"time_ms": 1, "value": 1, "metadata": {}}', "the record has no 'key'"),
        ("[1, 2]", "the record is a JSON list, not an object"),
        ('{"time_ms": null, "key": "x", "value": 1, "metadata": {}}', "time_ms must be a number"),
    ],
)
def test_record_the_parser_would_crash_on(
    closed_run: WriteRun, tmp_path: Path, record: str, message: str
) -> None:
    good = closed_run("verdict_crash_src.log")
    log = _rewrite(
        good, tmp_path / "crash.log", lambda ls: [*ls[:3], f":::MLLOG {record}\n", *ls[3:]]
    )
    result = check_log(log)
    assert not result.passed and result.returncode is None and result.output == ""
    [verdict] = result.rules
    assert verdict.rule == "log_format" and verdict.line == 4 and message in verdict.message
    code, data, stderr = _cli_json(["check", str(log)], tmp_path)
    assert code == 1 and data["returncode"] is None and "Traceback" not in stderr
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_compliance", "check", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert f"{log}:4: FAIL: log_format: bad MLLOG record: {message}" in proc.stdout
    assert "the checker was not run" in proc.stdout and "Traceback" not in proc.stderr


def test_prefixed_lines_keep_file_line_numbers(closed_run: WriteRun, tmp_path: Path) -> None:
    good = closed_run("verdict_prefix_src.log", first_eval_offset=8192)

    def prefix(lines: list[str]) -> list[str]:
        out = ["launcher: starting 8 ranks\n", "\n"]
        return out + [f"[rank0]: {line}" for line in lines]

    log = _rewrite(good, tmp_path / "prefixed.log", prefix)
    [failed] = check_log(log).failed_rules
    assert failed.line == _index_of(_lines(log), "eval_accuracy", nth=-1) + 1


def test_division_expectation(closed_run: WriteRun, tmp_path: Path) -> None:
    log = closed_run("verdict_division.log")
    assert check_log(log, division="closed").passed
    result = check_log(log, division="open")
    assert not result.passed
    [failed] = result.failed_rules
    assert failed.rule == "division" and failed.key == "submission_division"
    assert failed.line == _index_of(_lines(log), "submission_division") + 1
    assert main(["check", str(log), "--division", "open"]) == 1
    with pytest.raises(ValueError, match="division"):
        check_log(log, division="mixed")


def test_missing_file_json(tmp_path: Path) -> None:
    code, data, stderr = _cli_json(["check", str(tmp_path / "absent.log")], tmp_path)
    assert code == 2  # no verdict: an I/O error
    assert data["passed"] is False and "no MLPerf log" in str(data["error"])
    assert "no MLPerf log" in stderr
