from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from yambda_data.schema import (
    ALBUM_ITEM_MAPPING_SCHEMA,
    ARTIST_ITEM_MAPPING_SCHEMA,
    MULTI_EVENT_SCHEMA,
    validate_mapping,
    validate_multi_event,
)
from yambda_data.split import temporal_split
from yambda_data.synth import SynthConfig, SynthData, generate, roc_auc, synthesize, yambda_shape


def _files(paths) -> dict[str, bytes]:
    return {
        name: Path(getattr(paths, name)).read_bytes()
        for name in ("multi_event", "artist_item_mapping", "album_item_mapping")
    }


def test_layout_and_determinism(tmp_path: Path, tiny_config: SynthConfig):
    a = synthesize(tmp_path / "a", tiny_config)
    b = synthesize(tmp_path / "b", tiny_config)
    c = synthesize(tmp_path / "c", dataclasses.replace(tiny_config, seed=tiny_config.seed + 1))
    assert a.multi_event == tmp_path / "a" / "flat" / "50m" / "multi_event.parquet"
    assert a.artist_item_mapping == tmp_path / "a" / "artist_item_mapping.parquet"
    assert a.album_item_mapping == tmp_path / "a" / "album_item_mapping.parquet"
    assert _files(a) == _files(b)
    files_a, files_c = _files(a), _files(c)
    assert all(files_a[k] != files_c[k] for k in files_a)
    # No temporary files left behind.
    leftovers = [p for p in (tmp_path / "a").rglob("*") if p.is_file() and ".tmp" in p.name]
    assert leftovers == []
    validate_multi_event(a.multi_event)
    assert validate_mapping(a.artist_item_mapping, "artist") > 0
    assert validate_mapping(a.album_item_mapping, "album") > 0


def test_size_label(tmp_path: Path, tiny_config: SynthConfig):
    paths = synthesize(tmp_path, dataclasses.replace(tiny_config, users=3, size="500m"))
    assert paths.multi_event == tmp_path / "flat" / "500m" / "multi_event.parquet"


def test_schema_and_invariants(tiny_data: SynthData):
    ev = tiny_data.events
    assert ev.schema == MULTI_EVENT_SCHEMA
    assert tiny_data.artist_item_mapping.schema == ARTIST_ITEM_MAPPING_SCHEMA
    assert tiny_data.album_item_mapping.schema == ALBUM_ITEM_MAPPING_SCHEMA
    summary = validate_multi_event(ev)
    assert summary.num_users == tiny_data.config.users
    assert sorted(ev["uid"].unique().to_list()) == list(range(tiny_data.config.users))
    assert tiny_data.listen_plus_prob.shape == (ev.height,)
    listen = (ev["event_type"] == "listen").to_numpy()
    assert np.isnan(tiny_data.listen_plus_prob[~listen]).all()
    assert (
        (tiny_data.listen_plus_prob[listen] > 0) & (tiny_data.listen_plus_prob[listen] < 1)
    ).all()


def test_marginals(default_data: SynthData):
    ev = default_data.events
    n = ev.height
    share = {k: v / n for k, v in ev["event_type"].value_counts().iter_rows()}
    assert 0.96 <= share["listen"] <= 0.98
    assert 0.014 <= share["like"] <= 0.025
    assert 0.001 <= share["dislike"] <= 0.004
    assert 0.0005 <= share["unlike"] + share["undislike"] <= 0.01
    assert share["undislike"] > 0

    listens = ev.filter(pl.col("event_type") == "listen")
    ratio = listens["played_ratio_pct"].to_numpy()
    assert ratio.min() == 0 and ratio.max() <= 159 and ratio.max() > 140
    assert 0.06 <= (ratio == 0).mean() <= 0.09
    assert 0.002 <= (ratio > 100).mean() <= 0.008
    assert 0.55 <= (ratio >= 50).mean() <= 0.68
    length = listens["track_length_seconds"].to_numpy()
    assert (length % 5 == 0).all() and length.min() >= 30 and length.max() <= 900

    ts = ev["timestamp"].to_numpy().astype(np.int64)
    uid = ev["uid"].to_numpy()
    assert (ts % 5 == 0).all() and ts.min() >= 0 and ts.max() < 26_000_000
    same_user = uid[1:] == uid[:-1]
    ties = ((ts[1:] == ts[:-1]) & same_user).sum() / same_user.sum()
    assert 0.09 <= ties <= 0.15

    organic = ev["is_organic"].to_numpy()
    assert set(np.unique(organic)) == {0, 1}

    # Heavy-tailed users: median near the configured one, long right tail.
    per_user = np.bincount(uid)
    assert 800 <= np.median(per_user) <= 1_300
    assert np.percentile(per_user, 95) > 3 * np.median(per_user)


