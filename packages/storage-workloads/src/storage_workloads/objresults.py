"""Per-operation measurements of an object-storage run and the results files made from them.

A :class:`Recorder` takes one record per completed operation (bytes moved, latency, completion
time); recorders of threads and client processes merge exactly, keeping every latency, so the
percentiles are exact (nearest rank), not estimated from a histogram. :func:`summarize` turns a
recorder into a :class:`PhaseSummary`: totals and per-size-bucket ops/s, MiB/s,
mean/p50/p90/p95/p99/max latency (:class:`OpStats`), plus the per-second log.
:func:`summarize_ops` does the same for a phase of several operations (one recorder per op),
with the figures of every op under ``by_op`` (:class:`OpSummary`). :func:`write_results` writes
``results.json``, ``results.csv`` and ``per_second.csv`` atomically from an
:class:`ObjectResults`; its ``as_dict()`` is ``results.json``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from storage_workloads._atomic import write_text_atomic
from storage_workloads._records import JsonRecord, json_data

if TYPE_CHECKING:
    from storage_workloads.objects import ObjectWorkload

__all__ = [
    "BUCKET_SCHEMES",
    "PERCENTILES",
    "RESULTS_CSV_COLUMNS",
    "RESULTS_FILES",
    "SCHEMA",
    "SIZED_OPS",
    "Bucket",
    "BucketStats",
    "Errors",
    "HostInfo",
    "ObjectResults",
    "OpStats",
    "OpSummary",
    "PhaseSummary",
    "Recorder",
    "SecondCount",
    "bucket_of",
    "percentile",
    "summarize",
    "summarize_ops",
    "write_results",
]

#: Version 2 added op mixes (``by_op``, ``mix``), size distributions and the warm-up.
SCHEMA: Final = "storage-workloads/object-results/2"
#: The ops that move an object's bytes, and so have size buckets; LIST, STAT and DELETE do not.
SIZED_OPS: Final = ("GET", "PUT")
#: Percentiles reported for every bucket, besides the mean and the maximum.
PERCENTILES: Final = (50, 90, 95, 99)
#: The size-bucket schemes: ``pow2`` (the default) and ``sai3`` (sai3-bench's buckets).
BUCKET_SCHEMES: Final = ("pow2", "sai3")
#: The files :func:`write_results` writes, in the order it writes them (``results.json`` last).
RESULTS_FILES: Final = ("per_second.csv", "results.csv", "results.json")
RESULTS_CSV_COLUMNS: Final = (
    "phase",
    "op",
    "bucket",
    "low_bytes",
    "high_bytes",
    "ops",
    "bytes",
    "ops_per_s",
    "mib_per_s",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
)
PER_SECOND_CSV_COLUMNS: Final = ("phase", "op", "second", "ops", "bytes", "mib_per_s")

_SAI3_BOUNDS: Final = (0, 8 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20, 256 << 20, 2 << 30)
_SAI3_LABELS: Final = (
    "zero",
    "1B-8KiB",
    "8KiB-64KiB",
    "64KiB-512KiB",
    "512KiB-4MiB",
    "4MiB-32MiB",
    "32MiB-256MiB",
    "256MiB-2GiB",
    ">2GiB",
)


@dataclass(frozen=True)
class Bucket:
    """A size bucket: sizes ``n`` with ``low < n <= high`` (``high`` ``None``: no bound)."""

    index: int
    label: str
    low: int  # exclusive; -1 for the bucket of empty objects
    high: int | None  # inclusive


def _human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def bucket_of(nbytes: int, scheme: str = "pow2") -> Bucket:
    """The size bucket of an object of ``nbytes`` bytes.

    ``pow2``: bucket ``k`` holds ``2**(k-1) < n <= 2**k`` (labelled e.g. ``128KiB-256KiB``),
    bucket 0 the one-byte objects and ``empty`` the empty ones (index -1). A 32 KiB object is in
    ``16KiB-32KiB``, a 1 MiB one in ``512KiB-1MiB``.

    ``sai3``: sai3-bench's nine buckets with bounds growing eightfold: ``zero``, ``1B-8KiB``,
    ``8KiB-64KiB``, ``64KiB-512KiB``, ``512KiB-4MiB``, ``4MiB-32MiB``, ``32MiB-256MiB``,
    ``256MiB-2GiB`` and ``>2GiB``, upper bounds inclusive.
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if scheme == "pow2":
        if nbytes == 0:
            return Bucket(-1, "empty", -1, 0)
        k = (nbytes - 1).bit_length()
        high = 1 << k
        low = high >> 1 if k else 0
        label = _human(high) if k == 0 else f"{_human(low)}-{_human(high)}"
        return Bucket(k, label, low, high)
    if scheme == "sai3":
        for i, high in enumerate(_SAI3_BOUNDS):
            if nbytes <= high:
                low = _SAI3_BOUNDS[i - 1] if i else -1
                return Bucket(i, _SAI3_LABELS[i], low, high)
        return Bucket(len(_SAI3_BOUNDS), _SAI3_LABELS[-1], _SAI3_BOUNDS[-1], None)
    raise ValueError(f"bucket scheme must be one of {BUCKET_SCHEMES}, got {scheme!r}")


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``p`` % of the values <= it."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"p must be in (0, 100], got {p}")
    rank = math.ceil(p / 100 * n)
    return sorted_values[max(rank, 1) - 1]


