"""Object-storage runs over several client hosts: the presets of sai3-bench's 1-, 4- and 8-host
configurations, the command line's refusals, and runs over "hosts" on the loopback against a
moto S3 server.

mpirun is replaced by a stand-in (Open MPI is not installed where these tests run; the
``test_object_hosts_mpi`` tests use the real one where it is): it takes mpirun's options and
runs the agent here, as mpirun would run it on the named host. A host named ``down*`` cannot
be reached (mpirun exits 1 with ssh's message), ``crash*`` loses its agent just after the
phase starts, and ``mute*`` stops answering then (its agent paused, nothing relayed)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from storage_workloads import OBJECT_WORKLOADS
from storage_workloads.cli import main
from storage_workloads.hosts import HostSpec
from storage_workloads.objpresets import OBJECT_PRESETS, object_preset
from storage_workloads.objresults import Recorder, summarize
from storage_workloads.s3 import multihost
from storage_workloads.s3.multihost import FORWARDED_ENV, agent_command
from storage_workloads.s3.protocol import _Part

FAKE_MPIRUN = r"""
import json, os, signal, struct, subprocess, sys, threading, time
args = sys.argv[1:]
with open(os.environ["FAKE_MPIRUN_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\n")
i, host, exported = 0, None, []
while i < len(args) and args[i].startswith("-"):
    if args[i] in ("-n", "--host", "-x"):
        host = args[i + 1].split(":")[0] if args[i] == "--host" else host
        exported += [args[i + 1]] if args[i] == "-x" else []
        i += 2
    elif args[i] == "--mca":
        i += 3
    else:
        i += 1
program = args[i:]
if host.startswith("down"):
    print(f"ssh: connect to host {host} port 22: No route to host", file=sys.stderr)
    sys.exit(1)
if not host.startswith(("crash", "mute")):
    os.execv(program[0], program)
child = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
signal.signal(signal.SIGTERM, lambda *_: (child.kill(), os._exit(143)))
relay = threading.Event()
relay.set()

def frames(src, dst, on_frame=None):
    count = 0
    while True:
        head = src.read(8)
        if len(head) < 8:
            return
        body = src.read(struct.unpack("<Q", head)[0])
        if relay.is_set():
            dst.write(head + body)
            dst.flush()
        count += 1
        if on_frame:
            on_frame(count)

def from_controller(count):
    if count == 2:  # the task, then the first start
        time.sleep(0.3)
        if host.startswith("crash"):
            child.kill()
            print(f"{host}: the agent was killed", file=sys.stderr)
            sys.stderr.flush()
            os._exit(137)
        relay.clear()
        child.send_signal(signal.SIGSTOP)

threading.Thread(
    target=frames, args=(sys.stdin.buffer, child.stdin, from_controller), daemon=True
).start()
frames(child.stdout, sys.stdout.buffer)
"""

SEED = 5
BUCKET = "hosts"
# ResNet50's workload scaled down: 96 objects of 1 to 24 KiB.
SMALL = ["resnet50", "--objects", "96", "--size-mean", "6000", "--size-stdev", "4000"]
SMALL += ["--size-min", "1KiB", "--size-max", "24KiB", "--concurrency", "2", "--seed", str(SEED)]


@pytest.fixture
def fake_mpi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in ``mpirun`` on ``shutil.which``; returns the log of its command lines."""
    mpirun = tmp_path / "fakebin" / "mpirun"
    mpirun.parent.mkdir()
    mpirun.write_text(f"#!{sys.executable}\n{FAKE_MPIRUN}")
    mpirun.chmod(0o755)
    log = tmp_path / "mpirun.log"
    monkeypatch.setenv("FAKE_MPIRUN_LOG", str(log))
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name: str(mpirun) if name == "mpirun" else real_which(name)
    )
    return log


