"""Client hosts without DLIO: the ``--hosts`` list, the process count, the memory probe (through
a stand-in mpirun that runs the probe here and answers for hosts h1 and h2), the declared
memory against the measured one, the rules checker's use of it, and the command line's
refusals, all before any file is created."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from storage_workloads import check_params, workload
from storage_workloads.cli import main
from storage_workloads.dliorun import read_hosts
from storage_workloads.hosts import (
    HOST_MEMORY_TOLERANCE,
    HostMemory,
    HostReading,
    HostSpec,
    check_declared_memory,
    local_host_memory,
    parse_hosts,
    read_host_memory,
    resolve_processes,
)
from storage_workloads.hosts import _parse_probe as parse_probe
from storage_workloads.sizing import required_num_files

GIB = 2**30
# The stand-in mpirun: logs its arguments, runs the probe (everything from /bin/sh on) here,
# and answers as host h1 (16 GiB) or h2 (32 GiB), each its own machine (h1.lan is h1 by another
# name); a host named down* cannot be reached.
FAKE_MPIRUN = """\
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_MPIRUN_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\\n")
host = args[args.index("--host") + 1].split(":")[0]
if host.startswith("down"):
    print(f"ssh: connect to host {host} port 22: No route to host", file=sys.stderr)
    sys.exit(1)
out = subprocess.run(args[args.index("/bin/sh"):], capture_output=True, text=True).stdout
kib = {"h1": 16 * 2**20, "h2": 32 * 2**20}.get(host)
for line in out.splitlines():
    if line.startswith("MemTotal:") and kib:
        line = f"MemTotal:       {kib} kB"
    elif line.startswith("hostname="):
        line = f"hostname={host.split('.')[0]}-machine"
    print(line)