@dataclass
class Recorder:
    """Measurements of one thread, client or phase. Mergeable and picklable.

    ``latencies[b]`` holds the latencies (seconds) of the ops in bucket ``b`` and ``nbytes[b]``
    their bytes; ``per_second[s]`` is ``[ops, bytes]`` of the ops that completed in second
    ``s`` after the common start; ``end_s`` is the last completion time after the start;
    ``items`` counts what the ops returned besides bytes (the keys of LIST pages).
    """

    scheme: str = "pow2"
    latencies: dict[int, array] = field(default_factory=dict)
    nbytes: dict[int, int] = field(default_factory=dict)
    buckets: dict[int, Bucket] = field(default_factory=dict)
    per_second: dict[int, list[int]] = field(default_factory=dict)
    end_s: float = 0.0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    items: int = 0

    def record(self, nbytes: int, latency_s: float, done_s: float) -> None:
        """One completed operation of ``nbytes`` bytes, ``done_s`` seconds after the start."""
        bucket = bucket_of(nbytes, self.scheme)
        b = bucket.index
        lat = self.latencies.get(b)
        if lat is None:
            lat = self.latencies[b] = array("d")
            self.nbytes[b] = 0
            self.buckets[b] = bucket
        lat.append(latency_s)
        self.nbytes[b] += nbytes
        second = max(int(done_s), 0)
        slot = self.per_second.get(second)
        if slot is None:
            self.per_second[second] = [1, nbytes]
        else:
            slot[0] += 1
            slot[1] += nbytes
        if done_s > self.end_s:
            self.end_s = done_s

    def error(self, message: str, limit: int = 10) -> None:
        """One failed operation; the first ``limit`` distinct messages are kept."""
        self.errors += 1
        if len(self.error_samples) < limit and message not in self.error_samples:
            self.error_samples.append(message)

    def merge(self, other: Recorder) -> None:
        if other.scheme != self.scheme:
            raise ValueError(f"cannot merge bucket schemes {self.scheme} and {other.scheme}")
        for b, lat in other.latencies.items():
            if b in self.latencies:
                self.latencies[b].extend(lat)
                self.nbytes[b] += other.nbytes[b]
            else:
                self.latencies[b] = array("d", lat)
                self.nbytes[b] = other.nbytes[b]
                self.buckets[b] = other.buckets[b]
        for s, (ops, nbytes) in other.per_second.items():
            slot = self.per_second.setdefault(s, [0, 0])
            slot[0] += ops
            slot[1] += nbytes
        self.end_s = max(self.end_s, other.end_s)
        self.items += other.items
        self.errors += other.errors
        for message in other.error_samples:
            if len(self.error_samples) < 10 and message not in self.error_samples:
                self.error_samples.append(message)

    @property
    def ops(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.nbytes.values())


