from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from hstu_model import FeatureNames, HSTURanker, preset, seed_everything

VOCAB = {"uid": 11, "item_id": 50, "artist_id": 13, "album_id": 17}


@dataclass
class Batch:
    uih: KeyedJaggedTensor
    candidates: KeyedJaggedTensor
    labels: torch.Tensor


def make_batch(
    history_lengths: list[int], seed: int = 0, names: FeatureNames | None = None
) -> Batch:
    """Random ids within VOCAB, one candidate per sample, times on a 5 s grid."""
    names = names or FeatureNames()
    g = torch.Generator().manual_seed(seed)
    batch_size, total = len(history_lengths), sum(history_lengths)
    lengths = torch.tensor(history_lengths, dtype=torch.int64)
    ones = torch.ones(batch_size, dtype=torch.int64)

    def ids(table: str, n: int) -> torch.Tensor:
        return torch.randint(0, VOCAB[table], (n,), generator=g)

    query_time = 1_000_000 + 5 * torch.randint(0, 100_000, (batch_size,), generator=g)
    action_time = torch.cat(
        [
            torch.sort(query_time[b] - 5 * torch.randint(1, 50_000, (n,), generator=g)).values
            for b, n in enumerate(history_lengths)
        ]
        or [torch.empty(0, dtype=torch.int64)]
    )
    uih = KeyedJaggedTensor.from_lengths_sync(
        keys=[
            names.uid,
            names.item_id,
            names.artist_id,
            names.album_id,
            names.action_weight,
            names.action_timestamp,
        ],
        values=torch.cat(
            [
                ids("uid", batch_size),
                ids("item_id", total),
                ids("artist_id", total),
                ids("album_id", total),
                torch.tensor([1, 2, 4, 3], dtype=torch.int64)[
                    torch.randint(0, 4, (total,), generator=g)
                ],
                action_time,
            ]
        ),
        lengths=torch.cat([ones, lengths, lengths, lengths, lengths, lengths]),
    )
    candidates = KeyedJaggedTensor.from_lengths_sync(
        keys=[
            names.candidate_item_id,
            names.candidate_artist_id,
            names.candidate_album_id,
            names.query_time,
        ],
        values=torch.cat(
            [
                ids("item_id", batch_size),
                ids("artist_id", batch_size),
                ids("album_id", batch_size),
                query_time,
            ]
        ),
        lengths=torch.cat([ones, ones, ones, ones]),
    )
    labels = torch.randint(0, 2, (batch_size,), generator=g).to(torch.float32)
    return Batch(uih, candidates, labels)


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
            "max_seq_len": 16,
            "position_buckets": 16,
            "time_buckets": 32,
        }
    )
