"""Every output file of ``preprocess``, byte for byte, on fixed synthetic inputs.

The expected sha256 values were recorded from the preprocessing as it was before its speed
work (issue 18), so any change to how it reads, splits, sessionizes or writes must leave the
outputs exactly as they were. Inputs: a few hundred synthetic users written with small row
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
        "session_index/part-00000.parquet": "4ead8fafd2f69c06842e70c2bdee8f8f13a52e2a5a2d0b0f450c5da7d2333297",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "c735fe62501bd19fe834d402c4ff70d38fea963365a056394992b72f24183427",
        "train_sessions/part-00000.parquet": "5a284814b5318b364e4a8f6f54df3a95c5104c8c899ec517333e6b124538916b",
    },
    "enum-4": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "fac9ebaeb7020f13f0264c9b3cca3c1505bfcb347411d6da8c251dd8df9790fe",
        "session_index/part-00001.parquet": "3feb06f276a012ad0a673a2514794d52ce5053fefedf53511cc1b2b22cc6390f",
        "session_index/part-00002.parquet": "4f65069c9509f2996611dfdd6be350ddd4f45ee8a37c2ac0b5cc8ce4ffbc221b",
        "session_index/part-00003.parquet": "d7063f4e015ea8a26fd049652024191d12b57b22891c9027cbb93273ae595fd7",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "e2c74d286eaf1c7e92e000e85c97836c11649f9a65014e2e4fac31d621b56a22",
        "test_events/part-00001.parquet": "d8a5c2408a414cee20e5f73437078a198758630b325bb77747a1781b36614082",
        "test_events/part-00002.parquet": "3616aae1f50a0d6f007d0e16a87879b1f67621873ca8785e52a000ac6f3b4db9",
        "test_events/part-00003.parquet": "517ced235aa4f98b55a1ebb113d98664d1b1645e5ba0ae822e005ee1219908b7",
        "train_sessions/part-00000.parquet": "ebea10dd27a4cfa47b0c4000b18a1983a2ed4c6f0ae3bbcc05a696ec50dfff41",
        "train_sessions/part-00001.parquet": "7d119fa28b99eb78037fcd340eb3040d4608bb1efc756d14162b247be06a1edd",
        "train_sessions/part-00002.parquet": "2d45645ab478d8f870237269a17c2981ae7dd8b3026c2c155b458a5b6ab9a4b0",
        "train_sessions/part-00003.parquet": "7c4a9a645ab8a60562455fdeae26e119eae4f78a313e0f2e4b1bb7e361f3dbbf",
    },
    "string-3": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "a82fc8726717ff75cf22c75f441bbd905e57f3b612355ff93a0e0a2952a05ffd",
        "session_index/part-00001.parquet": "2a405a63c097ac02eac5f76ba352f78a32b0644520a28ca66977485dea8496c2",
        "session_index/part-00002.parquet": "9876a76b854e01ac919fad114c01eff6fa1ccf1df01499a81af8fadf66064f95",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "715d3fe4d949c1b7d3516f187569a10d5d3b119993dc9fdd8e4d6ca41bea7335",
        "test_events/part-00001.parquet": "e7a1679ad63cf72254da7aebe75fd112efec3e9ede38c468eba7ec550eb09b98",
        "test_events/part-00002.parquet": "e94618e001dc39f86536789417013d47e3768c7b2a0a30ff6bd45c5b50d98e9b",
        "train_sessions/part-00000.parquet": "0f131e234745929683f86b4129b0f34c35cb8e7bd2481512cfb24f0637bd93c0",
        "train_sessions/part-00001.parquet": "5dd4348711dda978c3feacc1877e4c41b555b3e02aa7099e62eed49c3adf2e89",
        "train_sessions/part-00002.parquet": "c4ec7dd4cf97d47fd27894a8897c4fd26895dbd28c2d382adcd3b46c92458f1f",
    },
    "gap-4": {
        "item_popularity.npy": "a8b999bb706f4c4c168213fc29db9d3e02185d15cdcac10a5da8f2c5ae1ac73a",
        "session_index/part-00000.parquet": "ccb6a30d3563d9ad8dbde561625c1df5f036543d08d7ab136c6027e1d8679a4e",
        "session_index/part-00001.parquet": "adf9a63aa2d97b53833f0c082ea9ecc57727efe0a22580d590a3f92f520784c4",
        "session_index/part-00002.parquet": "adf9a63aa2d97b53833f0c082ea9ecc57727efe0a22580d590a3f92f520784c4",
        "session_index/part-00003.parquet": "d1e855081ceade36dcacf0deb37456f97bcdf7f9afb6ab6a8ff552051c2683af",
        "split_meta.json": "5ad41c4acb0aaee35ab09b757a679042dc9b9778ccd1fa0802c92f3807cea98a",
        "test_events/part-00000.parquet": "21a0ce2cf5c67470ffa6aab98731105234774109564aac8182e8077f6b63806e",
        "test_events/part-00001.parquet": "82c49a55d5b5c92caf391f3f2b497302bc1ff1ef1ec6a8b6249ab2f5c00179b1",
        "test_events/part-00002.parquet": "82c49a55d5b5c92caf391f3f2b497302bc1ff1ef1ec6a8b6249ab2f5c00179b1",
        "test_events/part-00003.parquet": "97eb1ca13e49d013386881e6437ce2018dc82cd1662e6cfb4adaf7304b6ea77f",
        "train_sessions/part-00000.parquet": "268a2638cc739a1506d8f465884220b95b49d0321fb5c53f498de499f49f3c27",
        "train_sessions/part-00001.parquet": "533603e76ee0c26ab42f10f35c89fbe3a765fc75c462c216c796160060d149f1",
        "train_sessions/part-00002.parquet": "533603e76ee0c26ab42f10f35c89fbe3a765fc75c462c216c796160060d149f1",
        "train_sessions/part-00003.parquet": "75c7afe7e406d4d04b54123b70f05bfeca2b83fbf6ce4cdc65fd14ad8d09bd50",
    },
}


EXPECTED_RECORD_SHA256 = {
    "enum-None": "b46a43076043bc4b9210da018b26f1adcb11191416b753bfdac610e8ee4eeb09",
    "enum-4": "9603d2ed029677a172f85a714a2b56647ab0258ef221e7a55787cb1018f4b411",
    "string-3": "902e67a1c0b1f4be6ea35b2589bdda8312596ede163c82b293693205bc9d83a8",
    "gap-4": "13eb4ce2cf4c51c1443eeaa63d8bb321bf88f09e13d40fcb6e2f2faf7b12621d",
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
