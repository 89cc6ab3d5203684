"""Client hosts of a multi-host DLIO run: the ``--hosts`` list, the mpirun command line, and
the memory of each host, read from the host itself before a run.

``--hosts`` takes either a host count (``--hosts 4``: the number of client hosts, for the
sizing rule, with every process on this host unless ``--mpi-arg`` says otherwise) or a list of
``host:slots`` (``--hosts h1:2,h2:2``), which mpirun gets as ``--host h1:2,h2:2``; ``slots`` is
how many processes run on that host (1 when left out), and the process count is their sum.

The MLPerf Storage rules size a training dataset on the memory of all client hosts (at least
5x their sum; Submission_guidelines v2.0 section 6.6), so :func:`read_host_memory` reads
``MemTotal`` from ``/proc/meminfo`` on every listed host through mpirun, one single-process
launch per host, before a run. One launch per named host, not one launch with a process per
node: Open MPI (4.1) folds every name of the local machine (``localhost``, ``127.0.0.1``, its
host name) into one node, so ``--map-by ppr:1:node`` over ``localhost:1,127.0.0.1:1`` starts
one process where two hosts were named. :func:`local_host_memory` reads this host the same
way without mpirun.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "HOST_MEMORY_TOLERANCE",
    "HOST_OPTIONS",
    "HostMemory",
    "HostReading",
    "HostSpec",
    "check_declared_memory",
    "check_host_list",
    "format_hosts",
    "host_options_in",
    "local_host_memory",
    "mpirun_prefix",
    "parse_hosts",
    "read_host_memory",
    "resolve_processes",
]

#: How far a declared ``--host-memory-gb`` may fall below the memory read from the hosts
#: (a fraction of the measured total). ``MemTotal`` is a little below the installed memory
#: (the kernel and firmware keep some), so a declaration of the installed size passes.
HOST_MEMORY_TOLERANCE: Final = 0.05
#: mpirun options that choose hosts; with a ``--hosts`` list they would contradict it.
HOST_OPTIONS: Final = frozenset(
    {
        "-H",
        "-host",
        "--host",
        "-hostfile",
        "--hostfile",
        "-machinefile",
        "--machinefile",
        "-default-hostfile",
        "--default-hostfile",
    }
)
#: Most probes that run at once (one mpirun each).
_PROBES_AT_ONCE: Final = 16
_PROBE_TIMEOUT_S: Final = 120.0
# A host name as resolvers take it: dot-separated labels of letters, digits, '-' and '_'
# (which /etc/hosts and some clusters use), none empty or starting or ending with '-' (so
# that no name reads as an mpirun option), at most 63 characters a label, 253 in all.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_MAX_NAME = 253
#: The most hosts a count may give and processes one host may run: past any cluster's and
#: any machine's, so that a typo (an extra digit or ten) is refused, not planned for.
MAX_HOSTS: Final = 100_000
MAX_SLOTS: Final = 4096
# A name that reads as a number other than a count (1e3, 2.5): a typo for a count, or for
# an address, never a host.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# What the probe prints, one key=value a line, then /proc/meminfo's MemTotal line and the
# NAME and VERSION_ID of /etc/os-release. POSIX sh and coreutils only: it runs on every host.
_PROBE_SCRIPT: Final = (
    'printf \'hostname=%s\\nkernel=%s\\narch=%s\\n\' "$(uname -n)" "$(uname -r)" '
    '"$(uname -m)"; '
    "printf 'cpus=%s\\n' \"$(getconf _NPROCESSORS_ONLN 2>/dev/null)\"; "
    "printf 'cpu_model=%s\\nsockets=%s\\n' "
    "\"$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')\" "
    "\"$(grep '^physical id' /proc/cpuinfo 2>/dev/null | sort -u | wc -l)\"; "
    "grep '^MemTotal:' /proc/meminfo; "
    "if [ -r /etc/os-release ]; then grep -E '^(NAME|VERSION_ID)=' /etc/os-release | "
    "sed 's/^/os_/'; fi; exit 0"
)


@dataclass(frozen=True)
class HostSpec:
    """One client host of a ``--hosts`` list: its name and how many processes run on it."""

    name: str
    slots: int = 1

    def __str__(self) -> str:
        return f"{self.name}:{self.slots}"


def parse_hosts(text: str, *, flag: str = "--hosts") -> int | tuple[HostSpec, ...]:
    """``--hosts`` as a host count (``"4"``) or a host list (``"h1:2,h2:2"``).

    Raises ``ValueError`` naming ``flag`` and the value: a count below 1, an empty or
    malformed name (one that starts with '-', as ``--host`` does, or reads as a number,
    as ``1e3`` does), slots that are not an integer >= 1, or a host named twice, in any
    case (host names ignore case: ``h1`` and ``H1`` are one host, which mpirun would run
    twice as many processes on).
    """
    raw = text.strip()
    if re.fullmatch(r"[+-]?\d+", raw):
        count = int(raw)
        if count < 1:
            raise ValueError(f"{flag} must be a host count >= 1 or host:slots,..., got {text!r}")
        if count > MAX_HOSTS:
            raise ValueError(f"{flag} {text!r}: more than {MAX_HOSTS:,} hosts")
        return count
    hosts: list[HostSpec] = []
    for item in raw.split(","):
        name, sep, slots_text = item.strip().partition(":")
        if _NUMBER.fullmatch(name):
            raise ValueError(
                f"{flag} takes a host count (an integer) or host:slots,...; {name!r} in "
                f"{text!r} is neither"
            )
        if not name or len(name) > _MAX_NAME or not _NAME.fullmatch(name):
            raise ValueError(
                f"{flag} takes host:slots,... (a name is dot-separated labels of letters, "
                f"digits, '-' and '_', none starting or ending with '-'), got "
                f"{item.strip()!r} in {text!r}"
            )
        slots = 1
        if sep:
            try:
                slots = int(slots_text)
            except ValueError:
                slots = 0
            if not 1 <= slots <= MAX_SLOTS:
                raise ValueError(
                    f"{flag}: the slots of {name!r} must be an integer from 1 to "
                    f"{MAX_SLOTS:,}, got {slots_text!r} in {text!r}"
                )
        same = next((h.name for h in hosts if h.name.lower() == name.lower()), None)
        if same is not None:
            spelled = "" if same == name else f" (as {same!r} and {name!r}; host names ignore case)"
            raise ValueError(f"{flag} names {same!r} twice in {text!r}{spelled}")
        hosts.append(HostSpec(name, slots))
    return tuple(hosts)


def format_hosts(hosts: Sequence[HostSpec]) -> str:
    """The mpirun ``--host`` value: ``h1:2,h2:2``."""
    return ",".join(str(h) for h in hosts)


def resolve_processes(processes: int | None, hosts: Sequence[HostSpec] = ()) -> int:
    """The process count: ``processes``, or with a host list the sum of its slots, which a
    given ``processes`` must equal (otherwise some listed host would run nothing, or mpirun
    would refuse). Raises ``ValueError`` naming both values."""
    if processes is not None and (
        isinstance(processes, bool) or not isinstance(processes, int) or processes < 1
    ):
        raise ValueError(f"--processes must be an integer >= 1, got {processes!r}")
    if not hosts:
        return 1 if processes is None else processes
    slots = sum(h.slots for h in hosts)
    if processes is not None and processes != slots:
        raise ValueError(
            f"--processes {processes} does not match --hosts {format_hosts(hosts)} ({slots} "
            "slots in all): give slots that add up to the process count, or leave --processes "
            "out"
        )
    return slots


def host_options_in(mpi_args: Sequence[str]) -> list[str]:
    """The host-choosing mpirun options among ``mpi_args`` (``--host``, ``--hostfile``, ...,
    also in the ``--host=a,b`` form)."""
    return [a for a in mpi_args if a.split("=", 1)[0] in HOST_OPTIONS]


def check_host_list(
    hosts: Sequence[HostSpec], *, mpi: bool = True, mpi_args: Sequence[str] = ()
) -> None:
    """A host list needs mpirun and no other host choice in ``mpi_args``: ``ValueError``
    naming the options otherwise."""
    if not hosts:
        return
    if not mpi:
        raise ValueError(f"--hosts {format_hosts(hosts)} needs mpirun; drop --no-mpi")
    clash = host_options_in(mpi_args)
    if clash:
        raise ValueError(
            f"--mpi-arg {clash[0]} and --hosts {format_hosts(hosts)} both choose hosts; "
            "give the hosts once"
        )


def mpirun_prefix(
    processes: int, *, hosts: Sequence[HostSpec] = (), mpi_args: Sequence[str] = ()
) -> list[str]:
    """``mpirun -n PROCESSES`` with ``--host h1:2,...`` for a host list, then
    ``--allow-run-as-root`` when run as root, ``--oversubscribe`` when more processes than
    this host's CPUs run on it (no host list: with one, the slots say where processes go),
    and ``mpi_args``. Raises ``ValueError`` when ``mpi_args`` choose hosts too, or more
    processes than the list's slots are asked for, and ``RuntimeError`` (the callers' own
    error types wrap it) when mpirun is not installed."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError(
            "mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin), or "
            "run one process with --no-mpi"
        )
    cmd = [mpirun, "-n", str(processes)]
    if hosts:
        check_host_list(hosts, mpi_args=mpi_args)
        slots = sum(h.slots for h in hosts)
        if processes > slots:
            raise ValueError(
                f"{processes} processes do not fit the {slots} slots of --hosts "
                f"{format_hosts(hosts)}"
            )
        cmd += ["--host", format_hosts(hosts)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if not hosts and processes > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")
    cmd.extend(mpi_args)
    return cmd


# ---------------------------------------------------------------------------------------------
# Reading the hosts


@dataclass(frozen=True)
class HostReading:
    """What the probe read on one host: the name it was given (``host``) and its slots, the
    name the machine gives itself (``hostname``, ``uname -n``), ``MemTotal`` in bytes, and
    CPUs, kernel, architecture, OS, CPU model and sockets where it could read them."""

    host: str
    slots: int
    hostname: str
    mem_total_bytes: int
    cpus: int | None = None
    kernel: str | None = None
    arch: str | None = None
    os_name: str | None = None
    os_version: str | None = None
    cpu_model: str | None = None
    sockets: int | None = None

    @property
    def memory_gib(self) -> float:
        return self.mem_total_bytes / 2**30

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "slots": self.slots,
            "hostname": self.hostname,
            "mem_total_bytes": self.mem_total_bytes,
            "memory_gib": self.memory_gib,
            "cpus": self.cpus,
            "kernel": self.kernel,
            "arch": self.arch,
            "os_name": self.os_name,
            "os_version": self.os_version,
            "cpu_model": self.cpu_model,
            "sockets": self.sockets,
        }


