"""A resume at four ranks ends bit-identical to the run that was never stopped.

At two ranks every element of an all-reduce is a sum of two terms, the same in any order; from
three on, the order counts, and the order a ring all-reduce sums an element in depends on where
it lies in its gradient bucket. DistributedDataParallel would rebuild its buckets after a
process's first backward, so a resumed process would reduce its first step in another layout
than the uninterrupted run did (hstu_model.sharding.FixedGradientBuckets). Four gloo ranks
under torchrun, SIGTERM to torchrun after a checkpoint, the same command again."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RANKS = 4
COMMAND = [
    *("--users", "160", "--steps", "6", "--evals", "1", "--workers", "0"),
    *("--target-auc", "0.99", "--set", "train.batch_size=32"),
    *("--checkpoint-every", "2", "--resume", "auto"),
]


def torchrun(out: Path) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"),
        *("--nproc-per-node", str(RANKS), "--rdzv-backend", "c10d"),
        *("--rdzv-endpoint", f"127.0.0.1:{port}", str(ROOT / "tools" / "train.py")),
        *COMMAND,
        *("--out", str(out), "--checkpoint-dir", str(out / "checkpoints")),
    ]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def finish(out: Path) -> dict:
    result = subprocess.run(
        torchrun(out), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_four_ranks_resume_to_the_weights_of_the_uninterrupted_run(tmp_path):
    uninterrupted = finish(tmp_path / "uninterrupted")
    out = tmp_path / "stopped"
    stopped = subprocess.Popen(
        torchrun(out),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while not (out / "checkpoints" / "step-2").is_dir():
            assert stopped.poll() is None and time.monotonic() < deadline, "no step-2 checkpoint"
            time.sleep(0.05)
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(timeout=120) != 0
    finally:
        stopped.kill()
        stopped.wait()
    resumed = finish(out)
    assert resumed["resumed_from_step"] in (2, 4), resumed
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
