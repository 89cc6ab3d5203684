import numpy as np
import pytest

from yambda_data import SampleConfig, load_dlrmv4_samples, synthesize
from yambda_data.schema import SchemaError, multi_event_path


@pytest.fixture(scope="module")
def root(tmp_path_factory, tiny_config):
    out = tmp_path_factory.mktemp("yambda")
    synthesize(out, tiny_config)
    return out


def test_train_and_eval_samples_follow_the_split(root, tiny_config):
    data = load_dlrmv4_samples(
        root, tiny_config.size, SampleConfig(history_length=8, min_history=4)
    )
    meta = data.split
    assert len(data.train) > 0 and len(data.eval) > 0
    assert data.train.anchor_timestamp.max() < meta.train_end
    assert data.eval.anchor_timestamp.min() >= meta.test_start
    assert data.eval.anchor_timestamp.max() < meta.t_max
    # Eval histories reach back into the train period: the user's train events come first.
    first = data.eval.history_offsets[0]
    assert data.eval.history_timestamp[first] < meta.train_end
    for samples in (data.train, data.eval):
        assert samples.uid.max() < data.vocab.uid
        assert samples.item_id.max() < data.vocab.item_id
        assert samples.history_artist_id.max() < data.vocab.artist_id
        assert samples.history_album_id.max() < data.vocab.album_id
        assert np.all(np.diff(samples.history_offsets) <= 8)


def test_invalid_table_is_rejected_with_its_path(root, tiny_config, tmp_path):
    import polars as pl

    broken = tmp_path / "broken"
    path = multi_event_path(broken, tiny_config.size)
    path.parent.mkdir(parents=True)
    events = pl.read_parquet(multi_event_path(root, tiny_config.size))
    events.with_columns(pl.col("timestamp") + 1).write_parquet(path)
    for name in ("artist_item_mapping.parquet", "album_item_mapping.parquet"):
        (broken / name).write_bytes((root / name).read_bytes())
    with pytest.raises(SchemaError, match=r"multi_event\.parquet.*timestamp"):
        load_dlrmv4_samples(broken, tiny_config.size, SampleConfig(history_length=8))


def test_unknown_event_type_names_the_file(root, tiny_config, tmp_path):
    import polars as pl

    broken = tmp_path / "broken"
    path = multi_event_path(broken, tiny_config.size)
    path.parent.mkdir(parents=True)
    events = pl.read_parquet(multi_event_path(root, tiny_config.size))
    events = events.with_columns(pl.col("event_type").cast(pl.String))
    events.with_columns(
        pl.when(pl.int_range(pl.len()) == 3)
        .then(pl.lit("skip"))
        .otherwise(pl.col("event_type"))
        .alias("event_type")
    ).write_parquet(path)
    with pytest.raises(SchemaError, match=r"multi_event\.parquet.*event_type"):
        load_dlrmv4_samples(broken, tiny_config.size, SampleConfig(history_length=8))


def test_written_files_are_readable_by_others(root, tiny_config):
    import os
    import stat

    umask = os.umask(0)
    os.umask(umask)
    mode = stat.S_IMODE(multi_event_path(root, tiny_config.size).stat().st_mode)
    assert mode == 0o666 & ~umask


# prepare_preprocessed / prepare_store: reuse only what matches its checksums -------------------


