"""Writes a raw dataset unlike the synthesizer's, for ``bench_preprocess.py --raw``.

    uv run python packages/yambda-data/benchmarks/write_bursty_events.py USERS ROOT [--seed S]

The synthesizer's file is what the project was tuned on; a speed-up must hold on data it did
not make. This file keeps the public schema but none of the synthesizer's choices: 5,000 items
drawn Zipf-popular (exponent 1.05), every uid three apart, listening in bursts (a new session
on one event in 16, hours apart; within a session 30% of events at the same timestamp as the
one before and the rest a geometric number of 5-second steps later), timestamps in steps of
5 over 300 days, and one event in ten a like, dislike, unlike or undislike of the item just
heard, at its timestamp. About a third of the rows share (uid, timestamp) with the row before,
where the synthesizer's file has a fifth. Events per user are log-normal (median 500, clipped
to 64..20,000), as the synthesizer's. Written by polars in its own row groups, ``event_type``
as the public Enum, sorted by (uid, timestamp); ``bench_preprocess.py --layout`` rewrites it in
the other layouts. The artist and album mappings give each item one of 997 artists and one of
1,999 albums.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl

from yambda_data.schema import (
    EVENT_TYPE_DTYPE,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
    TIMESTAMP_QUANTUM,
    mapping_path,
    multi_event_path,
)

ITEMS = 5_000
TIME_SPAN = 300 * 86_400
EVENT_TYPE_SHARES = (0.9, 0.05, 0.02, 0.015, 0.015)  # in EVENT_TYPES order, listen first


def bursty_events(users: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    per_user = np.clip(rng.lognormal(np.log(500), 1.0, users), 64, 20_000).astype(np.int64)
    total = int(per_user.sum())
    first = np.r_[0, np.cumsum(per_user)[:-1]]
    uid = np.repeat(np.arange(users, dtype=np.uint32) * 3 + 1, per_user)

    steps = np.where(rng.random(total) < 0.3, 0, rng.geometric(0.05, total))
    new_session = rng.random(total) < 1 / 16
    steps = np.where(new_session, rng.exponential(4_000, total).astype(np.int64), steps)
    steps[first] = 0
    elapsed = np.cumsum(steps)
    elapsed -= np.repeat(elapsed[first], per_user)
    # Each user's events spread over most of the span, from a random start.
    last = np.repeat(np.maximum(elapsed[first + per_user - 1], 1), per_user)
    ticks = TIME_SPAN // TIMESTAMP_QUANTUM
    start = np.repeat(rng.integers(0, ticks // 20, users), per_user)
    timestamp = (start + elapsed * (ticks * 9 // 10) // last) * TIMESTAMP_QUANTUM

    popularity = 1.0 / np.arange(1, ITEMS + 1) ** 1.05
    item = rng.choice(ITEMS, size=total, p=popularity / popularity.sum()).astype(np.uint32)
    kind = rng.choice(len(EVENT_TYPES), size=total, p=EVENT_TYPE_SHARES)
    reaction = np.flatnonzero((kind > 0) & (np.r_[False, uid[1:] == uid[:-1]]))
    item[reaction] = item[reaction - 1]
    timestamp[reaction] = timestamp[reaction - 1]

    track_length = rng.integers(60, 600, ITEMS).astype(np.uint32)[item]
    events = pl.DataFrame(
        {
            "uid": uid,
            "timestamp": timestamp.astype(np.uint32),
            "item_id": item,
            "is_organic": (rng.random(total) < 0.4).astype(np.uint8),
            "played_ratio_pct": rng.integers(1, 101, total).astype(np.uint16),
            "track_length_seconds": track_length,
            "event_type": pl.Series(np.array(EVENT_TYPES)[kind]).cast(EVENT_TYPE_DTYPE),
        }
    )
    is_listen = pl.col("event_type") == "listen"
    return (
        events.with_columns(
            pl.when(is_listen).then(pl.col(name)).alias(name)
            for name in ("played_ratio_pct", "track_length_seconds")
        )
        .select(list(MULTI_EVENT_SCHEMA))
        .sort(["uid", "timestamp"], maintain_order=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("users", type=int)
    parser.add_argument("root", type=Path, help="the raw dataset root to write (must not exist)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.users < 1:
        parser.error(f"users: must be at least 1, got {args.users}")
    if args.root.exists():
        parser.error(f"{args.root}: exists; choose a new folder")
    events = bursty_events(args.users, args.seed)
    path = multi_event_path(args.root, "50m")
    path.parent.mkdir(parents=True)
    events.write_parquet(path, compression="zstd")
    items = np.arange(ITEMS, dtype=np.uint32)
    for kind, column, count in (("artist", "artist_id", 997), ("album", "album_id", 1_999)):
        mapping = pl.DataFrame({column: items % count, "item_id": items})
        mapping.write_parquet(mapping_path(args.root, kind))
    print(f"{path}: {events.height:,} events of {args.users:,} users")


if __name__ == "__main__":
    main()
