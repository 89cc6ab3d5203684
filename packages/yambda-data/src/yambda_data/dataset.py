"""The DLRMv4 train and eval samples of a Yambda root, in one call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from .samples import (
    ItemFeatures,
    SampleConfig,
    Samples,
    VocabSizes,
    build_samples,
    compute_vocab_sizes,
)
from .schema import multi_event_path, normalize_multi_event, validate_multi_event
from .split import SplitMeta, temporal_split


@dataclass(frozen=True)
class DLRMv4Samples:
    """Train samples (anchors before the split), eval samples (anchors in the test day)."""

    train: Samples
    eval: Samples
    vocab: VocabSizes
    split: SplitMeta


def load_dlrmv4_samples(root: str | Path, size: str, config: SampleConfig) -> DLRMv4Samples:
    """Validate ``<root>/flat/<size>/multi_event.parquet``, split it by time and build samples.

    Eval anchors see the user's train events and earlier test events as history. The whole
    table is held in memory: this is the path for synthetic and subsampled data.
    """
    path = multi_event_path(root, size)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    # Validate the file as stored (event_type may be Utf8 or Categorical), then normalize.
    raw = pl.read_parquet(path)
    validate_multi_event(raw, source=str(path))
    events = normalize_multi_event(raw.lazy()).collect()
    split = temporal_split(events, size=size)
    items = ItemFeatures.from_root(root)
    return DLRMv4Samples(
        train=build_samples(split.train, None, items, config),
        eval=build_samples(split.train, split.test, items, config),
        vocab=compute_vocab_sizes(events, items),
        split=split.meta,
    )
