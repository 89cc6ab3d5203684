"""Random batches in the model's input format, for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from hstu_model.config import FeatureNames


@dataclass
class Batch:
    """A batch as the model and Trainer take it."""

    uih: KeyedJaggedTensor
    candidates: KeyedJaggedTensor
    labels: torch.Tensor


def random_batch(
    history_lengths: list[int],
    vocab_sizes: Mapping[str, int],
    seed: int = 0,
    names: FeatureNames | None = None,
) -> Batch:
    """Uniform ids below `vocab_sizes`, one candidate per sample, times on a 5 s grid."""
    names = names or FeatureNames()
    g = torch.Generator().manual_seed(seed)
    batch_size, total = len(history_lengths), sum(history_lengths)
    lengths = torch.tensor(history_lengths, dtype=torch.int64)
    ones = torch.ones(batch_size, dtype=torch.int64)

    def ids(table: str, n: int) -> torch.Tensor:
        return torch.randint(0, vocab_sizes[table], (n,), generator=g)

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
