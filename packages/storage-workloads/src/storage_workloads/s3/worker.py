"""One client process of the object-storage runner (:func:`client_main`): its threads
upload the dataset or run the workload's mix, and report what they measured."""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, BinaryIO, Final

from storage_workloads.objresults import Recorder
from storage_workloads.s3.protocol import _ClientTask, _Part, _read_frame, _write_frame
from storage_workloads.s3.target import ObjectStoreError, _make_client, _short

_CHUNK: Final = 1 << 20  # bytes read from a GET body at a time

_MAX_CONSECUTIVE_ERRORS: Final = 50  # a thread gives up after this many failures in a row


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