def _flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] = (data[len(data) // 2] + 1) % 256
    path.write_bytes(bytes(data))


def test_prepare_store_rebuilds_a_damaged_store_and_says_which_file(root, tiny_config, tmp_path):
    from yambda_data import prepare_store

    work = tmp_path / "work"
    prepare_store(root, tiny_config.size, work, min_history=16)
    array = work / "store" / "event_item_id"
    before = array.read_bytes()
    _flip_middle_byte(array)
    said: list[str] = []
    store = prepare_store(root, tiny_config.size, work, min_history=16, progress=said.append)
    assert f"{array}: sha256 differs from manifest.json; rebuilding {work / 'store'}" in said
    assert not any(m.startswith("preprocessing") for m in said)
    assert array.read_bytes() == before
    store.verify()


def test_prepare_preprocessed_redoes_an_output_that_differs_from_its_checksums(
    root, tiny_config, tmp_path
):
    from yambda_data import prepare_preprocessed
    from yambda_data.preprocess import checksums_problem

    work = tmp_path / "work"
    said: list[str] = []
    pre = prepare_preprocessed(root, tiny_config.size, work, progress=said.append)
    path = multi_event_path(root, tiny_config.size)
    assert said == [f"preprocessing {path}"]
    said.clear()
    assert prepare_preprocessed(root, tiny_config.size, work, progress=said.append) == pre
    assert said == []  # reused, and the tiny data has no repeated rows

    part = pre / "train_sessions" / "part-00000.parquet"
    _flip_middle_byte(part)
    prepare_preprocessed(root, tiny_config.size, work, progress=said.append)
    assert said == [f"preprocessing {path} ({part}: sha256 differs from checksums.json)"]
    assert checksums_problem(pre) is None

    (pre / "checksums.json").unlink()  # an output of a version that wrote no record
    said.clear()
    prepare_preprocessed(root, tiny_config.size, work, progress=said.append)
    assert said == [f"preprocessing {path} ({pre / 'checksums.json'}: missing)"]
    assert checksums_problem(pre) is None


def test_prepare_repeats_the_warning_about_repeated_rows(root, tiny_config, tmp_path):
    import polars as pl

    from yambda_data import prepare_preprocessed

    doubled = tmp_path / "doubled"
    path = multi_event_path(doubled, tiny_config.size)
    path.parent.mkdir(parents=True)
    events = pl.read_parquet(multi_event_path(root, tiny_config.size))
    pl.concat([events, events]).sort("uid", "timestamp", maintain_order=True).write_parquet(path)
    warning = (
        f"warning: {path}: {events.height:,} rows (50.0%) repeat an earlier row in every column"
    )
    said: list[str] = []
    prepare_preprocessed(doubled, tiny_config.size, tmp_path / "work", progress=said.append)
    assert said == [f"preprocessing {path}", warning]
    said.clear()
    prepare_preprocessed(doubled, tiny_config.size, tmp_path / "work", progress=said.append)
    assert said == [warning]


def test_prepare_refuses_a_work_dir_that_would_replace_its_inputs(root, tiny_config, tmp_path):
    import shutil

    from yambda_data import prepare_preprocessed, prepare_store

    work = tmp_path / "work"
    inside = work / "preprocessed" / "raw"
    shutil.copytree(root, inside)
    other = tmp_path / "other"
    shutil.copytree(root, other / "store")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=rf"{work / 'preprocessed'}: the output holds the input"):
        prepare_preprocessed(inside, tiny_config.size, work)
    with pytest.raises(ValueError, match=rf"{work / 'preprocessed'}: the output holds the input"):
        prepare_store(inside, tiny_config.size, work, min_history=16)
    with pytest.raises(ValueError, match=rf"{other / 'store'}: the output holds the input"):
        prepare_store(other / "store", tiny_config.size, other, min_history=16)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    # the MLPerf layout: the prepared data inside the raw root, beside the raw files
    data = tmp_path / "data"
    shutil.copytree(root, data)
    prepare_store(data, tiny_config.size, data / "prepared" / tiny_config.size, min_history=16)


def test_prepare_refuses_raw_events_no_window_of_which_holds_the_anchors_asked_for(
    root, tiny_config, tmp_path
):
    """Before the preprocessing writes anything: nothing of the work folder but its locks;
    the same folder then takes a request the data can meet."""
    import polars as pl

    from yambda_data import WindowTooSmall, busiest_window_listens, prepare_store

    raw = multi_event_path(root, tiny_config.size)
    most = busiest_window_listens(pl.scan_parquet(raw), 86_400)
    work = tmp_path / "work"
    with pytest.raises(WindowTooSmall, match=rf"{raw}: no time window of 86,400 s can hold"):
        prepare_store(root, tiny_config.size, work, min_history=0, min_window_anchors=most + 1)
    assert [p for p in work.rglob("*") if not p.name.startswith(".")] == []
    store = prepare_store(root, tiny_config.size, work, min_history=0, min_window_anchors=most)
    assert 0 < store.window_sizes().max() <= most