@dataclass(frozen=True)
class OpStats(JsonRecord):
    """The figures of a set of completed ops: their count and bytes, ops/s and MiB/s over the
    phase's time, and the mean, nearest-rank percentiles (:data:`PERCENTILES`) and maximum of
    their latencies in ms (``None`` without ops)."""

    ops: int
    bytes: int
    ops_per_s: float
    mib_per_s: float
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    def percentile_ms(self, p: int) -> float | None:
        """The ``p``-th percentile of :data:`PERCENTILES`, in ms."""
        if p not in PERCENTILES:
            raise ValueError(f"p must be one of {PERCENTILES}, got {p}")
        value: float | None = getattr(self, f"p{p}_ms")
        return value


@dataclass(frozen=True)
class BucketStats:
    """The ops of one size bucket (:class:`Bucket`): its label and bounds, and their figures."""

    bucket: str
    low_bytes: int
    high_bytes: int | None
    stats: OpStats

    def as_dict(self) -> dict[str, Any]:
        """A row of the results: the bucket, then its figures beside it."""
        return {
            "bucket": self.bucket,
            "low_bytes": self.low_bytes,
            "high_bytes": self.high_bytes,
            **self.stats.as_dict(),
        }


@dataclass(frozen=True)
class SecondCount(JsonRecord):
    """The ops that completed in one second after the phase's start, and their bytes."""

    second: int
    ops: int
    bytes: int


@dataclass(frozen=True)
class Errors(JsonRecord):
    """The failed ops: how many, and the first distinct messages."""

    count: int
    samples: list[str]


@dataclass(frozen=True)
class OpSummary:
    """One op of a phase (:func:`summarize_ops`): its weight and share of the mix, its figures
    over the phase's time, its failures, the ops drawn but not issued, the keys its pages
    listed (LIST only, else ``None``), its size buckets (GET and PUT) and per-second log."""

    weight: int
    share: float
    totals: OpStats
    errors: Errors
    skipped: int
    keys_listed: int | None
    buckets: list[BucketStats]
    per_second: list[SecondCount]

    def as_dict(self) -> dict[str, Any]:
        """Its entry of ``by_op`` (``keys_listed`` only for LIST)."""
        entry = {name: json_data(getattr(self, name)) for name in _OP_HEAD}
        if self.keys_listed is not None:
            entry["keys_listed"] = self.keys_listed
        entry["buckets"] = json_data(self.buckets)
        entry["per_second"] = json_data(self.per_second)
        return entry


_OP_HEAD: Final = ("weight", "share", "totals", "errors", "skipped")


@dataclass(frozen=True, kw_only=True)
class PhaseSummary:
    """One phase of a run (:func:`summarize`, :func:`summarize_ops`): its name and op (``MIX``
    for several), its time from the common start to its end, the bucket scheme, its figures
    and failures, its size buckets and per-second log, and for a phase of ops its figures by
    op (``None`` otherwise). A phase of a run adds its own fields in a subclass; in the JSON
    form they stand between ``errors`` and ``buckets``."""

    phase: str
    op: str
    elapsed_s: float
    bucket_scheme: str
    totals: OpStats
    errors: Errors
    buckets: list[BucketStats]
    per_second: list[SecondCount]
    by_op: dict[str, OpSummary] | None = None

    @property
    def failed_ops(self) -> int:
        """The phase's failed ops (a subclass adds those of its uncounted ops)."""
        return self.errors.count

    @property
    def error_samples(self) -> list[str]:
        """The first distinct messages of :attr:`failed_ops`."""
        return list(self.errors.samples)

    def as_dict(self) -> dict[str, Any]:
        """The phase as ``results.json`` holds it (``by_op`` only for a phase of ops)."""
        names = [f.name for f in dataclasses.fields(self)]
        own = [n for n in names if n not in _PHASE_HEAD and n not in _PHASE_TAIL]
        tail = _PHASE_TAIL if self.by_op is not None else _PHASE_TAIL[:-1]
        return {name: json_data(getattr(self, name)) for name in (*_PHASE_HEAD, *own, *tail)}


_PHASE_HEAD: Final = ("phase", "op", "elapsed_s", "bucket_scheme", "totals", "errors")
_PHASE_TAIL: Final = ("buckets", "per_second", "by_op")

Summary = TypeVar("Summary", bound=PhaseSummary)