@dataclass(frozen=True)
class HostMemory:
    """The readings of all client hosts. ``method`` is ``"mpirun"`` (one launch per listed
    host) or ``"local"`` (this host, read directly)."""

    method: str
    hosts: tuple[HostReading, ...]

    @property
    def total_bytes(self) -> int:
        return sum(h.mem_total_bytes for h in self.hosts)

    @property
    def per_host_gib(self) -> list[float]:
        return [h.memory_gib for h in self.hosts]

    def same_machine(self) -> list[list[str]]:
        """Groups of given host names that report one machine name (aliases such as
        ``localhost`` and ``127.0.0.1``); their memory is counted once per name given."""
        groups: dict[str, list[str]] = {}
        for h in self.hosts:
            groups.setdefault(h.hostname, []).append(h.host)
        return [names for names in groups.values() if len(names) > 1]

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "hosts": [h.as_dict() for h in self.hosts],
            "total_bytes": self.total_bytes,
            "total_gib": self.total_bytes / 2**30,
            "same_machine": self.same_machine(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostMemory:
        fields = set(HostReading.__dataclass_fields__)
        return cls(
            method=str(data.get("method", "")),
            hosts=tuple(
                HostReading(**{k: v for k, v in h.items() if k in fields})
                for h in data.get("hosts", ())
            ),
        )


def _parse_probe(text: str, host: str, slots: int) -> HostReading:
    """A :class:`HostReading` from the probe's output; ``ValueError`` without ``MemTotal``."""
    values: dict[str, str] = {}
    mem_kib: int | None = None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                mem_kib = int(parts[1]) if unit == "kb" else None
        elif "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip('"')
    if mem_kib is None or mem_kib <= 0:
        raise ValueError(f"no MemTotal in kB in /proc/meminfo of {host}")
    cpus = values.get("cpus", "")
    sockets = values.get("sockets", "")
    return HostReading(
        host=host,
        slots=slots,
        hostname=values.get("hostname") or host,
        mem_total_bytes=mem_kib * 1024,
        cpus=int(cpus) if cpus.isdigit() else None,
        kernel=values.get("kernel") or None,
        arch=values.get("arch") or None,
        os_name=values.get("os_NAME") or None,
        os_version=values.get("os_VERSION_ID") or None,
        cpu_model=values.get("cpu_model") or None,
        # no "physical id" lines (some virtual machines, other architectures): unknown
        sockets=int(sockets) if sockets.isdigit() and int(sockets) > 0 else None,
    )


def _probe(
    host: HostSpec, mpi_args: Sequence[str], timeout_s: float, env: Mapping[str, str] | None
) -> HostReading:
    cmd = [
        *mpirun_prefix(1, hosts=[HostSpec(host.name, 1)], mpi_args=mpi_args),
        "/bin/sh",
        "-c",
        _PROBE_SCRIPT,
    ]
    try:
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=None if env is None else dict(env),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"reading the memory of host {host.name} through mpirun took over {timeout_s:g} s"
        ) from None
    except OSError as exc:
        raise RuntimeError(f"cannot start mpirun to read host {host.name}: {exc}") from None
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(
            f"cannot read the memory of host {host.name} through mpirun (exit status "
            f"{done.returncode}): {tail or 'no output'}"
        )
    try:
        return _parse_probe(done.stdout, host.name, host.slots)
    except ValueError as exc:
        raise RuntimeError(f"{exc} (mpirun printed: {done.stdout.strip()[:200]!r})") from None


