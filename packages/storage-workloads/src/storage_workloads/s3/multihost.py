"""Object-storage runs over several client hosts (:func:`run_on_hosts`).

This process is the controller. For each phase it starts one agent per host of the ``--hosts``
list through mpirun, as ``storage-workloads run --hosts`` starts DLIO and as the memory probe
reaches each host (one ``mpirun -n 1 --host NAME:1`` launch per host: Open MPI folds every name
of one machine into one node, so a single launch would start fewer agents than hosts named on
the loopback). The agent (:func:`agent_main`, ``python -m storage_workloads._host_agent``)
runs that host's client processes as a local run does and talks to the controller over
mpirun's forwarded stdin and stdout, in the frames of :mod:`storage_workloads.s3.protocol`:

- controller: the host's :class:`_HostTask` (its clients' tasks);
- agent: ``ready`` (its clients are ready; with the host's name, Python and code digest);
- controller: ``start`` with a delay in seconds; every host starts its clients that long after
  the message arrives, on its own clock (no clock synchronisation is assumed);
- agent: ``warm`` (after a warm-up, then another ``start``), then ``done`` with each client's
  measurements and the host's start time; ``alive`` every few seconds meanwhile; ``error``
  with a message when it fails.

Client ids are global (host ``i`` runs the clients after those of the hosts before it), so the
op streams and the split of an op count are those of a one-host run with as many clients, and
each host prepares the objects of its own clients: every object once. The controller merges
the hosts' measurements, which keep every latency, so the merged percentiles are those of all
the operations, not an average of the hosts'.

A host whose agent fails, exits, answers with another code, or says nothing for
``host_timeout_s`` ends its part in bounded time: it is named in the results, the other hosts'
measurements are kept, later phases do not run, and the run is marked incomplete. A host that
fails before the phase starts calls the phase off on every host.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import os
import platform
import queue as queue_mod
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from storage_workloads._records import JsonRecord
from storage_workloads.hosts import HostSpec, format_hosts, mpirun_prefix
from storage_workloads.objects import ObjectWorkload
from storage_workloads.objresults import (
    SCHEMA,
    Errors,
    ObjectResults,
    OpStats,
    PhaseSummary,
    Recorder,
    _stats,
    write_results,
)
from storage_workloads.s3.clients import (
    _READY_TIMEOUT_S,
    ClientReport,
    _Measured,
    _merge_reports,
    _run_clients,
)
from storage_workloads.s3.phases import (
    COMMANDS,
    Command,
    _check_scheme,
    _now,
    _run_fields,
    _say,
    get,
    prepare,
)
from storage_workloads.s3.protocol import _ClientTask, _Part, _read_frame, _write_frame
from storage_workloads.s3.target import ObjectStoreError, S3Target

__all__ = [
    "AGENT_MODULE",
    "DEFAULT_HOST_TIMEOUT_S",
    "FORWARDED_ENV",
    "ClientFigures",
    "HostPhase",
    "HostRun",
    "MultiHostResults",
    "agent_command",
    "agent_main",
    "code_digest",
    "run_on_hosts",
]

#: The module each host runs: ``python -m storage_workloads._host_agent``.
AGENT_MODULE: Final = "storage_workloads._host_agent"
#: How long a host may say nothing before it counts as silent (``--host-timeout``).
DEFAULT_HOST_TIMEOUT_S: Final = 60.0
#: The environment mpirun passes on to the agents (``-x NAME``: the names only are on its
#: command line, the values travel inside mpirun), when set here: where the endpoint is and the
#: credentials, and the path this package is imported from.
FORWARDED_ENV: Final = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CA_BUNDLE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "PYTHONPATH",
)
#: The start delay the controller sends: long enough for the message to reach every host.
_START_DELAY_S: Final = 0.5
_STOP_WAIT_S: Final = 10.0  # how long an agent may take to exit once told to stop
#: How a host's part of a phase can end; ``ready`` and ``warm`` wait for the next ``start``.
_ENDED: Final = frozenset({"done", "failed", "silent", "stopped"})
#: The schema of a multi-host ``results.json``: a one-host run's, plus the hosts' parts.
_SCHEMA_HOSTS: Final = SCHEMA + "+hosts"


@functools.cache
def code_digest() -> str:
    """A digest of this package's Python files: two hosts with the same digest run the same
    code (a version number alone would not tell two checkouts apart)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _identity() -> dict[str, str]:
    return {
        "node": platform.node(),
        "python": platform.python_version(),
        "code": code_digest(),
    }


