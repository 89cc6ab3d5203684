"""Size buckets, exact percentiles, the phase summary and the results files."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage_workloads import OBJECT_WORKLOADS
from storage_workloads.objresults import (
    RESULTS_CSV_COLUMNS,
    SIZED_OPS,
    Errors,
    HostInfo,
    ObjectResults,
    PhaseSummary,
    Recorder,
    bucket_of,
    percentile,
    summarize,
    summarize_ops,
    write_results,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("nbytes", "label", "low", "high"),
    [
        (0, "empty", -1, 0),
        (1, "1B", 0, 1),
        (2, "1B-2B", 1, 2),
        (3, "2B-4B", 2, 4),
        (32 * KiB, "16KiB-32KiB", 16 * KiB, 32 * KiB),
        (32 * KiB + 1, "32KiB-64KiB", 32 * KiB, 64 * KiB),
        (229_376, "128KiB-256KiB", 128 * KiB, 256 * KiB),
        (MiB, "512KiB-1MiB", 512 * KiB, MiB),
        (7_235_174, "4MiB-8MiB", 4 * MiB, 8 * MiB),
        (32 * MiB, "16MiB-32MiB", 16 * MiB, 32 * MiB),
    ],
)
def test_pow2_buckets(nbytes: int, label: str, low: int, high: int) -> None:
    b = bucket_of(nbytes)
    assert (b.label, b.low, b.high) == (label, low, high)
    assert b.low < nbytes <= b.high


def test_sai3_buckets_match_sai3_bench() -> None:
    bounds = [0, 8 * KiB, 64 * KiB, 512 * KiB, 4 * MiB, 32 * MiB, 256 * MiB, 2 * GiB]
    labels = [
        "zero",
        "1B-8KiB",
        "8KiB-64KiB",
        "64KiB-512KiB",
        "512KiB-4MiB",
        "4MiB-32MiB",
        "32MiB-256MiB",
        "256MiB-2GiB",
        ">2GiB",
    ]
    for i, high in enumerate(bounds):
        assert bucket_of(high, "sai3").label == labels[i]
        assert bucket_of(high + 1, "sai3").label == labels[i + 1]
    assert bucket_of(1, "sai3").index == 1
    assert bucket_of(5 * GiB, "sai3").high is None
    with pytest.raises(ValueError, match="bucket scheme"):
        bucket_of(1, "decimal")
    with pytest.raises(ValueError, match="nbytes"):
        bucket_of(-1)


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, p) for p in (1, 50, 90, 95, 99, 100)] == [1, 50, 90, 95, 99, 100]
    assert [percentile([1.0, 2.0, 3.0], p) for p in (33, 34, 50, 67, 90)] == [1, 2, 2, 3, 3]
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 0)


def _synthetic(seed: int, n: int) -> list[tuple[int, float, float]]:
    rng = random.Random(seed)
    return [
        (rng.choice([100, 40 * KiB, 200 * KiB, MiB]), rng.uniform(1e-4, 0.05), rng.uniform(0, 3.7))
        for _ in range(n)
    ]


def test_recorder_merge_and_summary_are_consistent() -> None:
    ops = _synthetic(1, 2000)
    whole = Recorder()
    parts = [Recorder() for _ in range(3)]
    for k, (nbytes, lat, done) in enumerate(ops):
        whole.record(nbytes, lat, done)
        parts[k % 3].record(nbytes, lat, done)
    merged = Recorder()
    for part in parts:
        merged.merge(part)
    merged.error("GET x: NoSuchKey")
    merged.error("GET x: NoSuchKey")
    elapsed = 4.0
    a = summarize(whole, phase="get", op="GET", elapsed_s=elapsed)
    b = summarize(merged, phase="get", op="GET", elapsed_s=elapsed)
    assert a.buckets == b.buckets and a.totals == b.totals
    assert b.errors == Errors(2, ["GET x: NoSuchKey"])

    totals = b.totals
    assert totals.ops == 2000
    assert totals.bytes == sum(n for n, _, _ in ops)
    assert totals.ops_per_s == pytest.approx(2000 / elapsed)
    assert totals.mib_per_s == pytest.approx(totals.bytes / MiB / elapsed)
    assert totals.mean_ms == pytest.approx(sum(lat for _, lat, _ in ops) / 2000 * 1e3)
    assert totals.max_ms == pytest.approx(max(lat for _, lat, _ in ops) * 1e3)
    assert [x.bucket for x in b.buckets] == [
        "64B-128B",
        "32KiB-64KiB",
        "128KiB-256KiB",
        "512KiB-1MiB",
    ]
    assert sum(x.stats.ops for x in b.buckets) == totals.ops
    assert sum(x.stats.bytes for x in b.buckets) == totals.bytes
    assert sum(x.stats.ops_per_s for x in b.buckets) == pytest.approx(totals.ops_per_s)
    for row in [totals, *(x.stats for x in b.buckets)]:
        chain = [row.p50_ms, row.p90_ms, row.p95_ms, row.p99_ms, row.max_ms]
        assert chain == sorted(chain)  # type: ignore[type-var]
        assert row.mean_ms <= row.max_ms  # type: ignore[operator]
        assert [row.percentile_ms(p) for p in (50, 90, 95, 99)] == chain[:4]
    seconds = b.per_second
    assert [s.second for s in seconds] == [0, 1, 2, 3]
    assert sum(s.ops for s in seconds) == totals.ops
    assert sum(s.bytes for s in seconds) == totals.bytes
    assert seconds[1].ops == sum(1 for _, _, d in ops if 1 <= d < 2)
    with pytest.raises(ValueError, match="p must be one of"):
        totals.percentile_ms(75)


@dataclass(frozen=True, kw_only=True)
class _Counted(PhaseSummary):
    """A phase with a field of its own, as a run's phases have."""

    skipped: int


