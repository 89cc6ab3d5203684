"""Object-storage runs over two client hosts on the loopback through Open MPI's own mpirun
(``--hosts localhost:1,127.0.0.1:1``), against a moto S3 server: the agents' frames go through
mpirun's forwarded stdin and stdout. Open MPI's remote launcher (ssh) is replaced by a shim that
records any call and fails (conftest's ``no_remote_launch``), so the loopback names launch
locally and any other host fails as an unreachable one would. Skipped (saying why) without mpirun (Debian: openmpi-bin)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from storage_workloads.cli import main

if shutil.which("mpirun") is None:
    pytest.skip("mpirun not found (Debian: openmpi-bin)", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open MPI's own traffic kept on the loopback interface, as in the DLIO loopback run."""
    monkeypatch.setenv("OMPI_MCA_btl_tcp_if_include", "lo")
    monkeypatch.setenv("OMPI_MCA_oob_tcp_if_include", "lo")


SMALL = ["resnet50", "--objects", "64", "--size-mean", "6000", "--size-stdev", "4000"]
SMALL += ["--size-min", "1KiB", "--size-max", "24KiB", "--concurrency", "2", "--quiet"]


def test_run_over_two_loopback_hosts(endpoint: str, tmp_path: Path, no_remote_launch: Path) -> None:
    out = tmp_path / "out"
    argv = ["object", "run", *SMALL, "--ops", "100", "--endpoint", endpoint, "--bucket", "mpi"]
    assert main([*argv, "--out", str(out), "--hosts", "localhost:1,127.0.0.1:1"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is True
    put, got = results["phases"]
    assert (put["totals"]["ops"], got["totals"]["ops"]) == (64, 100)
    for host in results["hosts"]:
        assert [p["status"] for p in host["phases"]] == ["done", "done"]
        assert [p["totals"]["ops"] for p in host["phases"]] == [32, 50]
    assert not no_remote_launch.exists()  # nothing was launched through ssh


def test_an_unreachable_host_is_named(
    endpoint: str, tmp_path: Path, no_remote_launch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["object", "prepare", *SMALL, "--endpoint", endpoint, "--bucket", "mpi-down"]
    assert main([*argv, "--out", str(out), "--hosts", "localhost,node-gone.invalid"]) == 1
    err = capsys.readouterr().err
    assert "node-gone.invalid (prepare, failed): mpirun exit status" in err
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is False and results["phases"] == []
    assert [h["phases"][0]["status"] for h in results["hosts"]] == ["stopped", "failed"]
