"""MLPerfLogger: call-site metadata, rank and enable filtering, fresh/resume, isolation."""

from __future__ import annotations

import logging
import math
from fractions import Fraction
from pathlib import Path

import pytest

from mlperf_compliance import MLPerfLogger, read_log

# One call per line: the record must name exactly this file and the line of the lambda.
CALLS = {
    "event": lambda log: log.event("seed", 7),
    "start": lambda log: log.start("epoch_start", metadata={"epoch_num": 1}),
    "end": lambda log: log.end("epoch_stop", metadata={"epoch_num": 1}),
    "submission_info": lambda log: log.submission_info(org="o", platform="p"),
    "cache_clear": lambda log: log.cache_clear(),
    "init_start": lambda log: log.init_start(),
    "init_stop": lambda log: log.init_stop(),
    "run_start": lambda log: log.run_start(),
    "run_stop": lambda log: log.run_stop("aborted", 10),
    "hyperparameters": lambda log: log.hyperparameters({"a": 1, "b": 2.5}),
    "block_start": lambda log: log.block_start(0, first_epoch_num=0, epoch_count=1),
    "block_stop": lambda log: log.block_stop(8192, first_epoch_num=0),
    "eval_start": lambda log: log.eval_start(8192, epoch_num=0.5),
    "eval_stop": lambda log: log.eval_stop(8192),
    "eval_accuracy": lambda log: log.eval_accuracy(0.5, 8192, 1),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_metadata_names_the_caller(tmp_path: Path, name: str) -> None:
    call = CALLS[name]
    with MLPerfLogger(tmp_path / "log.txt") as log:
        call(log)
    records = read_log(tmp_path / "log.txt")
    assert records, "nothing was written"
    for record in records:
        assert Path(record["metadata"]["file"]) == Path(__file__)
        assert record["metadata"]["lineno"] == call.__code__.co_firstlineno


def _wrapped_event(log: MLPerfLogger) -> None:
    """A user-side helper around ``event``: one extra frame."""
    log.event("wrapped", 1, stack_offset=1)


WRAPPED_CALL = (lambda log: _wrapped_event(log),)


def test_stack_offset_skips_wrapper_frames(tmp_path: Path) -> None:
    with MLPerfLogger(tmp_path / "log.txt") as log:
        WRAPPED_CALL[0](log)
    (record,) = read_log(tmp_path / "log.txt")
    assert record["metadata"]["lineno"] == WRAPPED_CALL[0].__code__.co_firstlineno
    assert Path(record["metadata"]["file"]) == Path(__file__)


def test_record_fields_and_types(tmp_path: Path) -> None:
    with MLPerfLogger(tmp_path / "log.txt", namespace="worker") as log:
        log.eval_accuracy(Fraction(3, 4), 16384, epoch_num=0.25, time_ms=1234)
        log.run_stop("success", 16384, metadata={"note": "x"})
    acc, stop = read_log(tmp_path / "log.txt")
    assert acc == {
        "namespace": "worker",
        "time_ms": 1234,
        "event_type": "POINT_IN_TIME",
        "key": "eval_accuracy",
        "value": 0.75,
        "metadata": {**acc["metadata"], "samples_count": 16384, "epoch_num": 0.25},
    }
    assert stop["event_type"] == "INTERVAL_END"
    assert stop["metadata"]["status"] == "success"
    assert stop["metadata"]["samples_count"] == 16384
    assert stop["metadata"]["note"] == "x"


def test_hyperparameters_keep_order(tmp_path: Path) -> None:
    pairs = [("z_first", 1), ("a_second", "x"), ("m_third", 1e-8)]
    with MLPerfLogger(tmp_path / "log.txt") as log:
        log.hyperparameters(pairs)
        log.hyperparameters({"q": 1, "b": 2})
    assert [(r["key"], r["value"]) for r in read_log(tmp_path / "log.txt")] == [
        *pairs,
        ("q", 1),
        ("b", 2),
    ]


def test_hyperparameters_reject_duplicates_before_writing(tmp_path: Path) -> None:
    with (
        MLPerfLogger(tmp_path / "log.txt") as log,
        pytest.raises(ValueError, match="'a' is given more than once"),
    ):
        log.hyperparameters([("a", 1), ("b", 2), ("a", 3)])
    assert read_log(tmp_path / "log.txt") == []


def test_nonzero_rank_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rank1.txt"
    with MLPerfLogger(path, rank=1) as log:
        assert not log.writes
        log.init_start()
        log.event("x", 1)
        log.run_stop("success", 1)
        with pytest.raises(RuntimeError, match="already"):
            log.run_stop("success", 1)
    assert not path.exists()


def test_disabled_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "off.txt"
    with MLPerfLogger(path, enabled=False) as log:
        log.init_start()
        log.hyperparameters({"a": 1})
        log.run_stop("aborted")
    assert not path.exists()


def test_fresh_run_truncates_and_resume_appends(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "log.txt"
    with MLPerfLogger(path) as log:
        log.event("first", 1)
    with MLPerfLogger(path, resume=True) as log:
        log.event("second", 2)
    assert [r["key"] for r in read_log(path)] == ["first", "second"]
    with MLPerfLogger(path) as log:
        assert read_log(path) == []  # truncated when the fresh logger is created
        log.event("third", 3)
    assert [r["key"] for r in read_log(path)] == ["third"]


def test_two_loggers_do_not_interfere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    root_handlers = list(root.handlers)
    a = MLPerfLogger(tmp_path / "a.txt")
    b = MLPerfLogger(tmp_path / "b.txt")
    for i in range(3):
        a.event("a", i)
        b.event("b", i)
    a.close()
    b.event("b", 3)
    b.close()
    assert [r["value"] for r in read_log(tmp_path / "a.txt")] == [0, 1, 2]
    assert [r["key"] for r in read_log(tmp_path / "b.txt")] == ["b"] * 4
    assert [r["value"] for r in read_log(tmp_path / "b.txt")] == [0, 1, 2, 3]
    captured = capsys.readouterr()
    assert ":::MLLOG" not in captured.out + captured.err
    assert root.handlers == root_handlers


def test_echo_stdout_is_opt_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MLPerfLogger(tmp_path / "log.txt", echo_stdout=True) as log:
        log.event("shown", 1)
    out = capsys.readouterr().out
    assert out.count(":::MLLOG") == 1 and '"shown"' in out


def test_run_stop_validates_and_happens_once(tmp_path: Path) -> None:
    with MLPerfLogger(tmp_path / "log.txt") as log:
        with pytest.raises(ValueError, match="status"):
            log.run_stop("done", 1)
        assert not log.run_stopped
        log.run_stop("aborted", 5)
        assert log.run_stopped
        with pytest.raises(RuntimeError, match="already"):
            log.run_stop("success", 6)
    stops = [r for r in read_log(tmp_path / "log.txt") if r["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"


def test_argument_validation(tmp_path: Path) -> None:
    with MLPerfLogger(tmp_path / "log.txt") as log:
        with pytest.raises(TypeError, match="samples_count"):
            log.eval_accuracy(0.5, 1.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="samples_count"):
            log.block_start(-1)
        with pytest.raises(ValueError, match="first_epoch_num"):
            log.block_start(0, epoch_count=1)
        with pytest.raises(ValueError, match="epoch_num"):
            log.eval_start(0, epoch_num=math.nan)
        with pytest.raises(ValueError, match="division"):
            log.submission_info(org="o", platform="p", division="preview")
        with pytest.raises(ValueError, match="set by the logger"):
            log.event("k", 1, metadata={"lineno": 3})
        with pytest.raises(TypeError, match="not JSON-serialisable"):
            log.event("k", object())
        with pytest.raises(ValueError, match="key"):
            log.event("")
    assert read_log(tmp_path / "log.txt") == []
    with pytest.raises(ValueError, match="rank"):
        MLPerfLogger(tmp_path / "x.txt", rank=-1)


def test_logging_after_close_raises(tmp_path: Path) -> None:
    log = MLPerfLogger(tmp_path / "log.txt")
    log.close()
    log.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        log.event("late", 1)


@pytest.mark.parametrize("suffix", ["", "/"])
def test_root_dir_trims_file_names(tmp_path: Path, suffix: str) -> None:
    here = Path(__file__)
    with MLPerfLogger(tmp_path / "log.txt", root_dir=f"{here.parent.parent}{suffix}") as log:
        log.event("k", 1)
    (record,) = read_log(tmp_path / "log.txt")
    assert record["metadata"]["file"] == f"{here.parent.name}/{here.name}"