@dataclass(frozen=True)
class _HostTask:
    """What one agent does: run ``tasks`` (its clients) and say ``alive`` every
    ``heartbeat_s``."""

    host: str
    tasks: tuple[_ClientTask, ...]
    heartbeat_s: float


# ---------------------------------------------------------------------------------------------
# The agent, on each host


def agent_main() -> int:
    """Body of an agent (``python -m storage_workloads._host_agent``), started by mpirun.

    Reads its :class:`_HostTask` from stdin, runs its clients as a local run does, says
    ``ready`` when they are, starts them after the delay of each ``start``, and writes ``warm``
    and ``done`` with each client's report, ``alive`` meanwhile; a failure is written as
    ``error``. Its clients are stopped if the controller goes away, or calls the phase off,
    before a start (end of stdin).
    """
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, not into the frames
    stdin = sys.stdin.buffer
    lock = threading.Lock()
    stopped = threading.Event()

    def send(kind: str, payload: object) -> None:
        with lock:
            _write_frame(out, (kind, payload))

    def beat(every_s: float) -> None:
        while not stopped.wait(every_s):
            with contextlib.suppress(OSError, ValueError):
                send("alive", None)

    starts: list[float] = []

    def start(warm: dict[int, ClientReport] | None) -> float:
        if warm is None:
            send("ready", _identity())
        else:
            send("warm", warm)
        kind, delay = _read_frame(stdin)
        if kind != "start":
            raise ObjectStoreError(f"expected start from the controller, got {kind!r}")
        starts.append(time.time() + float(delay))
        return starts[-1]

    try:
        task: _HostTask = _read_frame(stdin)
        threading.Thread(target=beat, args=(task.heartbeat_s,), daemon=True).start()
        measured = _run_clients(task.tasks, start)
        send("done", (measured.clients, starts[-1]))
    except EOFError:
        return 3  # the controller went away, or called the phase off
    except BaseException as exc:
        message = str(exc) if isinstance(exc, ObjectStoreError) else f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(OSError, ValueError):
            send("error", message)
        return 1
    finally:
        stopped.set()
    return 0


# ---------------------------------------------------------------------------------------------
# The controller


@dataclass(frozen=True)
class ClientFigures(JsonRecord):
    """One client of a host in a phase: its time from the host's start to its end, its
    figures over that time, and its failed ops."""

    client: int
    elapsed_s: float
    totals: OpStats
    errors: int


@dataclass(frozen=True)
class HostPhase(JsonRecord):
    """One host in one phase: how it ended (``done``; ``failed``: its agent failed or exited;
    ``silent``: it said nothing for the host timeout; ``stopped``: the phase was called off
    before it started, because another host failed; ``not run``: an earlier phase failed),
    why, its start and end on its own clock (ISO, UTC), its time from the start to its last
    client's end, its figures over that time, failures, and each client's figures."""

    phase: str
    status: str
    message: str | None
    started_at: str | None
    finished_at: str | None
    elapsed_s: float | None
    totals: OpStats | None
    errors: Errors | None
    clients: list[ClientFigures]


@dataclass(frozen=True)
class HostRun(JsonRecord):
    """One client host of a run: the name given, its slots (client processes) and their ids,
    what the agent said of itself (machine name, Python, code digest), and each phase."""

    host: str
    slots: int
    client_ids: list[int]
    node: str | None
    python: str | None
    code: str | None
    phases: list[HostPhase]


