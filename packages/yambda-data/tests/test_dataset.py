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