"""


@pytest.fixture
def fake_mpi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``mpirun`` (and a DLIO environment as far as finding it goes); returns the
    log of mpirun's command lines, one JSON list a line."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    mpirun = bin_dir / "mpirun"
    mpirun.write_text(f"#!{sys.executable}\n{FAKE_MPIRUN}")
    mpirun.chmod(0o755)
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    for name in ("dlio_benchmark", "python"):
        (venv / name).write_text("#!/bin/sh\nexit 1\n")
    log = tmp_path / "mpirun.log"
    monkeypatch.setenv("FAKE_MPIRUN_LOG", str(log))
    monkeypatch.setenv("STORAGE_WORKLOADS_DLIO_VENV", str(tmp_path / "venv"))
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name: str(mpirun) if name == "mpirun" else real_which(name)
    )
    return log


def _launches(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# ---------------------------------------------------------------------------------------------
# --hosts and the process count


def test_parse_hosts() -> None:
    assert parse_hosts("4") == 4
    assert parse_hosts("h1:2,h2:2") == (HostSpec("h1", 2), HostSpec("h2", 2))
    assert parse_hosts(" node-1.lan , 10.0.0.2:3 ") == (
        HostSpec("node-1.lan", 1),
        HostSpec("10.0.0.2", 3),
    )
    assert str(HostSpec("h1", 2)) == "h1:2"
    assert parse_hosts("node_7,gpu-a1.rack-2.example:8,1e3x") == (
        HostSpec("node_7"),
        HostSpec("gpu-a1.rack-2.example", 8),
        HostSpec("1e3x"),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "--hosts must be a host count >= 1 or host:slots,..., got '0'"),
        ("-2", "--hosts must be a host count >= 1"),
        ("h1:0", "--hosts: the slots of 'h1' must be an integer from 1 to 4,096, got '0' in"),
        ("h1:two", "the slots of 'h1' must be an integer from 1 to 4,096, got 'two'"),
        ("h1:2,h1:1", "--hosts names 'h1' twice in 'h1:2,h1:1'"),
        ("h1:2,", "--hosts takes host:slots,..."),
        (":2", "--hosts takes host:slots,..."),
        ("a b:1", "got 'a b:1' in 'a b:1'"),
        # Not host names: an mpirun option, numbers that are no count, empty labels.
        ("--host", "got '--host' in '--host'"),
        ("h1,-x:2", "got '-x:2' in 'h1,-x:2'"),
        ("1e3", "--hosts takes a host count (an integer) or host:slots,...; '1e3' in '1e3'"),
        ("h1,2.5:2", "'2.5' in 'h1,2.5:2' is neither"),
        ("h1..lan", "got 'h1..lan'"),
        ("h1-:2", "got 'h1-:2'"),
        ("a" * 64 + ".lan", "got 'aaaa"),
        ("h1:2,H1:2", "--hosts names 'h1' twice in 'h1:2,H1:2' (as 'h1' and 'H1'; host names"),
        ("h1:5000", "must be an integer from 1 to 4,096, got '5000'"),
        ("1000001", "--hosts '1000001': more than 100,000 hosts"),
    ],
)
def test_parse_hosts_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_hosts(text)
    assert message in str(exc.value)


def test_resolve_processes() -> None:
    hosts = parse_hosts("h1:2,h2:2")
    assert isinstance(hosts, tuple)
    assert resolve_processes(None, hosts) == 4
    assert resolve_processes(4, hosts) == 4
    assert resolve_processes(None) == 1 and resolve_processes(3) == 3
    with pytest.raises(ValueError) as exc:
        resolve_processes(3, hosts)
    assert str(exc.value).startswith(
        "--processes 3 does not match --hosts h1:2,h2:2 (4 slots in all)"
    )


# ---------------------------------------------------------------------------------------------
# Reading the hosts

PROBE_OUTPUT = """hostname=node7
kernel=6.1.0-18-amd64
arch=x86_64
cpus=64
cpu_model=AMD EPYC 9354 32-Core Processor
sockets=2
MemTotal:       263721332 kB
os_NAME="Debian GNU/Linux"
os_VERSION_ID="12"
"""


def test_parse_probe() -> None:
    r = parse_probe(PROBE_OUTPUT, "10.0.0.7", 8)
    assert r == HostReading(
        host="10.0.0.7",
        slots=8,
        hostname="node7",
        mem_total_bytes=263_721_332 * 1024,
        cpus=64,
        kernel="6.1.0-18-amd64",
        arch="x86_64",
        os_name="Debian GNU/Linux",
        os_version="12",
        cpu_model="AMD EPYC 9354 32-Core Processor",
        sockets=2,
    )
    # No "physical id" in /proc/cpuinfo (some virtual machines): the sockets are unknown.
    bare = parse_probe(PROBE_OUTPUT.replace("sockets=2", "sockets=0"), "h", 1)
    assert bare.sockets is None and bare.cpu_model == r.cpu_model
    assert r.memory_gib == pytest.approx(251.5, abs=0.05)
    with pytest.raises(ValueError, match="no MemTotal in kB in /proc/meminfo of h1"):
        parse_probe("hostname=x\n", "h1", 1)


def test_local_host_memory_reads_proc_meminfo() -> None:
    memory = local_host_memory()
    if not Path("/proc/meminfo").is_file():
        assert memory is None
        return
    assert memory is not None and memory.method == "local" and len(memory.hosts) == 1
    kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    assert memory.total_bytes == kib * 1024
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    if "model name" in cpuinfo:  # the probe reads the CPU model as /proc/cpuinfo names it
        model = next(line for line in cpuinfo.splitlines() if line.startswith("model name"))
        assert memory.hosts[0].cpu_model == model.split(":", 1)[1].strip()


def test_read_host_memory_one_launch_per_host(fake_mpi: Path) -> None:
    memory = read_host_memory(parse_hosts("h1:2,h2:3"))  # type: ignore[arg-type]
    assert memory.method == "mpirun"
    assert [(h.host, h.slots, h.hostname) for h in memory.hosts] == [
        ("h1", 2, "h1-machine"),
        ("h2", 3, "h2-machine"),
    ]
    assert memory.per_host_gib == [16.0, 32.0] and memory.total_bytes == 48 * GIB
    assert memory.same_machine() == []
    launches = sorted(_launches(fake_mpi), key=lambda a: a[a.index("--host") + 1])
    assert len(launches) == 2  # one single-process launch per named host
    for launch, name in zip(launches, ("h1", "h2"), strict=True):
        assert launch[:2] == ["-n", "1"]
        assert launch[launch.index("--host") + 1] == f"{name}:1"
        assert launch[launch.index("/bin/sh") + 1] == "-c"
    assert HostMemory.from_dict(json.loads(json.dumps(memory.as_dict()))) == memory


def test_read_hosts_reports_aliases(fake_mpi: Path) -> None:
    """Two names of one machine are both read and counted; the command says so."""
    said: list[str] = []
    hosts = (HostSpec("h2", 1), HostSpec("h1", 1), HostSpec("h1.lan", 1))
    memory = read_hosts(hosts, log=said.append)
    assert memory is not None and memory.same_machine() == [["h1", "h1.lan"]]
    assert len(memory.hosts) == 3
    assert said == [
        "hosts h1, h1.lan are one machine (h1-machine): its memory is counted once per host named"
    ]
    # A host count above 1 without a list: the other hosts cannot be read.
    assert read_hosts(2, log=said.append) is None
    assert said[-1].startswith("2 host(s) without a --hosts list")


def test_read_host_memory_names_the_unreachable_host(fake_mpi: Path) -> None:
    with pytest.raises(RuntimeError) as exc:
        read_host_memory(parse_hosts("h1:1,down1:1"))  # type: ignore[arg-type]
    message = str(exc.value)
    assert message.startswith("cannot read the memory of host down1 through mpirun (exit status 1)")
    assert "No route to host" in message


def test_declared_memory_against_measured() -> None:
    memory = HostMemory(
        "mpirun",
        (
            HostReading("h1", 2, "a", 16 * GIB),
            HostReading("h2", 2, "b", 32 * GIB),
        ),
    )
    assert check_declared_memory(24, 2, memory) is None  # 48 GiB declared, 48 read
    assert check_declared_memory(None, 2, memory) is None
    assert check_declared_memory(24, 2, None) is None
    low = 24 * (1 - HOST_MEMORY_TOLERANCE) - 0.1
    assert check_declared_memory(24 * (1 - HOST_MEMORY_TOLERANCE) + 0.01, 2, memory) is None
    with pytest.raises(ValueError) as exc:
        check_declared_memory(low, 2, memory)
    assert str(exc.value).startswith(f"--host-memory-gb {low:g} declares")
    assert "but they have 48.00 GiB (h1 16.00, h2 32.00)" in str(exc.value)
    warning = check_declared_memory(64, 2, memory)
    assert warning is not None and "more than the 48.00 GiB read from them" in warning


# ---------------------------------------------------------------------------------------------
# The rules checker and measured memory


def _params(**extra: Any) -> dict[str, Any]:
    return {"model": "unet3d", "accelerator": "h100", "num_accelerators": 1, **extra}


def test_checker_sizes_on_the_measured_memory() -> None:
    w = workload("unet3d", "h100")
    need = required_num_files(w, total_host_memory_bytes=48 * GIB, num_accelerators=1)
    fewer = {"overrides": {"dataset.num_files_train": need - 1}}
    report = check_params(_params(hosts=2, measured_host_memory_gb=[16, 32], **fewer))
    sizing = [i for i in report.issues if i.rule == "sizing"]
    assert len(sizing) == 1 and sizing[0].expected == f">= {need}"
    assert "2 host(s) of 16.00 + 32.00 GiB (read from them)" in sizing[0].message
    enough = {"overrides": {"dataset.num_files_train": need}}
    report = check_params(_params(hosts=2, measured_host_memory_gb=[16, 32], **enough))
    assert not [i for i in report.issues if i.rule == "sizing"]
    # The measured sum wins over a larger declaration (which only the run's warning reports).
    report = check_params(
        _params(hosts=2, host_memory_gb=30, measured_host_memory_gb=[16, 32], **enough)
    )
    assert report.verdict == "CLOSED", report.to_text()


def test_checker_flags_understated_and_malformed_memory() -> None:
    report = check_params(_params(hosts=2, host_memory_gb=8, measured_host_memory_gb=[16, 32]))
    rules = {i.rule: i for i in report.issues}
    assert "host-memory" in rules and report.verdict == "INVALID"
    assert "(16.00 GiB), but 48.00 GiB were read" in rules["host-memory"].message
    for bad in ([16], [16, -1], "16,32", [16, True]):
        report = check_params(_params(hosts=2, measured_host_memory_gb=bad))
        assert any(
            i.rule == "value-kind" and i.parameter == "measured_host_memory_gb"
            for i in report.issues
        ), bad


# ---------------------------------------------------------------------------------------------
# The command line: refusals before anything is created, and what-if with a host list


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--hosts", "0"], "--hosts must be a host count >= 1"),
        (["--hosts", "h1:2,h2:x"], "--hosts: the slots of 'h2' must be an integer from 1 to 4,096"),
        (["--hosts", "h1:2,h2:2", "--processes", "3"], "--processes 3 does not match --hosts"),
        (["--hosts", "h1:2", "--no-mpi"], "--hosts h1:2 needs mpirun; drop --no-mpi"),
        (
            ["--hosts", "h1:1", "--mpi-arg=--hostfile", "--mpi-arg=f"],
            "--mpi-arg --hostfile and --hosts h1:1 both choose hosts",
        ),
        (["--hosts", "h1:1,down2:1"], "cannot read the memory of host down2 through mpirun"),
        (
            ["--hosts", "h1:2,h2:2", "--host-memory-gb", "10"],
            "--host-memory-gb 10 declares 20.00 GiB for 2 host(s), but they have 48.00 GiB",
        ),
    ],
)
def test_cli_host_errors_create_nothing(
    tmp_path: Path,
    fake_mpi: Path,
    extra: list[str],
    message: str,
    npz_dataset: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "data"
    npz_dataset(data, 2)
    for where in (["--run-dir", str(tmp_path / "run")], ["--results-dir", str(tmp_path / "res")]):
        args = ["run", "dlrm", "--data-dir", str(data), *where, "--num-files", "2", "--quiet"]
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "res").exists()


def test_cli_what_if_with_a_host_list_contacts_no_host(
    tmp_path: Path, fake_mpi: Path, npz_dataset: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    npz_dataset(data, 2)
    args = ["run", "dlrm", "--data-dir", str(data), "--run-dir", str(run), "--num-files", "2"]
    assert main([*args, "--hosts", "h1:2,h2:2", "--host-memory-gb", "100", "--what-if"]) == 0
    captured = capsys.readouterr()
    command = captured.out.splitlines()[0].split()
    assert command[1:5] == ["-n", "4", "--host", "h1:2,h2:2"]
    assert "--oversubscribe" not in command
    assert "# note: the 2 host(s) of --hosts were not read: a plan contacts no host" in (
        captured.out
    )
    assert not [a for a in _launches(fake_mpi) if "/bin/sh" in a]  # no host was read
    assert "warning" not in captured.err
    assert not run.exists()
    # A plan given a reading made before holds the hosts read and the checker's figures.
    from storage_workloads.dliorun import plan_training, read_hosts

    hosts = parse_hosts("h1:2,h2:2")
    plan = plan_training(
        workload("dlrm", "h100"),
        run_dir=run,
        data_folder=data,
        num_files=2,
        hosts=hosts,
        host_memory=read_hosts(hosts),
    )
    record = plan.run_record
    assert record["hosts"] == "h1:2,h2:2" and record["processes"] == 4
    assert record["params"]["hosts"] == 2 and record["params"]["num_accelerators"] == 4
    assert record["params"]["measured_host_memory_gb"] == [16.0, 32.0]
    assert [h["hostname"] for h in record["host_memory"]["hosts"]] == ["h1-machine", "h2-machine"]
    assert plan.notes == [] and plan.missing_data is None
    assert not run.exists()


def test_cli_datagen_and_checkpoint_take_a_host_list(
    tmp_path: Path, fake_mpi: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    gen = ["datagen", "dlrm", "--data-dir", str(tmp_path / "data"), "--results-dir", str(root)]
    assert main([*gen, "--hosts", "h1:2,h2:1", "--what-if"]) == 0
    command = capsys.readouterr().out.splitlines()[0].split()
    assert command[1:5] == ["-n", "3", "--host", "h1:2,h2:1"]
    ckpt = ["checkpoint", "llama3_8b", "--results-dir", str(root)]
    ckpt += ["--checkpoint-folder", str(tmp_path / "ckpt"), "--hosts", "h1:4,h2:4"]
    assert main([*ckpt, "--what-if"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[1:5] == ["-n", "8", "--host", "h1:4,h2:4"]
    assert "/checkpointing/llama3-8b/" in out
    assert main([*ckpt, "--processes", "4"]) == 2
    assert "--processes 4 does not match --hosts h1:4,h2:4 (8 slots" in capsys.readouterr().err
    assert not root.exists() and not (tmp_path / "data").exists()
    # A plan reads no host.
    assert not [a for a in _launches(fake_mpi) if "/bin/sh" in a]