def test_sessions_cover_the_time_axis(default_data: SynthData):
    ev = default_data.events
    per_user = ev.group_by("uid").agg(
        pl.col("timestamp").min().alias("first"),
        pl.col("timestamp").max().alias("last"),
        (pl.col("timestamp").cast(pl.Int64).diff() > 1_800).sum().alias("gaps"),
    )
    assert per_user["first"].max() < 2 * 86_400
    assert per_user["last"].min() >= 26_000_000 - 86_400
    # Sessions: more than one per user, separated by gaps over 30 minutes.
    assert per_user["gaps"].min() >= 5
    split = temporal_split(ev)
    test_listens = split.test.filter(pl.col("event_type") == "listen")
    assert test_listens.height >= 3_000
    assert test_listens["uid"].n_unique() == default_data.config.users


def test_popularity_and_ids(default_data: SynthData):
    cfg = default_data.config
    ev = default_data.events
    counts = np.sort(ev["item_id"].value_counts()["count"].to_numpy())[::-1]
    top = counts[: max(1, counts.size // 100)].sum() / counts.sum()
    assert top > 0.2  # the top 1% of items take a large share
    ids = np.sort(ev["item_id"].unique().to_numpy().astype(np.int64))
    assert ids.max() < cfg.items * cfg.id_sparsity
    assert (np.diff(ids) > 1).mean() > 0.5  # sparse, not contiguous


def test_mappings_many_to_many(default_data: SynthData):
    cfg = default_data.config
    artist = default_data.artist_item_mapping
    album = default_data.album_item_mapping
    assert artist.is_duplicated().sum() == 0 and album.is_duplicated().sum() == 0
    per_item = artist.group_by("item_id").len()["len"]
    assert (per_item == 1).mean() > 0.8
    assert per_item.max() >= 2
    assert artist["artist_id"].n_unique() > 0.9 * cfg.artists
    assert artist.group_by("artist_id").len()["len"].max() > 1
    assert album.group_by("item_id").len()["len"].max() >= 2
    # A few items have no mapping at all.
    assert 0.005 < 1 - artist["item_id"].n_unique() / cfg.items < 0.05
    assert 0.005 < 1 - album["item_id"].n_unique() / cfg.items < 0.05


def test_planted_signal_bayes_auc(default_data: SynthData):
    """Bayes-optimal AUC of listen_plus from the generator's own probabilities."""
    auc = default_data.planted_auc()
    assert 0.75 <= auc <= 0.82
    t_max = int(default_data.events["timestamp"].max())
    assert 0.74 <= default_data.planted_auc(t_from=t_max - 86_400, t_to=t_max) <= 0.83


def test_no_signal(tiny_config: SynthConfig):
    data = generate(dataclasses.replace(tiny_config, users=60, signal_scale=0.0))
    probs = data.listen_plus_prob[~np.isnan(data.listen_plus_prob)]
    assert np.allclose(probs, probs[0])
    assert data.planted_auc() == 0.5


def test_roc_auc():
    assert roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert roc_auc(np.array([1.0, 1.0]), np.array([0, 1])) == 0.5
    assert np.isnan(roc_auc(np.array([1.0, 2.0]), np.array([1, 1])))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("users", 0),
        ("users", 2.5),
        ("seed", -1),
        ("size", ""),
        ("size", "../x"),
        ("median_events_per_user", 10),
        ("min_events_per_user", 4),
        ("max_events_per_user", 200_000),
        ("events_sigma", -0.1),
        ("items", 10),
        ("albums", 10),
        ("artists", 4),
        ("genres", 0),
        ("item_zipf", float("nan")),
        ("id_sparsity", 0.5),
        ("mean_session_listens", 0),
        ("last_day_sessions", 0),
        ("time_span", 100),
        ("signal_scale", -1.0),
        ("time_span", 10 * 86_400),
        ("users", True),
    ],
)
def test_config_validation_names_the_field(field: str, value):
    with pytest.raises(ValueError, match=rf"SynthConfig\.{field}"):
        SynthConfig(**{field: value})


