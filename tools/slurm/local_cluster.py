"""A SLURM cluster on this machine, in a folder of its own: munge, slurmctld and two slurmd.

    python tools/slurm/local_cluster.py up DIR     # prints `export SLURM_CONF=DIR/slurm.conf`
    python tools/slurm/local_cluster.py down DIR   # stops what `up` started, by pid

For trying tools/slurm/train.sbatch as a cluster user would (sbatch, scontrol requeue, a lost
node) without a cluster. It needs Debian's `slurm-wlm` (22.05, built with MULTIPLE_SLURMD, so
that two `slurmd -N NAME` on their own ports stand for two nodes at 127.0.0.1) and `munge`, and
root (slurmd starts the jobs' processes as the submitting user). Every daemon's configuration,
key, socket, state, spool, pid and log file lives under DIR; the ports are free ones picked at
`up`. `down` stops only the processes whose pids `up` wrote, and leaves DIR for the logs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

NODES = ("node1", "node2")
DAEMONS = ("munged", "slurmctld", "slurmd")
PIDS = "pids.json"
"""What `up` started, by name: the pids `down` stops."""


class ClusterError(RuntimeError):
    pass


def missing() -> str | None:
    """Why no cluster can start here, or None."""
    absent = [name for name in (*DAEMONS, "sbatch", "scontrol") if shutil.which(name) is None]
    if absent:
        return f"{', '.join(absent)} not found: install slurm-wlm and munge (Debian packages)"
    if os.geteuid() != 0:
        return "slurmd needs root to start jobs' processes"
    return None


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class Cluster:
    folder: Path

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment for SLURM's commands (sbatch, squeue, scontrol) on this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: {(result.stderr or result.stdout).strip()}")
        return result

    def pids(self) -> dict[str, int]:
        path = self.folder / PIDS
        return json.loads(path.read_text()) if path.exists() else {}


def _config(folder: Path, cpus: int) -> str:
    ctld_port, *node_ports = free_ports(1 + len(NODES))
    lines = [
        "ClusterName=local",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool' / '%n'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'log' / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No cgroups in a container: processes are tracked by their parent pids.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        # Both "nodes" are this machine: slurmd must not compare the CPUs below with its own.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        # A job's processes get SIGTERM, then SIGKILL this many seconds later (requeue, scancel).
        "KillWait=5",
        "MinJobAge=600",
        "SchedulerParameters=defer_batch=0",
        "InactiveLimit=0",
        "SlurmdTimeout=30",
    ]
    for name, port in zip(NODES, node_ports, strict=True):
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={cpus} RealMemory=1000 State=UNKNOWN"
        )
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE")
    return "\n".join(lines) + "\n"


def _wait(what: str, ready, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise ClusterError(f"{what} did not come up within {timeout:.0f} s")


def up(folder: Path, cpus: int = 4) -> Cluster:
    """Start munged, slurmctld and one slurmd per node in `folder` (created; must be empty)."""
    why = missing()
    if why:
        raise ClusterError(why)
    folder = folder.resolve()
    if folder.exists() and any(folder.iterdir()):
        raise ClusterError(f"{folder}: not empty; give a new folder")
    cluster = Cluster(folder)
    for sub in ("munge", "state", "log", *(f"spool/{n}" for n in NODES)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    cluster.conf.write_text(_config(folder, cpus))
    pids: dict[str, int] = {}

    def record() -> None:
        (folder / PIDS).write_text(json.dumps(pids))

    try:
        munge = folder / "munge"
        subprocess.run(
            [
                "munged",
                "--force",  # runs as root, and its folders are not the system's
                f"--socket={munge / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={folder / 'log' / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        pids["munged"] = int((munge / "munged.pid").read_text())
        record()
        subprocess.run(["slurmctld", "-f", str(cluster.conf)], check=True, timeout=30)
        _wait("slurmctld", lambda: (folder / "slurmctld.pid").exists())
        pids["slurmctld"] = int((folder / "slurmctld.pid").read_text())
        record()
        for name in NODES:
            subprocess.run(["slurmd", "-f", str(cluster.conf), "-N", name], check=True, timeout=30)
            pid_file = folder / f"slurmd-{name}.pid"
            _wait(f"slurmd {name}", pid_file.exists)
            pids[f"slurmd-{name}"] = int(pid_file.read_text())
            record()

        def idle() -> bool:
            states = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
            return states.count("idle") == len(NODES)

        _wait("two idle nodes", idle)
    except (subprocess.SubprocessError, OSError, ClusterError, ValueError) as error:
        down(folder)
        logs = "; ".join(
            f"{p.name}: {p.read_text()[-400:]}" for p in sorted((folder / "log").glob("*"))
        )
        raise ClusterError(f"the cluster in {folder} did not start: {error} ({logs})") from None
    return cluster


def down(folder: Path, timeout: float = 20) -> None:
    """Stop what `up` started in `folder`: its jobs first (a job's slurmstepd and processes
    outlive the slurmd that started them), then the daemons by the pids it recorded
    (SIGTERM, then SIGKILL), then any process of its jobs still there (SIGKILL)."""
    cluster = Cluster(folder.resolve())
    pids = cluster.pids()
    if _alive(pids.get("slurmctld", 0)):
        jobs = cluster.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if jobs:
            cluster.run("scancel", *jobs, check=False)
            deadline = time.monotonic() + timeout / 2
            while _job_processes(cluster) and time.monotonic() < deadline:
                time.sleep(0.2)
    for name in reversed(list(pids)):
        try:
            os.kill(pids[name], signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout
    for pid in pids.values():
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    for pid in _job_processes(cluster):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    (cluster.folder / PIDS).unlink(missing_ok=True)


def _job_processes(cluster: Cluster) -> list[int]:
    """The processes of `cluster`'s jobs: their slurmstepd, which works in the cluster's
    folder, and what the jobs started, which has a job id and the cluster's SLURM_CONF in its
    environment (a shell that only exported SLURM_CONF is not a job's)."""
    marker = f"SLURM_CONF={cluster.conf}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        in_job = marker in environ and any(v.startswith(b"SLURM_JOB_ID=") for v in environ)
        if cwd.is_relative_to(cluster.folder) or in_job:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A daemon that exited but was not yet reaped by its parent (init) is gone for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs each node says it has")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            cluster = up(args.folder, args.cpus)
            print(f"export SLURM_CONF={cluster.conf}")
        else:
            down(args.folder)
    except ClusterError as error:
        print(f"local_cluster.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