def _stats(latencies: Sequence[float], nbytes: int, elapsed_s: float) -> OpStats:
    values = sorted(latencies)
    n = len(values)
    ops_per_s = n / elapsed_s if elapsed_s > 0 else 0.0
    mib_per_s = nbytes / (1 << 20) / elapsed_s if elapsed_s > 0 else 0.0
    if not n:
        return OpStats(n, nbytes, ops_per_s, mib_per_s, None, None, None, None, None, None)
    return OpStats(
        n,
        nbytes,
        ops_per_s,
        mib_per_s,
        mean_ms=math.fsum(values) / n * 1e3,
        **{f"p{p}_ms": percentile(values, p) * 1e3 for p in PERCENTILES},
        max_ms=values[-1] * 1e3,
    )


class _Measurement(NamedTuple):
    """The fields of a :class:`PhaseSummary` (and of an :class:`OpSummary`) that a recorder
    measured."""

    totals: OpStats
    errors: Errors
    buckets: list[BucketStats]
    per_second: list[SecondCount]


def _measured(recorder: Recorder, elapsed_s: float, sized: bool) -> _Measurement:
    buckets = [
        BucketStats(
            recorder.buckets[b].label,
            recorder.buckets[b].low,
            recorder.buckets[b].high,
            _stats(recorder.latencies[b], recorder.nbytes[b], elapsed_s),
        )
        for b in (sorted(recorder.latencies) if sized else ())
    ]
    all_latencies: array = array("d")
    for lat in recorder.latencies.values():
        all_latencies.extend(lat)
    last = max(recorder.per_second, default=-1)
    per_second = [
        SecondCount(s, ops, nb)
        for s in range(last + 1)
        for ops, nb in [recorder.per_second.get(s, (0, 0))]
    ]
    return _Measurement(
        totals=_stats(all_latencies, recorder.total_bytes, elapsed_s),
        errors=Errors(recorder.errors, list(recorder.error_samples)),
        buckets=buckets,
        per_second=per_second,
    )


def summarize(
    recorder: Recorder,
    *,
    phase: str,
    op: str,
    elapsed_s: float,
    sized: bool = True,
    kind: type[Summary] = PhaseSummary,  # type: ignore[assignment]
    **fields: Any,
) -> Summary:
    """The summary of one phase: ``totals``, ``buckets`` (by size) and ``per_second``.

    Rates are over ``elapsed_s``, the time from the common start to the end of the phase, for
    the totals and for every bucket alike (so the buckets' ops/s add up to the total). The
    per-second log covers every second from 0 to the last completion, zeros included; its
    last second is usually partial. ``sized=False`` leaves ``buckets`` empty (ops that move no
    object, or a mix of ops). ``kind`` is the summary's class, a :class:`PhaseSummary` or a
    subclass whose own ``fields`` are given.
    """
    return kind(
        phase=phase,
        op=op,
        elapsed_s=elapsed_s,
        bucket_scheme=recorder.scheme,
        **_measured(recorder, elapsed_s, sized)._asdict(),
        **fields,
    )


def summarize_ops(
    recorders: Mapping[str, Recorder],
    *,
    phase: str,
    elapsed_s: float,
    weights: Mapping[str, int],
    skipped: Mapping[str, int] | None = None,
    kind: type[Summary] = PhaseSummary,  # type: ignore[assignment]
    **fields: Any,
) -> Summary:
    """The summary of a phase of one or more ops, one recorder per op (``GET``, ``PUT``, ...).

    The top level is :func:`summarize` of all the ops merged; its ``op`` is the op's name when
    there is one, else ``MIX``, and it has size buckets only for a single GET or PUT. ``by_op``
    holds, for every op of ``weights`` in their order, its :class:`OpSummary`: its ``weight``
    and ``share`` of the total weight, its ``totals``, ``errors``, ``skipped`` (ops drawn but
    not issued: a DELETE with nothing of the run's own to delete), ``buckets`` (GET and PUT)
    and ``per_second``; LIST also has ``keys_listed``. All rates are over the phase's
    ``elapsed_s``. ``kind`` and ``fields`` as for :func:`summarize`.
    """
    if not weights or set(recorders) - set(weights):
        raise ValueError(
            f"need a weight for every op, got ops {sorted(recorders)} and weights {dict(weights)}"
        )
    scheme = next(iter(recorders.values())).scheme if recorders else "pow2"
    merged = Recorder(scheme)
    for rec in recorders.values():
        merged.merge(rec)
    names = list(weights)
    op = names[0] if len(names) == 1 else "MIX"
    total_weight = sum(weights.values())
    by_op: dict[str, OpSummary] = {}
    for name in names:
        rec = recorders.get(name) or Recorder(scheme)
        part = _measured(rec, elapsed_s, sized=name in SIZED_OPS)._asdict()
        by_op[name] = OpSummary(
            weight=weights[name],
            share=weights[name] / total_weight,
            skipped=(skipped or {}).get(name, 0),
            keys_listed=rec.items if name == "LIST" else None,
            **part,
        )
    return summarize(
        merged,
        phase=phase,
        op=op,
        elapsed_s=elapsed_s,
        sized=op in SIZED_OPS,
        kind=kind,
        by_op=by_op,
        **fields,
    )


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