def test_a_failed_write_keeps_the_files_that_were_there(tmp_path: Path, tiny_config, monkeypatch):
    """synthesize renames its three files into place only once all are written: a write error
    (naming the file and the free space) leaves the old dataset whole."""
    import errno

    import polars as pl

    from yambda_data import WriteError

    paths = synthesize(tmp_path, dataclasses.replace(tiny_config, users=3))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    real = pl.DataFrame.write_parquet

    def full(self, file, **kwargs):
        if "event_type" in self.columns:  # the events, written last
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, file, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    with pytest.raises(WriteError) as info:
        synthesize(tmp_path, dataclasses.replace(tiny_config, users=5, seed=99))
    assert info.value.filename == str(paths.multi_event)
    assert "No space left on device" in str(info.value) and "bytes free in" in str(info.value)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_streamed_file_has_the_in_memory_rows_in_order(tmp_path):
    """stream=True writes the same rows as the in-memory path, in the same order and schema,
    in row groups of whole uid ranges, and the same config gives the same bytes again."""
    config = SynthConfig(users=600, seed=5, median_events_per_user=200)  # three user blocks
    streamed = synthesize(tmp_path / "streamed", config, stream=True)
    in_memory = synthesize(tmp_path / "in_memory", config)
    a, b = pl.read_parquet(streamed.multi_event), pl.read_parquet(in_memory.multi_event)
    assert a.schema == b.schema and a.equals(b)
    for name in ("artist_item_mapping", "album_item_mapping"):
        assert getattr(streamed, name).read_bytes() == getattr(in_memory, name).read_bytes()
    again = synthesize(tmp_path / "again", config, stream=True)
    assert again.multi_event.read_bytes() == streamed.multi_event.read_bytes()
    assert [p.name for p in streamed.multi_event.parent.iterdir()] == ["multi_event.parquet"]


def test_yambda_shape_has_the_published_users_and_per_user_mean():
    shape = yambda_shape("500m")
    assert (shape.users, shape.items, shape.size) == (100_000, 3_004_578, "500m")
    assert yambda_shape("5b", users=50).users == 50
    listens = generate(yambda_shape("500m", users=300)).events.filter(
        pl.col("event_type") == "listen"
    )
    per_user = listens.group_by("uid").len()["len"]
    # The published median is 3,076 listens per user and about 4,800 events per user on
    # average (466.5M listens over 100,000 users in 500m); 300 users sample it loosely.
    assert 2_400 <= per_user.median() <= 3_900
    assert 3_700 <= per_user.mean() <= 6_000
    with pytest.raises(ValueError, match="size: expected one of 50m, 500m, 5b, got '1b'"):
        yambda_shape("1b")


# synthesize_cached: a shared cache that is checked at every reuse -----------------------------

