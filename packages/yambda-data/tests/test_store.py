import errno
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from yambda_data import (
    InputFileError,
    ItemFeatures,
    SampleConfig,
    SchemaError,
    WriteError,
    build_samples,
    read_multi_event,
)
from yambda_data._checksums import HASH_THREADS
from yambda_data.cli import main
from yambda_data.preprocess import CHECKSUMS_FILE, preprocess
from yambda_data.split import temporal_split
from yambda_data.store import (
    MANIFEST_FILE,
    READY_FILE,
    SampleStore,
    StoreError,
    build_store,
)


def _reference(raw, size, config):
    events = read_multi_event(raw, size).collect()
    split = temporal_split(events, size=size)
    items = ItemFeatures.from_root(raw)
    return build_samples(split.train, None, items, config), build_samples(
        split.train, split.test, items, config
    )


def _assert_same_samples(expected, got):
    assert len(expected) == len(got)
    for name in expected.__dataclass_fields__:
        a, b = getattr(expected, name), getattr(got, name)
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b), name


@pytest.mark.parametrize("strategy", ["last_n", "interleaved"])
@pytest.mark.parametrize("causal_window", [40, 20_000])
def test_store_samples_equal_the_in_memory_spec(built_store, tiny_config, strategy, causal_window):
    raw, _pre, path = built_store
    config = SampleConfig(
        history_length=24, min_history=16, strategy=strategy, causal_window=causal_window
    )
    train, test = _reference(raw, tiny_config.size, config)
    store = SampleStore.open(path)
    # Train anchors are stored grouped by window; event order is the spec's order.
    _assert_same_samples(train, store.samples(np.sort(store.train_anchors), config))
    _assert_same_samples(test, store.samples(store.test_anchors, config))


def test_store_samples_default_to_interleaved(built_store, tiny_config):
    raw, _pre, path = built_store
    store = SampleStore.open(path)
    anchors = np.sort(store.train_anchors)
    default = store.samples(anchors, SampleConfig(min_history=16))  # L 64: 21 per pool
    assert default.history_lengths.max() <= 63
    interleaved = SampleConfig(min_history=16, strategy="interleaved")
    _assert_same_samples(store.samples(anchors, interleaved), default)
    _assert_same_samples(
        _reference(raw, tiny_config.size, SampleConfig(min_history=16))[0], default
    )
    last_n = store.samples(anchors, SampleConfig(min_history=16, strategy="last_n"))
    assert not np.array_equal(last_n.history_offsets, default.history_offsets)


def test_samples_follow_the_requested_order(built_store):
    store = SampleStore.open(built_store[2])
    config = SampleConfig(history_length=12, min_history=16)
    anchors = np.asarray(store.train_anchors[:50])
    order = np.random.default_rng(0).permutation(50)
    _assert_same_samples(
        store.samples(anchors, config).take(order), store.samples(anchors[order], config)
    )
    assert len(store.samples(anchors[:0], config)) == 0


