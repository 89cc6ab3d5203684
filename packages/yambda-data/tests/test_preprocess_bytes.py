"""Every output file of ``preprocess``, byte for byte, on fixed synthetic inputs.

The output's rows were fixed by the preprocessing as it was before its speed work (issue 18):
any change to how it reads, splits or sessionizes must leave them exactly as they were. The
sha256 values were recorded again when the parquet writer's zstd level went from polars'
default (3) to 1, after checking that every file of the four cases decoded to the same rows,
schema and values as the files pinned before; a change to how it writes must do the same. Inputs: a few hundred synthetic users written with small row
groups (so a uid range spans several of them and a row group can straddle two ranges), once
with ``event_type`` as the Enum and once as strings (the cast path), preprocessed in one and in
several partitions, and once with a gap in the uids that leaves two partitions empty.

The checksum record ``checksums.json`` came later: it must list exactly those sha256 values,
and its own bytes are pinned too, so that two runs stay byte-identical.

The same rows in every layout another writer may give the file (``event_type`` as the Enum,
dictionary-encoded, plain or large strings; small row groups or one; sorted or in uid blocks
of random order: :mod:`yambda_data._layouts`) give those same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from yambda_data._layouts import EVENT_TYPE_LAYOUTS, ORDERS, write_layout
from yambda_data.preprocess import preprocess
from yambda_data.schema import multi_event_path
from yambda_data.synth import SynthConfig, generate

CONFIG = SynthConfig(users=300, median_events_per_user=100, items=3_000, seed=11)
ROW_GROUP_ROWS = 8_192

EXPECTED_SPLIT = {
    "size": "50m",
    "t_min": 55,
    "t_max": 25999335,
    "train_start": 55,
    "train_end": 25911135,
    "test_start": 25912935,
    "test_end": 25999335,
    "train_days": 299.8967592592593,
    "gap_minutes": 30.0,
    "test_days": 1.0,
    "session_gap_seconds": 1800,
    "num_train_events": 46523,
    "num_test_events": 7752,
    "num_sessions": 3985,
    "num_users": 300,
}

EXPECTED_SHA256: dict[str, dict[str, str]] = {
    "enum-None": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "c4f00893f5e82f676704d342514a96a3792f838647d1e16c1a07b4f34a615a28",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "25219ef78891fdb8ea296b2fbfd77b171887cb0e881c157a5a36b96c42084ed0",
        "train_sessions/part-00000.parquet": "39d16dd3798b7e7e9af177187d0f67eec4d4f176bbeb614b99580e86e1766f0e",
    },
    "enum-4": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "610a86ac3e6e26a0d58c81eb78ab36332974a1d7448dba7f0d70515b75570e55",
        "session_index/part-00001.parquet": "059eb481a37f6419cde59d7cd465c7a666fd343b5a2506b7e8ea566124ffdf5b",
        "session_index/part-00002.parquet": "e6831a32e54dc04bf0ff65a4d8693d85c9093d074528cf4d6ed2d0480ac969df",
        "session_index/part-00003.parquet": "deca0d09ae4f2b9cb220464f8ffe3fa1ec3c4fe835b6cd1a0eafddbce0990133",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "98f66418040714a1d39773fa79c1f772e0571c90066c9cd167cb1a350b6f3593",
        "test_events/part-00001.parquet": "849ed5c95d2ba44de3e01366f7230a63ffd17b73e762c3a5700b1bdc333dec16",
        "test_events/part-00002.parquet": "a40ca61ea47bb5d09edd0cfa3fce75b8451d086094e3aa24de59ee29a140e383",
        "test_events/part-00003.parquet": "53b6e7da646d9a1f37120f643518f53a96ce5effa584427d59c47cb64e0b3828",
        "train_sessions/part-00000.parquet": "d34cf909c460f60e0c7bbe21a88512e494f7a71aa1a9a7d1bcab2b3ae89c1f18",
        "train_sessions/part-00001.parquet": "a4f74d61f82d7df041838dbe4cf4d3244096a19ac1ac9d410e4e611060f5069f",
        "train_sessions/part-00002.parquet": "1164153117e3f2148dba3860cbe3eefa313e59e4ab377baebb7407ba68d1d576",
        "train_sessions/part-00003.parquet": "9305086cc7e721d00d49d7d5d6fa4a1626b3888a34707ea4c82fd736e31385bf",
    },
    "string-3": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "f6fff1aa866d7aa3f4572cdb49803c75e30fd81f423f09900e9e72b431b573a5",
        "session_index/part-00001.parquet": "83b11459b84143ac2c230cc0d45b9dde09c7e282a60662b3a589a45a95e10b0e",
        "session_index/part-00002.parquet": "6a53049c87b6f8314f1a2decab40a44df62c7a9200bca9a1a85c11c6a81771cf",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "d8a0900a2672eee907cc3b46472673de6a7fef9ff9c77a1cf96b69c2bc75f811",
        "test_events/part-00001.parquet": "5e5f46a7fcb8b8de4d2db4e223e4f3ab4fc04b1d4790550bb8ddd2068a67bd9a",
        "test_events/part-00002.parquet": "0be6ec4ac6c493d57c2de1ba8a4ef8ceff87cf87b89cc3f7ecb0e596b69414b5",
        "train_sessions/part-00000.parquet": "24cc3ebc4c79955ec9de625871bf08d47a8ecc8bc65da638fb94355e112f1559",
        "train_sessions/part-00001.parquet": "64948d91ba80d52655f5d3d559bcb57429c0fa89fbb98a44c4e7af9a4a7b241d",
        "train_sessions/part-00002.parquet": "fdcd7cd317537e140e94a7c157cca6a2a1198b82d9985fde7dbe555261e9aeac",
    },
    "gap-4": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "46b73a06bc6c0c792b849b085ba676c713ceaf609a66f43f854209be5ae3f8fe",
        "session_index/part-00001.parquet": "adf9a63aa2d97b53833f0c082ea9ecc57727efe0a22580d590a3f92f520784c4",
        "session_index/part-00002.parquet": "adf9a63aa2d97b53833f0c082ea9ecc57727efe0a22580d590a3f92f520784c4",
        "session_index/part-00003.parquet": "611448cacf9521039466035bcfd74e43b6cc295de13abb8ab828b39c385ac4fc",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "ac49b1c119ab296324b7142c88f91632aab62f1db9698ecf667c4377bb9b7a77",
        "test_events/part-00001.parquet": "82c49a55d5b5c92caf391f3f2b497302bc1ff1ef1ec6a8b6249ab2f5c00179b1",
        "test_events/part-00002.parquet": "82c49a55d5b5c92caf391f3f2b497302bc1ff1ef1ec6a8b6249ab2f5c00179b1",
        "test_events/part-00003.parquet": "17a34cb8a5a0c39e25f3ba371c15b0a9d0e95175774f37503e25725e639f9ab5",
        "train_sessions/part-00000.parquet": "a4601f4fea16ad86ab5ff8f972751ed78002c22ee3c94a50840bd352e70b057a",
        "train_sessions/part-00001.parquet": "533603e76ee0c26ab42f10f35c89fbe3a765fc75c462c216c796160060d149f1",
        "train_sessions/part-00002.parquet": "533603e76ee0c26ab42f10f35c89fbe3a765fc75c462c216c796160060d149f1",
        "train_sessions/part-00003.parquet": "4cc00350513444f096a9feaee34868b954a63f1a875a36124044d8ccbef87f5c",
    },
}


EXPECTED_RECORD_SHA256 = {
    "enum-None": "eeacb59ed48e3d07a2d4ec28751c858c218f3f8069829263a2d7728c22c25bbd",
    "enum-4": "129862ec5f7a77b71eff02990fd447b1e7e8784f2022eb796ba65e5c02636cf6",
    "string-3": "1cc18693ed8788108f435e06440ad67a9656f2f2d7f00f9d2d480c67f4d647eb",
    "gap-4": "a78b850ab0cb1c6af8cbf2ecfcdf4736a0f3439a8c12e6096ec0e98fa6a11c3a",
}


def _sha256_of_tree(out: Path) -> dict[str, str]:
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def events() -> pl.DataFrame:
    return generate(CONFIG).events


@pytest.fixture(scope="module")
def raw_roots(events, tmp_path_factory) -> dict[str, Path]:
    roots = {}
    uid_gap = pl.when(pl.col("uid") >= 150).then(pl.col("uid") + 1_000).otherwise(pl.col("uid"))
    for name, frame in (
        ("enum", events),
        ("string", events.with_columns(pl.col("event_type").cast(pl.String))),
        ("gap", events.with_columns(uid_gap.cast(pl.UInt32))),
    ):
        root = tmp_path_factory.mktemp(f"raw-{name}")
        path = multi_event_path(root, "50m")
        path.parent.mkdir(parents=True)
        frame.write_parquet(path, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        roots[name] = root
    return roots


CASES = [("enum", None), ("enum", 4), ("string", 3), ("gap", 4)]


@pytest.mark.parametrize(("event_type", "partitions"), CASES)
def test_outputs_are_byte_identical(raw_roots, tmp_path, event_type, partitions):
    out = tmp_path / "out"
    meta = preprocess(raw_roots[event_type], "50m", out, partitions=partitions)
    assert meta.to_dict() == EXPECTED_SPLIT
    assert json.loads((out / "split_meta.json").read_text()) == EXPECTED_SPLIT
    case = f"{event_type}-{partitions}"
    found = _sha256_of_tree(out)
    assert found.pop("checksums.json") == EXPECTED_RECORD_SHA256[case]
    assert found == EXPECTED_SHA256[case]
    record = json.loads((out / "checksums.json").read_text())
    assert {name: entry["sha256"] for name, entry in record["files"].items()} == found
    events = generate(CONFIG).events
    assert record["input"] == {
        "rows": events.height,
        "duplicate_rows": events.height - events.unique().height,
    }


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("row_group_rows", [ROW_GROUP_ROWS, 1_000_000])
@pytest.mark.parametrize("event_type", EVENT_TYPE_LAYOUTS)
def test_every_layout_gives_the_same_bytes(events, tmp_path, event_type, row_group_rows, order):
    path = multi_event_path(tmp_path / "raw", "50m")
    path.parent.mkdir(parents=True)
    write_layout(
        events,
        path,
        event_type=event_type,
        row_group_rows=row_group_rows,
        order=order,
        seed=5,
    )
    out = tmp_path / "out"
    assert preprocess(tmp_path / "raw", "50m", out, partitions=4).to_dict() == EXPECTED_SPLIT
    found = _sha256_of_tree(out)
    assert found.pop("checksums.json") == EXPECTED_RECORD_SHA256["enum-4"]
    assert found == EXPECTED_SHA256["enum-4"]