def test_empty_summary() -> None:
    s = summarize(
        Recorder("sai3"), phase="prepare", op="PUT", elapsed_s=0.0, kind=_Counted, skipped=3
    )
    assert isinstance(s, _Counted)
    assert s.totals.ops == 0 and s.totals.p99_ms is None
    assert s.buckets == [] and s.per_second == [] and s.skipped == 3
    # a phase's own fields stand between its errors and its buckets in results.json
    assert list(s.as_dict()) == [
        "phase",
        "op",
        "elapsed_s",
        "bucket_scheme",
        "totals",
        "errors",
        "skipped",
        "buckets",
        "per_second",
    ]
    with pytest.raises(TypeError, match="skipped"):
        summarize(Recorder(), phase="prepare", op="PUT", elapsed_s=0.0, skipped=3)
    with pytest.raises(ValueError, match="bucket schemes"):
        Recorder("sai3").merge(Recorder("pow2"))


def _results(*phases: PhaseSummary) -> ObjectResults:
    if not phases:
        rec = Recorder()
        for nbytes, lat, done in _synthetic(2, 300):
            rec.record(nbytes, lat, done)
        phases = (summarize(rec, phase="get", op="GET", elapsed_s=3.9),)
    return ObjectResults(
        schema="test",
        command="get",
        workload=OBJECT_WORKLOADS["resnet50_object"],
        endpoint="http://127.0.0.1:9",
        bucket="b",
        prefix="p/",
        seed=0,
        bucket_scheme="pow2",
        started_at="2026-01-02T03:04:05+00:00",
        finished_at=None,
        host=HostInfo("node", "3.12.0"),
        phases=list(phases),
    )


def test_write_results_files_agree(tmp_path: Path) -> None:
    results = _results()
    paths = write_results(tmp_path / "out", results)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "per_second.csv",
        "results.csv",
        "results.json",
    ]
    data = json.loads(paths["results.json"].read_text())
    assert data == results.as_dict()
    assert data["workload"] == OBJECT_WORKLOADS["resnet50_object"].as_dict()
    assert data["host"] == {"node": "node", "python": "3.12.0"}
    assert list(data["phases"][0]["totals"])[:4] == ["ops", "bytes", "ops_per_s", "mib_per_s"]
    assert list(data["phases"][0]["buckets"][0])[:4] == ["bucket", "low_bytes", "high_bytes", "ops"]
    rows = list(csv.DictReader(paths["results.csv"].open()))
    assert tuple(rows[0]) == RESULTS_CSV_COLUMNS
    phase = results.phases[0]
    assert rows[0]["bucket"] == "all" and int(rows[0]["ops"]) == phase.totals.ops
    assert [r["bucket"] for r in rows[1:]] == [b.bucket for b in phase.buckets]
    for row, bucket in zip(rows[1:], phase.buckets, strict=True):
        assert int(row["bytes"]) == bucket.stats.bytes
        assert float(row["p99_ms"]) == pytest.approx(bucket.stats.p99_ms, abs=1e-6)
    per_second = list(csv.DictReader(paths["per_second.csv"].open()))
    assert [int(r["ops"]) for r in per_second] == [s.ops for s in phase.per_second]
    assert sum(int(r["bytes"]) for r in per_second) == phase.totals.bytes
    assert paths["results.json"].stat().st_mode & 0o777 == 0o644


def test_write_results_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_results(tmp_path, {"schema": "old", "phases": []})

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_results(tmp_path, _results())
    monkeypatch.undo()
    assert json.loads((tmp_path / "results.json").read_text())["schema"] == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "per_second.csv",
        "results.csv",
        "results.json",
    ]  # no temporary file left behind


