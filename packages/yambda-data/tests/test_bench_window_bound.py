"""bench_window_bound.py: the early window refusal's pass, timed on raw files."""

import re

import numpy as np
import polars as pl

from yambda_data import SampleStore, busiest_window_listens
from yambda_data.schema import multi_event_path


def test_it_prints_the_bound_of_each_file_above_the_store_s_largest_window(
    built_store, run_benchmark
):
    raw, _, store = built_store
    result = run_benchmark("bench_window_bound.py", raw, raw, "--repeat", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = re.findall(
        r"^\| .*multi_event\.parquet \| ([\d,]+) \| ([\d,]+) \| [\d.]+ \| [\d.]+ \|$",
        result.stdout,
        re.M,
    )
    assert len(rows) == 2, result.stdout
    path = multi_event_path(raw, "50m")
    expected = busiest_window_listens(pl.scan_parquet(path), 86_400)
    for events, bound in rows:
        assert (
            int(events.replace(",", "")) == pl.scan_parquet(path).select(pl.len()).collect().item()
        )
        assert int(bound.replace(",", "")) == expected
    assert int(np.max(SampleStore.open(store).window_sizes())) <= expected


def test_a_missing_file_is_named_before_anything_runs(tmp_path, run_benchmark):
    result = run_benchmark("bench_window_bound.py", tmp_path)
    assert result.returncode == 2
    assert f"{tmp_path}/flat/50m/multi_event.parquet: no such file" in result.stderr