def read_host_memory(
    hosts: Sequence[HostSpec],
    *,
    mpi_args: Sequence[str] = (),
    timeout_s: float = _PROBE_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> HostMemory:
    """Read ``MemTotal`` (and CPUs, kernel, OS) on every host of ``hosts``: one
    ``mpirun -n 1 --host NAME:1 /bin/sh -c ...`` per host, up to 16 at once, with
    ``mpi_args`` (the run's own, which may carry transport settings). Raises
    ``RuntimeError`` naming the first host that could not be read."""
    if not hosts:
        raise ValueError("read_host_memory needs at least one host")
    with ThreadPoolExecutor(max_workers=min(_PROBES_AT_ONCE, len(hosts))) as pool:
        futures = [pool.submit(_probe, h, mpi_args, timeout_s, env) for h in hosts]
        readings = tuple(f.result() for f in futures)
    return HostMemory(method="mpirun", hosts=readings)


def local_host_memory(slots: int = 1) -> HostMemory | None:
    """This host read as :func:`read_host_memory` reads a listed one (the same script,
    without mpirun); ``None`` where it cannot be read (no ``/proc/meminfo``)."""
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", _PROBE_SCRIPT],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        reading = _parse_probe(done.stdout, os.uname().nodename, slots)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return HostMemory(method="local", hosts=(reading,))


def check_declared_memory(
    declared_gb: float | None, hosts: int, measured: HostMemory | None
) -> str | None:
    """Compare ``--host-memory-gb`` (per host, GiB) with what was read from the hosts.

    The rules size the dataset on the hosts' memory, so a declaration below the measured total
    by more than :data:`HOST_MEMORY_TOLERANCE` would let a dataset the hosts can cache pass:
    ``ValueError`` naming the option, the declared and the measured values. A declaration
    above it by more than the tolerance only makes the sizing stricter: returns a warning
    (the measured memory is what the sizing then uses). ``None`` when they agree or either
    is missing."""
    if declared_gb is None or measured is None or not measured.hosts:
        return None
    declared = declared_gb * hosts
    have = measured.total_bytes / 2**30
    each = ", ".join(f"{h.host} {h.memory_gib:,.2f}" for h in measured.hosts)
    if declared < have * (1 - HOST_MEMORY_TOLERANCE):
        raise ValueError(
            f"--host-memory-gb {declared_gb:g} declares {declared:,.2f} GiB for {hosts} "
            f"host(s), but they have {have:,.2f} GiB ({each}): the dataset must be 5x the "
            "clients' memory, so a smaller declaration is refused; leave --host-memory-gb out "
            "to size on what was read"
        )
    if declared > have * (1 + HOST_MEMORY_TOLERANCE):
        return (
            f"--host-memory-gb {declared_gb:g} declares {declared:,.2f} GiB for {hosts} "
            f"host(s), more than the {have:,.2f} GiB read from them ({each}); the rules check "
            "uses what was read"
        )
    return None