def _store_resident_kib(store: SampleStore) -> int:
    """Resident KiB of this process's mappings of the store's files (Linux smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.rstrip().endswith(tuple(str(store.path / n) for n in store.arrays))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_mapped_pages_are_released_and_samples_stay_the_same(built_store):
    store = SampleStore.open(built_store[2])
    store.mapped_budget_bytes = 0
    config = SampleConfig(history_length=24, min_history=16)
    anchors = np.sort(store.train_anchors)
    before = store.samples(anchors, config)
    assert _store_resident_kib(store) > 0
    store.release_mapped_pages()
    assert _store_resident_kib(store) == 0
    _assert_same_samples(before, store.samples(anchors, config))
    assert _store_resident_kib(store) > 0


def test_mapped_pages_are_released_past_the_budget(built_store, monkeypatch):
    store = SampleStore.open(built_store[2])
    releases = []
    real_release = store.release_mapped_pages
    monkeypatch.setattr(store, "release_mapped_pages", lambda: releases.append(1) or real_release())
    config = SampleConfig(history_length=12, min_history=16)
    anchors = np.asarray(store.train_anchors[:40])
    expected = store.samples(anchors, config)  # the tiny store is far below the 1 GiB budget
    assert releases == []
    store.mapped_budget_bytes = 1
    _assert_same_samples(expected, store.samples(anchors, config))
    if sys.platform.startswith("linux"):  # before the cut, each pool and each event gather
        assert len(releases) == 1 + 3 + 4
    store.mapped_budget_bytes = 0
    releases.clear()
    store.samples(anchors, config)
    assert releases == []


def test_windows_partition_train_anchors_by_time(built_store):
    store = SampleStore.open(built_store[2])
    ts = store.arrays["event_timestamp"]
    seen = []
    for w in range(store.num_windows):
        anchors = np.asarray(store.window(w))
        lo = store.first_window_start + w * store.window_seconds
        assert np.all((ts[anchors] >= lo) & (ts[anchors] < lo + store.window_seconds))
        assert np.all(np.diff(anchors) > 0)  # by user, then time: event order
        seen.append(anchors)
    all_anchors = np.concatenate(seen)
    assert np.array_equal(np.sort(all_anchors), np.sort(store.train_anchors))
    assert np.unique(all_anchors).size == all_anchors.size
    assert int(ts[store.train_anchors].min()) == store.first_window_start
    assert store.window_sizes().sum() == store.manifest["num_train_anchors"]
    assert ts[store.train_anchors].max() < ts[store.test_anchors].min()
    with pytest.raises(IndexError, match="window"):
        store.window(store.num_windows)


def test_manifest_counts_and_vocab(built_store):
    _raw, pre, path = built_store
    store = SampleStore.open(path)
    meta = json.loads((pre / "split_meta.json").read_text())
    m = store.manifest
    assert m["num_events"] == meta["num_train_events"] + meta["num_test_events"]
    assert m["num_users"] == meta["num_users"]
    assert sum(m["pool_events"].values()) <= m["num_events"]
    assert store.split.t_max == meta["t_max"]
    config = SampleConfig(history_length=12, min_history=16)
    s = store.samples(np.asarray(store.train_anchors), config)
    assert s.uid.max() < store.vocab.uid
    assert s.history_item_id.max() < store.vocab.item_id
    assert s.history_artist_id.max() < store.vocab.artist_id
    assert s.history_album_id.max() < store.vocab.album_id
    store.verify()


def test_partition_count_does_not_change_the_arrays(built_store, tmp_path):
    raw, _pre, path = built_store
    preprocess(raw, "50m", tmp_path / "pre1", partitions=1)
    other = build_store(tmp_path / "pre1", raw, tmp_path / "store", min_history=16)
    ours = SampleStore.open(path)
    for name, entry in ours.manifest["files"].items():
        assert other.manifest["files"][name]["sha256"] == entry["sha256"], name


def test_rebuild_is_a_no_op_and_settings_change_rebuilds(built_store, tmp_path):
    raw, pre, _path = built_store
    out = tmp_path / "store"
    first = build_store(pre, raw, out, min_history=16)
    stamp = (out / READY_FILE).stat().st_mtime_ns
    messages = []
    again = build_store(pre, raw, out, min_history=16, progress=messages.append)
    assert (out / READY_FILE).stat().st_mtime_ns == stamp
    assert messages == [f"{out}: up to date"]
    assert again.manifest == first.manifest
    other = build_store(pre, raw, out, min_history=8)
    assert other.min_history == 8
    assert other.manifest["num_train_anchors"] > first.manifest["num_train_anchors"]
    assert not list(tmp_path.glob(".store.tmp-*")) and not list(tmp_path.glob(".store.old-*"))


def test_min_history_must_match_the_store(built_store):
    store = SampleStore.open(built_store[2])
    with pytest.raises(ValueError, match=r"min_history=4.*min_history=16"):
        store.samples(store.test_anchors[:3], SampleConfig(history_length=8, min_history=4))


def test_incomplete_or_corrupt_stores_are_refused(built_store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built_store[2], copy)
    (copy / "event_item_id").write_bytes((copy / "event_item_id").read_bytes()[:-4] + b"\0\0\0\7")
    with pytest.raises(StoreError, match="event_item_id: sha256"):
        SampleStore.open(copy).verify()
    with open(copy / "event_action", "ab") as f:
        f.write(b"\0")
    with pytest.raises(StoreError, match=r"event_action: .* bytes, the manifest says"):
        SampleStore.open(copy)
    (copy / MANIFEST_FILE).write_text((copy / MANIFEST_FILE).read_text() + " ")
    with pytest.raises(StoreError, match="does not match"):
        SampleStore.open(copy)
    (copy / READY_FILE).unlink()
    with pytest.raises(StoreError, match="READY: missing"):
        SampleStore.open(copy)


def test_a_failed_build_leaves_nothing_and_keeps_the_old_store(built_store, tmp_path, monkeypatch):
    raw, pre, _path = built_store
    out = tmp_path / "store"
    build_store(pre, raw, out, min_history=16)
    before = (out / MANIFEST_FILE).read_text()
    import yambda_data._store_build as store_module

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store_module, "_group_by_window", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        build_store(pre, raw, out, min_history=12)
    assert (out / MANIFEST_FILE).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".store.lock", ".store.readers", "store"]


def test_stale_temporary_directories_are_removed(built_store, tmp_path):
    raw, pre, _path = built_store
    stale = tmp_path / ".store.tmp-dead"
    stale.mkdir()
    (stale / "event_item_id").write_bytes(b"partial")
    build_store(pre, raw, tmp_path / "store", min_history=16)
    assert not stale.exists()


def test_refuses_to_replace_other_directories(built_store, tmp_path):
    raw, pre, _path = built_store
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a sample store"):
        build_store(pre, raw, tmp_path / "mine", min_history=16)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_bad_inputs_name_what_is_wrong(built_store, tmp_path):
    raw, pre, _path = built_store
    with pytest.raises(FileNotFoundError, match=r"split_meta\.json"):
        build_store(tmp_path, raw, tmp_path / "s", min_history=16)
    with pytest.raises(FileNotFoundError, match=r"artist_item_mapping\.parquet"):
        build_store(pre, tmp_path, tmp_path / "s", min_history=16)
    with pytest.raises(ValueError, match="min_history"):
        build_store(pre, raw, tmp_path / "s", min_history=-1)
    with pytest.raises(ValueError, match="window_seconds"):
        build_store(pre, raw, tmp_path / "s", min_history=16, window_seconds=0)
    with pytest.raises(StoreError, match=r"no train anchor.*min_history=100000"):
        build_store(pre, raw, tmp_path / "s", min_history=100_000)


_BUILD = """
import sys
from pathlib import Path
from yambda_data.store import build_store
store = build_store(sys.argv[1], sys.argv[2], sys.argv[3], min_history=16)
print(store.manifest["files"]["train_anchor"]["sha256"])
"""


def test_ranks_building_at_once_get_one_store(built_store, tmp_path):
    raw, pre, _path = built_store
    out = tmp_path / "store"
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD, str(pre), str(raw), str(out)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    digests = {rank.communicate(timeout=300)[0].strip() for rank in ranks}
    assert [rank.returncode for rank in ranks] == [0, 0, 0]
    assert len(digests) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".store.lock", ".store.readers", "store"]
    SampleStore.open(out).verify()


def test_inputs_are_checked_before_anything_is_created(built_store, tmp_path):
    """A malformed split_meta.json, a mapping of the wrong schema or an out_dir in the way
    is refused with nothing created (not even the lock file or the parent directory)."""
    raw, pre, _path = built_store
    bad_pre = tmp_path / "pre"
    shutil.copytree(pre, bad_pre)
    meta = json.loads((bad_pre / "split_meta.json").read_text())
    meta["num_users"] = "many"
    (bad_pre / "split_meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"split_meta\.json: field 'num_users': expected int"):
        build_store(bad_pre, raw, tmp_path / "new" / "store", min_history=16)

    bad_raw = tmp_path / "raw"
    shutil.copytree(raw, bad_raw)
    album = bad_raw / "album_item_mapping.parquet"
    album.write_bytes((bad_raw / "artist_item_mapping.parquet").read_bytes())
    with pytest.raises(SchemaError, match=r"album_item_mapping\.parquet: column 'album_id'"):
        build_store(pre, bad_raw, tmp_path / "new" / "store", min_history=16)
    album.write_bytes(album.read_bytes()[:50])  # truncated: named
    with pytest.raises(InputFileError, match=f"{re.escape(str(album))}: cannot read it"):
        build_store(pre, bad_raw, tmp_path / "new" / "store", min_history=16)

    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        build_store(pre, raw, tmp_path / "file" / "store", min_history=16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "pre", "raw"]


def test_no_space_while_building_keeps_the_old_store(built_store, tmp_path, monkeypatch, capsys):
    raw, pre, _path = built_store
    out = tmp_path / "store"
    build_store(pre, raw, out, min_history=16)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import yambda_data._store_build as store_module

    class FullFile:  # the file of event_item_id hits a full disk
        def __init__(self, file):
            self.file = file

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            self.file.close()

    real_init = store_module._Appender.__init__

    def init(self, path, dtype, output=None):
        real_init(self, path, dtype, output)
        if path.name == "event_item_id":
            self._file = FullFile(self._file)

    monkeypatch.setattr(store_module._Appender, "__init__", init)
    with pytest.raises(WriteError) as info:
        build_store(pre, raw, out, min_history=12)
    err = info.value
    assert err.errno == errno.ENOSPC and err.output == out
    assert err.filename.endswith("event_item_id") and f"bytes free in {tmp_path}" in str(err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".store.lock", ".store.readers", "store"]

    argv = ["build-store", "--preprocessed", str(pre), "--raw", str(raw), "--out", str(out)]
    assert main([*argv, "--min-history", "12"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the progress lines
    assert last.startswith(f"yambda-data build-store: error: writing {out} (at ")
    assert "event_item_id): No space left on device [errno 28]" in last


def test_a_malformed_manifest_is_a_store_error(built_store, tmp_path):
    _raw, _pre, path = built_store
    copy = tmp_path / "store"
    shutil.copytree(path, copy)
    text = "{not json"
    (copy / MANIFEST_FILE).write_text(text)
    (copy / READY_FILE).write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")
    with pytest.raises(StoreError, match=r"manifest\.json: not valid JSON"):
        SampleStore.open(copy)
    text = json.dumps({"format": 1})
    (copy / MANIFEST_FILE).write_text(text)
    (copy / READY_FILE).write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")
    with pytest.raises(StoreError, match=r"manifest\.json: malformed \(KeyError"):
        SampleStore.open(copy)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_store_memory_benchmark_runs(built_store):
    script = Path(__file__).parents[1] / "benchmarks" / "bench_store_memory.py"
    argv = [sys.executable, str(script), str(built_store[2]), "--batch-size", "8"]
    argv += ["--batches", "3", "--repeat", "1", "--budget", "0", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["off", "0"] and all(
        float(r[1].replace(",", "")) > 0 for r in rows
    )


# reuse only what matches its checksums; never remove what the build did not write ------------


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def test_a_damaged_array_is_named_and_rebuilt_not_reused(built_store, tmp_path):
    raw, pre, _path = built_store
    out = tmp_path / "store"
    build_store(pre, raw, out, min_history=16)
    before = _tree(out)
    array = out / "event_item_id"
    data = bytearray(array.read_bytes())
    data[len(data) // 2] = (data[len(data) // 2] + 1) % 256  # the same size
    array.write_bytes(bytes(data))
    said: list[str] = []
    store = build_store(pre, raw, out, min_history=16, progress=said.append)
    assert said[0] == f"{array}: sha256 differs from {MANIFEST_FILE}; rebuilding {out}"
    assert any(m.startswith("partition 1/3") for m in said)
    assert _tree(out) == before
    store.verify()


def test_the_fingerprint_covers_the_content_of_the_inputs(built_store, tmp_path):
    """Inputs whose names, sizes and split metadata are those the store was built from, but
    whose content differs (a popularity count, recorded in the output's checksums), are
    other inputs: the store is rebuilt, not reused."""
    raw, pre, _path = built_store
    out = tmp_path / "store"
    build_store(pre, raw, out, min_history=16)
    other = tmp_path / "pre"
    shutil.copytree(pre, other)
    popularity = np.load(other / "item_popularity.npy")
    popularity[0] += 1
    np.save(other / "item_popularity.npy", popularity)
    record = json.loads((other / CHECKSUMS_FILE).read_text())
    data = (other / "item_popularity.npy").read_bytes()
    assert record["files"]["item_popularity.npy"]["bytes"] == len(data)
    record["files"]["item_popularity.npy"]["sha256"] = hashlib.sha256(data).hexdigest()
    (other / CHECKSUMS_FILE).write_text(json.dumps(record))
    said: list[str] = []
    build_store(other, raw, out, min_history=16, progress=said.append)
    assert said[0] == f"{out}: built from other inputs or settings; rebuilding {out}"


def test_a_preprocess_output_that_differs_from_its_checksums_is_refused(built_store, tmp_path):
    raw, pre, _path = built_store
    other = tmp_path / "pre"
    shutil.copytree(pre, other)
    part = other / "train_sessions" / "part-00001.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] = (data[len(data) // 2] + 1) % 256
    part.write_bytes(bytes(data))
    with pytest.raises(InputFileError, match=f"{re.escape(str(part))}: sha256 differs from "):
        build_store(other, raw, tmp_path / "new" / "store", min_history=16)
    assert not (tmp_path / "new").exists()
    (other / CHECKSUMS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{CHECKSUMS_FILE}: no such file"):
        build_store(other, raw, tmp_path / "new" / "store", min_history=16)
    assert not (tmp_path / "new").exists()


def test_an_existing_store_holding_other_files_is_never_replaced(built_store, tmp_path):
    raw, pre, _path = built_store
    out = tmp_path / "store"
    build_store(pre, raw, out, min_history=16)
    (out / "notes.txt").write_text("keep me")
    build_store(pre, raw, out, min_history=16)  # reused: nothing removed
    before = _tree(out)
    with pytest.raises(ValueError, match=rf"{re.escape(str(out))}: holds notes\.txt, which"):
        build_store(pre, raw, out, min_history=8)
    assert _tree(out) == before


def test_a_store_is_never_where_its_inputs_are(built_store, tmp_path):
    """The output may not be, hold or lie inside the preprocess output or a mapping file, nor
    be or hold the raw root; refused before anything is created."""
    raw, pre, _path = built_store
    nest = tmp_path / "st2"
    shutil.copytree(pre, nest / "pre")
    shutil.copytree(raw, nest / "raw")
    build_store(nest / "pre", nest / "raw", nest / "store", min_history=16)
    shutil.rmtree(nest / "store")
    before = _tree(tmp_path)
    artist = nest / "raw" / "artist_item_mapping.parquet"
    cases = [
        (nest, "holds", nest / "pre"),
        (nest / "pre", "is", nest / "pre"),
        (nest / "pre" / "store", "lies inside", nest / "pre"),
        (nest / "raw", "holds", artist),
        (artist, "is", artist),
    ]
    for out, relation, what in cases:
        pattern = f"{re.escape(str(out))}: the output {relation} the input {re.escape(str(what))};"
        with pytest.raises(ValueError, match=pattern):
            build_store(nest / "pre", nest / "raw", out, min_history=16)
        assert _tree(tmp_path) == before
    # beside the raw files, inside the raw root, is fine (DATA/prepared/SIZE)
    build_store(nest / "pre", nest / "raw", nest / "raw" / "prepared" / "store", min_history=16)

    argv = ["build-store", "--preprocessed", str(nest / "pre"), "--raw", str(nest / "raw")]
    assert main([*argv, "--out", str(nest), "--min-history", "16"]) == 2


def test_verify_threads_report_the_first_array_in_manifest_order(built_store, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(built_store[2], copy)
    names = list(SampleStore.open(copy).manifest["files"])
    for name in (names[-1], names[1]):  # damaged: the first named is the earlier one
        data = bytearray((copy / name).read_bytes())
        data[0] ^= 1
        (copy / name).write_bytes(bytes(data))
    with pytest.raises(StoreError, match=f"{names[1]}: sha256 differs from {MANIFEST_FILE}"):
        SampleStore.open(copy).verify()


def test_the_checksum_benchmark_runs(tmp_path):
    script = Path(__file__).parents[1] / "benchmarks" / "bench_checksums.py"
    argv = [sys.executable, str(script), "--work", str(tmp_path), "--repeat", "1"]
    argv += ["--file-gib", "0.001", "--store-gib", "0.001", "--skip-duplicates"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(" | ")[0].strip("| ") for line in done.stdout.splitlines()[3:]]
    assert rows == [
        "sha256, 1 thread",
        "synthesize_cached, reused",
        "preprocess output: checksums_problem",
        "store: SampleStore.verify",
        "prepare_store, reused",
        f"500m-sized store (sparse), {HASH_THREADS} threads",
        "500m-sized store (sparse), 1 thread",
    ]


_HOLDER = """
import sys, time
from yambda_data.store import hold_store
hold_store(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def test_a_store_held_by_a_run_is_not_rebuilt_under_it(built_store, tmp_path):
    """Another process holds the store (a run reading it): a build of other settings into it
    is refused naming that process, and the store is as it was; its own hold does not count."""
    import subprocess
    import sys

    from yambda_data.store import StoreInUse, hold_store

    raw, pre, _path = built_store
    out = tmp_path / "store"
    build_store(pre, raw, out, min_history=16)
    before = _tree(out)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(StoreInUse, match=rf"in use by process {holder.pid}, a run that"):
            build_store(pre, raw, out, min_history=8)
        assert _tree(out) == before
    finally:
        holder.kill()
        holder.wait()
    hold_store(out)  # this process's own hold
    assert build_store(pre, raw, out, min_history=8).min_history == 8


def test_a_loader_refuses_a_store_that_is_not_the_one_verified(built_store):
    from yambda_data.loader import StoreBatches
    from yambda_data.samples import SampleConfig
    from yambda_data.streaming import BatchPlan

    store = SampleStore.open(built_store[2])
    plan = BatchPlan((0,), 4)
    config = SampleConfig(history_length=8, min_history=store.min_history)
    verified = store.manifest["fingerprint"]
    assert StoreBatches(store.path, config, plan, fingerprint=verified).store.path == store.path
    with pytest.raises(StoreError, match=r"not the store this run verified"):
        _ = StoreBatches(store.path, config, plan, fingerprint="another").store


def test_a_mapping_id_that_would_size_huge_tables_is_refused_before_anything(built_store, tmp_path):
    """One mapping row with item_id 2^32 - 1 would make two 16 GiB item tables: validate and
    build_store refuse it naming the file, the column and the value, creating nothing."""
    import shutil

    import polars as pl

    from yambda_data.schema import SchemaError, validate_mapping

    raw, pre, _path = built_store
    root = tmp_path / "raw"
    shutil.copytree(raw, root)
    path = root / "artist_item_mapping.parquet"
    mapping = pl.read_parquet(path)
    ids = mapping["item_id"].to_list()
    ids[0] = 2**32 - 1
    mapping.with_columns(pl.Series("item_id", ids, mapping["item_id"].dtype)).write_parquet(path)
    with pytest.raises(SchemaError, match=r"column 'item_id': id 4,294,967,295 is above"):
        validate_mapping(pl.scan_parquet(path), "artist", source=str(path))
    with pytest.raises(SchemaError, match=r"would take 32\.0 GiB") as info:
        build_store(pre, root, tmp_path / "store", min_history=16)
    assert info.value.source == str(path)
    assert not (tmp_path / "store").exists()
