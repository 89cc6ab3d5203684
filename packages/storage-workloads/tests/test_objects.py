"""The object-storage workloads: definitions, validation, tree layout and object sizes."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import pickle
import random
import re
import statistics

import pytest

from storage_workloads import (
    OBJECT_WORKLOADS,
    ObjectWorkload,
    UnknownWorkloadError,
    clipped_lognormal_mean,
    draw_sizes,
    lognormal_params,
    object_workload,
)
from storage_workloads.objects import (
    OPS,
    GiB,
    KiB,
    MiB,
    draw_uniform_sizes,
    parse_mix,
    selection_rng,
    split_evenly,
)

RESNET = OBJECT_WORKLOADS["resnet50_object"]
UNET = OBJECT_WORKLOADS["unet3d_object"]


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


# -- the definitions ---------------------------------------------------------------------------


def test_registry() -> None:
    assert list(OBJECT_WORKLOADS) == ["resnet50_object", "unet3d_object"]
    with pytest.raises(TypeError):
        OBJECT_WORKLOADS["x"] = RESNET  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RESNET.concurrency = 1  # type: ignore[misc]


def test_resnet50_object_is_the_sai3_bench_workload() -> None:
    w = RESNET
    assert (w.width, w.depth, w.files_per_dir) == (64, 2, 150)
    assert w.leaf_dirs == 4096
    assert w.total_objects == 614_400
    assert (w.size_mean, w.size_stdev) == (229_376, 160_563)
    assert (w.size_min, w.size_max) == (32 * KiB, 1 * MiB) == (32_768, 1_048_576)
    assert (w.concurrency, w.duration_s, w.clients, w.scale_with_clients) == (64, 300.0, 1, False)
    assert w.num_objects is None and w.ops is None
    assert w.prefix == "resnet50/"
    # The clipped mean is a little below the nominal one; the dataset is about 131 GiB.
    assert 228_000 < w.expected_object_bytes < 229_376
    assert round(w.expected_dataset_bytes / 2**30) == 131


def test_unet3d_object_is_the_sai3_bench_workload() -> None:
    w = UNET
    assert (w.width, w.depth, w.files_per_dir) == (28, 2, 64)
    assert w.total_objects == 50_176
    assert (w.size_mean, w.size_stdev) == (7_235_174, 5_788_139)
    assert (w.size_min, w.size_max) == (1 * MiB, 32 * MiB)
    assert (w.concurrency, w.duration_s) == (32, 300.0)
    assert round(w.expected_dataset_bytes / 2**30) == 336


@pytest.mark.parametrize(("clients", "objects"), [(1, 614_400), (4, 2_457_600), (8, 4_915_200)])
def test_dataset_grows_with_the_clients_only_on_request(clients: int, objects: int) -> None:
    assert RESNET.override(clients=clients).total_objects == 614_400
    w = RESNET.override(clients=clients, scale_with_clients=True)
    assert w.total_objects == objects  # sai3-bench's 1-, 4- and 8-host datasets
    # every leaf directory holds 150 objects per client: object i is in leaf i % 4096
    assert divmod(w.total_objects, w.leaf_dirs) == (150 * clients, 0)
    assert w.leaf_dir(objects - 1) == "resnet50/scan.d1_w64.dir/scan.d2_w64.dir/"
    assert w.leaf_dir(4097 * clients) == w.leaf_dir(clients)
    assert w.override(num_objects=1000).total_objects == 1000


def test_lookup() -> None:
    assert object_workload("resnet50") is RESNET
    assert object_workload(" ResNet50_Object ") is RESNET
    assert object_workload("unet3d-object") is UNET
    with pytest.raises(UnknownWorkloadError) as exc:
        object_workload("bert")
    assert str(exc.value) == (
        "unknown object workload 'bert'; known object workloads: resnet50_object, unet3d_object"
    )


def test_override_scales_for_tests() -> None:
    w = RESNET.override(num_objects=300, duration_s=1.5, concurrency=4, clients=2, ops=100)
    assert (w.total_objects, w.duration_s, w.concurrency, w.clients, w.ops) == (
        300,
        1.5,
        4,
        2,
        100,
    )
    assert RESNET.override(concurrency=None) == RESNET  # None: keep (CLI defaults)
    assert w.size_mean == RESNET.size_mean
    with pytest.raises(TypeError, match="no field objects"):
        RESNET.override(objects=3)
    with pytest.raises(ValueError, match=r"ObjectWorkload\.concurrency must be >= 1, got 0"):
        RESNET.override(concurrency=0)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"name": "ResNet"}, ValueError, "ObjectWorkload.name"),
        ({"prefix": "data"}, ValueError, "ObjectWorkload.prefix must be '' or end with '/'"),
        ({"prefix": "/data/"}, ValueError, "ObjectWorkload.prefix must not start with '/'"),
        ({"width": 0}, ValueError, "ObjectWorkload.width must be >= 1, got 0"),
        ({"depth": 0}, ValueError, "ObjectWorkload.depth must be >= 1, got 0"),
        ({"files_per_dir": 0}, ValueError, "ObjectWorkload.files_per_dir must be >= 1"),
        ({"size_stdev": -1}, ValueError, "ObjectWorkload.size_stdev must be >= 0"),
        ({"size_min": 0}, ValueError, "ObjectWorkload.size_min must be >= 1"),
        ({"size_min": 2 * MiB}, ValueError, "ObjectWorkload.size_min must be <= size_max"),
        ({"size_mean": 1}, ValueError, "ObjectWorkload.size_mean must lie in"),
        ({"concurrency": 2.5}, TypeError, "ObjectWorkload.concurrency must be an integer"),
        ({"clients": True}, TypeError, "ObjectWorkload.clients must be an integer"),
        ({"duration_s": 0}, ValueError, "ObjectWorkload.duration_s must be finite and > 0"),
        ({"duration_s": math.inf}, ValueError, "ObjectWorkload.duration_s must be finite"),
        ({"duration_s": "5m"}, TypeError, "ObjectWorkload.duration_s must be a number"),
        ({"scale_with_clients": 1}, TypeError, "ObjectWorkload.scale_with_clients must be a bool"),
        ({"num_objects": 0}, ValueError, "ObjectWorkload.num_objects must be >= 1"),
        ({"ops": 0}, ValueError, "ObjectWorkload.ops must be >= 1"),
    ],
)
def test_validation_names_the_field(
    changes: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        dataclasses.replace(RESNET, **changes)


# -- the tree ----------------------------------------------------------------------------------

_LEAF = re.compile(r"^resnet50/scan\.d1_w(?P<a>[0-9]+)\.dir/scan\.d2_w(?P<b>[0-9]+)\.dir/$")


def test_full_resnet50_layout() -> None:
    keys = list(RESNET.object_keys())
    assert len(keys) == len(set(keys)) == 614_400
    per_leaf: collections.Counter[str] = collections.Counter()
    for i, key in enumerate(keys):
        leaf, _, name = key.rpartition("/")
        assert name == f"obj_{i:08d}.dat"
        per_leaf[leaf + "/"] += 1
    assert set(per_leaf.values()) == {150}
    coordinates = set()
    for leaf in per_leaf:
        m = _LEAF.match(leaf)
        assert m is not None, leaf
        coordinates.add((int(m["a"]), int(m["b"])))
    assert coordinates == {(a, b) for a in range(1, 65) for b in range(1, 65)}
    assert keys[0] == "resnet50/scan.d1_w1.dir/scan.d2_w1.dir/obj_00000000.dat"
    assert keys[1] == "resnet50/scan.d1_w1.dir/scan.d2_w2.dir/obj_00000001.dat"
    assert keys[64] == "resnet50/scan.d1_w2.dir/scan.d2_w1.dir/obj_00000064.dat"
    assert keys[4096] == "resnet50/scan.d1_w1.dir/scan.d2_w1.dir/obj_00004096.dat"
    assert keys[-1] == "resnet50/scan.d1_w64.dir/scan.d2_w64.dir/obj_00614399.dat"


def test_full_unet3d_layout() -> None:
    dirs = collections.Counter(key.rsplit("/", 1)[0] for key in UNET.object_keys())
    assert len(dirs) == 28 * 28
    assert set(dirs.values()) == {64}
    assert {d.split("/")[1] for d in dirs} == {f"scan.d1_w{i}.dir" for i in range(1, 29)}


@pytest.mark.parametrize(("width", "depth", "files_per_dir"), [(3, 3, 2), (4, 2, 20), (5, 1, 7)])
def test_small_tree_layout(width: int, depth: int, files_per_dir: int) -> None:
    w = RESNET.override(width=width, depth=depth, files_per_dir=files_per_dir, prefix="t/")
    keys = list(w.object_keys())
    assert len(keys) == len(set(keys)) == width**depth * files_per_dir
    dirs = collections.Counter(key.rsplit("/", 1)[0] for key in keys)
    assert len(dirs) == width**depth
    assert set(dirs.values()) == {files_per_dir}
    for d in dirs:
        parts = d.split("/")
        assert parts[0] == "t"
        assert len(parts) == depth + 1
        for level, part in enumerate(parts[1:], start=1):
            m = re.fullmatch(rf"scan\.d{level}_w([0-9]+)\.dir", part)
            assert m is not None and 1 <= int(m[1]) <= width
    # a partial dataset is dealt round-robin: leaf sizes differ by at most one
    partial = w.override(num_objects=width**depth + 1)
    counts = collections.Counter(k.rsplit("/", 1)[0] for k in partial.object_keys())
    assert sorted(counts.values()) == [1] * (width**depth - 1) + [2]


def test_keys_do_not_depend_on_the_seed_clients_or_sizes() -> None:
    small = RESNET.override(num_objects=500)
    other = small.override(clients=4, concurrency=3, size_mean=40_000, files_per_dir=7)
    assert list(small.object_keys()) == list(other.object_keys())
    with pytest.raises(IndexError, match=r"object index 500 out of range \[0, 500\)"):
        small.object_key(500)
    with pytest.raises(TypeError):
        small.object_key(1.0)  # type: ignore[arg-type]


def test_pickles_without_caches() -> None:
    w = RESNET.override(num_objects=10)
    w.object_key(3)  # fills the caches
    data = pickle.dumps(w)
    assert len(data) < 1000
    assert pickle.loads(data) == w
    assert pickle.loads(data).object_key(3) == w.object_key(3)


# -- the sizes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("w", [RESNET, UNET], ids=lambda w: w.name)
def test_lognormal_parameters_are_exact(w: ObjectWorkload) -> None:
    mu, sigma = lognormal_params(w.size_mean, w.size_stdev)
    assert sigma**2 == pytest.approx(math.log(1 + (w.size_stdev / w.size_mean) ** 2), rel=1e-15)
    assert mu == pytest.approx(math.log(w.size_mean) - sigma**2 / 2, rel=1e-15)
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(w.size_mean, rel=1e-12)
    var = (math.exp(sigma**2) - 1) * math.exp(2 * mu + sigma**2)
    assert math.sqrt(var) == pytest.approx(w.size_stdev, rel=1e-12)
    assert lognormal_params(100, 0) == (math.log(100), 0.0)


@pytest.mark.parametrize("w", [RESNET, UNET], ids=lambda w: w.name)
def test_clipped_mean_matches_numerical_integration(w: ObjectWorkload) -> None:
    mu, sigma = w.lognormal
    lo, hi = math.log(w.size_min), math.log(w.size_max)
    steps = 20_000  # Simpson's rule over the log of the size
    h = (hi - lo) / steps

    def f(y: float) -> float:
        return (
            math.exp(y)
            * math.exp(-(((y - mu) / sigma) ** 2) / 2)
            / (sigma * math.sqrt(2 * math.pi))
        )

    inner = f(lo) + f(hi) + sum((4 if k % 2 else 2) * f(lo + k * h) for k in range(1, steps))
    expected = (
        w.size_min * _phi((lo - mu) / sigma)
        + w.size_max * (1 - _phi((hi - mu) / sigma))
        + inner * h / 3
    )
    assert w.expected_object_bytes == pytest.approx(expected, rel=1e-9)
    # no clipping in effect: the nominal mean
    assert clipped_lognormal_mean(mu, sigma, 1e-9, 1e30) == pytest.approx(w.size_mean, rel=1e-9)
    assert clipped_lognormal_mean(mu, 0.0, 1, 10) == 10


def test_unclipped_draws_have_the_nominal_statistics() -> None:
    n = 200_000
    m, s = 229_376, 160_563
    sizes = draw_sizes(n, mean=m, stdev=s, minimum=1, maximum=1 << 62, seed=7)
    mu, sigma = lognormal_params(m, s)
    logs = [math.log(x) for x in sizes]
    # log-space: normal(mu, sigma); standard errors sigma/sqrt(n) and sigma/sqrt(2n)
    assert abs(statistics.fmean(logs) - mu) < 4 * sigma / math.sqrt(n)
    assert abs(statistics.pstdev(logs) - sigma) < 4 * sigma / math.sqrt(2 * n)
    # linear space: the requested mean and stdev
    assert abs(statistics.fmean(sizes) - m) < 4 * s / math.sqrt(n)
    excess_kurtosis = (
        math.exp(4 * sigma**2) + 2 * math.exp(3 * sigma**2) + 3 * math.exp(2 * sigma**2) - 6
    )
    se_stdev = s / 2 * math.sqrt((excess_kurtosis + 2) / n)
    assert abs(statistics.pstdev(sizes) - s) < 4 * se_stdev


@pytest.mark.parametrize("w", [RESNET, UNET], ids=lambda w: w.name)
def test_clipped_draws(w: ObjectWorkload) -> None:
    n = 200_000
    sizes = draw_sizes(
        n,
        mean=w.size_mean,
        stdev=w.size_stdev,
        minimum=w.size_min,
        maximum=w.size_max,
        seed=3,
    )
    assert min(sizes) == w.size_min and max(sizes) == w.size_max
    assert all(isinstance(x, int) for x in sizes[:100])
    mu, sigma = w.lognormal
    # a draw rounds to the minimum when exp(...) < min + 0.5, to the maximum when >= max - 0.5
    p_min = _phi((math.log(w.size_min + 0.5) - mu) / sigma)
    p_max = 1 - _phi((math.log(w.size_max - 0.5) - mu) / sigma)
    counts = collections.Counter(sizes)
    for p, observed in ((p_min, counts[w.size_min]), (p_max, counts[w.size_max])):
        assert 0.001 < p < 0.02
        assert abs(observed / n - p) < 4 * math.sqrt(p * (1 - p) / n)
    sample_mean = statistics.fmean(sizes)
    assert abs(sample_mean - w.expected_object_bytes) < 4 * statistics.pstdev(sizes) / math.sqrt(n)


def test_sizes_are_deterministic_and_prefix_stable() -> None:
    kw = {"mean": 229_376, "stdev": 160_563, "minimum": 32 * KiB, "maximum": MiB}
    assert draw_sizes(6, seed=0, **kw) == [245171, 103219, 267633, 181231, 467442, 310005]
    a = draw_sizes(1000, seed=5, **kw)
    assert a == draw_sizes(1000, seed=5, **kw)
    assert a[:100] == draw_sizes(100, seed=5, **kw)
    assert a != draw_sizes(1000, seed=6, **kw)
    w = RESNET.override(num_objects=1000)
    assert w.object_sizes(5) == a
    assert draw_sizes(3, mean=10, stdev=0, minimum=1, maximum=100) == [10, 10, 10]
    assert draw_sizes(0, **kw) == []
    with pytest.raises(ValueError, match="minimum"):
        draw_sizes(3, mean=10, stdev=1, minimum=5, maximum=4)


# -- the GET selection -------------------------------------------------------------------------


def test_op_count_split_and_planned_selection() -> None:
    assert split_evenly(10, 4) == [3, 3, 2, 2]
    assert split_evenly(1, 3) == [1, 0, 0]
    w = RESNET.override(num_objects=300, clients=2, concurrency=3, ops=11)
    assert w.ops_per_thread() == [[2, 2, 2], [2, 2, 1]]
    planned = w.planned_get_indices(seed=4)
    assert len(planned) == 11 and all(0 <= i < 300 for i in planned)
    assert planned == w.planned_get_indices(seed=4)
    assert planned != w.planned_get_indices(seed=5)
    # each thread has its own stream
    first = [selection_rng(4, c, t).randrange(300) for c in range(2) for t in range(3)]
    assert len(set(first)) > 1
    with pytest.raises(ValueError, match="timed run"):
        RESNET.ops_per_thread()


def test_get_only_selection_is_unchanged() -> None:
    # A GET-only mix draws no op choice: the GETs are those of the plain GET phase.
    w = RESNET.override(num_objects=300, clients=2, concurrency=3, ops=11)
    old = []
    for client, threads in enumerate(w.ops_per_thread()):
        for thread, count in enumerate(threads):
            rng = selection_rng(4, client, thread)
            old.extend(rng.randrange(300) for _ in range(count))
    assert w.planned_get_indices(4) == old
    assert w.planned_ops(4) == [("get", i) for i in old]


# -- op mixes ----------------------------------------------------------------------------------


def test_parse_mix_forms_and_canonical_order() -> None:
    expected = (("get", 70), ("put", 20), ("list", 5), ("stat", 4), ("delete", 1))
    assert parse_mix("get=70,put=20,list=5,stat=4,delete=1") == expected
    assert parse_mix(" DELETE = 1, stat=4 ,list=5,put=20,get=70") == expected
    assert parse_mix({"put": 20, "get": 70, "list": 5, "stat": 4, "delete": 1}) == expected
    assert parse_mix([("stat", 4), ("get", 70), ("delete", 1), ("list", 5), ("put", 20)]) == (
        expected
    )
    assert parse_mix("get=3,put=0,stat=0") == (("get", 3),)  # zero weights are dropped
    assert OPS == ("get", "put", "list", "stat", "delete")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("get=70,copy=30", "unknown op 'copy'; the ops are get, put, list, stat, delete"),
        ("get=70,get=30", "get is given twice"),
        ("get=7.5", "weight of 'get' must be an integer, got '7.5'"),
        ("get=-1,put=2", "weight of get must be >= 0, got -1"),
        ("get=0,put=0", "needs at least one weight > 0"),
        ("get", "op mix item 'get' is not OP=WEIGHT"),
        ("", "op mix item '' is not OP=WEIGHT"),
        ({"get": True}, "weight of get must be an integer, got True"),
        ({"get": 1.0}, "weight of get must be an integer, got 1.0"),
    ],
)
def test_parse_mix_errors_name_the_item(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_mix(spec)  # type: ignore[arg-type]


def test_workload_mix_is_normalised_and_validated() -> None:
    assert RESNET.mix == (("get", 100),)
    w = RESNET.override(mix="stat=1,get=3")
    assert w.mix == (("get", 3), ("stat", 1))
    assert w == RESNET.override(mix={"get": 3, "stat": 1})
    assert w.as_dict()["mix"] == {"get": 3, "stat": 1}
    with pytest.raises(ValueError, match=r"ObjectWorkload\.mix: op mix: unknown op 'head'"):
        RESNET.override(mix="head=1")
    with pytest.raises(ValueError, match="mix has delete but no put"):
        RESNET.override(mix="get=9,delete=1")
    with pytest.raises(TypeError, match=r"ObjectWorkload\.mix"):
        RESNET.override(mix=5)


def test_op_stream_follows_the_weights() -> None:
    n = 100_000
    w = RESNET.override(num_objects=1000, mix="get=70,put=20,list=5,stat=4,delete=1")
    ops = list(itertools.islice(w.op_stream(9, 0, 0), n))
    counts = collections.Counter(op for op, _ in ops)
    for op, weight in w.mix:
        p = weight / 100
        assert abs(counts[op] / n - p) < 4 * math.sqrt(p * (1 - p) / n), (op, counts[op])
    for op, arg in ops:
        if op in ("get", "stat"):
            assert 0 <= arg < 1000
        elif op == "list":
            assert 0 <= arg < w.leaf_dirs
        elif op == "put":
            assert w.size_min <= arg <= w.size_max
        else:
            assert arg == 0
    # the GETs pick objects uniformly: every object comes up about 70 times
    gets = collections.Counter(arg for op, arg in ops if op == "get")
    assert len(gets) == 1000 and max(gets.values()) < 140
    # LIST picks only leaves that hold objects: a 1000-object dataset fills 1000 of 4096
    small = w.override(num_objects=10)
    lists = {a for op, a in itertools.islice(small.op_stream(1, 0, 0), 5000) if op == "list"}
    assert lists == set(range(10))


def test_op_streams_are_deterministic_per_seed_client_and_thread() -> None:
    w = RESNET.override(num_objects=500, mix="get=5,put=3,stat=1,delete=1")
    first = list(itertools.islice(w.op_stream(3, 1, 2), 200))
    assert first == list(itertools.islice(w.op_stream(3, 1, 2), 200))
    assert first != list(itertools.islice(w.op_stream(4, 1, 2), 200))
    assert first != list(itertools.islice(w.op_stream(3, 0, 2), 200))
    assert first != list(itertools.islice(w.op_stream(3, 1, 1), 200))
    # pinned: a change in how ops are drawn must be a deliberate one
    assert first[:6] == [
        ("delete", 0),
        ("stat", 345),
        ("put", 370246),
        ("stat", 110),
        ("get", 375),
        ("put", 526800),
    ]


def test_thread_plans_put_the_warmup_first() -> None:
    w = RESNET.override(
        num_objects=200, clients=2, concurrency=2, ops=10, warmup_ops=7, mix="get=1,stat=1"
    )
    assert w.warmup_ops_per_thread() == [[2, 2], [2, 1]]
    assert w.ops_per_thread() == [[3, 2], [3, 2]]
    planned = []
    for client in range(2):
        for thread in range(2):
            warm, counted = w.thread_plan(5, client, thread)
            stream = list(itertools.islice(w.op_stream(5, client, thread), 10))
            assert warm + counted == stream[: len(warm) + len(counted)]
            assert len(warm) == w.warmup_ops_per_thread()[client][thread]
            assert len(counted) == w.ops_per_thread()[client][thread]
            planned += counted
    assert planned == w.planned_ops(5)
    no_warmup = dataclasses.replace(w, warmup_ops=None)
    assert no_warmup.thread_plan(5, 0, 0) == ([], list(itertools.islice(w.op_stream(5, 0, 0), 3)))
    timed = dataclasses.replace(w, warmup_ops=None, warmup_period_s=2.0)
    with pytest.raises(ValueError, match="timed warm-up"):
        timed.planned_ops(5)
    with pytest.raises(ValueError, match="no op-count warm-up"):
        no_warmup.warmup_ops_per_thread()


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"warmup_period_s": 0}, ValueError, "ObjectWorkload.warmup_period_s must be finite and"),
        ({"warmup_period_s": "1s"}, TypeError, "ObjectWorkload.warmup_period_s must be a number"),
        ({"warmup_ops": 0}, ValueError, "ObjectWorkload.warmup_ops must be >= 1, got 0"),
        (
            {"warmup_ops": 5, "warmup_period_s": 1.0},
            ValueError,
            "warmup_period_s and warmup_ops exclude each other",
        ),
        ({"put_prefix": "out"}, ValueError, "ObjectWorkload.put_prefix must be end with '/'"),
        ({"put_prefix": ""}, ValueError, "ObjectWorkload.put_prefix must be end with '/'"),
        ({"put_prefix": "/out/"}, ValueError, "ObjectWorkload.put_prefix must not start with"),
        ({"put_prefix": "resnet50/"}, ValueError, "put_prefix must lie outside the dataset"),
        ({"put_prefix": "resnet50/new/"}, ValueError, "put_prefix must lie outside the dataset"),
        ({"put_prefix": "resnet50/", "prefix": "resnet50/a/"}, ValueError, "outside the dataset"),
        ({"put_prefix": "scan.x/", "prefix": ""}, ValueError, "outside the dataset"),
        ({"list_max_keys": 0}, ValueError, "ObjectWorkload.list_max_keys must be >= 1"),
        ({"list_max_keys": 1001}, ValueError, "list_max_keys must be <= 1000 (S3's MaxKeys"),
        ({"size_distribution": "normal"}, ValueError, "size_distribution must be one of"),
        ({"size_max": 5 * GiB + 1}, ValueError, "size_max must be <= 5368709120 (5 GiB"),
        ({"size_mean": None}, ValueError, "size_mean is required for lognormal sizes"),
        ({"size_stdev": None}, ValueError, "size_stdev is required for lognormal sizes"),
    ],
)
def test_new_fields_are_validated(
    changes: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        dataclasses.replace(RESNET, **changes)


def test_put_prefix_lies_outside_the_dataset() -> None:
    assert RESNET.effective_put_prefix == "resnet50-put/"
    assert RESNET.override(prefix="a/b/").effective_put_prefix == "a/b-put/"
    assert RESNET.override(prefix="").effective_put_prefix == "put/"
    assert RESNET.override(put_prefix="scratch/").effective_put_prefix == "scratch/"
    assert RESNET.override(prefix="", put_prefix="writes/").effective_put_prefix == "writes/"
    assert RESNET.as_dict()["effective_put_prefix"] == "resnet50-put/"


def test_leaf_prefix() -> None:
    w = RESNET.override(width=3, depth=2, prefix="t/")
    assert w.leaf_prefix(0) == "t/scan.d1_w1.dir/scan.d2_w1.dir/"
    assert w.leaf_prefix(8) == "t/scan.d1_w3.dir/scan.d2_w3.dir/"
    assert w.leaf_prefix(4) == w.leaf_dir(4)
    with pytest.raises(IndexError, match=r"leaf index 9 out of range \[0, 9\)"):
        w.leaf_prefix(9)


# -- size distributions ------------------------------------------------------------------------


def test_uniform_sizes() -> None:
    n = 200_000
    low, high = 1_000, 5_000
    sizes = draw_uniform_sizes(n, minimum=low, maximum=high, seed=2)
    assert min(sizes) == low and max(sizes) == high
    mean = (low + high) / 2
    var = ((high - low + 1) ** 2 - 1) / 12  # the discrete uniform on low..high
    assert abs(statistics.fmean(sizes) - mean) < 4 * math.sqrt(var / n)
    # var of the sample variance of a uniform: (mu4 - var^2) / n, mu4 = 9/5 var^2 (continuous)
    assert abs(statistics.pvariance(sizes) - var) < 4 * math.sqrt(0.8 * var**2 / n)
    # each of the 4001 values is equally likely: no value far from n / 4001 = 50
    counts = collections.Counter(sizes)
    assert len(counts) == 4001 and max(counts.values()) < 100
    assert draw_uniform_sizes(5, minimum=low, maximum=high, seed=0) == [
        1377,
        4574,
        4905,
        3862,
        3546,
    ]
    assert sizes[:500] == draw_uniform_sizes(500, minimum=low, maximum=high, seed=2)
    assert sizes[:500] != draw_uniform_sizes(500, minimum=low, maximum=high, seed=3)
    assert draw_uniform_sizes(3, minimum=7, maximum=7) == [7, 7, 7]
    with pytest.raises(ValueError, match="minimum"):
        draw_uniform_sizes(3, minimum=0, maximum=4)
    with pytest.raises(ValueError, match="minimum"):
        draw_uniform_sizes(3, minimum=5, maximum=4)


def test_with_sizes_uniform_and_fixed() -> None:
    u = RESNET.with_sizes("uniform", minimum=4 * KiB, maximum=64 * KiB).override(num_objects=1000)
    assert (u.size_distribution, u.size_min, u.size_max) == ("uniform", 4096, 65536)
    assert u.size_mean is None and u.size_stdev is None
    assert u.expected_object_bytes == (4096 + 65536) / 2
    assert u.object_sizes(5) == draw_uniform_sizes(1000, minimum=4096, maximum=65536, seed=5)
    assert u.as_dict()["lognormal_mu"] is None and u.as_dict()["lognormal_sigma"] is None
    with pytest.raises(ValueError, match="has uniform sizes, not lognormal"):
        _ = u.lognormal
    # uniform by default over the workload's own range
    assert RESNET.with_sizes("uniform").size_min == RESNET.size_min
    assert RESNET.with_sizes("uniform").expected_object_bytes == (32 * KiB + MiB) / 2

    f = RESNET.with_sizes("fixed", size=300_000).override(num_objects=50)
    assert (f.size_distribution, f.size_min, f.size_max) == ("fixed", 300_000, 300_000)
    assert f.object_sizes(1) == [300_000] * 50 == f.object_sizes(2)
    assert f.expected_object_bytes == 300_000 and f.expected_dataset_bytes == 15_000_000

    back = f.with_sizes("lognormal", mean=5000, stdev=100, minimum=10, maximum=10_000)
    assert (back.size_mean, back.size_stdev, back.size_min, back.size_max) == (
        5000,
        100,
        10,
        10_000,
    )
    assert RESNET.with_sizes("lognormal") == RESNET


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("fixed",), {}, "fixed sizes need size"),
        (("fixed",), {"size": 10, "minimum": 5}, "fixed sizes take size, not minimum"),
        (("uniform",), {"mean": 10}, "uniform sizes take minimum, maximum, not mean"),
        (("gamma",), {}, "size distribution must be one of lognormal, uniform, fixed"),
        (("fixed",), {"size": 0}, "ObjectWorkload.size_min must be >= 1, got 0"),
        (("fixed",), {"size": 6 * GiB}, "ObjectWorkload.size_max must be <= 5368709120"),
        (("uniform",), {"minimum": 9, "maximum": 8}, "size_min must be <= size_max (8), got 9"),
        (("uniform",), {"minimum": 0}, "ObjectWorkload.size_min must be >= 1"),
        (("lognormal",), {"mean": 10}, "size_mean must lie in [size_min, size_max]"),
    ],
)
def test_with_sizes_errors(args: tuple[str], kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        RESNET.with_sizes(*args, **kwargs)
    fixed = RESNET.with_sizes("fixed", size=8)
    with pytest.raises(ValueError, match="lognormal sizes need mean and stdev"):
        fixed.with_sizes("lognormal", minimum=1, maximum=100)


def test_distribution_fields_must_agree() -> None:
    with pytest.raises(ValueError, match="fixed sizes need size_min == size_max"):
        dataclasses.replace(
            RESNET, size_distribution="fixed", size_mean=None, size_stdev=None, size_max=MiB
        )
    with pytest.raises(ValueError, match="size_mean applies to the lognormal distribution only"):
        dataclasses.replace(RESNET, size_distribution="uniform")
    with pytest.raises(ValueError, match="size_stdev applies to the lognormal distribution only"):
        dataclasses.replace(RESNET, size_distribution="uniform", size_mean=None)


@pytest.mark.parametrize("kind", ["lognormal", "uniform", "fixed"])
def test_size_sampler_draws_what_object_sizes_draws(kind: str) -> None:
    w = RESNET.with_sizes(kind, size=1234) if kind == "fixed" else RESNET.with_sizes(kind)
    w = w.override(num_objects=2000)
    draw = w.size_sampler(random.Random("storage-workloads/sizes/8"))
    assert [draw() for _ in range(2000)] == w.object_sizes(8)
