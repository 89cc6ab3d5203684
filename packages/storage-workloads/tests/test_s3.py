"""The object-storage runner against a local S3 server (moto's server mode on loopback)."""

from __future__ import annotations

import collections
import csv
import json
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from storage_workloads import OBJECT_WORKLOADS
from storage_workloads.cli import main
from storage_workloads.objresults import Errors, PhaseSummary, bucket_of
from storage_workloads.s3 import ObjectStoreError, PrepareSummary, S3Target, get, prepare, run

BUCKET = "bench"
SEED = 11
# A few hundred small objects in a 4 x 4 tree of 20 objects per leaf directory, sizes scaled
# down from the ResNet50 workload (the lognormal and its clipping are tested on their own).
SMALL = OBJECT_WORKLOADS["resnet50_object"].override(
    prefix="small/",
    width=4,
    depth=2,
    files_per_dir=20,
    size_mean=6_000,
    size_stdev=4_000,
    size_min=1_024,
    size_max=24_576,
    concurrency=4,
)


@pytest.fixture(scope="module")
def prepared(endpoint: str) -> PrepareSummary:
    """SMALL prepared once in BUCKET; the prepare summary."""
    return prepare(SMALL, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED)


def _s3(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def _check_consistent(phase: PhaseSummary | dict[str, Any]) -> None:
    """Buckets add up to the totals, percentiles are ordered, the per-second log sums up, in
    the JSON form (results.json's, or a returned summary's as_dict())."""
    summary = phase.as_dict() if isinstance(phase, PhaseSummary) else phase
    totals, buckets = summary["totals"], summary["buckets"]
    assert sum(b["ops"] for b in buckets) == totals["ops"]
    assert sum(b["bytes"] for b in buckets) == totals["bytes"]
    for row in [totals, *buckets]:
        chain = [row[k] for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")]
        assert chain == sorted(chain) and chain[0] > 0
        assert 0 < row["mean_ms"] <= row["max_ms"]
    for b in buckets:
        assert b["ops"] > 0
    seconds = summary["per_second"]
    assert [s["second"] for s in seconds] == list(range(len(seconds)))
    assert sum(s["ops"] for s in seconds) == totals["ops"]
    assert sum(s["bytes"] for s in seconds) == totals["bytes"]
    assert totals["ops_per_s"] == pytest.approx(totals["ops"] / summary["elapsed_s"])
    assert len(seconds) <= summary["elapsed_s"] + 1


def _bucket_counts(sizes: list[int]) -> dict[str, int]:
    return dict(collections.Counter(bucket_of(n).label for n in sizes))


# -- prepare -----------------------------------------------------------------------------------


def test_prepare_uploads_the_tree(endpoint: str, prepared: PrepareSummary) -> None:
    sizes = SMALL.object_sizes(SEED)
    assert SMALL.total_objects == 320
    assert prepared.phase == "prepare" and prepared.op == "PUT"
    assert prepared.bucket_created is True
    assert (prepared.objects, prepared.uploaded, prepared.skipped) == (320, 320, 0)
    assert prepared.errors == Errors(0, [])
    assert prepared.totals.ops == 320
    assert prepared.totals.bytes == prepared.sizes.total_bytes == sum(sizes)
    assert {b.bucket: b.stats.ops for b in prepared.buckets} == _bucket_counts(sizes)
    _check_consistent(prepared)

    listed: dict[str, int] = {}
    for page in _s3(endpoint).get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        listed.update({o["Key"]: o["Size"] for o in page.get("Contents", ())})
    assert listed == {SMALL.object_key(i): sizes[i] for i in range(320)}
    leaves = collections.Counter(key.rsplit("/", 1)[0] for key in listed)
    assert len(leaves) == 16 and set(leaves.values()) == {20}
    assert {key.split("/")[1] for key in listed} == {f"scan.d1_w{i}.dir" for i in (1, 2, 3, 4)}


def test_prepare_skips_what_is_there(endpoint: str, prepared: PrepareSummary) -> None:
    again = prepare(
        SMALL, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED, skip_existing=True
    )
    assert (again.uploaded, again.skipped, again.bucket_created) == (0, 320, False)
    assert again.totals.ops == 0 and again.per_second == []


# -- get ---------------------------------------------------------------------------------------


def test_get_op_count_one_client_fetches_the_planned_objects(
    endpoint: str, prepared: PrepareSummary
) -> None:
    w = SMALL.override(ops=200, clients=1)
    summary = get(w, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED)
    sizes = SMALL.object_sizes(SEED)
    fetched = [sizes[i] for i in w.planned_get_indices(SEED)]
    assert summary.mode == "ops" and summary.requested_ops == 200
    assert summary.errors.count == 0
    assert summary.totals.ops == 200
    assert summary.totals.bytes == sum(fetched)
    assert {b.bucket: b.stats.ops for b in summary.buckets} == _bucket_counts(fetched)
    _check_consistent(summary)


def test_get_timed_two_clients(endpoint: str, prepared: PrepareSummary) -> None:
    w = SMALL.override(duration_s=1.0, clients=2, concurrency=3)
    summary = get(w, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED)
    totals = summary.totals
    assert summary.mode == "duration" and summary.requested_duration_s == 1.0
    assert summary.clients == 2 and summary.errors.count == 0
    assert totals.ops > 10
    assert 1.0 <= summary.elapsed_s < 10
    assert SMALL.size_min * totals.ops <= totals.bytes <= SMALL.size_max * totals.ops
    possible = set(_bucket_counts(SMALL.object_sizes(SEED)))
    assert {b.bucket for b in summary.buckets} <= possible
    _check_consistent(summary)


# -- the command line, prepare then get --------------------------------------------------------


def test_cli_run_prepare_then_get(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["object", "run", "resnet50", "--endpoint", endpoint, "--bucket", "cli-run"]
    argv += ["--objects", "64", "--ops", "120", "--clients", "2", "--concurrency", "4"]
    argv += ["--seed", "3", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    stdout, stderr = capsys.readouterr()
    assert "prepare (PUT)" in stdout and "get (GET)" in stdout and stderr == ""

    results = json.loads((out / "results.json").read_text())
    assert results["command"] == "run" and results["seed"] == 3
    assert results["endpoint"] == endpoint and results["bucket"] == "cli-run"
    put, got = results["phases"]
    w = OBJECT_WORKLOADS["resnet50_object"].override(
        num_objects=64, ops=120, clients=2, concurrency=4
    )
    assert results["workload"] == w.as_dict()
    sizes = w.object_sizes(3)
    assert (put["op"], put["totals"]["ops"], put["totals"]["bytes"]) == ("PUT", 64, sum(sizes))
    assert min(sizes) >= 32 * 1024 and max(sizes) <= 1024 * 1024
    fetched = [sizes[i] for i in w.planned_get_indices(3)]
    assert (got["op"], got["totals"]["ops"], got["totals"]["bytes"]) == ("GET", 120, sum(fetched))
    for phase in (put, got):
        _check_consistent(phase)

    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["phase"], r["bucket"]) for r in rows] == [
        (p["phase"], b) for p in (put, got) for b in ["all", *(x["bucket"] for x in p["buckets"])]
    ]
    assert int(rows[0]["bytes"]) == sum(sizes)
    seconds = list(csv.DictReader((out / "per_second.csv").open()))
    for phase in (put, got):
        mine = [s for s in seconds if s["phase"] == phase["phase"]]
        assert sum(int(s["ops"]) for s in mine) == phase["totals"]["ops"]
        assert sum(int(s["bytes"]) for s in mine) == phase["totals"]["bytes"]


# -- errors ------------------------------------------------------------------------------------


def test_get_on_a_missing_bucket_names_it(endpoint: str) -> None:
    with pytest.raises(ObjectStoreError) as exc:
        get(SMALL.override(ops=5), S3Target(bucket="no-such-bucket", endpoint=endpoint))
    assert str(exc.value) == (
        f"bucket 'no-such-bucket' does not exist at {endpoint}; prepare the dataset first "
        "(storage-workloads object prepare)"
    )


def test_get_beyond_the_prepared_objects_names_the_missing_key(
    endpoint: str, prepared: PrepareSummary
) -> None:
    with pytest.raises(ObjectStoreError, match="is missing") as exc:
        get(SMALL.override(num_objects=321, ops=5), S3Target(bucket=BUCKET, endpoint=endpoint))
    key = SMALL.override(num_objects=321).object_key(320)
    assert f"object s3://{BUCKET}/{key} is missing at {endpoint}" in str(exc.value)


@pytest.mark.parametrize("phase", [prepare, get])
def test_unreachable_endpoint_names_the_url(endpoint: str, closed_port: int, phase: Any) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    with pytest.raises(ObjectStoreError, match=f"cannot reach the S3 endpoint {url}"):
        phase(SMALL.override(ops=5), S3Target(bucket=BUCKET, endpoint=url))


def test_missing_credentials(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ObjectStoreError, match="no usable AWS credentials"):
        get(SMALL.override(ops=5), S3Target(bucket=BUCKET, endpoint=endpoint))


def test_a_client_process_that_dies_is_reported(
    endpoint: str, prepared: PrepareSummary, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'client exploded' >&2\nexit 7\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    with pytest.raises(ObjectStoreError, match="client process") as exc:
        get(SMALL.override(ops=5), S3Target(bucket=BUCKET, endpoint=endpoint))
    assert "code 7" in str(exc.value) or "lost a client process" in str(exc.value)


def test_cli_errors_are_one_line(
    endpoint: str, closed_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    base = ["--ops", "5", "--out", str(tmp_path / "o"), "--quiet"]
    cases = [
        (["get", "resnet50", "--endpoint", url, "--bucket", BUCKET], f"S3 endpoint {url}"),
        (["get", "resnet50", "--endpoint", endpoint, "--bucket", "nope-bucket"], "'nope-bucket'"),
        (["prepare", "resnet50", "--endpoint", endpoint, "--bucket", "ab"], "bucket 'ab'"),
        (["get", "resnet50", "--endpoint", "ftp://x", "--bucket", BUCKET], "S3Target.endpoint"),
    ]
    for args, needle in cases:
        assert main(["object", *args, *base]) == 2
        stdout, stderr = capsys.readouterr()
        assert stdout == ""
        assert stderr.startswith("storage-workloads: error: ") and needle in stderr, stderr
        assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert not (tmp_path / "o").exists()


def test_run_keeps_partial_results_when_get_fails(endpoint: str, tmp_path: Path) -> None:
    w = SMALL.override(num_objects=16, prefix="partial/", ops=4)
    target = S3Target(bucket=BUCKET, endpoint=endpoint)
    prepared = run("prepare", w, target, out_dir=tmp_path / "p", seed=1)
    with pytest.raises(ObjectStoreError, match="obj_00000016"):
        run("get", w.override(num_objects=17), target, out_dir=tmp_path / "g", seed=1)
    assert not (tmp_path / "g").exists()  # nothing measured, nothing written
    written = json.loads((tmp_path / "p" / "results.json").read_text())
    assert written == prepared.as_dict() and written["phases"][0]["uploaded"] == 16
    assert isinstance(prepared.phases[0], PrepareSummary) and prepared.phases[0].uploaded == 16
    assert prepared.finished_at is not None and prepared.failed_ops == 0


# -- op mixes, size distributions and warm-ups ------------------------------------------------

MIX = "get=50,put=20,list=10,stat=15,delete=5"


def _expected(w: Any, seed: int, data_seed: int | None = None) -> dict[str, Any]:
    """What an op-count run of ``w`` with ``seed`` must count, worked out from the thread plans
    alone, over a dataset prepared with ``data_seed`` (default: ``seed``).

    Each thread's DELETEs remove objects it put itself, oldest first, in the warm-up or later;
    a DELETE with none to remove is skipped.
    """
    sizes = w.object_sizes(seed if data_seed is None else data_seed)
    n, leaves = w.total_objects, w.leaf_dirs
    ops: collections.Counter[str] = collections.Counter()
    nbytes: collections.Counter[str] = collections.Counter()
    skipped: collections.Counter[str] = collections.Counter()
    warm: collections.Counter[str] = collections.Counter()
    keys = left = 0
    for client, threads in enumerate(w.ops_per_thread()):
        for thread in range(len(threads)):
            warmup, counted = w.thread_plan(seed, client, thread)
            pool = 0
            for phase, plan in (("warm", warmup), ("counted", counted)):
                for op, arg in plan:
                    if op == "delete" and pool == 0:
                        (warm if phase == "warm" else skipped)["skipped"] += 1
                        continue
                    pool += 1 if op == "put" else -1 if op == "delete" else 0
                    if phase == "warm":
                        warm["ops"] += 1
                        continue
                    ops[op.upper()] += 1
                    nbytes[op.upper()] += sizes[arg] if op == "get" else arg if op == "put" else 0
                    if op == "list":
                        keys += min(w.list_max_keys, n // leaves + (arg < n % leaves))
            left += pool
    return {
        "ops": ops,
        "bytes": nbytes,
        "skipped": skipped,
        "keys": keys,
        "left": left,
        "warm": warm,
    }


def _check_mix(phase: PhaseSummary | dict[str, Any]) -> None:
    """The per-op figures add up to the totals, each op's percentiles are ordered, in the JSON
    form, as _check_consistent."""
    summary = phase.as_dict() if isinstance(phase, PhaseSummary) else phase
    by_op, totals = summary["by_op"], summary["totals"]
    assert summary["op"] == "MIX" and summary["buckets"] == []
    assert sum(e["totals"]["ops"] for e in by_op.values()) == totals["ops"]
    assert sum(e["totals"]["bytes"] for e in by_op.values()) == totals["bytes"]
    assert sum(e["errors"]["count"] for e in by_op.values()) == summary["errors"]["count"]
    assert sum(e["totals"]["ops_per_s"] for e in by_op.values()) == pytest.approx(
        totals["ops_per_s"]
    )
    for op, entry in by_op.items():
        t = entry["totals"]
        if t["ops"]:
            chain = [t[k] for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")]
            assert chain == sorted(chain) and chain[0] > 0
        if op in ("GET", "PUT"):
            assert sum(b["ops"] for b in entry["buckets"]) == t["ops"]
        else:
            assert entry["buckets"] == [] and t["bytes"] == 0
        assert sum(s["ops"] for s in entry["per_second"]) == t["ops"]
    seconds = summary["per_second"]
    assert sum(s["ops"] for s in seconds) == totals["ops"]
    assert sum(s["bytes"] for s in seconds) == totals["bytes"]


def _listing(endpoint: str, prefix: str) -> dict[str, int]:
    listed: dict[str, int] = {}
    pages = _s3(endpoint).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    for page in pages:
        listed.update({o["Key"]: o["Size"] for o in page.get("Contents", ())})
    return listed


def test_mix_op_count_does_what_the_plan_says(endpoint: str, prepared: PrepareSummary) -> None:
    w = SMALL.override(ops=300, clients=2, concurrency=3, mix=MIX, list_max_keys=7)
    summary = get(w, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED)
    want = _expected(w, SEED)
    assert summary.errors.count == 0 and summary.warmup is None
    assert summary.mix == {"get": 50, "put": 20, "list": 10, "stat": 15, "delete": 5}
    by_op = summary.by_op
    assert list(by_op) == ["GET", "PUT", "LIST", "STAT", "DELETE"]
    assert {op: e.totals.ops for op, e in by_op.items()} == dict(want["ops"])
    assert {op: e.totals.bytes for op, e in by_op.items()} == {
        op: want["bytes"][op] for op in by_op
    }
    assert by_op["DELETE"].skipped == want["skipped"]["skipped"] > 0
    assert sum(e.totals.ops for e in by_op.values()) + want["skipped"]["skipped"] == 300
    assert by_op["LIST"].keys_listed == want["keys"] == 7 * by_op["LIST"].totals.ops
    assert by_op["GET"].weight == 50 and by_op["GET"].share == 0.5
    _check_mix(summary)

    # PUTs went under the run's own prefix, DELETEs removed only those: the dataset is whole.
    sizes = SMALL.object_sizes(SEED)
    assert _listing(endpoint, "small/") == {SMALL.object_key(i): sizes[i] for i in range(320)}
    put_prefix = summary.put_prefix
    assert put_prefix.startswith("small-put/") and put_prefix.endswith("/")
    left = _listing(endpoint, put_prefix)
    assert len(left) == summary.put_objects_left == want["left"]
    assert all(SMALL.size_min <= size <= SMALL.size_max for size in left.values())


def test_op_count_warmup_is_run_but_not_counted(endpoint: str, prepared: PrepareSummary) -> None:
    w = SMALL.override(ops=120, warmup_ops=90, clients=1, concurrency=3, mix=MIX)
    summary = get(w, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED + 1)
    want = _expected(w, SEED + 1, data_seed=SEED)
    warm = summary.warmup
    assert warm.mode == "ops" and warm.requested_ops == 90
    assert warm.errors == 0 and warm.ops == want["warm"]["ops"]
    assert warm.ops + warm.skipped == 90 and sum(warm.by_op.values()) == warm.ops
    # the counted figures are the plan's ops after the warm-up, not before or with it
    assert {op: e.totals.ops for op, e in summary.by_op.items()} == dict(want["ops"])
    assert summary.by_op["GET"].totals.bytes == want["bytes"]["GET"]
    assert summary.by_op["DELETE"].skipped == want["skipped"]["skipped"]
    assert summary.put_objects_left == want["left"]
    assert summary.errors.count == 0
    _check_mix(summary)


def test_timed_warmup_then_op_count(endpoint: str, prepared: PrepareSummary) -> None:
    w = SMALL.override(ops=40, warmup_period_s=1.0, clients=1, concurrency=2)
    summary = get(w, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED)
    warm = summary.warmup
    assert warm.mode == "duration" and warm.requested_duration_s == 1.0
    assert warm.elapsed_s >= 1.0 and warm.ops > 10 and warm.by_op == {"GET": warm.ops}
    assert summary.op == "GET" and summary.totals.ops == 40  # exactly, warm-up aside
    assert summary.elapsed_s < 1.0  # the window starts after the warm-up
    assert summary.by_op["GET"].totals == summary.totals
    _check_consistent(summary)


def test_timed_warmup_then_timed_two_clients(endpoint: str, prepared: PrepareSummary) -> None:
    w = SMALL.override(duration_s=1.0, warmup_period_s=1.5, clients=2, concurrency=2)
    w = w.override(mix="get=3,stat=1")
    summary = get(w, S3Target(bucket=BUCKET, endpoint=endpoint), seed=SEED)
    assert summary.warmup.elapsed_s >= 1.5 and summary.warmup.ops > 0
    # counted from the second common start: 1 s and the requests then in flight, not 2.5 s
    assert 1.0 <= summary.elapsed_s < 2.0
    assert len(summary.per_second) <= 3
    assert summary.put_prefix is None and summary.put_objects_left == 0
    assert summary.by_op["STAT"].totals.ops > 0
    _check_mix(summary)


@pytest.mark.parametrize("kind", ["uniform", "fixed"])
def test_prepare_and_put_other_size_distributions(endpoint: str, kind: str) -> None:
    base = SMALL.override(prefix=f"{kind}/", num_objects=40, concurrency=3)
    w = base.with_sizes(kind, size=3000) if kind == "fixed" else base.with_sizes(kind)
    target = S3Target(bucket=BUCKET, endpoint=endpoint)
    summary = prepare(w, target, seed=4)
    sizes = w.object_sizes(4)
    assert summary.sizes.distribution == kind and summary.uploaded == 40
    assert _listing(endpoint, f"{kind}/") == {w.object_key(i): sizes[i] for i in range(40)}
    if kind == "fixed":
        assert set(sizes) == {3000}
    else:
        assert len(set(sizes)) > 30 and min(sizes) >= 1024 and max(sizes) <= 24_576
    puts = get(w.override(mix="get=1,put=1", ops=30), target, seed=4)
    want = _expected(w.override(mix="get=1,put=1", ops=30), 4)
    assert puts.by_op["PUT"].totals.bytes == want["bytes"]["PUT"] > 0
    assert puts.by_op["GET"].totals.bytes == want["bytes"]["GET"] > 0
    assert len(_listing(endpoint, puts.put_prefix)) == want["ops"]["PUT"]


def test_cli_run_with_a_mix_sizes_and_warmup(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["object", "run", "resnet50", "--endpoint", endpoint, "--bucket", "cli-mix"]
    argv += ["--objects", "48", "--ops", "60", "--clients", "2", "--concurrency", "2"]
    argv += ["--size-distribution", "uniform", "--size-min", "1KiB", "--size-max", "8KiB"]
    argv += ["--mix", "get=6,put=2,list=1,stat=1,delete=1", "--warmup-ops", "20"]
    argv += ["--list-max-keys", "3", "--put-prefix", "scratch", "--seed", "5"]
    argv += ["--out", str(out), "--quiet"]
    assert main(argv) == 0
    stdout, stderr = capsys.readouterr()
    assert stderr == ""
    assert "get warm-up: " in stdout and "not counted below" in stdout
    assert "get (MIX)" in stdout and "DELETE" in stdout

    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == "storage-workloads/object-results/2"
    w = OBJECT_WORKLOADS["resnet50_object"].with_sizes("uniform", minimum=1024, maximum=8192)
    w = w.override(
        num_objects=48,
        ops=60,
        clients=2,
        concurrency=2,
        mix="get=6,put=2,list=1,stat=1,delete=1",
        warmup_ops=20,
        list_max_keys=3,
        put_prefix="scratch/",
    )
    assert results["workload"] == w.as_dict()
    put, got = results["phases"]
    assert put["sizes"]["distribution"] == "uniform" and put["totals"]["bytes"] == sum(
        w.object_sizes(5)
    )
    want = _expected(w, 5)
    assert got["warmup"]["ops"] == want["warm"]["ops"]
    assert {op: e["totals"]["ops"] for op, e in got["by_op"].items()} == dict(want["ops"])
    assert got["put_prefix"].startswith("scratch/")
    _check_mix(got)

    rows = list(csv.DictReader((out / "results.csv").open()))
    mix_rows = [(r["op"], r["bucket"]) for r in rows if r["phase"] == "get"]
    assert mix_rows[0] == ("MIX", "all")
    assert [r for r in mix_rows if r[1] == "all"] == [
        ("MIX", "all"),
        ("GET", "all"),
        ("PUT", "all"),
        ("LIST", "all"),
        ("STAT", "all"),
        ("DELETE", "all"),
    ]
    assert {op for op, b in mix_rows if b != "all"} == {"GET", "PUT"}  # size buckets
    seconds = list(csv.DictReader((out / "per_second.csv").open()))
    for op in ("MIX", "GET", "PUT", "LIST", "STAT", "DELETE"):
        mine = [s for s in seconds if s["phase"] == "get" and s["op"] == op]
        total = got["totals"] if op == "MIX" else got["by_op"][op]["totals"]
        assert sum(int(s["ops"]) for s in mine) == total["ops"]


def test_cli_bad_mix_and_size_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--bucket", BUCKET, "--out", str(tmp_path / "o"), "--quiet"]
    base += ["--endpoint", "http://127.0.0.1:9"]  # never reached: the options fail first
    cases = [
        (["get", "--mix", "get=1,delete=1"], "--mix: ObjectWorkload.mix has delete but no put"),
        (["get", "--size-distribution", "fixed"], "--size-distribution fixed needs --object-size"),
        (["get", "--object-size", "4KiB"], "--object-size needs --size-distribution fixed"),
        (
            ["get", "--size-distribution", "uniform", "--size-mean", "5"],
            "--size-mean does not apply to --size-distribution uniform",
        ),
        (
            ["get", "--size-distribution", "fixed", "--object-size", "5", "--size-max", "9"],
            "--size-max does not apply to --size-distribution fixed",
        ),
        (
            ["get", "--size-distribution", "uniform", "--size-min", "2MiB"],
            "the size minimum (2097152, --size-min) must be <= the size maximum (1048576",
        ),
        (["get", "--size-mean", "16KiB"], "--size-mean (16384) must lie in [--size-min, --size"),
        (["get", "--put-prefix", "resnet50/new"], "--put-prefix: ObjectWorkload.put_prefix must"),
        (["get", "--list-max-keys", "1001"], "--list-max-keys must be <= 1000"),
        (["prepare", "--mix", "get=1,put=1"], "--mix applies to get and run, not prepare"),
        (["prepare", "--warmup-ops", "5"], "--warmup-ops applies to get and run, not prepare"),
    ]
    for (command, *args), needle in cases:
        assert main(["object", command, "resnet50", *base, *args]) == 2
        stdout, stderr = capsys.readouterr()
        assert stdout == ""
        assert stderr.startswith("storage-workloads: error: ") and needle in stderr, stderr
        assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # Refused before boto3 is asked, in one line, the password never repeated.
        (["--bucket", "..//x"], "S3Target.bucket must be a bucket name"),
        (["--bucket", "b/c"], "got 'b/c'"),
        (["--endpoint", "http://user:s3cr3t@127.0.0.1:9"], "'http://***@127.0.0.1:9'"),
        (["--objects", "1000000000"], "--objects: ObjectWorkload.num_objects: 1,000,000,000"),
        (["--objects", "1" + "0" * 20], "more than 100,000,000 (the run keeps every object's"),
        (["--objects", "1e9"], "argument --objects: must be an integer, got '1e9'"),
        (["--clients", "100000"], "--clients: ObjectWorkload.clients must be <= 1,024"),
        (["--concurrency", "1000000"], "--concurrency: ObjectWorkload.concurrency must be <="),
    ],
)
def test_hostile_object_flags_are_refused_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    given = dict(zip(args[::2], args[1::2], strict=True))
    base = {"--endpoint": "http://127.0.0.1:9", "--bucket": "bench", "--ops": "1"} | given
    flat = [x for pair in base.items() for x in pair]
    command = ["object", "run", "resnet50", *flat, "--out", str(tmp_path / "o"), "--quiet"]
    try:
        status = main(command)
    except SystemExit as exc:  # an argument error
        status = exc.code
    assert status == 2
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and needle in stderr and stderr.count("\n") == 1, stderr
    assert "s3cr3t" not in stderr and "usage:" not in stderr
    assert not (tmp_path / "o").exists()


def test_an_endpoint_password_from_the_environment_is_not_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://user:s3cr3t@127.0.0.1:9")
    assert S3Target(bucket="bench").endpoint_name == "http://***@127.0.0.1:9"
