from __future__ import annotations

import pytest

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
