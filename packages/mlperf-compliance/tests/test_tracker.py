"""RunTracker: order of records, convergence, abort on exception/signal, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mlperf_compliance import (
    DLRMV4_TRAIN_SAMPLES,
    MLPerfLogger,
    RunInterrupted,
    RunTracker,
    TrackerStateError,
    check_log,
    dlrmv4_run_start_keys,
    eval_interval_samples,
    eval_schedule,
    first_eval_samples,
    read_log,
)

CLOSED_GBS = 8192


def _keys(path: Path) -> list[str]:
    return [r["key"] for r in read_log(path)]


@pytest.fixture(name="start")
def start_fixture(closed_values):
    """start(tracker): the records of a closed run up to run_start."""

    def start(tracker: RunTracker) -> None:
        log = tracker.logger
        log.cache_clear(True)
        tracker.init_start()
        log.submission_info(org="Example Org", platform="8xExampleGPU", division="closed")
        log.hyperparameters(dlrmv4_run_start_keys(closed_values))
        tracker.init_stop()
        tracker.run_start()

    return start


def _block_and_eval(tracker: RunTracker, at: int, auc: float) -> bool:
    tracker.block_start(tracker.samples_count)
    tracker.block_stop(at)
    return tracker.eval(auc, at)


# ---------------------------------------------------------------- schedule


def test_eval_schedule_closed_values() -> None:
    schedule = eval_schedule(DLRMV4_TRAIN_SAMPLES, CLOSED_GBS, 0.001)
    assert schedule[0] == first_eval_samples(CLOSED_GBS) == 57_344_000
    assert schedule[1] - schedule[0] == eval_interval_samples(CLOSED_GBS) == 2_293_760
    assert schedule[-1] <= DLRMV4_TRAIN_SAMPLES < schedule[-1] + 2_293_760


def test_eval_schedule_small_run() -> None:
    # 1000 steps of 128, 4 evals: every 250 steps, first at the first grid point.
    assert eval_schedule(128_000, 128, 0.25) == [32_000, 64_000, 96_000, 128_000]
    # 1001 steps: the grid rounds the interval up to whole steps (251), three evals fit.
    assert eval_schedule(1001 * 128, 128, 0.25) == [251 * 128 * k for k in (1, 2, 3)]
    assert eval_schedule(100, 128, 0.5) == []  # shorter than one step: no eval


# ---------------------------------------------------------------- transitions


def test_happy_path_and_convergence(tmp_path: Path, start) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        assert tracker.state == "new"
        start(tracker)
        assert tracker.state == "running"
        first = first_eval_samples(CLOSED_GBS)
        assert _block_and_eval(tracker, first, 0.70) is False
        assert not tracker.converged
        assert _block_and_eval(tracker, first + 2_293_760, 0.751) is True
        assert tracker.converged and tracker.best_accuracy == 0.751 and tracker.num_evals == 2
        assert tracker.run_stop() == "success"  # the status follows the convergence decision
        assert tracker.stopped and tracker.status == "success"
    keys = _keys(tmp_path / "run.log")
    assert keys.count("run_start") == keys.count("run_stop") == 1
    assert keys[-4:] == ["eval_start", "eval_accuracy", "eval_stop", "run_stop"]
    stop = read_log(tmp_path / "run.log")[-1]
    assert stop["metadata"]["status"] == "success"
    assert stop["metadata"]["samples_count"] == first + 2_293_760
    assert stop["metadata"]["file"].endswith("test_tracker.py")  # the caller, not tracker.py


def test_not_converged_stops_aborted(tmp_path: Path, start) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log, target_accuracy=0.8)
        start(tracker)
        assert _block_and_eval(tracker, 1000, 0.79) is False
        with pytest.raises(ValueError, match=r"no eval reached target_accuracy 0\.8"):
            tracker.run_stop("success")
        assert tracker.run_stop() == "aborted"


def test_eval_start_is_logged_when_the_evaluation_begins(tmp_path: Path, start) -> None:
    """eval_start, then the evaluation, then eval_accuracy and eval_stop: the records bracket
    the evaluation's time, as the reference's do."""
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log, target_accuracy=0.8)
        start(tracker)
        tracker.block_start(0)
        tracker.block_stop(1000)
        tracker.eval_start(1000, epoch_num=0, time_ms=5_000)
        assert tracker.state == "evaluating"
        with pytest.raises(TrackerStateError, match=r"block_start.*evaluating"):
            tracker.block_start(1000)
        with pytest.raises(ValueError, match="samples_count 2000 is not the 1000 of eval_start"):
            tracker.eval(0.5, 2000)
        assert tracker.eval(0.81, 1000, epoch_num=0, time_ms=9_000) is True
        assert tracker.state == "running" and tracker.num_evals == 1
        assert tracker.run_stop() == "success"
    records = read_log(tmp_path / "run.log")
    brackets = ("eval_start", "eval_accuracy", "eval_stop")
    evals = [(r["key"], r["time_ms"]) for r in records if r["key"] in brackets]
    assert evals == [("eval_start", 5_000), ("eval_accuracy", 9_000), ("eval_stop", 9_000)]


def test_a_run_that_dies_in_an_evaluation_stops_aborted(tmp_path: Path, start) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        start(tracker)
        tracker.eval_start(0)
        with pytest.raises(TrackerStateError, match=r"state_dict.*evaluating"):
            tracker.state_dict()
        assert tracker.abort() is True
    assert _keys(tmp_path / "run.log")[-2:] == ["eval_start", "run_stop"]


@pytest.mark.parametrize(
    ("steps", "call", "state"),
    [
        ([], "init_stop()", "new"),
        ([], "run_start()", "new"),
        ([], "run_stop()", "new"),
        (["init_start"], "run_start()", "initializing"),
        (["init_start", "init_stop"], "block_start(0)", "initialized"),
        (["init_start", "init_stop", "run_start"], "run_start()", "running"),
        (["init_start", "init_stop", "run_start"], "block_stop(0)", "running"),
        (["init_start", "init_stop", "run_start", "block"], "eval(samples_count=0)", "in_block"),
        (["init_start", "init_stop", "run_start", "block"], "block_start(0)", "in_block"),
        (["init_start", "init_stop", "run_start", "stop"], "init_start()", "stopped"),
        (["init_start", "init_stop", "run_start", "stop"], "run_stop()", "stopped"),
    ],
)
def test_illegal_transition_names_state_and_call(
    tmp_path: Path, steps: list[str], call: str, state: str
) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        for step in steps:
            if step == "block":
                tracker.block_start(0)
            elif step == "stop":
                tracker.run_stop("aborted")
            else:
                getattr(tracker, step)()
        before = len(read_log(tmp_path / "run.log"))
        name = call.split("(")[0]
        args = {"block_start": (0,), "block_stop": (0,), "eval": (0.5, 0)}.get(name, ())
        with pytest.raises(TrackerStateError) as err:
            getattr(tracker, name)(*args)
        assert call in str(err.value) and f"state {state!r}" in str(err.value)
        assert tracker.state == state
        assert len(read_log(tmp_path / "run.log")) == before  # nothing written


def test_bad_values_rejected(tmp_path: Path, start) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        start(tracker)
        tracker.block_start(100)
        with pytest.raises(ValueError, match="below 100"):
            tracker.block_stop(99)
        tracker.block_stop(200)
        for bad in (float("nan"), 1.5, -0.1):
            with pytest.raises(ValueError, match="accuracy"):
                tracker.eval(bad, 200)
        assert tracker.num_evals == 0
    with pytest.raises(ValueError, match="target_accuracy"):
        RunTracker(MLPerfLogger(tmp_path / "x.log", enabled=False), target_accuracy=75)


# ---------------------------------------------------------------- guard


def test_guard_aborts_on_exception_once(tmp_path: Path, start) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        with pytest.raises(KeyError), tracker.guard():
            start(tracker)
            tracker.block_start(0)
            assert signal.getsignal(signal.SIGTERM) is not before
            raise KeyError("boom")
        assert signal.getsignal(signal.SIGTERM) is before  # restored
        assert tracker.status == "aborted"
    records = read_log(tmp_path / "run.log")
    assert [r["key"] for r in records].count("run_stop") == 1
    assert records[-1]["metadata"]["status"] == "aborted"
    assert records[-1]["metadata"]["file"].endswith("test_tracker.py")


def test_guard_no_second_run_stop(tmp_path: Path, start) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        # The tracker itself is a guard with the default signals.
        with pytest.raises(RuntimeError, match="after"), tracker:
            start(tracker)
            tracker.run_stop("aborted")
            raise RuntimeError("after run_stop")
        with tracker.guard():  # a normal exit writes nothing
            pass
    assert _keys(tmp_path / "run.log").count("run_stop") == 1


def test_guard_turns_signal_into_run_interrupted(tmp_path: Path, start) -> None:
    with MLPerfLogger(tmp_path / "run.log") as log:
        tracker = RunTracker(log)
        with pytest.raises(RunInterrupted) as err, tracker.guard(signals=(signal.SIGUSR1,)):
            start(tracker)
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(5)  # the handler raises before this ends
        assert err.value.code == 128 + signal.SIGUSR1 and "SIGUSR1" in str(err.value)
    assert read_log(tmp_path / "run.log")[-1]["metadata"]["status"] == "aborted"


_SIGTERM_CHILD = textwrap.dedent(
    """
    import sys, time
    from mlperf_compliance import MLPerfLogger, RunTracker
    log = MLPerfLogger(sys.argv[1])
    tracker = RunTracker(log)
    with tracker.guard():
        tracker.init_start(); tracker.init_stop(); tracker.run_start()
        tracker.block_start(0)
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    """
)


def test_sigterm_mid_run_ends_log_with_aborted(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    records = read_log(path)
    assert [r["key"] for r in records].count("run_stop") == 1
    assert records[-1]["key"] == "run_stop"
    assert records[-1]["metadata"]["status"] == "aborted"


# ---------------------------------------------------------------- resume


def test_crash_and_resume_passes_closed_checker(tmp_path: Path, start) -> None:
    path = tmp_path / "resumed.log"
    first = first_eval_samples(CLOSED_GBS)
    interval = eval_interval_samples(CLOSED_GBS)
    # First process: two evals, a checkpoint after the second, then it dies (no run_stop).
    log = MLPerfLogger(path)
    tracker = RunTracker(log)
    start(tracker)
    _block_and_eval(tracker, first, 0.712)
    _block_and_eval(tracker, first + interval, 0.7431)
    checkpoint = tracker.state_dict()
    log.close()

    # Second process: appends to the same log and continues the same run.
    with MLPerfLogger(path, resume=True) as log:
        resumed = RunTracker(log)
        resumed.load_state_dict(checkpoint)
        assert resumed.state == "running" and resumed.samples_count == first + interval
        with pytest.raises(TrackerStateError, match="'running'"):
            resumed.run_start()
        assert _block_and_eval(resumed, first + 2 * interval, 0.7504)
        resumed.run_stop()
    keys = _keys(path)
    assert keys.count("init_start") == keys.count("run_start") == keys.count("run_stop") == 1
    result = check_log(path)
    assert result.passed, result.output


def test_resume_needs_appending_logger(tmp_path: Path) -> None:
    with MLPerfLogger(tmp_path / "a.log") as log:
        tracker = RunTracker(log)
        tracker.init_start()
        tracker.init_stop()
        tracker.run_start()
        tracker.block_start(10)
        saved = tracker.state_dict()
    with MLPerfLogger(tmp_path / "a.log", resume=True) as log:
        resumed = RunTracker(log)
        resumed.load_state_dict(saved)
        assert resumed.in_block  # resumes inside the block: no block_start
        resumed.block_stop(20)
    with MLPerfLogger(tmp_path / "b.log") as log:
        with pytest.raises(ValueError, match="resume=True"):
            RunTracker(log).load_state_dict(saved)
        with pytest.raises(ValueError, match="targets accuracy"):
            RunTracker(log, target_accuracy=0.5).load_state_dict(saved | {"state": "new"})
        done = saved | {"state": "stopped"}
        with pytest.raises(TrackerStateError, match="already logged run_stop"):
            RunTracker(log).load_state_dict(done)
