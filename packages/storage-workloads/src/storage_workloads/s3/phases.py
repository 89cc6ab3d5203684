"""The phases of an object-storage run: :func:`prepare`, :func:`get`, and :func:`run`, which
runs them and writes the results files."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from storage_workloads._records import JsonRecord
from storage_workloads.objects import ObjectWorkload
from storage_workloads.objresults import (
    BUCKET_SCHEMES,
    SCHEMA,
    HostInfo,
    ObjectResults,
    PhaseSummary,
    Recorder,
    summarize,
    summarize_ops,
    write_results,
)
from storage_workloads.s3.clients import _Measured, _run_clients
from storage_workloads.s3.protocol import _ClientTask
from storage_workloads.s3.target import (
    ObjectStoreError,
    S3Target,
    _bucket_exists,
    _ensure_bucket,
    _existing_objects,
    _make_client,
    _object_size,
)

Command = Literal["prepare", "get", "run"]

#: ``run``'s commands; ``run`` is prepare then get.
COMMANDS: Final = ("prepare", "get", "run")

#: How a phase's client tasks run: :func:`~storage_workloads.s3.clients._run_clients` (local
#: processes) by default; a multi-host run spreads them over its hosts.
ClientRunner = Callable[[Sequence[_ClientTask]], _Measured]


@dataclass(frozen=True)
class ObjectSizes(JsonRecord):
    """The sizes of a prepared dataset: the distribution they were drawn from, their total,
    mean, standard deviation, minimum and maximum, and the mean the workload expects."""

    distribution: str
    total_bytes: int
    mean: float
    stdev: float
    min: int
    max: int
    expected_mean: float


@dataclass(frozen=True, kw_only=True)
class PrepareSummary(PhaseSummary):
    """The prepare phase (:func:`prepare`): besides its figures, the dataset's objects, how
    many were uploaded and skipped (already there), whether the bucket was created, the
    clients and threads, and the objects' sizes."""

    objects: int
    uploaded: int
    skipped: int
    bucket_created: bool
    clients: int
    concurrency: int
    sizes: ObjectSizes


@dataclass(frozen=True)
class WarmupSummary(JsonRecord):
    """The uncounted warm-up before a get phase: what was asked (``ops`` or ``duration``), its
    time, ops, bytes, failures and their first messages, ops skipped, and ops by op."""

    mode: str
    requested_ops: int | None
    requested_duration_s: float | None
    elapsed_s: float
    ops: int
    bytes: int
    errors: int
    error_samples: list[str]
    skipped: int
    by_op: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class GetSummary(PhaseSummary):
    """The get phase (:func:`get`): besides its figures by op, how long it ran (``ops`` or
    ``duration``, as asked), the dataset's objects, the clients and threads, the mix, the
    warm-up (``None``: none), and where its PUTs went and how many are left (``None``: no
    PUTs)."""

    mode: str
    requested_ops: int | None
    requested_duration_s: float | None
    objects: int
    clients: int
    concurrency: int
    mix: dict[str, int]
    warmup: WarmupSummary | None
    put_prefix: str | None
    put_objects_left: int

    @property
    def failed_ops(self) -> int:
        """The phase's failed ops, its warm-up's included."""
        return super().failed_ops + (self.warmup.errors if self.warmup else 0)

    @property
    def error_samples(self) -> list[str]:
        """The first distinct failure messages, the counted ops' before the warm-up's."""
        return super().error_samples + (self.warmup.error_samples if self.warmup else [])


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
    runner: ClientRunner = _run_clients,
) -> PrepareSummary:
    """Create the bucket if missing and upload the dataset; the phase summary (op ``PUT``).

    Object ``i`` gets key ``workload.object_key(i)`` and ``workload.object_sizes(seed)[i]``
    random bytes. The ``clients`` processes upload every ``clients``-th object each, with
    ``concurrency`` threads. With ``skip_existing`` the objects already there with the right
    size are left alone (and counted as ``skipped``). ``runner`` runs the client tasks.
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
        measured = runner(tasks)
        rec, elapsed = measured.part.recorder("PUT"), measured.elapsed_s
    else:
        rec, elapsed = Recorder(bucket_scheme), 0.0
    summary = summarize(
        rec,
        phase="prepare",
        op="PUT",
        elapsed_s=elapsed,
        kind=PrepareSummary,
        objects=n,
        uploaded=rec.ops,
        skipped=n - len(todo),
        bucket_created=created,
        clients=workload.clients,
        concurrency=workload.concurrency,
        sizes=ObjectSizes(
            distribution=workload.size_distribution,
            total_bytes=sum(sizes),
            mean=statistics.fmean(sizes),
            stdev=statistics.pstdev(sizes) if n > 1 else 0.0,
            min=min(sizes),
            max=max(sizes),
            expected_mean=workload.expected_object_bytes,
        ),
    )
    _say(log, _one_line(summary))
    return summary


def _run_id() -> str:
    """A name for one run's PUTs: the UTC time and 6 random hex digits."""
    return f"{_dt.datetime.now(_dt.UTC):%Y%m%dT%H%M%SZ}-{os.urandom(3).hex()}"


