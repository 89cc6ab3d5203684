"""Run an :class:`~storage_workloads.ObjectWorkload` against an S3 endpoint through boto3.

- :func:`prepare`: create the bucket if it is missing and upload the dataset (or the objects
  that are not there yet, with ``skip_existing``).
- :func:`get`: ``clients`` processes, each with ``concurrency`` threads, run the workload's mix
  (GETs of uniformly random objects of the dataset by default; PUT, LIST, STAT and DELETE by
  weight) for ``duration_s`` seconds or ``ops`` operations in all, after an uncounted warm-up
  if the workload has one.
- :func:`run`: ``prepare``, ``get`` or ``prepare`` then ``get``, and write the results files.

boto3 is an optional dependency (the ``s3`` extra); it is imported only when a run starts.
Credentials come from boto3's usual chain: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(and ``AWS_SESSION_TOKEN``), ``AWS_PROFILE`` and the shared config files. Every failure that
stops a run is raised as :class:`ObjectStoreError` with a message that names the endpoint,
bucket or key at fault.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import os
import pickle
import platform
import queue as queue_mod
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

from storage_workloads.objects import ObjectWorkload
from storage_workloads.objresults import (
    BUCKET_SCHEMES,
    SCHEMA,
    Recorder,
    summarize,
    summarize_ops,
    write_results,
)

__all__ = [
    "COMMANDS",
    "Command",
    "ObjectStoreError",
    "S3Target",
    "get",
    "prepare",
    "run",
]

Command = Literal["prepare", "get", "run"]
#: ``run``'s commands; ``run`` is prepare then get.
COMMANDS: Final = ("prepare", "get", "run")
ADDRESSING_STYLES: Final = ("path", "virtual", "auto")

_CHUNK: Final = 1 << 20  # bytes read from a GET body at a time
_MAX_CONSECUTIVE_ERRORS: Final = 50  # a thread gives up after this many failures in a row
_READY_TIMEOUT_S: Final = 120.0
_START_DELAY_S: Final = 0.05


class ObjectStoreError(Exception):
    """A run that cannot start or finish; the message says why (endpoint, bucket or key)."""


@dataclass(frozen=True)
class S3Target:
    """Where the dataset lives: the bucket and how to reach it.

    Attributes:
        bucket: bucket name.
        endpoint: ``http://`` or ``https://`` URL of the S3 endpoint; ``None`` uses boto3's
            default (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` if set, else AWS).
        region: region name; ``None`` uses ``AWS_REGION``/``AWS_DEFAULT_REGION`` or the
            profile's, else ``us-east-1``.
        addressing_style: ``path`` (``URL/bucket/key``, what most S3-compatible servers
            expect; the default), ``virtual`` (``bucket.host/key``) or ``auto``.
    """

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    addressing_style: str = "path"

    def __post_init__(self) -> None:
        if not isinstance(self.bucket, str) or not self.bucket.strip():
            raise ValueError(f"S3Target.bucket must be a non-empty string, got {self.bucket!r}")
        if self.endpoint is not None and (
            not isinstance(self.endpoint, str)
            or not self.endpoint.lower().startswith(("http://", "https://"))
            or len(self.endpoint.split("://", 1)[1].strip("/")) == 0
        ):
            raise ValueError(
                f"S3Target.endpoint must be an http:// or https:// URL, got {self.endpoint!r}"
            )
        if self.addressing_style not in ADDRESSING_STYLES:
            raise ValueError(
                f"S3Target.addressing_style must be one of {ADDRESSING_STYLES}, "
                f"got {self.addressing_style!r}"
            )

    @property
    def endpoint_name(self) -> str:
        """The endpoint as error messages name it."""
        if self.endpoint:
            return self.endpoint
        env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return env or "the default AWS S3 endpoint"

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"


# -- boto3 ---------------------------------------------------------------------------------------


def _botocore_exceptions() -> Any:
    try:
        from botocore import exceptions
    except ImportError:
        raise ObjectStoreError(
            "the object-storage runner needs boto3, which is not installed: "
            "install the s3 extra (pip install 'storage-workloads[s3]')"
        ) from None
    return exceptions


def _make_client(target: S3Target, *, pool: int, attempts: int) -> Any:
    _botocore_exceptions()
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=max(pool, 1),
        retries={"max_attempts": attempts, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        s3={"addressing_style": target.addressing_style},
    )
    try:
        return boto3.session.Session().client(
            "s3", endpoint_url=target.endpoint, region_name=target.region, config=config
        )
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise ObjectStoreError(f"invalid S3 endpoint {target.endpoint_name}: {exc}") from None
    except Exception as exc:
        raise _explain(exc, target, "creating the S3 client") from None


def _error_code(exc: Any) -> tuple[str, int | None]:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status


def _explain(exc: BaseException, target: S3Target, what: str) -> ObjectStoreError:
    """An :class:`ObjectStoreError` that says what failed, where, and why."""
    if isinstance(exc, ObjectStoreError):
        return exc
    be = _botocore_exceptions()
    where = target.endpoint_name
    if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
        return ObjectStoreError(
            f"{what}: no usable AWS credentials for {where}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        )
    if isinstance(exc, be.ConnectionError | be.HTTPClientError):
        return ObjectStoreError(f"{what}: cannot reach the S3 endpoint {where}: {exc}")
    if isinstance(exc, be.ClientError):
        code, status = _error_code(exc)
        if code in {"NoSuchBucket"} or (status == 404 and "bucket" in what):
            return ObjectStoreError(
                f"{what}: bucket {target.bucket!r} does not exist at {where}; "
                "create it with `storage-workloads object prepare`"
            )
        if status == 403 or code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
            return ObjectStoreError(
                f"{what}: access denied by {where} ({code or status}): check the credentials "
                f"and the permissions on bucket {target.bucket!r}"
            )
        return ObjectStoreError(f"{what}: {where} answered {code or status}: {exc}")
    if isinstance(exc, be.ParamValidationError):
        return ObjectStoreError(f"{what}: invalid request: {exc}")
    if isinstance(exc, be.BotoCoreError):
        return ObjectStoreError(f"{what}: {where}: {exc}")
    return ObjectStoreError(f"{what}: {type(exc).__name__}: {exc}")


def _short(exc: BaseException) -> str:
    code, status = _error_code(exc)
    if code or status:
        return f"{code or status}"
    return f"{type(exc).__name__}: {exc}"


def _bucket_exists(client: Any, target: S3Target) -> bool:
    be = _botocore_exceptions()
    try:
        client.head_bucket(Bucket=target.bucket)
    except be.ClientError as exc:
        code, status = _error_code(exc)
        if status == 404 or code in {"404", "NoSuchBucket", "NotFound"}:
            return False
        raise _explain(exc, target, f"checking bucket {target.bucket!r}") from None
    except Exception as exc:
        raise _explain(exc, target, f"checking bucket {target.bucket!r}") from None
    return True


def _ensure_bucket(client: Any, target: S3Target) -> bool:
    """Create the bucket if it is missing; True if it was created."""
    if _bucket_exists(client, target):
        return False
    be = _botocore_exceptions()
    kwargs: dict[str, Any] = {"Bucket": target.bucket}
    region = client.meta.region_name
    if region and region not in {"us-east-1", "aws-global"}:
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**kwargs)
    except be.ClientError as exc:
        code, _ = _error_code(exc)
        if code == "BucketAlreadyOwnedByYou":
            return False
        raise _explain(exc, target, f"creating bucket {target.bucket!r}") from None
    except Exception as exc:
        raise _explain(exc, target, f"creating bucket {target.bucket!r}") from None
    return True


def _object_size(client: Any, target: S3Target, key: str) -> int | None:
    """The size of an object, or None if there is no such object."""
    be = _botocore_exceptions()
    try:
        return int(client.head_object(Bucket=target.bucket, Key=key)["ContentLength"])
    except be.ClientError as exc:
        code, status = _error_code(exc)
        if status == 404 or code in {"404", "NoSuchKey", "NotFound"}:
            return None
        raise _explain(exc, target, f"checking object {target.url(key)}") from None
    except Exception as exc:
        raise _explain(exc, target, f"checking object {target.url(key)}") from None


def _existing_objects(client: Any, target: S3Target, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=prefix
        )
        for page in pages:
            for item in page.get("Contents", ()):
                out[item["Key"]] = int(item["Size"])
    except Exception as exc:
        raise _explain(exc, target, f"listing {target.url(prefix)}") from None
    return out


# -- client processes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _ClientTask:
    """What one client process does: upload ``items`` (``op="PUT"``, prepare) or run the
    workload's mix (``op="MIX"``), for ``ops_per_thread`` or until ``duration_s`` has passed,
    after a warm-up of ``warmup_per_thread`` ops or ``warmup_s`` seconds if one is given."""

    client_id: int
    op: str  # "PUT" or "MIX"
    workload: ObjectWorkload
    target: S3Target
    seed: int
    scheme: str
    duration_s: float | None = None  # MIX: timed run
    ops_per_thread: tuple[int, ...] | None = None  # MIX: op-count run
    warmup_s: float | None = None  # MIX: timed warm-up
    warmup_per_thread: tuple[int, ...] | None = None  # MIX: op-count warm-up
    run_id: str = ""  # MIX: PUT keys go under {effective_put_prefix}{run_id}/
    items: tuple[tuple[int, int], ...] = ()  # PUT: (object index, size)

    @property
    def has_warmup(self) -> bool:
        return self.warmup_s is not None or self.warmup_per_thread is not None


@dataclass
class _Part:
    """What the threads of a phase measured: one recorder per op, the skipped ops, and (for the
    counted phase) how many objects the run put and did not delete."""

    scheme: str
    recorders: dict[str, Recorder] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    put_left: int = 0

    def recorder(self, op: str) -> Recorder:
        rec = self.recorders.get(op)
        if rec is None:
            rec = self.recorders[op] = Recorder(self.scheme)
        return rec

    def merge(self, other: _Part) -> None:
        for op, rec in other.recorders.items():
            self.recorder(op).merge(rec)
        for op, n in other.skipped.items():
            self.skipped[op] = self.skipped.get(op, 0) + n
        self.put_left += other.put_left

    @property
    def ops(self) -> int:
        return sum(rec.ops for rec in self.recorders.values())


class _Worker:
    """One thread of a client in the mix: its op stream and the keys it put and has not
    deleted, kept from the warm-up into the counted phase."""

    def __init__(self, task: _ClientTask, client: Any, thread: int) -> None:
        wl = task.workload
        self.task, self.client, self.thread = task, client, thread
        self.stream = wl.op_stream(task.seed, task.client_id, thread)
        self.put_root = (
            f"{wl.effective_put_prefix}{task.run_id}/c{task.client_id:03d}-t{thread:03d}-"
        )
        self.put_count = 0
        self.put_keys: collections.deque[str] = collections.deque()
        self.current = wl.mix[0][0].upper()  # the op under way, for a thread failure
        self.consecutive = 0
        self.stopped = False

    def run(self, count: int | None, deadline: float, t0: float, part: _Part) -> None:
        """``count`` ops (``None``: until ``deadline``), measured from ``t0``, into ``part``."""
        clock = time.time
        done = 0
        while not self.stopped and ((done < count) if count is not None else clock() < deadline):
            op, arg = next(self.stream)
            done += 1
            self._one(op, arg, t0, part)

    def _one(self, op: str, arg: int, t0: float, part: _Part) -> None:
        name = self.current = op.upper()
        wl, bucket, s3 = self.task.workload, self.task.target.bucket, self.client
        body = b""
        if op == "delete":
            if not self.put_keys:  # nothing of this run's own to delete
                part.skipped[name] = part.skipped.get(name, 0) + 1
                return
            key = self.put_keys.popleft()
        elif op == "put":
            self.put_count += 1
            key = f"{self.put_root}{self.put_count:08d}.dat"
            body = os.urandom(arg)  # incompressible, unique content, made before the clock starts
        elif op == "list":
            key = wl.leaf_prefix(arg)
        else:
            key = wl.object_key(arg)
        rec = part.recorder(name)
        nbytes = items = 0
        perf = time.perf_counter
        start = perf()
        try:
            if op == "get":
                stream = s3.get_object(Bucket=bucket, Key=key)["Body"]
                try:
                    for chunk in stream.iter_chunks(_CHUNK):
                        nbytes += len(chunk)
                finally:
                    stream.close()
            elif op == "put":
                s3.put_object(Bucket=bucket, Key=key, Body=body)
                nbytes = arg
            elif op == "stat":
                s3.head_object(Bucket=bucket, Key=key)
            elif op == "list":
                page = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=wl.list_max_keys)
                items = len(page.get("Contents", ()))
            else:
                s3.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:
            if op == "delete":
                self.put_keys.appendleft(key)  # still there: a later DELETE tries it again
            rec.error(f"{name} {key}: {_short(exc)}")
            self.consecutive += 1
            if self.consecutive >= _MAX_CONSECUTIVE_ERRORS:
                rec.error(
                    f"thread {self.thread} stopped after {self.consecutive} failed ops in a row"
                )
                self.stopped = True
            return
        latency = perf() - start
        self.consecutive = 0
        if op == "put":
            self.put_keys.append(key)
        rec.items += items
        rec.record(nbytes, latency, time.time() - t0)


def _put_thread(
    client: Any,
    task: _ClientTask,
    thread: int,
    t0: float,
    items: Any,
    lock: threading.Lock,
    rec: Recorder,
) -> None:
    wl, bucket = task.workload, task.target.bucket
    consecutive = 0
    clock, perf = time.time, time.perf_counter
    while True:
        with lock:
            item = next(items, None)
        if item is None:
            return
        index, size = item
        key = wl.object_key(index)
        body = os.urandom(size)  # incompressible, unique content (sai3-bench: fill random)
        start = perf()
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body)
        except Exception as exc:
            rec.error(f"PUT {key}: {_short(exc)}")
            consecutive += 1
            if consecutive >= _MAX_CONSECUTIVE_ERRORS:
                rec.error(f"thread {thread} stopped after {consecutive} failed PUTs in a row")
                return
            continue
        latency = perf() - start
        consecutive = 0
        rec.record(size, latency, clock() - t0)


def _join_all(threads: list[threading.Thread], parts: list[_Part], scheme: str) -> _Part:
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    merged = _Part(scheme)
    for part in parts:
        merged.merge(part)
    return merged


def _run_uploads(task: _ClientTask, client: Any, t0: float) -> _Part:
    """Prepare: upload ``task.items`` with ``concurrency`` threads."""
    items = iter(task.items)
    lock = threading.Lock()
    threads, parts = [], []

    def guarded(thread: int, rec: Recorder) -> None:
        try:
            _put_thread(client, task, thread, t0, items, lock, rec)
        except BaseException as exc:  # a thread must not die silently
            rec.error(f"thread failed: {type(exc).__name__}: {exc}")

    for thread in range(min(task.workload.concurrency, len(task.items))):
        part = _Part(task.scheme)
        parts.append(part)
        threads.append(threading.Thread(target=guarded, args=(thread, part.recorder("PUT"))))
    return _join_all(threads, parts, task.scheme)


def _run_workers(
    workers: Sequence[_Worker], counts: Sequence[int | None], deadline: float, t0: float
) -> _Part:
    """One phase of the mix: worker ``i`` runs ``counts[i]`` ops (``None``: until ``deadline``)."""
    scheme = workers[0].task.scheme
    threads, parts = [], []

    def guarded(worker: _Worker, count: int | None, part: _Part) -> None:
        try:
            worker.run(count, deadline, t0, part)
        except BaseException as exc:  # a thread must not die silently
            part.recorder(worker.current).error(f"thread failed: {type(exc).__name__}: {exc}")
            worker.stopped = True

    for worker, count in zip(workers, counts, strict=True):
        if count == 0:
            continue
        part = _Part(scheme)
        parts.append(part)
        threads.append(threading.Thread(target=guarded, args=(worker, count, part)))
    return _join_all(threads, parts, scheme)


def _write_frame(stream: BinaryIO, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream: BinaryIO) -> Any:
    """The next object on ``stream``; EOFError at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _wait_for_start(stdin: BinaryIO) -> float:
    """Read the common start time from the parent and sleep until it; the start time."""
    t0 = float(_read_frame(stdin))
    delay = t0 - time.time()
    if delay > 0:
        time.sleep(delay)
    return t0


def client_main() -> int:
    """Body of one client process (``python -m storage_workloads._client``).

    Reads its :class:`_ClientTask` from stdin, makes its S3 client, says ``ready`` on stdout,
    waits for the common start time on stdin, and runs. With a warm-up it runs the warm-up
    first, writes ``warm`` with what it measured and the seconds from the start to its end, and
    waits for a second common start time before the counted phase; the warm-up leaves each
    thread's op stream and PUT keys where the counted phase goes on from. It then writes
    ``done`` with its :class:`_Part` and the seconds from the (last) start to its end. Failures
    are written as ``error`` with a message.
    """
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, not into the frames
    stdin = sys.stdin.buffer
    try:
        task: _ClientTask = _read_frame(stdin)
        client = _make_client(task.target, pool=task.workload.concurrency, attempts=3)
        _write_frame(out, ("ready", None))
        t0 = _wait_for_start(stdin)
        if task.op == "PUT":
            part = _run_uploads(task, client, t0)
        else:
            threads = task.workload.concurrency
            workers = [_Worker(task, client, thread) for thread in range(threads)]
            if task.has_warmup:
                counts = task.warmup_per_thread or (None,) * threads
                warm = _run_workers(workers, counts, t0 + (task.warmup_s or 0.0), t0)
                _write_frame(out, ("warm", (warm, time.time() - t0)))
                t0 = _wait_for_start(stdin)
            counts = task.ops_per_thread or (None,) * threads
            part = _run_workers(workers, counts, t0 + (task.duration_s or 0.0), t0)
            part.put_left = sum(len(worker.put_keys) for worker in workers)
        _write_frame(out, ("done", (part, time.time() - t0)))
    except EOFError:
        return 3  # the parent went away
    except BaseException as exc:
        message = str(exc) if isinstance(exc, ObjectStoreError) else f"{type(exc).__name__}: {exc}"
        _write_frame(out, ("error", message))
        return 1
    return 0


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
    deadline = None if timeout is None else time.monotonic() + timeout
    while len(got) < len(clients):
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            cid, what, payload = inbox.get(timeout=wait)
        except queue_mod.Empty:
            missing = sorted(set(range(len(clients))) - set(got))
            raise ObjectStoreError(
                f"client processes {missing} were not {kind} after {timeout:.0f} s"
            ) from None
        if what == "error":
            raise ObjectStoreError(f"client {cid}: {payload}")
        if what == "eof":
            if cid in got:
                continue  # it said what it had to say, then exited
            client = clients[cid]
            code = client.proc.wait()
            tail = client.stderr_tail()
            raise ObjectStoreError(
                f"client process {cid} exited with code {code} before it was {kind}"
                + (f": {tail}" if tail else "")
            )
        if what == kind:
            got[cid] = payload
    return got


@dataclass
class _Measured:
    """What the clients of a phase measured: the counted phase and, if any, the warm-up."""

    part: _Part
    elapsed_s: float
    warmup: _Part | None = None
    warmup_elapsed_s: float = 0.0


def _merge_reports(scheme: str, reports: dict[int, Any]) -> tuple[_Part, float]:
    merged = _Part(scheme)
    elapsed = 0.0
    for cid in sorted(reports):
        part, end_s = reports[cid]
        merged.merge(part)
        elapsed = max(elapsed, end_s)
    return merged, elapsed


def _start_all(clients: Sequence[_Client]) -> None:
    t0 = time.time() + _START_DELAY_S
    for client in clients:
        _write_frame(client.stdin, t0)


def _run_clients(tasks: Sequence[_ClientTask]) -> _Measured:
    """Run the tasks in one process each, started together (and, after a warm-up, started
    together again); what they measured, merged."""
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
        _start_all(clients)
        if tasks[0].has_warmup:
            warm = _merge_reports(scheme, _collect(inbox, clients, "warm", None))
            _start_all(clients)
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
        return _Measured(part, elapsed)
    return _Measured(part, elapsed, warm[0], warm[1])


# -- phases --------------------------------------------------------------------------------------


def _check_scheme(bucket_scheme: str) -> None:
    if bucket_scheme not in BUCKET_SCHEMES:
        raise ValueError(f"bucket_scheme must be one of {BUCKET_SCHEMES}, got {bucket_scheme!r}")


def _say(log: Callable[[str], None] | None, message: str) -> None:
    if log is not None:
        log(message)


def prepare(
    workload: ObjectWorkload,
    target: S3Target,
    *,
    seed: int = 0,
    skip_existing: bool = False,
    bucket_scheme: str = "pow2",
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Create the bucket if missing and upload the dataset; the phase summary (op ``PUT``).

    Object ``i`` gets key ``workload.object_key(i)`` and ``workload.object_sizes(seed)[i]``
    random bytes. The ``clients`` processes upload every ``clients``-th object each, with
    ``concurrency`` threads. With ``skip_existing`` the objects already there with the right
    size are left alone (and counted as ``skipped``).
    """
    _check_scheme(bucket_scheme)
    n = workload.total_objects
    sizes = workload.object_sizes(seed)
    client = _make_client(target, pool=1, attempts=1)
    created = _ensure_bucket(client, target)
    todo = list(range(n))
    if skip_existing and not created:
        existing = _existing_objects(client, target, workload.prefix)
        todo = [i for i in todo if existing.get(workload.object_key(i)) != sizes[i]]
    _say(
        log,
        f"prepare: {len(todo):,} of {n:,} objects ({sum(sizes[i] for i in todo) / 2**30:.2f} "
        f"GiB) to {target.url(workload.prefix)} at {target.endpoint_name}, "
        f"{workload.clients} client(s) x {workload.concurrency} threads",
    )
    if todo:
        tasks = [
            _ClientTask(
                client_id=c,
                op="PUT",
                workload=workload,
                target=target,
                seed=seed,
                scheme=bucket_scheme,
                items=tuple((i, sizes[i]) for i in todo[c :: workload.clients]),
            )
            for c in range(workload.clients)
        ]
        measured = _run_clients(tasks)
        rec, elapsed = measured.part.recorder("PUT"), measured.elapsed_s
    else:
        rec, elapsed = Recorder(bucket_scheme), 0.0
    summary = summarize(
        rec,
        phase="prepare",
        op="PUT",
        elapsed_s=elapsed,
        objects=n,
        uploaded=rec.ops,
        skipped=n - len(todo),
        bucket_created=created,
        clients=workload.clients,
        concurrency=workload.concurrency,
        sizes={
            "distribution": workload.size_distribution,
            "total_bytes": sum(sizes),
            "mean": statistics.fmean(sizes),
            "stdev": statistics.pstdev(sizes) if n > 1 else 0.0,
            "min": min(sizes),
            "max": max(sizes),
            "expected_mean": workload.expected_object_bytes,
        },
    )
    _say(log, _one_line(summary))
    return summary


def _run_id() -> str:
    """A name for one run's PUTs: the UTC time and 6 random hex digits."""
    return f"{_dt.datetime.now(_dt.UTC):%Y%m%dT%H%M%SZ}-{os.urandom(3).hex()}"


def _mix_text(workload: ObjectWorkload) -> str:
    return ",".join(f"{op}={weight}" for op, weight in workload.mix)


def _warmup_summary(workload: ObjectWorkload, measured: _Measured) -> dict[str, Any] | None:
    warm = measured.warmup
    if warm is None:
        return None
    return {
        "mode": "ops" if workload.warmup_ops is not None else "duration",
        "requested_ops": workload.warmup_ops,
        "requested_duration_s": workload.warmup_period_s,
        "elapsed_s": measured.warmup_elapsed_s,
        "ops": warm.ops,
        "bytes": sum(rec.total_bytes for rec in warm.recorders.values()),
        "errors": sum(rec.errors for rec in warm.recorders.values()),
        "error_samples": [s for rec in warm.recorders.values() for s in rec.error_samples][:10],
        "skipped": sum(warm.skipped.values()),
        "by_op": {
            op.upper(): warm.recorders[op.upper()].ops if op.upper() in warm.recorders else 0
            for op, _ in workload.mix
        },
    }


def get(
    workload: ObjectWorkload,
    target: S3Target,
    *,
    seed: int = 0,
    bucket_scheme: str = "pow2",
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the workload's mix over a prepared dataset (GETs only by default); the phase summary.

    ``clients`` processes with ``concurrency`` threads each; thread ``t`` of client ``c`` draws
    its ops from :meth:`ObjectWorkload.op_stream` ``(seed, c, t)``:

    - GET: reads a dataset object chosen uniformly, the whole body, in 1 MiB chunks;
    - PUT: writes a new object of a size drawn from the size distribution under
      ``{effective_put_prefix}{run id}/``, never into the dataset;
    - LIST: one page of at most ``list_max_keys`` keys of a leaf directory of the dataset;
    - STAT: a HEAD of a dataset object chosen uniformly;
    - DELETE: removes the oldest object that this thread put and has not deleted; with none,
      it is skipped (counted under ``skipped``, not issued).

    With ``workload.ops`` set, the ops are split evenly over the clients and threads
    (:meth:`ObjectWorkload.planned_ops` lists them); otherwise every thread issues ops until
    ``duration_s`` has passed since the common start and the requests in flight then
    complete. A warm-up (``warmup_ops`` or ``warmup_period_s``) runs first, from the same
    streams; when every client has finished it, all start the counted phase together, so its
    ``elapsed_s`` and rates cover the counted ops only, and ``warmup`` says how many ops the
    warm-up ran. Fails early, naming them, if the bucket or the first or last object of the
    dataset is missing.
    """
    _check_scheme(bucket_scheme)
    n = workload.total_objects
    client = _make_client(target, pool=1, attempts=1)
    if not _bucket_exists(client, target):
        raise ObjectStoreError(
            f"bucket {target.bucket!r} does not exist at {target.endpoint_name}; "
            "prepare the dataset first (storage-workloads object prepare)"
        )
    for index in sorted({0, n - 1}):
        key = workload.object_key(index)
        if _object_size(client, target, key) is None:
            raise ObjectStoreError(
                f"object {target.url(key)} is missing at {target.endpoint_name}: the bucket "
                f"does not hold the {n:,} objects of {workload.name}; prepare them first "
                "(with the same --objects, --prefix and --scale-with-clients)"
            )
    mix = dict(workload.mix)
    run_id = _run_id() if "put" in mix else ""
    per_client = workload.ops_per_thread() if workload.ops is not None else None
    warm_client = workload.warmup_ops_per_thread() if workload.warmup_ops is not None else None
    mode = f"{workload.ops:,} ops" if workload.ops is not None else f"{workload.duration_s:g} s"
    if workload.warmup_ops is not None:
        mode += f" after a warm-up of {workload.warmup_ops:,} ops"
    elif workload.warmup_period_s is not None:
        mode += f" after a warm-up of {workload.warmup_period_s:g} s"
    _say(
        log,
        f"get: {mode} of {_mix_text(workload)} over {n:,} objects in "
        f"{target.url(workload.prefix)} at {target.endpoint_name}, {workload.clients} client(s) "
        f"x {workload.concurrency} threads",
    )
    tasks = [
        _ClientTask(
            client_id=c,
            op="MIX",
            workload=workload,
            target=target,
            seed=seed,
            scheme=bucket_scheme,
            duration_s=None if per_client is not None else float(workload.duration_s),
            ops_per_thread=tuple(per_client[c]) if per_client is not None else None,
            warmup_s=workload.warmup_period_s,
            warmup_per_thread=tuple(warm_client[c]) if warm_client is not None else None,
            run_id=run_id,
        )
        for c in range(workload.clients)
    ]
    measured = _run_clients(tasks)
    warmup = _warmup_summary(workload, measured)
    if warmup is not None:
        _say(
            log,
            f"warm-up: {warmup['ops']:,} ops in {warmup['elapsed_s']:.2f} s, not counted",
        )
    summary = summarize_ops(
        measured.part.recorders,
        phase="get",
        elapsed_s=measured.elapsed_s,
        weights={op.upper(): weight for op, weight in workload.mix},
        skipped=measured.part.skipped,
        mode="ops" if workload.ops is not None else "duration",
        requested_ops=workload.ops,
        requested_duration_s=None if workload.ops is not None else workload.duration_s,
        objects=n,
        clients=workload.clients,
        concurrency=workload.concurrency,
        mix=mix,
        warmup=warmup,
        put_prefix=f"{workload.effective_put_prefix}{run_id}/" if run_id else None,
        put_objects_left=measured.part.put_left,
    )
    _say(log, _one_line(summary))
    return summary


def _one_line(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    line = (
        f"{summary['phase']}: {t['ops']:,} {summary['op']} ops, {t['bytes'] / 2**20:,.1f} MiB in "
        f"{summary['elapsed_s']:.2f} s: {t['ops_per_s']:,.1f} ops/s, {t['mib_per_s']:,.1f} MiB/s"
    )
    if t["ops"]:
        line += f", p50 {t['p50_ms']:.2f} ms, p99 {t['p99_ms']:.2f} ms"
    if summary["errors"]["count"]:
        line += f", {summary['errors']['count']:,} errors"
    return line


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def run(
    command: Command,
    workload: ObjectWorkload,
    target: S3Target,
    *,
    out_dir: str | os.PathLike[str],
    seed: int = 0,
    skip_existing: bool = False,
    bucket_scheme: str = "pow2",
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run ``prepare``, ``get`` or ``run`` (prepare then get) and write the results files.

    Returns the results (the content of ``results.json``). The files are written even when a
    phase fails part-way through its operations; a prepare with failed uploads stops ``run``
    before its get phase with an :class:`ObjectStoreError`.
    """
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    _check_scheme(bucket_scheme)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ObjectStoreError(f"--out {out} exists and is not a directory")
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "workload": workload.as_dict(),
        "endpoint": target.endpoint_name,
        "bucket": target.bucket,
        "prefix": workload.prefix,
        "seed": seed,
        "bucket_scheme": bucket_scheme,
        "started_at": _now(),
        "finished_at": None,
        "host": {"node": platform.node(), "python": platform.python_version()},
        "phases": [],
    }
    try:
        if command in ("prepare", "run"):
            phase = prepare(
                workload,
                target,
                seed=seed,
                skip_existing=skip_existing,
                bucket_scheme=bucket_scheme,
                log=log,
            )
            results["phases"].append(phase)
            failed = phase["errors"]["count"]
            if command == "run" and failed:
                samples = "; ".join(phase["errors"]["samples"][:3])
                raise ObjectStoreError(
                    f"prepare failed for {failed:,} of {phase['objects']:,} objects, so the get "
                    f"phase did not run: {samples}"
                )
        if command in ("get", "run"):
            results["phases"].append(
                get(workload, target, seed=seed, bucket_scheme=bucket_scheme, log=log)
            )
    except BaseException:
        if results["phases"]:  # keep what was measured; the error is what the caller sees
            results["finished_at"] = _now()
            with contextlib.suppress(OSError):
                write_results(out, results)
        raise
    results["finished_at"] = _now()
    try:
        paths = write_results(out, results)
    except OSError as exc:
        raise ObjectStoreError(f"cannot write the results to {out}: {exc}") from None
    _say(log, f"results: {paths['results.json']}")
    return results
