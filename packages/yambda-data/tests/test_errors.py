"""The package's errors cross processes whole: a rank's or a worker's error is pickled to the
one that reports it (a custom ``__init__`` alone does not unpickle)."""

import errno
import pickle
from pathlib import Path

import pytest

from yambda_data import (
    DataInUse,
    InputFileError,
    ReadError,
    SchemaError,
    StoreError,
    WindowTooSmall,
    WriteError,
)
from yambda_data.store import StoreInUse

ERRORS = [
    SchemaError("raw/multi_event.parquet", "uid", "null value (first at row 3)"),
    SchemaError("frame", None, "no events"),
    InputFileError("raw/multi_event.parquet", "cannot read it: not parquet"),
    WindowTooSmall("raw/multi_event.parquet", 1024, 253, 86_400),
    WriteError(errno.ENOSPC, "No space left on device", Path("o/.t/p"), Path("o"), 0, Path("/")),
    WriteError(None, "failed", Path("o/p"), None, None, Path("o")),
    ReadError(errno.EIO, "Input/output error", "raw/multi_event.parquet"),
    StoreError("store/: incomplete"),
    StoreInUse("store/: held by pid 12"),
    DataInUse("raw/: held by pid 12"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_pickles_with_its_message_and_fields(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    fields = {k: v for k, v in vars(error).items()}
    assert {k: v for k, v in vars(copy).items()} == fields
    if isinstance(error, OSError):
        assert (copy.errno, copy.filename) == (error.errno, error.filename)