def _launches(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _keys(endpoint: str, bucket: str) -> dict[str, int]:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    listed: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        listed.update({o["Key"]: o["Size"] for o in page.get("Contents", ())})
    return listed


# ---------------------------------------------------------------------------------------------
# The presets


@pytest.mark.parametrize(
    ("model", "per_host", "files_per_dir", "width", "concurrency", "size_mean"),
    [("resnet50", 614_400, 150, 64, 64, 229_376), ("unet3d", 50_176, 64, 28, 32, 7_235_174)],
)
def test_presets_are_the_sai3_configurations(
    model: str, per_host: int, files_per_dir: int, width: int, concurrency: int, size_mean: int
) -> None:
    # sai3-bench's {model}_{1-host,4-hosts,8-hosts}.yaml: count = hosts x the 1-host count,
    # files_per_dir = hosts x the 1-host figure, the same tree, sizes, concurrency and 5 min.
    for hosts in (1, 4, 8):
        suffix = "1host" if hosts == 1 else f"{hosts}hosts"
        full, get_only = (
            OBJECT_PRESETS[f"{model}_{suffix}"],
            OBJECT_PRESETS[f"{model}_{suffix}_get"],
        )
        assert (full.phases, get_only.phases) == (("prepare", "get"), ("get",))
        for preset in (full, get_only):
            w = preset.workload
            assert preset.hosts == hosts and preset.objects_per_host == per_host
            assert w.total_objects == hosts * per_host
            assert (w.width, w.depth, w.files_per_dir) == (width, 2, hosts * files_per_dir)
            assert preset.files_per_dir_per_host == files_per_dir
            assert (w.concurrency, w.duration_s, w.size_mean) == (concurrency, 300.0, size_mean)
            assert w.prefix == f"{model}/" and w.mix == (("get", 100),)
            assert preset.as_dict()["concurrency_per_host"] == concurrency
    assert OBJECT_PRESETS["resnet50_8hosts"].workload.total_objects == 4_915_200
    assert OBJECT_PRESETS["unet3d_4hosts"].workload.total_objects == 200_704
    assert object_preset("ResNet50-4Hosts") is OBJECT_PRESETS["resnet50_4hosts"]
    assert object_preset("resnet50") is None


def test_object_list_lists_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["object", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert list(listed) == [*OBJECT_WORKLOADS, *OBJECT_PRESETS]
    entry = listed["unet3d_8hosts_get"]
    assert (entry["hosts"], entry["phases"], entry["objects_per_host"]) == (8, ["get"], 50_176)
    assert entry["workload"]["total_objects"] == 401_408


@pytest.mark.slow
def test_a_preset_runs_its_phases(endpoint: str, tmp_path: Path) -> None:
    """The 1-host presets on this host: the prepare+get form runs both phases, its get-only
    form only the get phase over what the first prepared; both report sai3-bench's buckets."""
    common = ["--objects", "24", "--ops", "20", "--concurrency", "2", "--quiet"]
    common += ["--endpoint", endpoint, "--bucket", f"{BUCKET}-preset"]
    for name, phases in (("resnet50_1host", ["prepare", "get"]), ("resnet50_1host_get", ["get"])):
        out = tmp_path / name
        assert main(["object", "run", name, *common, "--out", str(out)]) == 0
        results = json.loads((out / "results.json").read_text())
        assert [p["phase"] for p in results["phases"]] == phases
        assert results["workload"]["name"] == name and results["bucket_scheme"] == "sai3"
        assert results["phases"][-1]["totals"]["ops"] == 20


# ---------------------------------------------------------------------------------------------
# Refusals, before anything is created


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--hosts", "4"],
            "object --hosts takes the client hosts as host:slots,..., got the count 4",
        ),
        (["--hosts", "h1:2,h2", "--clients", "2"], "--clients 2 does not match --hosts h1:2,h2:1"),
        (["--hosts", "h1,h1"], "--hosts names 'h1' twice"),
        (["--mpi-arg=-v"], "--mpi-arg applies to a run over a --hosts list"),
        (["--host-timeout", "5"], "--host-timeout applies to a run over a --hosts list"),
        (["--hosts", "h1", "--mpi-arg=--host=h2"], "--mpi-arg --host=h2 and --hosts h1:1 both"),
    ],
)
def test_host_options_refused(
    extra: list[str],
    message: str,
    fake_mpi: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    argv = ["object", "run", *SMALL, "--bucket", "b", "--endpoint", "http://127.0.0.1:9"]
    assert main([*argv, "--out", str(out), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not _launches(fake_mpi)


@pytest.mark.parametrize(
    ("name", "hosts", "message"),
    [
        (
            "resnet50_4hosts",
            "h1,h2",
            "resnet50_4hosts is sai3-bench's 4-host configuration but --hosts names 2",
        ),
        (
            "unet3d_8hosts_get",
            None,
            "unet3d_8hosts_get is sai3-bench's 8-host configuration but no --hosts list was given",
        ),
    ],
)
def test_preset_needs_its_host_count(
    name: str, hosts: str | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["object", "get", name, "--bucket", "b", "--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv + (["--hosts", hosts] if hosts else [])) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_agent_command_forwards_names_not_values(
    fake_mpi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    cmd = agent_command(HostSpec("h2", 3), mpi_args=["--mca", "btl", "self,tcp"])
    assert cmd[1:5] == ["-n", "1", "--host", "h2:1"]  # one agent; the slots are its clients
    assert "--mca" in cmd and "s3cr3t" not in " ".join(cmd)
    exported = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"]
    assert "AWS_SECRET_ACCESS_KEY" in exported and "AWS_SESSION_TOKEN" not in exported
    assert set(exported) <= set(FORWARDED_ENV) and "PYTHONPATH" in exported
    assert cmd[-3:] == [sys.executable, "-m", "storage_workloads._host_agent"]


# ---------------------------------------------------------------------------------------------
# Merging the hosts' measurements


def _report(latencies_ms: list[float], end_s: float) -> tuple[_Part, float]:
    part = _Part("sai3")
    rec = part.recorder("GET")
    for i, ms in enumerate(latencies_ms):
        rec.record(4096, ms / 1e3, end_s * (i + 1) / len(latencies_ms))
    return part, end_s


def test_merged_percentiles_are_those_of_all_the_ops() -> None:
    """A fast host and a slow one: the merged p50 is the all-ops p50 (nearest rank), which
    lies far from the mean of the two hosts' own p50s."""
    fast = [1.0 + i / 100 for i in range(300)]  # 1 to 4 ms
    slow = [50.0 + i for i in range(100)]  # 50 to 149 ms
    runner = multihost._HostRunner.__new__(multihost._HostRunner)
    runner.hosts, runner.phases = (HostSpec("a", 1), HostSpec("b", 1)), []
    states = [multihost._HostState(status="done", started=1e9) for _ in range(2)]
    states[0].done, states[1].done = {0: _report(fast, 2.0)}, {1: _report(slow, 3.0)}
    merged = runner._merged("sai3", states)
    totals = summarize(merged.part.recorder("GET"), phase="get", op="GET", elapsed_s=3.0).totals
    every = sorted(fast + slow)
    for p in (50, 90, 95, 99):
        assert getattr(totals, f"p{p}_ms") == pytest.approx(every[math.ceil(p / 100 * 400) - 1])
    hosts = [multihost._host_phase("get", s) for s in states]
    host_p50s = [h.totals.p50_ms for h in hosts if h.totals]
    assert abs(totals.p50_ms - sum(host_p50s) / 2) > 20  # not an average of the hosts'
    assert (totals.ops, merged.elapsed_s) == (400, 3.0)
    assert [h.totals.ops_per_s for h in hosts if h.totals] == [150.0, pytest.approx(100 / 3)]


# ---------------------------------------------------------------------------------------------
# Runs over loopback hosts


def _capture_host_reports(monkeypatch: pytest.MonkeyPatch) -> list[Recorder]:
    """Every GET recorder of every client of every host, as the hosts sent them."""
    seen: list[Recorder] = []
    original = multihost._host_phase

    def capture(phase: str, state: Any) -> Any:
        if phase == "get" and state.done:
            seen.extend(part.recorders["GET"] for part, _ in state.done.values())
        return original(phase, state)

    monkeypatch.setattr(multihost, "_host_phase", capture)
    return seen


@pytest.mark.slow
def test_run_on_two_loopback_hosts(
    endpoint: str,
    fake_mpi: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """prepare then get over localhost:2 and 127.0.0.1:1: one agent launch per host and
    phase, each host prepares its clients' objects (all of them once), the op streams are
    those of a one-host run of three clients, and the merged figures are those of every op."""
    reports = _capture_host_reports(monkeypatch)
    out = tmp_path / "out"
    argv = ["object", "run", *SMALL, "--ops", "150", "--buckets", "sai3", "--quiet"]
    argv += ["--endpoint", endpoint, "--bucket", BUCKET, "--out", str(out)]
    assert main([*argv, "--hosts", "localhost:2,127.0.0.1"]) == 0
    stdout = capsys.readouterr().out
    assert "hosts (p99 in ms" in stdout and "127.0.0.1" in stdout

    launches = _launches(fake_mpi)
    # One launch per host and phase (the agents start at once, in no fixed order).
    hosts = sorted(a[a.index("--host") + 1] for a in launches)
    assert hosts == ["127.0.0.1:1", "127.0.0.1:1", "localhost:1", "localhost:1"]
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is True and results["incomplete_hosts"] == []
    assert results["host_list"] == "localhost:2,127.0.0.1:1"
    one_host = OBJECT_WORKLOADS["resnet50_object"].override(
        num_objects=96,
        concurrency=2,
        clients=3,
        ops=150,
        size_mean=6000,
        size_stdev=4000,
        size_min=1024,
        size_max=24 * 1024,
    )
    assert results["workload"] == one_host.as_dict()
    sizes = one_host.object_sizes(SEED)
    assert _keys(endpoint, BUCKET) == {one_host.object_key(i): sizes[i] for i in range(96)}

    put, got = results["phases"]
    assert (put["totals"]["ops"], put["totals"]["bytes"]) == (96, sum(sizes))
    fetched = [sizes[i] for i in one_host.planned_get_indices(SEED)]
    assert (got["totals"]["ops"], got["totals"]["bytes"]) == (150, sum(fetched))
    assert {b["bucket"] for b in got["buckets"]} <= {"1B-8KiB", "8KiB-64KiB"}

    a, b = results["hosts"]
    assert (a["host"], a["slots"], a["client_ids"], b["client_ids"]) == (
        "localhost",
        2,
        [0, 1],
        [2],
    )
    for phase, total in ((0, 96), (1, 150)):
        parts = [a["phases"][phase], b["phases"][phase]]
        assert [p["status"] for p in parts] == ["done", "done"]
        assert sum(p["totals"]["ops"] for p in parts) == total
        for p in parts:
            assert p["started_at"] < p["finished_at"]
            assert sum(c["totals"]["ops"] for c in p["clients"]) == p["totals"]["ops"]
    assert [c["totals"]["ops"] for c in a["phases"][1]["clients"] + b["phases"][1]["clients"]] == [
        50,
        50,
        50,
    ]
    # Host 0 prepared the objects of clients 0 and 1 (every third from 0 and from 1).
    assert a["phases"][0]["totals"]["ops"] == 64 and b["phases"][0]["totals"]["ops"] == 32

    # The merged percentiles are those of all the ops the hosts measured.
    every = sorted(x for rec in reports for lat in rec.latencies.values() for x in lat)
    assert len(every) == 150
    for p in (50, 90, 95, 99):
        want = every[math.ceil(p / 100 * len(every)) - 1] * 1e3
        assert got["totals"][f"p{p}_ms"] == pytest.approx(want, rel=1e-12)
    assert got["totals"]["max_ms"] == pytest.approx(every[-1] * 1e3, rel=1e-12)
    assert (out / "results.csv").is_file() and (out / "per_second.csv").is_file()


@pytest.mark.slow
def test_a_failing_and_a_silent_host_are_named_and_the_others_kept(
    endpoint: str, fake_mpi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The get phase on localhost, a host whose agent is lost once the phase started, and one
    that goes silent then: the run ends within the host timeout, names both hosts, keeps
    localhost's figures and is marked incomplete."""
    common = [*SMALL, "--endpoint", endpoint, "--bucket", f"{BUCKET}-lost", "--quiet"]
    assert main(["object", "prepare", *common, "--out", str(tmp_path / "p")]) == 0
    out = tmp_path / "out"
    argv = ["object", "get", *common, "--duration", "1", "--out", str(out)]
    assert main([*argv, "--hosts", "localhost,crash1,mute1", "--host-timeout", "3"]) == 1
    err = capsys.readouterr().err
    assert "crash1 (get, failed)" in err and "mute1 (get, silent)" in err
    assert "the run is incomplete" in err
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is False
    assert [line.split(" ", 1)[0] for line in results["incomplete_hosts"]] == ["crash1", "mute1"]
    good, crashed, muted = (h["phases"][0] for h in results["hosts"])
    assert [good["status"], crashed["status"], muted["status"]] == ["done", "failed", "silent"]
    assert "the agent was killed" in crashed["message"]
    assert muted["message"] == "said nothing for 3 s (waiting for done)"
    (got,) = results["phases"]
    assert got["totals"]["ops"] == good["totals"]["ops"] > 0
    assert got["clients"] == 3  # the phase was planned for the three hosts


@pytest.mark.slow
def test_an_unreachable_host_calls_the_phase_off(
    endpoint: str, fake_mpi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["object", "run", *SMALL, "--ops", "20", "--endpoint", endpoint, "--quiet"]
    argv += ["--bucket", f"{BUCKET}-down", "--out", str(out), "--hosts", "127.0.0.1,down2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "down2 (prepare, failed): mpirun exit status 1: ssh: connect to host down2" in err
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is False and results["phases"] == []
    assert [p["status"] for h in results["hosts"] for p in h["phases"]] == [
        "stopped",
        "not run",
        "failed",
        "not run",
    ]
    assert _keys(endpoint, f"{BUCKET}-down") == {}  # nothing was uploaded
