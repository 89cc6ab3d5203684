"""Fixtures shared by the tests of DLIO runs that need no DLIO, and the local S3 endpoint of
the object-storage tests (moto's server mode on the loopback)."""

from __future__ import annotations

import json
import logging
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads.dlio import dump_yaml, runs
from storage_workloads.dlio_ext import CHECKPOINT_TIMINGS
from storage_workloads.dliorun import DLIO_VENV_ENV
from storage_workloads.layout import HYDRA_SUBDIR


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DLIO environment as far as finding it goes (``dlio_benchmark`` and ``python`` files),
    and an ``mpirun`` on PATH (every program is found as ``/opt/bin/<name>``)."""
    monkeypatch.delenv(DLIO_VENV_ENV, raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/bin/{name}")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("dlio_benchmark", "python"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
    return tmp_path / "venv"


@pytest.fixture
def npz_dataset() -> Callable[[Path, int], None]:
    """Writes ``n`` small ``.npz`` files into ``folder/train``, as a generated dataset."""

    def write(folder: Path, n: int) -> None:
        (folder / "train").mkdir(parents=True)
        for i in range(n):
            (folder / "train" / f"img_{i}_of_{n}.npz").write_bytes(b"\0" * 16)

    return write


FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"


def _fake_execute(launch: Any, *, run_dir: Path, timeout_s: float | None, log: Any) -> float:
    """Stand-in for the DLIO launch (``storage_workloads.dlio.runs._execute``): writes the
    workload YAML as the real one does, leaves Hydra's record as DLIO does (the config it
    composed, the task overrides of the command line, the workload it chose), a recorded
    two-rank run as DLIO's output and, for checkpointing, the mechanism's timings (2 MB a
    checkpoint, 10 ms a write, 5 ms a read)."""
    (run_dir / "configs" / "workload").mkdir(parents=True)
    (run_dir / "configs" / "workload" / f"{launch.name}.yaml").write_text(dump_yaml(launch.config))
    record = run_dir / HYDRA_SUBDIR
    record.mkdir()
    (record / "config.yaml").write_text(dump_yaml({"workload": launch.expected}))
    task = [a for a in launch.cmd if a.startswith(("workload=", "++workload."))]
    (record / "overrides.yaml").write_text(yaml.safe_dump(task))
    choices = {"hydra": {"runtime": {"choices": {"workload": launch.name}}}}
    (record / "hydra.yaml").write_text(yaml.safe_dump(choices))
    section = launch.expected.get("checkpoint", {})
    workflow = launch.expected.get("workflow", {})
    if workflow.get("checkpoint") and not workflow.get("train", True):  # the fork's checkpointing
        _fork_checkpointing(run_dir, launch.cmd, section)
        return 1.5
    shutil.copytree(FIXTURE, run_dir, dirs_exist_ok=True)
    if "num_checkpoints_write" in section:
        (run_dir / CHECKPOINT_TIMINGS).write_text(
            json.dumps(
                {
                    "bytes_per_checkpoint": 2_000_000,
                    "writes_s": [0.01] * section["num_checkpoints_write"],
                    "reads_s": [0.005] * section["num_checkpoints_read"],
                    "model_bytes_per_rank": section["model_bytes_per_rank"],
                    "optimizer_bytes_per_rank": section["optimizer_bytes_per_rank"],
                    "fsync": True,
                }
            )
        )
    return 1.5


def _fork_checkpointing(run_dir: Path, cmd: list[str], section: dict[str, Any]) -> None:
    """What the MLPerf DLIO fork leaves after a checkpointing run: ``summary.json`` with its
    checkpoint metrics (0.5 GiB a checkpoint, written at 2 GiB/s, read at 4 GiB/s), rank 0's
    ``0_per_epoch_stats.json`` with each save and load, and the checkpoint files."""
    processes = int(cmd[cmd.index("-n") + 1]) if "-n" in cmd else 1
    writes, reads = section["num_checkpoints_write"], section["num_checkpoints_read"]
    epoch: dict[str, Any] = {}
    for kind, count, seconds in (("save", writes, 0.25), ("load", reads, 0.125)):
        for i in range(1, count + 1):
            epoch[f"{kind}_ckpt{i}"] = {"duration": seconds, "throughput": 0.5 / seconds}
    (run_dir / "0_per_epoch_stats.json").write_text(json.dumps({"1": epoch}))
    metric = {
        "save_checkpoint_io_mean_GB_per_second": 2.0,
        "save_checkpoint_duration_mean_seconds": 0.25,
        "load_checkpoint_io_mean_GB_per_second": 4.0,
        "load_checkpoint_duration_mean_seconds": 0.125,
        "checkpoint_size_GB": 0.5,
    }
    summary = {"num_accelerators": processes, "num_hosts": 1, "metric": metric, "epochs": 0}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    folder = Path(section["checkpoint_folder"])
    for i in range(1, writes + 1):
        step = folder / f"global_epoch1_step{i}"
        step.mkdir(parents=True)
        (step / "model_states-0.pt").write_bytes(b"\0" * 8)


@pytest.fixture
def fake_dlio(monkeypatch: pytest.MonkeyPatch) -> None:
    """DLIO's launch replaced by :func:`_fake_execute`."""
    monkeypatch.setattr(runs, "_execute", _fake_execute)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    return _free_port()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (a free port) for the test module, with test credentials
    and no AWS configuration files in the environment; its URL."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        port = _free_port()
        from moto.server import ThreadedMotoServer  # the dev group's; only these tests need it

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()


@pytest.fixture
def no_remote_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Open MPI's remote launcher (ssh) replaced by a shim that records any call and fails:
    Open MPI must take the loopback names for this machine and launch nothing remotely (any
    other host fails as an unreachable one).
    Returns the file the shim would write."""
    calls = tmp_path / "rsh-calls"
    shim = tmp_path / "rsh-shim"
    shim.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    shim.chmod(0o755)
    monkeypatch.setenv("OMPI_MCA_plm_rsh_agent", str(shim))
    return calls
