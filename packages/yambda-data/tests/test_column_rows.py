"""values_and_nulls_at reads a column's buffers; it must equal polars' own gather."""

import numpy as np
import polars as pl
import pytest

from yambda_data._column_rows import values_and_nulls_at


def _by_polars(column: pl.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    gathered = column.gather(rows)
    return gathered.fill_null(0).to_numpy(), gathered.is_null().to_numpy()


@pytest.mark.parametrize("dtype", [pl.UInt8, pl.UInt16, pl.UInt32, pl.Int64])
def test_values_and_nulls_equal_a_polars_gather(dtype):
    rng = np.random.default_rng(0)
    values = pl.Series("v", rng.integers(0, 100, 1_000), dtype=dtype)
    with_nulls = values.set(pl.Series(rng.random(1_000) < 0.3), None)
    chunked = pl.concat([with_nulls[:333], with_nulls[333:]], rechunk=False)
    assert chunked.n_chunks() == 2
    columns = [values, with_nulls, with_nulls[7:900], chunked, pl.Series("v", [None] * 9, dtype)]
    for column in columns:
        rows = rng.integers(0, len(column), 500)
        got_values, got_nulls = values_and_nulls_at(column, rows)
        want_values, want_nulls = _by_polars(column, rows)
        np.testing.assert_array_equal(got_nulls, want_nulls)
        np.testing.assert_array_equal(got_values, want_values)
        assert got_values.dtype == column.head(0).to_numpy().dtype
    empty_values, empty_nulls = values_and_nulls_at(with_nulls, np.zeros(0, dtype=np.int64))
    assert len(empty_values) == len(empty_nulls) == 0


def test_rows_outside_the_column_and_other_types_are_refused():
    column = pl.Series("v", [1, None, 3], dtype=pl.UInt16)
    with pytest.raises(IndexError, match=r"rows outside 0\.\.2"):
        values_and_nulls_at(column, np.array([3]))
    with pytest.raises(TypeError, match="not an integer type"):
        values_and_nulls_at(pl.Series("f", [1.5]), np.array([0]))