def _mix_text(workload: ObjectWorkload) -> str:
    return ",".join(f"{op}={weight}" for op, weight in workload.mix)


def _warmup_summary(workload: ObjectWorkload, measured: _Measured) -> WarmupSummary | None:
    warm = measured.warmup
    if warm is None:
        return None
    return WarmupSummary(
        mode="ops" if workload.warmup_ops is not None else "duration",
        requested_ops=workload.warmup_ops,
        requested_duration_s=workload.warmup_period_s,
        elapsed_s=measured.warmup_elapsed_s,
        ops=warm.ops,
        bytes=sum(rec.total_bytes for rec in warm.recorders.values()),
        errors=sum(rec.errors for rec in warm.recorders.values()),
        error_samples=[s for rec in warm.recorders.values() for s in rec.error_samples][:10],
        skipped=sum(warm.skipped.values()),
        by_op={
            op.upper(): warm.recorders[op.upper()].ops if op.upper() in warm.recorders else 0
            for op, _ in workload.mix
        },
    )


def get(
    workload: ObjectWorkload,
    target: S3Target,
    *,
    seed: int = 0,
    bucket_scheme: str = "pow2",
    log: Callable[[str], None] | None = None,
    runner: ClientRunner = _run_clients,
) -> GetSummary:
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
    dataset is missing. ``runner`` runs the client tasks.
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
    measured = runner(tasks)
    warmup = _warmup_summary(workload, measured)
    if warmup is not None:
        _say(
            log,
            f"warm-up: {warmup.ops:,} ops in {warmup.elapsed_s:.2f} s, not counted",
        )
    summary = summarize_ops(
        measured.part.recorders,
        phase="get",
        elapsed_s=measured.elapsed_s,
        weights={op.upper(): weight for op, weight in workload.mix},
        skipped=measured.part.skipped,
        kind=GetSummary,
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


def _one_line(summary: PhaseSummary) -> str:
    t = summary.totals
    line = (
        f"{summary.phase}: {t.ops:,} {summary.op} ops, {t.bytes / 2**20:,.1f} MiB in "
        f"{summary.elapsed_s:.2f} s: {t.ops_per_s:,.1f} ops/s, {t.mib_per_s:,.1f} MiB/s"
    )
    if t.ops:
        line += f", p50 {t.p50_ms:.2f} ms, p99 {t.p99_ms:.2f} ms"
    if summary.errors.count:
        line += f", {summary.errors.count:,} errors"
    return line


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _run_fields(
    command: str,
    workload: ObjectWorkload,
    target: S3Target,
    seed: int,
    bucket_scheme: str,
    started_at: str,
) -> dict[str, Any]:
    """The fields of :class:`ObjectResults` that say what ran where, from this host."""
    return {
        "schema": SCHEMA,
        "command": command,
        "workload": workload,
        "endpoint": target.endpoint_name,
        "bucket": target.bucket,
        "prefix": workload.prefix,
        "seed": seed,
        "bucket_scheme": bucket_scheme,
        "started_at": started_at,
        "host": HostInfo(node=platform.node(), python=platform.python_version()),
    }


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
) -> ObjectResults:
    """Run ``prepare``, ``get`` or ``run`` (prepare then get) and write the results files.

    Returns the results (:meth:`ObjectResults.as_dict` is ``results.json``). The files are
    written even when a phase fails part-way through its operations; a prepare with failed
    uploads stops ``run`` before its get phase with an :class:`ObjectStoreError`.
    """
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    _check_scheme(bucket_scheme)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ObjectStoreError(f"--out {out} exists and is not a directory")
    started_at = _now()
    phases: list[PhaseSummary] = []

    def results(finished_at: str | None) -> ObjectResults:
        return ObjectResults(
            **_run_fields(command, workload, target, seed, bucket_scheme, started_at),
            finished_at=finished_at,
            phases=list(phases),
        )

    try:
        if command in ("prepare", "run"):
            prepared = prepare(
                workload,
                target,
                seed=seed,
                skip_existing=skip_existing,
                bucket_scheme=bucket_scheme,
                log=log,
            )
            phases.append(prepared)
            failed = prepared.errors.count
            if command == "run" and failed:
                samples = "; ".join(prepared.errors.samples[:3])
                raise ObjectStoreError(
                    f"prepare failed for {failed:,} of {prepared.objects:,} objects, so the get "
                    f"phase did not run: {samples}"
                )
        if command in ("get", "run"):
            phases.append(get(workload, target, seed=seed, bucket_scheme=bucket_scheme, log=log))
    except BaseException:
        if phases:  # keep what was measured; the error is what the caller sees
            with contextlib.suppress(OSError):
                write_results(out, results(_now()))
        raise
    done = results(_now())
    try:
        paths = write_results(out, done)
    except OSError as exc:
        raise ObjectStoreError(f"cannot write the results to {out}: {exc}") from None
    _say(log, f"results: {paths['results.json']}")
    return done
