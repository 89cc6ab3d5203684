from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from yambda_data.schema import (
    ALBUM_ITEM_MAPPING_SCHEMA,
    ARTIST_ITEM_MAPPING_SCHEMA,
    EVENT_TYPE_CODES,
    EVENT_TYPE_DTYPE,
    MULTI_EVENT_SCHEMA,
    SchemaError,
    check_multi_event_file_keeping_head,
    check_multi_event_rows,
    mapping_path,
    multi_event_path,
    read_mapping,
    read_multi_event,
    validate_mapping,
    validate_multi_event,
)


def valid_frame() -> pl.DataFrame:
    rows = [
        # uid, timestamp, item, organic, ratio, length, type
        (1, 0, 10, 1, 80, 200, "listen"),
        (1, 5, 11, 0, 20, 180, "listen"),
        (1, 5, 11, 0, None, None, "like"),
        (1, 10, 12, 1, None, None, "dislike"),
        (2, 0, 10, 0, 100, 200, "listen"),
        (2, 20, 10, 0, None, None, "unlike"),
        (2, 25, 12, 0, None, None, "undislike"),
    ]
    return pl.DataFrame(rows, schema=MULTI_EVENT_SCHEMA, orient="row")


def test_schema_constants_match_facts():
    assert list(MULTI_EVENT_SCHEMA) == [
        "uid",
        "timestamp",
        "item_id",
        "is_organic",
        "played_ratio_pct",
        "track_length_seconds",
        "event_type",
    ]
    assert MULTI_EVENT_SCHEMA["played_ratio_pct"] == pl.UInt16
    assert MULTI_EVENT_SCHEMA["is_organic"] == pl.UInt8
    assert EVENT_TYPE_CODES == {"listen": 0, "like": 1, "dislike": 2, "unlike": 3, "undislike": 4}
    codes = pl.Series(list(EVENT_TYPE_CODES), dtype=EVENT_TYPE_DTYPE).to_physical().to_list()
    assert codes == [0, 1, 2, 3, 4]
    assert list(ARTIST_ITEM_MAPPING_SCHEMA) == ["artist_id", "item_id"]
    assert list(ALBUM_ITEM_MAPPING_SCHEMA) == ["album_id", "item_id"]


@pytest.mark.parametrize("event_dtype", ["utf8", "categorical", "enum"])
def test_round_trip(tmp_path: Path, event_dtype: str):
    frame = valid_frame()
    stored = frame
    if event_dtype == "utf8":
        stored = frame.with_columns(pl.col("event_type").cast(pl.String))
    elif event_dtype == "categorical":
        stored = frame.with_columns(pl.col("event_type").cast(pl.String).cast(pl.Categorical))
    path = multi_event_path(tmp_path, "50m")
    path.parent.mkdir(parents=True)
    stored.write_parquet(path)
    summary = validate_multi_event(path)
    assert summary.num_events == 7 and summary.num_users == 2
    assert (summary.t_min, summary.t_max) == (0, 25)
    assert summary.event_counts == {
        "listen": 3,
        "like": 1,
        "dislike": 1,
        "unlike": 1,
        "undislike": 1,
    }
    back = read_multi_event(tmp_path, "50m").collect()
    assert back.schema == MULTI_EVENT_SCHEMA
    assert back.equals(frame)


def test_read_normalizes_column_order(tmp_path: Path):
    path = multi_event_path(tmp_path, "x")
    path.parent.mkdir(parents=True)
    frame = valid_frame()
    frame.select(reversed(frame.columns)).write_parquet(path)
    assert read_multi_event(tmp_path, "x").collect().equals(frame)


def test_read_missing_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        read_multi_event(tmp_path, "50m")


def test_read_checks_dtypes(tmp_path: Path):
    path = multi_event_path(tmp_path, "50m")
    path.parent.mkdir(parents=True)
    valid_frame().with_columns(pl.col("uid").cast(pl.Int64)).write_parquet(path)
    with pytest.raises(SchemaError) as err:
        read_multi_event(tmp_path, "50m")
    assert err.value.column == "uid" and str(path) in str(err.value)


def _err(frame: pl.DataFrame, tmp_path: Path) -> SchemaError:
    path = tmp_path / "bad.parquet"
    frame.write_parquet(path)
    with pytest.raises(SchemaError) as err:
        validate_multi_event(path)
    assert err.value.source == str(path)
    assert str(path) in str(err.value)
    return err.value


