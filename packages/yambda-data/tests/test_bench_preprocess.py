"""bench_preprocess.py on an input it did not synthesize (``--raw``), in two layouts."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from yambda_data.schema import multi_event_path
from yambda_data.synth import SynthConfig, synthesize

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_preprocess.py"


@pytest.mark.slow
def test_a_raw_input_is_preprocessed_in_each_layout_with_identical_outputs(tmp_path):
    raw = tmp_path / "other-writer"
    synthesize(raw, SynthConfig(users=60, median_events_per_user=80, seed=3))
    events = multi_event_path(raw, "50m")
    before = events.read_bytes()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--raw", str(raw), "--layout", "synth",
         "dictionary:700:unsorted", "--partitions", "3", "--no-validate",
         "--work", str(tmp_path / "work"), "--count-cost", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "outputs of the 2 layouts byte-identical" in result.stdout, result.stdout
    rows = re.findall(
        r"^\| other-writer \| ([\d,]+) \| (\S+) \| preprocess \| 3 \|", result.stdout, re.M
    )
    assert [layout for _, layout in rows] == ["synth", "dictionary:700:unsorted"], result.stdout
    assert events.read_bytes() == before  # the input is read, never rewritten in place
    costs = re.findall(
        r"^other-writer, (\S+), 3 partitions: the repeated-row count's cost, 1 alternated pairs "
        r"with it and without: -?[\d.]+% of the wall time",
        result.stdout,
        re.M,
    )
    assert costs == ["synth", "dictionary:700:unsorted"], result.stdout


def test_a_missing_raw_input_is_refused_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--raw", str(tmp_path / "absent")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert (
        "--raw:" in result.stderr and "absent" in result.stderr and "no such file" in result.stderr
    )


def test_the_yambda_shaped_generator_writes_a_valid_file_of_that_shape(tmp_path):
    """The generator's file: valid, sorted by (uid, timestamp), the stored types of the
    public file (event_type dictionary-encoded), 50,000-row row groups, and about the share
    of events at the timestamp of the one before that it was asked for."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_preprocess
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from yambda_data.schema import validate_multi_event

    bench_preprocess.write_shaped(tmp_path / "raw", 300, 0.35, 0)
    path = multi_event_path(tmp_path / "raw", "50m")
    summary = validate_multi_event(path)  # raises unless sorted, on the grid, nulls right
    assert summary.num_users == 300
    stored = pq.read_schema(path)
    assert stored.field("played_ratio_pct").type == pa.uint16()
    assert stored.field("is_organic").type == pa.uint8()
    assert stored.field("track_length_seconds").type == pa.uint32()
    assert pa.types.is_dictionary(stored.field("event_type").type)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == -(-summary.num_events // 50_000)
    table = pq.read_table(path, columns=["uid", "timestamp"])
    uid, ts = (table.column(c).to_numpy() for c in ("uid", "timestamp"))
    same = ((uid[1:] == uid[:-1]) & (ts[1:] == ts[:-1])).mean()
    assert 0.3 < same < 0.45, same  # 0.35 of a session's steps, plus reactions at their listen


def test_paired_ratios_are_each_pairs_and_their_median():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import _common
        import bench_preprocess
    finally:
        sys.path.remove(str(SCRIPT.parent))

    def run(wall_s: float) -> _common.ChildResult:
        return _common.ChildResult(wall_s, 100.0, wall_s, 0.0, "")

    project = [run(5.0), run(4.0), run(6.0)]
    reference = [run(10.0), run(9.0), run(11.0)]
    assert bench_preprocess.paired_ratios(project, reference) == (
        "events/s, project / reference, per alternated pair: 1.83x, 2.00x, 2.25x; median 2.00x"
    )


def test_the_shaped_generator_repeats_the_share_of_rows_asked_for(tmp_path):
    """``repeated``: that share of the rows are copies of an earlier row in every column, of
    many users and timestamps, some next to their row and some not; the file stays valid and
    the rows without the copies are the file of ``repeated`` 0."""
    import polars as pl

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_preprocess
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from yambda_data.schema import count_duplicate_rows, validate_multi_event

    plain = pl.from_arrow(bench_preprocess.shaped_events(200, 0.35, 0))
    bench_preprocess.write_shaped(tmp_path / "raw", 200, 0.35, 0, 0.05)
    path = multi_event_path(tmp_path / "raw", "50m")
    validate_multi_event(path)  # sorted by (uid, timestamp), on the grid, nulls right
    events = pl.read_parquet(path)
    copies = events.height - plain.height
    assert copies == round(plain.height * 0.05 / 0.95)
    assert count_duplicate_rows(events) == count_duplicate_rows(plain) + copies
    as_plain = events.with_columns(pl.col("event_type").cast(pl.String))
    plain = plain.with_columns(pl.col("event_type").cast(pl.String))
    assert as_plain.unique(maintain_order=True).equals(plain.unique(maintain_order=True))
    repeats = as_plain.filter(as_plain.is_duplicated())
    assert repeats["uid"].n_unique() > 100 and repeats["timestamp"].n_unique() > copies // 2
    # Next to their row (equal to the row before) or not (an other row of the run between).
    next_to = as_plain.select(pl.all_horizontal(pl.all().eq_missing(pl.all().shift(1)))).to_series()
    adjacent = int(next_to.sum())
    assert copies // 3 < adjacent < copies, (adjacent, copies)