def _op_parts(phase: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The (op, figures) of a phase's rows: the phase itself, then each op of a mix."""
    parts = [(phase["op"], phase)]
    by_op = phase.get("by_op") or {}
    if len(by_op) > 1:
        parts += list(by_op.items())
    return parts


def _results_csv(results: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RESULTS_CSV_COLUMNS)
    for phase in results["phases"]:
        for op, part in _op_parts(phase):
            rows = [{"bucket": "all", "low_bytes": None, "high_bytes": None, **part["totals"]}]
            rows += part["buckets"]
            for row in rows:
                full = {"phase": phase["phase"], **row, "op": op}
                writer.writerow([_fmt(full[c]) for c in RESULTS_CSV_COLUMNS])
    return buf.getvalue()


def _per_second_csv(results: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PER_SECOND_CSV_COLUMNS)
    for phase in results["phases"]:
        for op, part in _op_parts(phase):
            for row in part["per_second"]:
                mib = row["bytes"] / (1 << 20)
                writer.writerow(
                    [phase["phase"], op, row["second"], row["ops"], row["bytes"], _fmt(mib)]
                )
    return buf.getvalue()


@dataclass(frozen=True)
class HostInfo(JsonRecord):
    """The machine that ran the clients: its node name and Python version."""

    node: str
    python: str


@dataclass(frozen=True)
class ObjectResults(JsonRecord):
    """An object-storage run (``storage_workloads.s3.run``), as ``results.json`` holds it
    (:meth:`as_dict`, :data:`SCHEMA`): the command, the workload, where it ran (endpoint,
    bucket, prefix), the seed and bucket scheme, when it started and finished (``None``: it did
    not), the host, and each phase it ran."""

    schema: str
    command: str
    workload: ObjectWorkload
    endpoint: str
    bucket: str
    prefix: str
    seed: int
    bucket_scheme: str
    started_at: str
    finished_at: str | None
    host: HostInfo
    phases: list[PhaseSummary]

    @property
    def failed_ops(self) -> int:
        """The failed ops of every phase, the warm-ups' included."""
        return sum(phase.failed_ops for phase in self.phases)

    @property
    def error_samples(self) -> list[str]:
        """The failures' first distinct messages, phase by phase."""
        return [sample for phase in self.phases for sample in phase.error_samples]


def write_results(
    out_dir: str | os.PathLike[str], results: ObjectResults | Mapping[str, Any]
) -> dict[str, Path]:
    """Write ``per_second.csv``, ``results.csv`` and ``results.json`` into ``out_dir``, from an
    :class:`ObjectResults` or its :meth:`~ObjectResults.as_dict`.

    Each file is written to a temporary file in ``out_dir``, synced and renamed over the
    target, so a reader never sees a partial file; ``results.json`` comes last, so its
    presence means the set is complete. Returns the paths by file name.
    """
    if isinstance(results, ObjectResults):
        results = results.as_dict()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = {
        "per_second.csv": _per_second_csv(results),
        "results.csv": _results_csv(results),
        "results.json": json.dumps(results, indent=2, allow_nan=False) + "\n",
    }
    paths = {}
    for name in RESULTS_FILES:
        paths[name] = out / name
        write_text_atomic(paths[name], texts[name])
    return paths