def _set(frame: pl.DataFrame, column: str, row: int, value) -> pl.DataFrame:
    values = frame[column].to_list()
    values[row] = value
    return frame.with_columns(pl.Series(column, values, dtype=frame.schema[column]))


@pytest.mark.parametrize("column", list(MULTI_EVENT_SCHEMA))
def test_missing_column(tmp_path: Path, column: str):
    err = _err(valid_frame().drop(column), tmp_path)
    assert err.column == column and "missing column" in str(err)


def test_unexpected_column(tmp_path: Path):
    err = _err(valid_frame().with_columns(pl.lit(1).alias("extra")), tmp_path)
    assert err.column == "extra"


@pytest.mark.parametrize(
    ("column", "dtype"),
    [
        ("uid", pl.Int64),
        ("timestamp", pl.UInt64),
        ("item_id", pl.Int32),
        ("is_organic", pl.Boolean),
        ("played_ratio_pct", pl.Float32),
        ("track_length_seconds", pl.UInt16),
        ("event_type", pl.UInt8),
    ],
)
def test_wrong_dtype(tmp_path: Path, column: str, dtype):
    frame = valid_frame()
    if column == "event_type":
        frame = frame.with_columns(pl.col(column).to_physical().cast(dtype))
    else:
        frame = frame.with_columns(pl.col(column).cast(dtype))
    err = _err(frame, tmp_path)
    assert err.column == column and "dtype" in str(err)


@pytest.mark.parametrize("column", ["uid", "timestamp", "item_id", "is_organic", "event_type"])
def test_null_not_allowed(tmp_path: Path, column: str):
    err = _err(_set(valid_frame(), column, 3, None), tmp_path)
    assert err.column == column and "null" in str(err) and "row 3" in str(err)


@pytest.mark.parametrize("column", ["played_ratio_pct", "track_length_seconds"])
def test_listen_columns_null_exactly_for_non_listens(tmp_path: Path, column: str):
    err = _err(_set(valid_frame(), column, 1, None), tmp_path)
    assert err.column == column and "null in a listen" in str(err) and "row 1" in str(err)
    err = _err(_set(valid_frame(), column, 2, 7), tmp_path)
    assert err.column == column and "non-null in a non-listen" in str(err)


def test_unsorted_uid(tmp_path: Path):
    frame = valid_frame()
    frame = pl.concat([frame[4:], frame[:4]])
    err = _err(frame, tmp_path)
    assert err.column == "uid" and "sorted" in str(err) and "row 3" in str(err)
    assert "uid 1 after uid 2" in str(err)


def test_unsorted_timestamp_within_user(tmp_path: Path):
    err = _err(_set(valid_frame(), "timestamp", 3, 0), tmp_path)
    assert err.column == "timestamp" and "sorted" in str(err) and "row 3" in str(err)
    assert "timestamp 0 after 5 of uid 1" in str(err)


@pytest.mark.parametrize("value", [2, 7, 255])
def test_is_organic_must_be_0_or_1(tmp_path: Path, value: int):
    """File and in-memory checks alike name the file, the column, the row and the value."""
    frame = _set(valid_frame(), "is_organic", 4, value)
    err = _err(frame, tmp_path)
    assert err.column == "is_organic"
    assert f"value {value} is not 0 or 1 (first at row 4)" in str(err)
    with pytest.raises(SchemaError, match=f"f: column 'is_organic': value {value} is not 0 or 1"):
        validate_multi_event(frame, source="f")


def test_file_and_frame_checks_agree(tmp_path: Path):
    """validate_multi_event of a file (streaming passes) and of a frame (one query) report the
    same error, with the offending value, and the same summary."""
    path = tmp_path / "ok.parquet"
    valid_frame().write_parquet(path)
    assert validate_multi_event(path, source="x") == validate_multi_event(valid_frame(), source="x")
    for column, row, value in [("timestamp", 5, 22), ("event_type", 2, "skip")]:
        frame = valid_frame().with_columns(pl.col("event_type").cast(pl.String))
        frame = _set(frame, column, row, value)
        frame.write_parquet(path)
        with pytest.raises(SchemaError) as from_file:
            validate_multi_event(path, source="x")
        with pytest.raises(SchemaError) as from_frame:
            validate_multi_event(frame, source="x")
        assert str(from_file.value) == str(from_frame.value)
        assert repr(value) in str(from_file.value) or str(value) in str(from_file.value)
        assert f"(first at row {row})" in str(from_file.value)


