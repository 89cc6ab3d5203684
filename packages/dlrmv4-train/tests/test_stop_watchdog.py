"""`RunSignals.watched`: a stop signal that the main thread cannot answer ends the process with
the run's abort record and its status; one it answers, or one a forked child received, does
not. The blocked main thread is the real one: a gloo all-reduce whose peer is alive but never
joins, which Python's signal handlers cannot interrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GRACE = 1.0

_RANK = r"""
import os, signal, sys, time
from pathlib import Path

import torch
import torch.distributed as dist

from dlrmv4_train.run import RunSignals

mode, rank, store, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
if rank == 1:  # alive, sockets open, never in the collective
    while True:
        time.sleep(1)
signals = RunSignals(grace_seconds=float(sys.argv[5]))
for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, signals.handle)
signals.abort_record = lambda: marker.write_text("run_stop aborted")
with signals.watched(lambda error: f"rank 0 of 2: {error}"):
    if mode == "fork":  # a child forked inside the watch gets the signal, not this process
        child = os.fork()
        if child == 0:
            os.close(1), os.close(2)  # the test reads this process's pipes to their end
            time.sleep(60)
            os._exit(0)
        print(child, flush=True)
    print("waiting", flush=True)
    if mode == "blocked":
        dist.all_reduce(torch.ones(4))
    else:
        deadline = time.monotonic() + 3 * float(sys.argv[5]) + 3
        while time.monotonic() < deadline:
            time.sleep(0.2)  # a signal wakes it at once to run the handler
if mode == "fork":
    os.kill(child, signal.SIGKILL)
print("returned", flush=True)
"""


def _start(mode: str, tmp_path: Path) -> tuple[subprocess.Popen, subprocess.Popen, Path]:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    marker = tmp_path / "abort_record"
    args = [str(tmp_path / "store"), str(marker), str(GRACE)]

    def rank(index: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(script), mode, str(index), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return rank(0), rank(1), marker


@pytest.fixture
def ranks(request, tmp_path):
    started = _start(request.param, tmp_path)
    yield started
    for proc in started[:2]:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _until_waiting(rank0: subprocess.Popen) -> list[str]:
    lines = []
    while (line := rank0.stdout.readline()) and line.strip() != "waiting":
        lines.append(line.strip())
    assert line, f"rank 0 ended before its wait:\n{rank0.stderr.read()}"
    # Inside the all-reduce (or the sleep loop): the main thread then stays asleep.
    task = Path(f"/proc/{rank0.pid}/task/{rank0.pid}/stat")
    asleep_since = given_up = time.monotonic()
    while time.monotonic() - asleep_since < 0.5:
        assert time.monotonic() - given_up < 30, "rank 0's main thread never waited"
        if task.read_text().rsplit(")", 1)[1].split()[0] != "S":
            asleep_since = time.monotonic()
        time.sleep(0.02)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("ranks", ["blocked"], indirect=True)
def test_a_signal_the_blocked_main_thread_cannot_answer_ends_the_process(ranks):
    rank0, _, marker = ranks
    _until_waiting(rank0)
    began = time.monotonic()
    rank0.send_signal(signal.SIGTERM)
    rank0.wait(timeout=GRACE + 30)
    took = time.monotonic() - began
    said = rank0.stderr.read()
    assert rank0.returncode == 128 + signal.SIGTERM, said
    assert said.splitlines()[-1].startswith(
        f"rank 0 of 2: run interrupted by SIGTERM; it was not answered within {GRACE:g} s"
    ), said
    assert marker.read_text() == "run_stop aborted"
    assert "returned" not in rank0.stdout.read()
    assert GRACE <= took < GRACE + 20


@pytest.mark.slow
@pytest.mark.parametrize("ranks", ["answered"], indirect=True)
def test_a_signal_the_main_thread_answers_is_left_to_it(ranks):
    rank0, _, marker = ranks
    _until_waiting(rank0)
    rank0.send_signal(signal.SIGINT)
    rank0.wait(timeout=30)
    said = rank0.stderr.read()
    assert rank0.returncode == 128 + signal.SIGINT, said  # RunInterrupted, a SystemExit
    assert "not answered" not in said and not marker.exists(), said


@pytest.mark.slow
@pytest.mark.parametrize("ranks", ["fork"], indirect=True)
def test_a_signal_to_a_forked_child_is_not_the_parents(ranks):
    """The child inherits Python's wakeup fd; without its reset there, the child's SIGTERM
    reaches the parent's watchdog as the parent's own, and the parent ends after the grace."""
    rank0, _, marker = ranks
    (child,) = _until_waiting(rank0)
    os.kill(int(child), signal.SIGTERM)
    rank0.wait(timeout=3 * GRACE + 30)
    said = rank0.stderr.read()
    assert rank0.returncode == 0 and "returned" in rank0.stdout.read(), said
    assert not marker.exists(), said
