"""The client processes as the parent sees them: started together, fed their tasks, and
their reports collected and merged (:func:`_run_clients`)."""

from __future__ import annotations

import contextlib
import os
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

from storage_workloads.s3.protocol import _ClientTask, _Part, _read_frame, _write_frame
from storage_workloads.s3.target import ObjectStoreError

_READY_TIMEOUT_S: Final = 120.0

_START_DELAY_S: Final = 0.05


class _Client:
    """One client process as the parent sees it."""

    def __init__(self, task: _ClientTask, inbox: queue_mod.Queue[Any]) -> None:
        import storage_workloads

        self.task = task
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        env = dict(os.environ)
        src = str(Path(storage_workloads.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "storage_workloads._client"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: BinaryIO = self.proc.stdin
        self.reader = threading.Thread(
            target=self._read, args=(self.proc.stdout, inbox), daemon=True
        )
        self.reader.start()

    def _read(self, stream: BinaryIO, inbox: queue_mod.Queue[Any]) -> None:
        cid = self.task.client_id
        try:
            while True:
                kind, payload = _read_frame(stream)
                inbox.put((cid, kind, payload))
        except Exception:  # EOF, or a broken frame: the process is gone or going
            inbox.put((cid, "eof", None))

    def stderr_tail(self, limit: int = 600) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode("utf-8", "replace").strip()
        return text[-limit:]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        self.stderr.close()


def _collect(
    inbox: queue_mod.Queue[Any], clients: Sequence[_Client], kind: str, timeout: float | None
) -> dict[int, Any]:
    got: dict[int, Any] = {}
    by_id = {client.task.client_id: client for client in clients}
    deadline = None if timeout is None else time.monotonic() + timeout
    while len(got) < len(clients):
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            cid, what, payload = inbox.get(timeout=wait)
        except queue_mod.Empty:
            missing = sorted(set(by_id) - set(got))
            raise ObjectStoreError(
                f"client processes {missing} were not {kind} after {timeout:.0f} s"
            ) from None
        if what == "error":
            raise ObjectStoreError(f"client {cid}: {payload}")
        if what == "eof":
            if cid in got:
                continue  # it said what it had to say, then exited
            client = by_id[cid]
            code = client.proc.wait()
            tail = client.stderr_tail()
            raise ObjectStoreError(
                f"client process {cid} exited with code {code} before it was {kind}"
                + (f": {tail}" if tail else "")
            )
        if what == kind:
            got[cid] = payload
    return got


#: What one client reports at the end of a phase: what it measured and the seconds from the
#: common start to its end.
ClientReport = tuple[_Part, float]


@dataclass
class _Measured:
    """What the clients of a phase measured: the counted phase and, if any, the warm-up, merged,
    and each client's own report of the counted phase (by client id)."""

    part: _Part
    elapsed_s: float
    warmup: _Part | None = None
    warmup_elapsed_s: float = 0.0
    clients: dict[int, ClientReport] = field(default_factory=dict)


def _merge_reports(scheme: str, reports: dict[int, Any]) -> tuple[_Part, float]:
    merged = _Part(scheme)
    elapsed = 0.0
    for cid in sorted(reports):
        part, end_s = reports[cid]
        merged.merge(part)
        elapsed = max(elapsed, end_s)
    return merged, elapsed


#: When the clients start: called once they are all ready (with ``None``) and, after a
#: warm-up, again with what each client measured in it; returns the common start time.
StartTime = Callable[[dict[int, ClientReport] | None], float]


def _soon(_: dict[int, ClientReport] | None) -> float:
    return time.time() + _START_DELAY_S


def _start_all(clients: Sequence[_Client], t0: float) -> None:
    for client in clients:
        _write_frame(client.stdin, t0)


def _run_clients(tasks: Sequence[_ClientTask], start: StartTime = _soon) -> _Measured:
    """Run the tasks in one process each, started together at ``start``'s time (and, after a
    warm-up, started together again); what they measured, merged and by client."""
    inbox: queue_mod.Queue[Any] = queue_mod.Queue()
    clients: list[_Client] = []
    scheme = tasks[0].scheme
    finished = False
    warm: tuple[_Part, float] | None = None
    try:
        for task in tasks:
            clients.append(_Client(task, inbox))
            _write_frame(clients[-1].stdin, task)
        _collect(inbox, clients, "ready", _READY_TIMEOUT_S)
        _start_all(clients, start(None))
        if tasks[0].has_warmup:
            warm_reports = _collect(inbox, clients, "warm", None)
            warm = _merge_reports(scheme, warm_reports)
            _start_all(clients, start(warm_reports))
        done = _collect(inbox, clients, "done", None)
        finished = True
    except OSError as exc:  # a pipe to a client broke
        raise ObjectStoreError(f"lost a client process: {exc}") from None
    finally:
        for client in clients:
            if not finished and client.proc.poll() is None:
                client.proc.kill()  # failed or interrupted: the other clients stop too
            client.stop()
    part, elapsed = _merge_reports(scheme, done)
    if warm is None:
        return _Measured(part, elapsed, clients=done)
    return _Measured(part, elapsed, warm[0], warm[1], clients=done)