@pytest.mark.parametrize("head_rows", [0, 1, 4, 7, 100])
def test_checks_keeping_the_head_hand_back_the_first_rows(tmp_path: Path, head_rows: int):
    """The head is the file's first rows as read; the aggregates come per part (head, rest)
    and add up to those of the whole file."""
    path = tmp_path / "ok.parquet"
    valid_frame().write_parquet(path, row_group_size=3)
    aggs = [pl.len().alias("rows"), pl.col("timestamp").max().alias("t_max")]
    per_part, head = check_multi_event_file_keeping_head(path, head_rows, aggs=aggs)
    rows = min(head_rows, 7)
    if head_rows:
        assert head.equals(pl.read_parquet(path).head(rows))
    else:
        assert head is None
    expected = ([rows] if head_rows else []) + ([7 - rows] if head_rows < 7 else [])
    assert per_part["rows"].to_list() == expected
    assert per_part.columns == ["rows", "t_max"] and per_part["t_max"].max() == 25


@pytest.mark.parametrize("head_rows", [0, 2, 3, 6])
def test_checks_keeping_the_head_name_the_file_row(tmp_path: Path, head_rows: int):
    """An offending row before, at or after the end of the head is named by its file row."""
    path = tmp_path / "bad.parquet"
    _set(valid_frame(), "timestamp", 3, 22).write_parquet(path, row_group_size=2)
    with pytest.raises(SchemaError, match=r"value 22 is not a multiple of 5 \(first at row 3\)"):
        check_multi_event_file_keeping_head(path, head_rows)
    with pytest.raises(ValueError, match="head_rows must be at least 0, got -1"):
        check_multi_event_file_keeping_head(path, -1)


def test_truncated_file_is_named(tmp_path: Path):
    from yambda_data import InputFileError

    path = tmp_path / "cut.parquet"
    valid_frame().write_parquet(path)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(InputFileError, match=f"^{path}: cannot read it: ") as err:
        validate_multi_event(path)
    assert err.value.path == path and "\n" not in str(err.value)


def test_timestamp_equal_across_users_is_fine():
    validate_multi_event(valid_frame())  # user 2 starts at 0 after user 1 at 10


def test_timestamp_not_multiple_of_five(tmp_path: Path):
    err = _err(_set(valid_frame(), "timestamp", 3, 12), tmp_path)
    assert err.column == "timestamp" and "multiple of 5" in str(err)


@pytest.mark.parametrize("categorical", [False, True])
def test_unknown_event_type(tmp_path: Path, categorical: bool):
    frame = valid_frame().with_columns(pl.col("event_type").cast(pl.String))
    frame = _set(frame, "event_type", 5, "skip")
    if categorical:
        frame = frame.with_columns(pl.col("event_type").cast(pl.Categorical))
    err = _err(frame, tmp_path)
    assert err.column == "event_type" and "unknown event_type" in str(err)


def test_unknown_enum_category(tmp_path: Path):
    frame = valid_frame().with_columns(
        pl.col("event_type").cast(pl.String).cast(pl.Enum([*EVENT_TYPE_CODES, "skip"]))
    )
    err = _err(frame, tmp_path)
    assert err.column == "event_type" and "skip" in str(err)


def test_frame_source_label():
    frame = valid_frame().drop("uid")
    with pytest.raises(SchemaError, match="my-frame: column 'uid'"):
        validate_multi_event(frame, source="my-frame")
    with pytest.raises(SchemaError, match="<LazyFrame>"):
        validate_multi_event(frame.lazy())


def test_row_checks_report_a_row_index_column():
    frame = _set(valid_frame(), "timestamp", 3, 12).with_columns(
        pl.int_range(100, 107, dtype=pl.UInt32).alias("file_row")
    )
    with pytest.raises(SchemaError, match=r"part: column 'timestamp'.*first at row 103"):
        check_multi_event_rows(frame, "part", row_index="file_row")
    with pytest.raises(SchemaError, match=r"first at row 3\)"):
        check_multi_event_rows(frame.drop("file_row"), "part")
    summary = check_multi_event_rows(valid_frame().lazy(), "ok")
    assert summary == validate_multi_event(valid_frame(), source="ok")


