"""Command line: ``yambda-data synth``, ``validate`` and ``preprocess``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import polars as pl

from .download import PINNED_REVISION, SIZES, DownloadError, download
from .preprocess import preprocess
from .schema import (
    SchemaError,
    mapping_path,
    multi_event_path,
    validate_mapping,
    validate_multi_event,
)
from .synth import SynthConfig, synthesize

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="yambda-data",
        description="Yambda dataset tools: download, synthetic data, validation, preprocessing.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a synthetic dataset in the public Yambda layout")
    synth.add_argument("--users", type=int, required=True, help="number of users")
    synth.add_argument("--out", required=True, help="dataset root to write")
    synth.add_argument("--seed", type=int, required=True, help="random seed")
    synth.add_argument("--size", default="50m", help="size label of flat/<size>/ (default 50m)")
    synth.add_argument(
        "--median-events",
        type=int,
        default=None,
        help=f"median listens per user (default {SynthConfig.median_events_per_user})",
    )
    synth.add_argument(
        "--items", type=int, default=None, help=f"catalogue size (default {SynthConfig.items})"
    )

    down = sub.add_parser(
        "download", help="fetch a Yambda size from the Hugging Face Hub (or a local mirror)"
    )
    down.add_argument("--size", required=True, choices=SIZES, help="dataset size")
    down.add_argument("--dest", required=True, help="dataset root to write")
    down.add_argument(
        "--revision", default=PINNED_REVISION, help="dataset revision (default: the reference's)"
    )
    down.add_argument("--embeddings", action="store_true", help="also fetch embeddings.parquet")
    down.add_argument("--source", help="copy from this local directory instead of the Hub")

    validate = sub.add_parser("validate", help="check a dataset against the public schema")
    validate.add_argument("--root", required=True, help="dataset root")
    validate.add_argument("--size", required=True, help="size label, e.g. 50m")

    prep = sub.add_parser(
        "preprocess",
        help="split by time, sessionize and write the DLRMv4 preprocessing outputs",
    )
    prep.add_argument("--raw", required=True, help="dataset root holding flat/<size>/")
    prep.add_argument("--size", required=True, help="size label, e.g. 50m")
    prep.add_argument("--out", required=True, help="output directory (replaced atomically)")
    prep.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="uid-range partitions processed one at a time (default: one per 5M rows)",
    )
    return parser


def _synth(args: argparse.Namespace) -> None:
    overrides = {"users": args.users, "seed": args.seed, "size": args.size}
    if args.median_events is not None:
        overrides["median_events_per_user"] = args.median_events
    if args.items is not None:
        overrides["items"] = args.items
    config = SynthConfig(**overrides)
    start = time.perf_counter()
    paths = synthesize(args.out, config)
    elapsed = time.perf_counter() - start
    print(f"wrote {paths.multi_event}")
    print(f"wrote {paths.artist_item_mapping}")
    print(f"wrote {paths.album_item_mapping}")
    print(f"in {elapsed:.1f} s")


def _download(args: argparse.Namespace) -> None:
    paths = download(
        args.size, args.dest, revision=args.revision, embeddings=args.embeddings, source=args.source
    )
    for path in paths:
        print(f"{path}: {path.stat().st_size:,} bytes")


def _validate(args: argparse.Namespace) -> None:
    summary = validate_multi_event(multi_event_path(args.root, args.size))
    counts = ", ".join(f"{k} {v:,}" for k, v in summary.event_counts.items())
    print(f"{summary.source}: ok: {summary.num_events:,} events, {summary.num_users:,} users")
    print(f"  timestamps {summary.t_min}..{summary.t_max}; {counts}")
    for kind in ("artist", "album"):
        path = mapping_path(args.root, kind)
        rows = validate_mapping(path, kind)
        print(f"{path}: ok: {rows:,} rows")


def _preprocess(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    meta = preprocess(args.raw, args.size, args.out, partitions=args.partitions)
    elapsed = time.perf_counter() - start
    print(f"wrote {args.out}")
    print(
        f"  train {meta.num_train_events:,} events in {meta.num_sessions:,} sessions of "
        f"{meta.num_users:,} users; test {meta.num_test_events:,} events"
    )
    print(
        f"  train [{meta.train_start}, {meta.train_end}), test [{meta.test_start}, {meta.test_end})"
    )
    print(f"in {elapsed:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 on any error, with a message on stderr)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "synth":
            _synth(args)
        elif args.command == "preprocess":
            _preprocess(args)
        elif args.command == "download":
            _download(args)
        else:
            _validate(args)
    except (SchemaError, DownloadError, FileNotFoundError, ValueError, OSError) as exc:
        print(f"yambda-data {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except pl.exceptions.PolarsError as exc:
        # A file polars cannot read at all (truncated, not parquet): name what was read.
        where = (
            getattr(args, "root", None) or getattr(args, "raw", None) or getattr(args, "out", "")
        )
        print(f"yambda-data {args.command}: error: reading {where}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
