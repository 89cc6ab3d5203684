"""A signal to ``storage-workloads`` ends what it started: DLIO (or mpirun and its ranks)
goes with it, in bounded time, with one line and the status ``128 + signal``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_dlio_with_the_run(tmp_path: Path, signum: int) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    pids = tmp_path / "pids"
    # Stands in for DLIO: it starts a worker of its own and waits, as mpirun waits on ranks.
    for name in ("python", "dlio_benchmark"):
        (venv / name).write_text(f"#!/bin/sh\nsleep 300 &\necho $! >> {pids}\nwait\n")
        (venv / name).chmod(0o755)
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    for i in range(4):
        (data / f"img_{i}_of_4.npz").write_bytes(b"\0" * 16)
    command = [
        sys.executable, "-m", "storage_workloads", "run", "dlrm", "--accelerator", "h100",
        "--data-dir", str(data.parent), "--run-dir", str(tmp_path / "run"),
        "--dlio-venv", str(venv.parent), "--processes", "1", "--no-mpi",
        "--param", "dataset.num_files_train=4",
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
        time.sleep(0.05)
    worker = int(pids.read_text().split()[0])
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum
    assert err.splitlines()[-1] == f"storage-workloads: stopped by {signal.Signals(signum).name}"
    deadline = time.monotonic() + 10
    while _alive(worker):
        assert time.monotonic() < deadline, "DLIO's worker outlived the run"
        time.sleep(0.05)