def test_mappings(tmp_path: Path):
    artist = pl.DataFrame(
        {"artist_id": [3, 7, 0], "item_id": [10, 10, 11]}, schema=ARTIST_ITEM_MAPPING_SCHEMA
    )
    artist.write_parquet(mapping_path(tmp_path, "artist"))
    assert validate_mapping(mapping_path(tmp_path, "artist"), "artist") == 3
    assert read_mapping(tmp_path, "artist").collect().equals(artist)
    with pytest.raises(SchemaError) as err:
        validate_mapping(artist.with_columns(pl.col("item_id").cast(pl.Int64)), "artist")
    assert err.value.column == "item_id"
    with pytest.raises(SchemaError) as err:
        validate_mapping(artist.rename({"artist_id": "album_id"}), "artist", source="f")
    assert err.value.column == "artist_id" and err.value.source == "f"
    with_null = pl.DataFrame(
        {"album_id": [1, None], "item_id": [1, 2]}, schema=ALBUM_ITEM_MAPPING_SCHEMA
    )
    with pytest.raises(SchemaError, match="null value"):
        validate_mapping(with_null, "album")
    with pytest.raises(FileNotFoundError):
        read_mapping(tmp_path, "album")
    with pytest.raises(ValueError, match="mapping kind"):
        validate_mapping(artist, "genre")  # type: ignore[arg-type]


BAD_ROWS = [
    ("uid", 3, None),
    ("is_organic", 4, 2),
    ("played_ratio_pct", 1, None),
    ("track_length_seconds", 2, 7),
    ("timestamp", 5, 22),
    ("timestamp", 3, 0),  # out of order within uid 1
]


@pytest.mark.parametrize("event_type", ["enum", "string"])
@pytest.mark.parametrize(("column", "row", "value"), BAD_ROWS)
def test_row_checks_without_summary_raise_the_same_error(event_type, column, row, value):
    """summary=False (the flags first, the search only when one is set) returns None for valid
    rows and raises exactly the error of the full check for invalid ones, Enum or string."""
    cast = {"enum": EVENT_TYPE_DTYPE, "string": pl.String}[event_type]
    valid = valid_frame().with_columns(pl.col("event_type").cast(cast))
    assert check_multi_event_rows(valid, "ok", summary=False) is None
    bad = _set(valid, column, row, value).with_columns(
        pl.int_range(100, 107, dtype=pl.UInt32).alias("file_row")
    )
    with pytest.raises(SchemaError) as full:
        check_multi_event_rows(bad, "part", row_index="file_row")
    with pytest.raises(SchemaError) as flags_first:
        check_multi_event_rows(bad, "part", row_index="file_row", summary=False)
    assert str(flags_first.value) == str(full.value)
    assert flags_first.value.column == full.value.column == column


def test_unknown_event_type_string_without_summary():
    bad = _set(
        valid_frame().with_columns(pl.col("event_type").cast(pl.String)), "event_type", 2, "skip"
    )
    with pytest.raises(SchemaError, match=r"unknown event_type value 'skip' \(first at row 2\)"):
        check_multi_event_rows(bad, "part", summary=False)


def test_repeated_rows_are_counted_exactly_in_frames_and_files(tmp_path: Path, monkeypatch):
    """A row counts when every column (nulls included) equals an earlier row's, wherever it is
    among the rows of its (uid, timestamp); a file is counted one uid range at a time."""
    import yambda_data.schema as schema
    from yambda_data.schema import count_duplicate_rows, validate_multi_event

    def row(uid, ts, item, etype, ratio=None):
        listen = etype == "listen"
        return (uid, ts, item, 0, ratio if listen else None, 200 if listen else None, etype)

    rows = [
        row(1, 5, 10, "listen", 60),
        row(1, 5, 10, "like"),
        row(1, 5, 10, "listen", 60),  # repeats row 0, not next to it
        row(1, 5, 10, "like"),  # repeats row 1 (nulls equal nulls)
        row(1, 5, 10, "listen", 61),  # another ratio: not a repeat
        row(1, 10, 10, "listen", 60),  # another time: not a repeat
        row(2, 10, 10, "listen", 60),  # another uid: not a repeat
        row(2, 10, 10, "listen", 60),
        row(2, 10, 10, "listen", 60),
        row(3, 15, 11, "dislike"),
    ]
    frame = pl.DataFrame(rows, schema=MULTI_EVENT_SCHEMA, orient="row")
    assert count_duplicate_rows(frame) == 4
    assert count_duplicate_rows(frame.with_columns(pl.col("event_type").cast(pl.String))) == 4
    assert validate_multi_event(frame).num_duplicate_rows == 4
    path = tmp_path / "events.parquet"
    frame.write_parquet(path, row_group_size=3)
    monkeypatch.setattr(schema, "ROWS_PER_PARTITION", 3)  # four uid ranges
    assert schema.default_partitions(len(rows)) == 4
    summary = validate_multi_event(path)
    assert summary.num_duplicate_rows == 4 and summary.num_events == 10
