"""tools/slurm/train.sbatch on a real SLURM cluster: munge, slurmctld and two slurmd on this
machine (tools/slurm/local_cluster.py), jobs submitted with sbatch from the repository root as a
user submits them. Skipped, saying why, where slurm-wlm and munge are not installed or the
tests do not run as root.

Every job trains the same small command (two ranks in all unless said otherwise, gloo); its
weights are compared with a direct torchrun of that command, run once per rank count for the
module. The requeues share one job: requeued before its first checkpoint, after one, and after
its end."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "slurm" / "train.sbatch"
_spec = importlib.util.spec_from_file_location(
    "local_cluster", ROOT / "tools" / "slurm" / "local_cluster.py"
)
local_cluster = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = local_cluster  # its dataclass looks its module up there
_spec.loader.exec_module(local_cluster)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(local_cluster.missing() is not None, reason=str(local_cluster.missing())),
]

COMMAND = [
    *("--users", "160", "--steps", "6", "--evals", "1", "--workers", "0"),
    *("--target-auc", "0.99", "--set", "train.batch_size=16"),
    *("--checkpoint-every", "2", "--resume", "auto"),
]
"""Checkpoints at steps 2 and 4; a global batch that every time window holds at 4 ranks."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        # The test's environment (synced) instead of `uv run`, and the ranks' threads as the
        # script sets them.
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "UV_RUN": "env",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def run_args(folder: Path) -> list[str]:
    return [*COMMAND, "--out", str(folder), "--checkpoint-dir", str(folder / "checkpoints")]