@dataclass(frozen=True)
class MultiHostResults(ObjectResults):
    """A run over several hosts: the merged figures of :class:`ObjectResults` (``host`` is the
    controller), whether every host finished every phase (``complete``), the hosts that did not
    (``incomplete_hosts``, one line each), the host list, and each host's part."""

    complete: bool = True
    incomplete_hosts: list[str] = field(default_factory=list)
    host_list: str = ""
    hosts: list[HostRun] = field(default_factory=list)


def _iso(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).isoformat(timespec="milliseconds")


class _Agent:
    """One host's agent as the controller sees it: the mpirun process, its frames in the
    controller's inbox, and when it was last heard from."""

    def __init__(
        self, index: int, spec: HostSpec, cmd: list[str], env: dict[str, str], inbox: Any
    ) -> None:
        self.index, self.spec = index, spec
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.heard = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: BinaryIO = self.proc.stdin
        self.reader = threading.Thread(
            target=self._read, args=(self.proc.stdout, inbox), daemon=True
        )
        self.reader.start()

    def _read(self, stream: BinaryIO, inbox: Any) -> None:
        try:
            while True:
                kind, payload = _read_frame(stream)
                inbox.put((self.index, kind, payload))
        except EOFError:
            inbox.put((self.index, "eof", None))
        except Exception as exc:  # not a frame: something else wrote to the agent's stdout
            inbox.put((self.index, "eof", f"unreadable output ({type(exc).__name__})"))

    def send(self, obj: object) -> None:
        _write_frame(self.stdin, obj)

    def exit_message(self, wait_s: float = 5.0) -> str:
        try:
            code: int | None = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            code = None
        self.stderr.seek(0)
        lines = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
        tail = " ".join(line.strip() for line in lines[-3:] if line.strip())
        status = "did not exit" if code is None else f"exit status {code}"
        return f"mpirun {status}" + (f": {tail[-400:]}" if tail else ", no output")

    def stop(self) -> None:
        """Close its stdin (the agent then exits and stops its clients), then end mpirun if
        it lingers: SIGTERM first, which mpirun passes on to its job."""
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            self.proc.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=5)
        self.stderr.close()


@dataclass
class _HostState:
    """What the controller knows of one host in the phase under way."""

    status: str = "running"
    message: str | None = None
    identity: dict[str, str] | None = None
    warm: dict[int, ClientReport] | None = None
    done: dict[int, ClientReport] | None = None
    started: float | None = None


def agent_command(spec: HostSpec, *, mpi_args: Sequence[str] = ()) -> list[str]:
    """``mpirun -n 1 --host NAME:1 [mpi_args] -x VAR... PYTHON -m storage_workloads._host_agent``
    for one host, PYTHON this one's (the same path on every host); ``RuntimeError`` when mpirun
    is missing, ``ValueError`` when ``mpi_args`` choose hosts too."""
    cmd = mpirun_prefix(1, hosts=[HostSpec(spec.name, 1)], mpi_args=mpi_args)
    for name in FORWARDED_ENV:
        if name in os.environ or name == "PYTHONPATH":
            cmd += ["-x", name]
    return [*cmd, sys.executable, "-m", AGENT_MODULE]


