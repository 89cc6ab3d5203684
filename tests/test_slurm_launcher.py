"""tools/slurm/train.sbatch, run outside SLURM with stand-ins for scontrol and srun: a one-node
"allocation" whose srun runs the task here, so the torchrun rendezvous the script sets up
(c10d on the first node, the job id as rendezvous id) really trains two gloo ranks."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mlperf_compliance import check_log

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "slurm" / "train.sbatch"


def fake_slurm(bin_dir: Path) -> None:
    bin_dir.mkdir()
    tools = {
        # `scontrol show hostnames LIST`: one host per line.
        "scontrol": '[ "$1 $2" = "show hostnames" ] && echo 127.0.0.1\n',
        # srun with one task on one node: drop srun's own options, run the rest here.
        "srun": 'while [ "${1#--}" != "$1" ]; do echo "srun $1" >&2; shift; done\nexec "$@"\n',
    }
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\nset -eu\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def slurm_env(tmp_path: Path, **extra: str) -> dict:
    fake_slurm(tmp_path / "bin")
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{venv_bin}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "node[1]",
        "UV_RUN": "env",  # torchrun from the test's environment instead of `uv run`
        **extra,
    }


def test_outside_slurm_it_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "not inside a SLURM job" in result.stderr


def test_bad_settings_are_named(tmp_path):
    env = slurm_env(tmp_path, GPUS_PER_NODE="two")
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "GPUS_PER_NODE must be a positive integer, got 'two'" in result.stderr


@pytest.mark.parametrize(
    ("srun_says", "srun_status", "job_status"),
    [
        ("exitcode  : -9 (pid: 4103)", 137, 1),  # a rank killed, srun killed the other node
        ("exitcode  : 1 (pid: 4103)", 1, 1),
        ("exitcode  : 2 (pid: 4103)", 1, 2),  # a refusal
        ("exitcode  : 143 (pid: 4103)", 137, 143),  # interrupted
    ],
)
def test_the_job_exits_with_what_the_run_said(srun_says, srun_status, job_status, tmp_path):
    env = slurm_env(tmp_path)
    (tmp_path / "bin" / "srun").write_text(
        f"#!/usr/bin/env bash\necho '{srun_says}' >&2\nexit {srun_status}\n"
    )
    result = subprocess.run(
        ["bash", str(SCRIPT), "--steps", "1"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == job_status, result.stderr
    assert f"ends with status {job_status}" in result.stderr


@pytest.mark.slow
def test_one_node_two_ranks_train_through_the_rendezvous(tmp_path):
    out = tmp_path / "run"
    env = slurm_env(tmp_path, GPUS_PER_NODE="2", RDZV_PORT=str(_free_port()))
    argv = ["--users", "80", "--steps", "4", "--evals", "1", "--workers", "0", "--out", str(out)]
    result = subprocess.run(
        ["bash", str(SCRIPT), *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    assert "1 node(s) x 2 rank(s), rendezvous 127.0.0.1:" in result.stderr
    assert "srun --kill-on-bad-exit=1" in result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["train_samples"] == 4 * 2 * 256
    assert check_log(out / "mlperf.log", ruleset="dev").passed


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