def weights(folder: Path) -> str:
    return json.loads((folder / "result.json").read_text())["weights_sha256"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm") / "cluster"
    try:
        yield local_cluster.up(folder, cpus=4)
    finally:
        local_cluster.down(folder)


@pytest.fixture(scope="module")
def torchrun_weights(tmp_path_factory):
    """weights_sha256 of the command under a plain torchrun at `ranks` ranks (run once)."""
    found: dict[int, str] = {}

    def at(ranks: int) -> str:
        if ranks not in found:
            out = tmp_path_factory.mktemp(f"torchrun{ranks}") / "run"
            result = subprocess.run(
                [
                    *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"),
                    *("--nproc-per-node", str(ranks), "--rdzv-backend", "c10d"),
                    *("--rdzv-endpoint", f"127.0.0.1:{free_port()}"),
                    *(str(ROOT / "tools" / "train.py"), *run_args(out)),
                ],
                cwd=ROOT,
                env=environment(),
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert result.returncode == 0, result.stderr[-3000:]
            found[ranks] = weights(out)
        return found[ranks]

    return at


class Job:
    def __init__(self, cluster, job_id: str, log: Path) -> None:
        self.cluster, self.id, self.log = cluster, job_id, log

    def fields(self) -> dict[str, str]:
        shown = self.cluster.run("scontrol", "-o", "show", "job", self.id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", shown))

    def state(self) -> str:
        return self.fields()["JobState"]

    def wait(self, *states: str, timeout: float = 600) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fields = self.fields()
            if fields["JobState"] in states:
                return fields
            time.sleep(0.5)
        raise AssertionError(f"job {self.id} not {states} in {timeout} s: {self.fields()}")

    def requeue(self) -> None:
        self.cluster.run("scontrol", "requeue", self.id)
        # A requeued job waits for its start time, two minutes on; once SLURM has it back in
        # the queue (pending, after its steps ended), it may start now.
        self.wait("PENDING", timeout=60)
        self.cluster.run("scontrol", "update", f"JobId={self.id}", "StartTime=now")


def submit(
    cluster, tmp_path: Path, out: Path, *sbatch: str, args: tuple[str, ...] = (), **env: str
) -> Job:
    log = tmp_path / "job.log"
    result = subprocess.run(
        ["sbatch", "--parsable", f"--output={log}", *sbatch, str(SCRIPT), *run_args(out), *args],
        cwd=ROOT,
        env={
            **environment(RDZV_PORT=str(free_port()), **{"GPUS_PER_NODE": "2", **env}),
            **cluster.env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return Job(cluster, result.stdout.strip().split(";")[0], log)


def wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.1)


def test_sbatch_on_two_nodes_trains_what_torchrun_does(cluster, torchrun_weights, tmp_path):
    out = tmp_path / "run"
    job = submit(cluster, tmp_path, out, "--nodes=2", GPUS_PER_NODE="2")
    fields = job.wait("COMPLETED", "FAILED", "CANCELLED")
    log = job.log.read_text()
    assert fields["JobState"] == "COMPLETED", log[-3000:]
    assert "attempt 1, 2 node(s) x 2 rank(s)" in log
    assert weights(out) == torchrun_weights(4)


def test_requeues_before_a_checkpoint_after_one_and_after_the_end_end_well(
    cluster, torchrun_weights, tmp_path
):
    """One node, two ranks: the first attempt is requeued before its first checkpoint (the
    second starts again), the second after its step-2 checkpoint (the third resumes
    crash-exactly: the weights of torchrun's uninterrupted run, one run_start in the MLPerf
    log), and the finished job once more (the same command finds the run done)."""
    out = tmp_path / "run"
    job = submit(cluster, tmp_path, out)
    wait_for(lambda: (out / "config.json").is_file(), "run folder")
    assert not any((out / "checkpoints").glob("step-*"))
    job.requeue()
    wait_for(lambda: "attempt 2," in job.log.read_text(), "second attempt")
    wait_for(lambda: (out / "checkpoints" / "step-2").is_dir(), "step-2 checkpoint")
    job.requeue()
    fields = job.wait("COMPLETED", "FAILED", "CANCELLED")
    log = job.log.read_text()
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "2", log[-3000:]
    # Every attempt in the one log (--open-mode=append), the third resumed.
    assert "attempt 1, 1 node(s) x 2 rank(s)" in log and "attempt 3," in log
    assert re.search(r"resum\w+ from .*step-[24]", log), log[-3000:]
    assert (out / "mlperf.log").read_text().count('"key": "run_start"') == 1
    assert weights(out) == torchrun_weights(2)
    finished = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    job.requeue()
    fields = job.wait("COMPLETED", "FAILED", "CANCELLED")
    log = job.log.read_text()
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "3", log[-3000:]
    assert "finished" in log and "nothing to do" in log
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == finished


def test_a_killed_rank_fails_the_job_in_bounded_time(cluster, tmp_path):
    out = tmp_path / "run"
    job = submit(cluster, tmp_path, out, "--nodes=2", GPUS_PER_NODE="1")
    wait_for(lambda: (out / "checkpoints" / "step-2").is_dir(), "step-2 checkpoint")
    rank = rank_pid(job.id, 1)
    os.kill(rank, signal.SIGKILL)
    killed = time.monotonic()
    fields = job.wait("FAILED", "COMPLETED", "CANCELLED", timeout=120)
    took = time.monotonic() - killed
    assert fields["JobState"] == "FAILED", job.log.read_text()[-3000:]
    assert took < 60, f"the job took {took:.0f} s to fail"
    assert fields["ExitCode"] == "1:0"  # the run failed (torchrun and srun say 1 for any)
    assert '"status": "aborted"' in (out / "mlperf.log").read_text()


def rank_pid(job_id: str, rank: int) -> int:
    """The pid of the rank `rank` of SLURM job `job_id`, a python process of this machine."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            f"SLURM_JOB_ID={job_id}".encode() in environ
            and f"RANK={rank}".encode() in environ
            and b"train.py" in cmdline
            and b"torch.distributed.run" not in cmdline
            and b"torchrun" not in cmdline
        ):
            return int(entry.name)
    raise AssertionError(f"no rank {rank} of job {job_id}")


def test_a_refusal_is_the_jobs_exit_status(cluster, tmp_path):
    """torchrun and srun would say 1; the script finds the ranks' 2 in torchrun's report."""
    out = tmp_path / "run"
    job = submit(cluster, tmp_path, out, "--nodes=2", args=("--target-auc", "2"), GPUS_PER_NODE="1")
    fields = job.wait("FAILED", "COMPLETED", "CANCELLED")
    log = job.log.read_text()
    assert fields["ExitCode"] == "2:0", log[-3000:]
    assert "ends with status 2" in log and "--target-auc" in log
    assert not out.exists()