def _mix_recorders() -> dict[str, Recorder]:
    """GET and PUT with sizes, LIST and STAT without; no DELETE completed."""
    recs = {op: Recorder() for op in ("GET", "PUT", "LIST", "STAT")}
    for k, (nbytes, lat, done) in enumerate(_synthetic(3, 400)):
        op = ("GET", "PUT", "LIST", "STAT")[k % 4]
        recs[op].record(nbytes if op in ("GET", "PUT") else 0, lat, done)
        if op == "LIST":
            recs[op].items += 7
    recs["PUT"].error("PUT k: SlowDown")
    return recs


def test_summarize_ops_breaks_a_mix_down_by_op() -> None:
    recs = _mix_recorders()
    weights = {"GET": 50, "PUT": 20, "LIST": 10, "STAT": 15, "DELETE": 5}
    s = summarize_ops(recs, phase="get", elapsed_s=4.0, weights=weights, skipped={"DELETE": 3})
    assert s.op == "MIX" and s.buckets == [] and s.by_op is not None
    assert list(s.by_op) == ["GET", "PUT", "LIST", "STAT", "DELETE"]
    assert s.totals.ops == 400 == sum(e.totals.ops for e in s.by_op.values())
    assert s.totals.bytes == recs["GET"].total_bytes + recs["PUT"].total_bytes
    assert s.errors == Errors(1, ["PUT k: SlowDown"])
    get, put, lst, stat, delete = s.by_op.values()
    assert (get.weight, get.share, delete.share) == (50, 0.5, 0.05)
    assert get.totals == summarize(recs["GET"], phase="get", op="GET", elapsed_s=4.0).totals
    assert get.buckets and put.buckets and put.errors.count == 1
    assert lst.buckets == [] and stat.buckets == [] and lst.totals.bytes == 0
    assert lst.keys_listed == 7 * 100 and get.keys_listed is None
    assert "keys_listed" in lst.as_dict() and "keys_listed" not in get.as_dict()
    assert delete.totals.ops == 0 and delete.skipped == 3 and get.skipped == 0
    assert delete.totals.p50_ms is None and delete.per_second == []
    # the merged latencies are those of all ops together
    every = Recorder()
    for rec in recs.values():
        every.merge(rec)
    assert s.totals == summarize(every, phase="get", op="MIX", elapsed_s=4.0).totals
    assert s.per_second == summarize(every, phase="get", op="MIX", elapsed_s=4.0).per_second
    assert list(s.as_dict())[-3:] == ["buckets", "per_second", "by_op"]


def test_summarize_ops_of_one_op_is_the_plain_summary() -> None:
    recs = _mix_recorders()
    s = summarize_ops({"GET": recs["GET"]}, phase="get", elapsed_s=2.0, weights={"GET": 100})
    plain = summarize(recs["GET"], phase="get", op="GET", elapsed_s=2.0)
    assert s.by_op is not None and plain.by_op is None
    assert dataclasses.replace(s, by_op=None) == plain
    assert s.by_op["GET"].buckets == plain.buckets
    stat = summarize_ops({"STAT": recs["STAT"]}, phase="get", elapsed_s=2.0, weights={"STAT": 1})
    assert stat.op == "STAT" and stat.buckets == []  # a HEAD moves no object
    with pytest.raises(ValueError, match="need a weight for every op"):
        summarize_ops(recs, phase="get", elapsed_s=1.0, weights={"GET": 1})
    assert SIZED_OPS == ("GET", "PUT")


def test_results_files_of_a_mix_have_rows_per_op(tmp_path: Path) -> None:
    recs = _mix_recorders()
    weights = {"GET": 50, "PUT": 20, "LIST": 10, "STAT": 15, "DELETE": 5}
    mix = summarize_ops(recs, phase="get", elapsed_s=4.0, weights=weights)
    assert mix.by_op is not None
    paths = write_results(tmp_path, _results(mix))
    rows = list(csv.DictReader(paths["results.csv"].open()))
    expected = [("MIX", "all")]
    for op, entry in mix.by_op.items():
        expected += [(op, "all")] + [(op, b.bucket) for b in entry.buckets]
    assert [(r["op"], r["bucket"]) for r in rows] == expected
    assert {r["phase"] for r in rows} == {"get"}
    by_key = {(r["op"], r["bucket"]): r for r in rows}
    assert int(by_key[("MIX", "all")]["ops"]) == 400
    assert int(by_key[("LIST", "all")]["ops"]) == 100
    assert by_key[("DELETE", "all")]["p50_ms"] == ""  # no DELETE completed
    seconds = list(csv.DictReader(paths["per_second.csv"].open()))
    for op in ("MIX", "GET", "PUT", "LIST", "STAT", "DELETE"):
        got = [int(r["ops"]) for r in seconds if r["op"] == op]
        want = mix.per_second if op == "MIX" else mix.by_op[op].per_second
        assert got == [s.ops for s in want]