class _HostRunner:
    """The runner of a multi-host run's phases (``runner=`` of :func:`prepare` and
    :func:`get`): the client tasks spread over the hosts, one agent each, and what they
    measured merged; each host's part is kept in :attr:`phases`."""

    def __init__(
        self,
        hosts: Sequence[HostSpec],
        *,
        mpi_args: Sequence[str],
        host_timeout_s: float,
        log: Callable[[str], None] | None,
    ) -> None:
        self.hosts = tuple(hosts)
        self.mpi_args = tuple(mpi_args)
        self.host_timeout_s = host_timeout_s
        self.log = log
        self.phases: list[tuple[str, list[_HostState]]] = []
        self.identities: dict[int, dict[str, str]] = {}
        firsts = [sum(h.slots for h in self.hosts[:i]) for i in range(len(self.hosts))]
        self.client_ids = [
            list(range(first, first + h.slots)) for first, h in zip(firsts, self.hosts, strict=True)
        ]
        self.cmds = [agent_command(h, mpi_args=self.mpi_args) for h in self.hosts]

    @property
    def failed(self) -> list[str]:
        """One line per host that did not finish a phase: host, phase, status, why."""
        return [
            f"{self.hosts[i].name} ({phase}, {state.status}): {state.message}"
            for phase, states in self.phases
            for i, state in enumerate(states)
            if state.status != "done"
        ]

    def _env(self) -> dict[str, str]:
        import storage_workloads

        env = dict(os.environ)
        src = str(Path(storage_workloads.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        return env

    def __call__(self, tasks: Sequence[_ClientTask]) -> _Measured:
        phase = "prepare" if tasks[0].op == "PUT" else "get"
        by_id = {task.client_id: task for task in tasks}
        states = [_HostState() for _ in self.hosts]
        self.phases.append((phase, states))
        inbox: queue_mod.Queue[Any] = queue_mod.Queue()
        heartbeat = min(5.0, self.host_timeout_s / 4)
        agents: list[_Agent] = []
        try:
            env = self._env()
            for i, spec in enumerate(self.hosts):
                agents.append(_Agent(i, spec, self.cmds[i], env, inbox))
                task = _HostTask(spec.name, tuple(by_id[c] for c in self.client_ids[i]), heartbeat)
                # A task is sent from a thread of its own: an agent slow to start must not hold
                # up the others' (a prepare task holds every object of the host's share).
                threading.Thread(target=self._send, args=(agents[-1], task)).start()
            self._await(inbox, agents, states, "ready")
            if any(s.status != "ready" for s in states):
                for state in states:
                    if state.status not in _ENDED:
                        state.status, state.message = "stopped", "another host failed first"
                raise _CalledOff(self.failed)
            mismatch = self._check_code(states)
            if mismatch:
                raise _CalledOff(self.failed)
            self._start(agents, states, warm=False)
            if tasks[0].has_warmup:
                self._await(inbox, agents, states, "warm")
                self._start(agents, states, warm=True)
            self._await(inbox, agents, states, "done")
        finally:
            for agent in agents:
                agent.stop()
        return self._merged(tasks[0].scheme, states)

    @staticmethod
    def _send(agent: _Agent, task: _HostTask) -> None:
        # When mpirun has ended, its exit says why, through the reader's end of its output.
        with contextlib.suppress(OSError, ValueError):
            agent.send(task)

    def _check_code(self, states: list[_HostState]) -> bool:
        mine = code_digest()
        bad = False
        for i, state in enumerate(states):
            identity = state.identity or {}
            self.identities[i] = identity
            if identity.get("code") != mine:
                bad = True
                state.status = "failed"
                state.message = (
                    f"runs other code (digest {identity.get('code')}, this host "
                    f"{mine}, Python {identity.get('python')}): install the same version of "
                    "storage-workloads on every host"
                )
        if bad:
            for state in states:
                if state.status == "ready":
                    state.status, state.message = "stopped", "another host runs other code"
        return bad

    def _start(self, agents: list[_Agent], states: list[_HostState], *, warm: bool) -> None:
        want = "warm" if warm else "ready"
        for agent, state in zip(agents, states, strict=True):
            if state.status != want:
                continue
            try:
                agent.send(("start", _START_DELAY_S))
            except (OSError, ValueError) as exc:
                state.status, state.message = "failed", f"lost the agent: {exc}"
                continue
            state.status = "running"

    def _await(self, inbox: Any, agents: list[_Agent], states: list[_HostState], kind: str) -> None:
        """Wait until every running host has sent ``kind``, failed, or been silent for the
        host timeout (its mpirun is then stopped). Waiting for ``ready`` ends at the first
        host that fails: the phase cannot start."""
        now = time.monotonic()
        for agent in agents:
            agent.heard = now
        while True:
            waiting = [a for a, s in zip(agents, states, strict=True) if s.status == "running"]
            if not waiting or (kind == "ready" and any(s.status in _ENDED for s in states)):
                return
            # An agent says nothing until it has started, and mpirun may take a while to start
            # it (ssh, Python's imports on a busy host): starting has the clients' allowance.
            allowed = self.host_timeout_s + (_READY_TIMEOUT_S if kind == "ready" else 0.0)
            deadline = min(a.heard for a in waiting) + allowed
            try:
                index, what, payload = inbox.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue_mod.Empty:
                now = time.monotonic()
                for agent in waiting:
                    if now - agent.heard >= allowed:
                        state = states[agent.index]
                        state.status = "silent"
                        state.message = f"said nothing for {allowed:g} s (waiting for {kind})"
                        _say(self.log, f"host {agent.spec.name}: {state.message}; stopping it")
                        agent.proc.terminate()
                continue
            agent, state = agents[index], states[index]
            agent.heard = time.monotonic()
            if state.status in _ENDED:
                continue
            if what == "error":
                state.status, state.message = "failed", str(payload)
            elif what == "eof":
                state.status = "failed"
                state.message = payload or agent.exit_message()
            elif what == kind and state.status == "running":
                state.status = kind
                if kind == "ready":
                    state.identity = payload
                elif kind == "warm":
                    state.warm = payload
                else:
                    state.done, state.started = payload
            if state.status == "failed":
                _say(self.log, f"host {agent.spec.name} failed: {state.message}")

    def _merged(self, scheme: str, states: list[_HostState]) -> _Measured:
        reports: dict[int, ClientReport] = {}
        warm: dict[int, ClientReport] = {}
        for state in states:
            if state.status == "done" and state.done is not None:
                reports.update(state.done)
                warm.update(state.warm or {})
        if not reports:
            raise _CalledOff(self.failed)
        part, elapsed = _merge_reports(scheme, reports)
        if not any(s.warm for s in states):
            return _Measured(part, elapsed, clients=reports)
        warm_part, warm_elapsed = _merge_reports(scheme, warm)
        return _Measured(part, elapsed, warm_part, warm_elapsed, clients=reports)

    def host_runs(self, phases_not_run: Sequence[str]) -> list[HostRun]:
        runs = []
        for i, spec in enumerate(self.hosts):
            identity = self.identities.get(i) or {}
            parts = [_host_phase(phase, states[i]) for phase, states in self.phases]
            parts += [
                HostPhase(p, "not run", "an earlier phase failed", None, None, None, None, None, [])
                for p in phases_not_run
            ]
            runs.append(
                HostRun(
                    host=spec.name,
                    slots=spec.slots,
                    client_ids=self.client_ids[i],
                    node=identity.get("node"),
                    python=identity.get("python"),
                    code=identity.get("code"),
                    phases=parts,
                )
            )
        return runs


class _CalledOff(ObjectStoreError):
    """A phase that could not run or produced nothing, with the hosts at fault."""

    def __init__(self, failed: list[str]) -> None:
        super().__init__("; ".join(failed) or "no host finished the phase")


def _host_phase(phase: str, state: _HostState) -> HostPhase:
    if state.status != "done" or state.done is None or state.started is None:
        return HostPhase(phase, state.status, state.message, None, None, None, None, None, [])
    reports = state.done
    scheme = next(iter(reports.values()))[0].scheme
    part, elapsed = _merge_reports(scheme, reports)
    clients = [
        ClientFigures(cid, end_s, *_figures(rep, end_s))
        for cid, (rep, end_s) in sorted(reports.items())
    ]
    totals, errors = _figures(part, elapsed)
    samples = [s for rec in part.recorders.values() for s in rec.error_samples][:10]
    return HostPhase(
        phase=phase,
        status="done",
        message=None,
        started_at=_iso(state.started),
        finished_at=_iso(state.started + elapsed),
        elapsed_s=elapsed,
        totals=totals,
        errors=Errors(errors, samples),
        clients=clients,
    )


def _figures(part: _Part, elapsed_s: float) -> tuple[OpStats, int]:
    """All the ops of ``part`` as one :class:`OpStats` over ``elapsed_s``, and its failures."""
    merged = Recorder(part.scheme)
    for rec in part.recorders.values():
        merged.merge(rec)
    latencies = [x for lat in merged.latencies.values() for x in lat]
    return _stats(latencies, merged.total_bytes, elapsed_s), merged.errors


def run_on_hosts(
    command: Command,
    workload: ObjectWorkload,
    target: S3Target,
    hosts: Sequence[HostSpec],
    *,
    out_dir: str | os.PathLike[str],
    seed: int = 0,
    skip_existing: bool = False,
    bucket_scheme: str = "pow2",
    mpi_args: Sequence[str] = (),
    host_timeout_s: float = DEFAULT_HOST_TIMEOUT_S,
    log: Callable[[str], None] | None = None,
) -> MultiHostResults:
    """Run ``prepare``, ``get`` or ``run`` on ``hosts`` and write the merged results files.

    ``workload.clients`` must be the hosts' slots added up (host ``i`` runs the clients after
    the slots of the hosts before it). The bucket is created and checked from this host.
    Returns the results, whose
    ``complete`` is ``False`` when a host did not finish (they are written either way, with
    the measurements of the hosts that finished).
    """
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    _check_scheme(bucket_scheme)
    hosts = tuple(hosts)
    if not hosts:
        raise ValueError("run_on_hosts needs at least one host")
    slots = sum(h.slots for h in hosts)
    if workload.clients != slots:
        raise ValueError(
            f"the workload has {workload.clients} client(s) but --hosts {format_hosts(hosts)} "
            f"has {slots} slot(s): one client process runs per slot"
        )
    if not host_timeout_s > 0:
        raise ValueError(f"--host-timeout must be > 0 seconds, got {host_timeout_s!r}")
    todo = [p for p in ("prepare", "get") if command in (p, "run")]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ObjectStoreError(f"--out {out} exists and is not a directory")
    try:
        runner = _HostRunner(hosts, mpi_args=mpi_args, host_timeout_s=host_timeout_s, log=log)
    except RuntimeError as exc:  # no mpirun
        raise ObjectStoreError(str(exc)) from None
    started_at = _now()
    summaries: list[PhaseSummary] = []
    _say(log, f"hosts: {format_hosts(hosts)} ({slots} client(s)), one agent each through mpirun")

    def results(finished_at: str | None, not_run: Sequence[str]) -> MultiHostResults:
        failed = runner.failed
        fields = _run_fields(command, workload, target, seed, bucket_scheme, started_at)
        return MultiHostResults(
            **(fields | {"schema": _SCHEMA_HOSTS}),
            finished_at=finished_at,
            phases=list(summaries),
            complete=not failed and not not_run,
            incomplete_hosts=failed,
            host_list=format_hosts(hosts),
            hosts=runner.host_runs(not_run),
        )

    kwargs: dict[str, Any] = {"seed": seed, "bucket_scheme": bucket_scheme, "log": log}
    not_run: list[str] = []
    try:
        for index, phase in enumerate(todo):
            try:
                if phase == "prepare":
                    summary: PhaseSummary = prepare(
                        workload,
                        target,
                        skip_existing=skip_existing,
                        runner=runner,
                        **kwargs,
                    )
                else:
                    summary = get(workload, target, runner=runner, **kwargs)
            except _CalledOff:
                not_run = todo[index + 1 :]
                break
            summaries.append(summary)
            if runner.failed or (phase == "prepare" and summary.errors.count):
                not_run = todo[index + 1 :]
                break
    except BaseException:
        if summaries or runner.phases:  # keep what was measured; the error is what is seen
            with contextlib.suppress(OSError):
                write_results(out, results(_now(), not_run))
        raise
    done = results(_now(), not_run)
    try:
        paths = write_results(out, done)
    except OSError as exc:
        raise ObjectStoreError(f"cannot write the results to {out}: {exc}") from None
    for line in done.incomplete_hosts:
        _say(log, f"incomplete: {line}")
    _say(log, f"results: {paths['results.json']}" + ("" if done.complete else " (incomplete)"))
    return done