SMALL = SynthConfig(users=6, median_events_per_user=80, items=600, artists=60, albums=150, seed=3)


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def test_cache_is_made_once_and_reused_while_its_checksums_match(tmp_path):
    from yambda_data import synthesize_cached
    from yambda_data.synth import SYNTH_RECORD_FILE

    root = tmp_path / "cache"
    said: list[str] = []
    paths = synthesize_cached(root, SMALL, progress=said.append)
    assert said == [f"synthesizing {root}"]
    assert _files(paths) == _files(synthesize(tmp_path / "plain", SMALL))
    record = json.loads((root / SYNTH_RECORD_FILE).read_text())
    assert record["config"] == SMALL.to_dict()
    assert sorted(record["files"]) == [
        "album_item_mapping.parquet",
        "artist_item_mapping.parquet",
        "flat/50m/multi_event.parquet",
    ]
    for name, entry in record["files"].items():
        data = (root / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    before = _tree(root)
    said.clear()
    assert synthesize_cached(root, SMALL, progress=said.append) == paths
    assert said == [f"{root}: synthetic data up to date"]
    assert _tree(root) == before


@pytest.mark.parametrize("damage", ["flip", "delete", "truncate"])
def test_a_damaged_cache_file_is_named_and_made_again(tmp_path, damage):
    from yambda_data import synthesize_cached

    root = tmp_path / "cache"
    paths = synthesize_cached(root, SMALL)
    before = _tree(root)
    target = paths.multi_event if damage == "flip" else paths.artist_item_mapping
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[len(data) // 2] = (data[len(data) // 2] + 1) % 256  # same size
        target.write_bytes(bytes(data))
        why = f"{target}: sha256 differs from synth.json"
    elif damage == "delete":
        target.unlink()
        why = f"{target}: missing (listed in synth.json)"
    else:
        target.write_bytes(bytes(data[:-10]))
        why = f"{target}: {len(data) - 10:,} bytes, synth.json says {len(data):,}"
    said: list[str] = []
    synthesize_cached(root, SMALL, progress=said.append)
    assert said == [f"synthesizing {root} ({why})"]
    assert _tree(root) == before


def test_another_config_or_an_unfinished_record_makes_the_cache_again(tmp_path):
    from yambda_data import synthesize_cached
    from yambda_data.synth import SYNTH_RECORD_FILE

    root = tmp_path / "cache"
    synthesize_cached(root, SMALL)
    record = root / SYNTH_RECORD_FILE
    other = dataclasses.replace(SMALL, seed=4)
    said: list[str] = []
    synthesize_cached(root, other, progress=said.append)
    assert said == [f"synthesizing {root} ({record}: made for another config)"]
    assert json.loads(record.read_text())["config"] == other.to_dict()
    # a synthesis killed after it claimed the folder: the files there are replaced
    record.write_text(json.dumps({"config": other.to_dict(), "files": None}))
    said.clear()
    synthesize_cached(root, other, progress=said.append)
    assert said == [
        f"synthesizing {root} ({record}: no checksums (an earlier synthesis did not finish))"
    ]
    # the record of the trainer's earlier cache (the config alone)
    record.write_text(json.dumps(other.to_dict(), sort_keys=True))
    said.clear()
    synthesize_cached(root, other, progress=said.append)
    assert said == [f"synthesizing {root} ({record}: not a record of synthesize_cached)"]


def test_leftovers_of_killed_syntheses_are_removed_and_nothing_else(tmp_path):
    from yambda_data import synthesize_cached

    root = tmp_path / "cache"
    paths = synthesize_cached(root, SMALL)
    flat = paths.multi_event.parent
    leftovers = [
        flat / ".multi_event.parquet.k1ll3d.tmp",
        root / ".artist_item_mapping.parquet.k1ll3d.tmp",
        root / ".synth.json.k1ll3d.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"half")
    parts = flat / ".multi_event.parquet.k1ll3d.tmp.parts-x9"
    parts.mkdir()
    (parts / "part-0000000.parquet").write_bytes(b"half")
    keep = [root / "notes.txt", flat / "multi_event.parquet.tmp", root / ".synth.json.tmp"]
    for path in keep:
        path.write_text("mine")
    said: list[str] = []
    synthesize_cached(root, SMALL, progress=said.append)
    assert not parts.exists() and not any(path.exists() for path in leftovers)
    assert all(path.read_text() == "mine" for path in keep)
    removed = sorted(m for m in said if m.startswith("removing "))
    assert (
        len(removed) == 4 and f"removing {parts} (left by a synthesis that was killed)" in removed
    )
    assert said[-1] == f"{root}: synthetic data up to date"


def test_synthesize_over_a_killed_one_removes_its_leftovers(tmp_path):
    """`synth --overwrite` after a kill -9: the temporary files and part folders the killed
    synthesis left beside the dataset are removed; the user's files are not."""
    root = tmp_path / "data"
    paths = synthesize(root, SMALL)
    flat = paths.multi_event.parent
    leftovers = [
        flat / ".multi_event.parquet.k1ll3d.tmp",
        root / ".album_item_mapping.parquet.x.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"half")
    parts = flat / ".multi_event.parquet.k1ll3d.tmp.parts-x9"
    parts.mkdir()
    (parts / "part-0000000.parquet").write_bytes(b"half")
    mine = root / "notes.tmp"
    mine.write_text("mine")
    synthesize(root, SMALL)
    assert not parts.exists() and not any(path.exists() for path in leftovers)
    assert mine.read_text() == "mine"


def test_a_synthesis_waits_for_a_live_one_and_keeps_its_temporaries(tmp_path):
    """Two syntheses into one root take turns: while another holds the root, its temporary
    file is not touched; once it is gone the file counts as a killed one's."""
    import fcntl
    import threading

    root = tmp_path / "data"
    paths = synthesize(root, SMALL)
    live = paths.multi_event.parent / ".multi_event.parquet.l1ve.tmp"
    with open(root / ".synthesis.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        live.write_bytes(b"being written")
        second = threading.Thread(target=synthesize, args=(root, SMALL))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and live.read_bytes() == b"being written"
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    second.join(timeout=60)
    assert not second.is_alive() and not live.exists()


def test_cache_never_replaces_files_it_did_not_make(tmp_path):
    from yambda_data import synthesize_cached

    root = tmp_path / "download"
    paths = synthesize(root, SMALL)  # a dataset of the user's: no record
    before = _tree(root)
    with pytest.raises(ValueError, match=r"refusing to replace a dataset that synthesize_cached"):
        synthesize_cached(root, SMALL)
    assert _tree(root) == before
    paths.multi_event.unlink()
    paths.multi_event.mkdir()  # not a file: refused before anything is written
    with pytest.raises(ValueError, match=f"{paths.multi_event}: exists and is not a file"):
        synthesize_cached(tmp_path / "download", dataclasses.replace(SMALL, seed=9))
    with pytest.raises(ValueError, match=f"{paths.multi_event}: exists and is not a file"):
        synthesize(tmp_path / "download", SMALL)
    with pytest.raises(TypeError, match="config must be a SynthConfig"):
        synthesize_cached(tmp_path / "other", SMALL.to_dict())  # type: ignore[arg-type]
    assert not (tmp_path / "other").exists()


_CACHE = """
import sys
from yambda_data import SynthConfig, synthesize_cached
config = SynthConfig(users=6, median_events_per_user=80, items=600, artists=60, albums=150, seed=3)
synthesize_cached(sys.argv[1], config, progress=print, hold=True)
"""


def test_concurrent_callers_take_turns(tmp_path):
    root = tmp_path / "cache"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _CACHE, str(root)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    said = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0]
    assert sum(text.startswith("synthesizing") for text in said) == 1
    assert sum(text == f"{root}: synthetic data up to date\n" for text in said) == 2
    assert sorted(p.name for p in root.iterdir()) == [
        ".readers",
        ".synth.json.lock",
        ".synthesis.lock",
        "album_item_mapping.parquet",
        "artist_item_mapping.parquet",
        "flat",
        "synth.json",
    ]


_READER = """
import sys, time
from yambda_data import hold_data
hold_data(sys.argv[1], progress=lambda line: print(line, flush=True))
print("held", flush=True)
time.sleep(120)
"""


def _reader(root: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _READER, str(root)], stdout=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_a_dataset_that_runs_read_is_not_replaced_under_them(tmp_path):
    """Two processes hold one dataset for reading (two runs of one --data share it): a
    synthesis or a download into it is refused in one line naming the path and a holder,
    and the files are as they were; once the readers are gone it is replaced."""
    root, mirror = tmp_path / "data", tmp_path / "mirror"
    synthesize(root, SMALL)
    synthesize(mirror, dataclasses.replace(SMALL, seed=4))
    before = _tree(root)
    readers = [_reader(root), _reader(root)]
    try:
        assert [reader.stdout.readline() for reader in readers] == ["held\n", "held\n"]
        cli = [sys.executable, "-m", "yambda_data"]
        for command in (
            ["synth", "--users", "6", "--seed", "5", "--out", str(root), "--overwrite"],
            ["download", "--size", "50m", "--dest", str(root), "--source", str(mirror)],
        ):
            done = subprocess.run([*cli, *command], capture_output=True, text=True, timeout=120)
            holders = [f"in use by process {reader.pid}, a run that reads it" for reader in readers]
            assert done.returncode == 2, done.stderr
            assert len(done.stderr.splitlines()) == 1, done.stderr
            assert done.stderr.startswith(f"yambda-data {command[0]}: error: {root}: ")
            assert any(holder in done.stderr for holder in holders), done.stderr
        assert _tree(root) == before
    finally:
        for reader in readers:
            reader.kill()
            reader.wait()
    synthesize(root, dataclasses.replace(SMALL, seed=5))
    assert _tree(root) != before


@pytest.mark.slow
def test_a_run_that_writes_its_own_data_keeps_holding_it(tmp_path):
    """This process's own hold does not block its synthesis, and holds again afterwards; a
    reader that starts while a synthesis writes waits for it, naming it."""
    import os

    from yambda_data import DataInUse, hold_data
    from yambda_data._readers import writing_data

    root = tmp_path / "data"
    synthesize(root, SMALL)
    hold_data(root)
    synthesize(root, dataclasses.replace(SMALL, seed=5))
    reader = _reader(root)
    try:
        # The reader is in: the hold came back after the synthesis, and readers share it.
        assert reader.stdout.readline() == "held\n"
        with pytest.raises(DataInUse, match=rf"{root}: in use by process {reader.pid}"):
            synthesize(root, SMALL)
    finally:
        reader.kill()
        reader.wait()
    other = tmp_path / "other"
    synthesize(other, SMALL)
    with writing_data(other, "a synthesis"):
        waiting = _reader(other)
        try:
            line = waiting.stdout.readline()
            assert line == f"waiting for process {os.getpid()}, which is writing {other}\n"
        except BaseException:
            waiting.kill()
            raise
    try:
        assert waiting.stdout.readline() == "held\n"
    finally:
        waiting.kill()
        waiting.wait()


def test_a_dataset_no_window_of_which_holds_the_anchors_asked_for_is_refused_unwritten(tmp_path):
    """min_window_anchors: refused from the events generated in memory, before the record or
    a file of the dataset is written; the same root then takes a request it can meet."""
    from yambda_data import WindowTooSmall, busiest_window_listens, generate, synthesize_cached
    from yambda_data.synth import SYNTH_RECORD_FILE

    most = busiest_window_listens(generate(SMALL).events, 86_400)
    root = tmp_path / "cache"
    said: list[str] = []
    with pytest.raises(WindowTooSmall, match=rf"multi_event\.parquet: .* {most:,} train") as e:
        synthesize_cached(root, SMALL, progress=said.append, min_window_anchors=most + 1)
    assert (e.value.needed, e.value.most, e.value.window_seconds) == (most + 1, most, 86_400)
    assert said == []
    assert not (root / SYNTH_RECORD_FILE).exists()
    assert [p for p in root.rglob("*") if not p.name.startswith(".")] == []  # locks only
    paths = synthesize_cached(root, SMALL, min_window_anchors=most)
    assert _files(paths) == _files(synthesize(tmp_path / "plain", SMALL))
    with pytest.raises(ValueError, match="min_window_anchors must be a positive integer"):
        synthesize_cached(tmp_path / "other", SMALL, min_window_anchors=0)
    assert not (tmp_path / "other").exists()
