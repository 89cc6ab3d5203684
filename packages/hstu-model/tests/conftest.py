from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from hstu_model import FeatureNames, HSTURanker, preset, seed_everything
from hstu_model.testing import random_batch

VOCAB = {"uid": 11, "item_id": 50, "artist_id": 13, "album_id": 17}


def make_batch(history_lengths: list[int], seed: int = 0, names: FeatureNames | None = None):
    return random_batch(history_lengths, VOCAB, seed, names)


@pytest.fixture(name="make_batch")
def make_batch_fixture():
    return make_batch


@pytest.fixture(name="vocab")
def vocab_fixture():
    return dict(VOCAB)


@pytest.fixture(name="build")
def build_fixture():
    """build(config, seed=0): a freshly seeded model over VOCAB."""

    def build(config, seed=0):
        seed_everything(seed)
        return HSTURanker(config.model, VOCAB)

    return build


@pytest.fixture
def tiny_config():
    cfg = preset("tiny")
    return cfg.replace(
        model={
            "embedding_dim": 16,
            "attention_dim": 8,
            "linear_dim": 8,
            "num_heads": 2,
            "preprocessor_hidden_dim": 16,
            "history_length": 12,
            "max_seq_len": 24,
            "position_buckets": 24,
            "time_buckets": 32,
        }
    )


@pytest.fixture(name="run_distributed", scope="session")
def run_distributed_fixture(tmp_path_factory):
    """run_distributed(script, nproc, *args) -> [rank 0's result, rank 1's, ...].

    Launches `python -m torch.distributed.run --standalone --nproc-per-node nproc script
    OUT_DIR *args` in a subprocess (a standalone script: nothing to pickle into spawned
    processes) and reads back the `OUT_DIR/rank<r>.json` each rank writes. Fails with the
    launcher's output when a rank fails or writes nothing.
    """

    def run(script: Path, nproc: int, *args: str, timeout: float = 300.0) -> list[dict]:
        out_dir = tmp_path_factory.mktemp(script.stem)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            str(script),
            str(out_dir),
            *args,
        ]
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
        files = [out_dir / f"rank{rank}.json" for rank in range(nproc)]
        if proc.returncode != 0 or not all(f.exists() for f in files):
            pytest.fail(
                f"{' '.join(command)} exited with {proc.returncode}\n"
                f"--- stdout ---\n{proc.stdout[-5000:]}\n--- stderr ---\n{proc.stderr[-10000:]}"
            )
        return [json.loads(f.read_text()) for f in files]

    return run


@pytest.fixture(name="gloo_world_1")
def gloo_world_1_fixture(tmp_path):
    """A one-process gloo world group in this process, destroyed afterwards."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.fixture
def reference_table_rows() -> dict[str, int]:
    """The reference's eleven embedding tables and their rows (facts.md section 3), in the
    model's table order: the id tables, then the seven crosses."""
    return {
        "item_id": 9_390_624,
        "artist_id": 1_293_395,
        "album_id": 3_367_692,
        "uid": 1_000_001,
        "user_x_artist": 100_000_000,
        "user_x_album": 40_000_000,
        "user_x_hour": 24_000_000,
        "item_x_hour": 40_000_000,
        "artist_x_hour": 32_000_000,
        "user_x_is_organic": 2_000_000,
        "user_x_artist_x_hour": 40_000_000,
    }
