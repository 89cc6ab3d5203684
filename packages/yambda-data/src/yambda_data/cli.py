"""Command line: ``yambda-data synth``, ``download``, ``validate``, ``preprocess``,
``build-store``, ``inspect`` and ``verify`` (also ``python -m yambda_data``).

Results go to stdout, progress to stderr. Every command checks all it was given before it
creates or changes a file. Exit status:

* 0: done (for ``validate`` and ``verify``: the data passed);
* 1: ``validate`` or ``verify`` found the data wrong (``yambda-data <command>: FAILED: ...``);
* 2: a usage, validation or I/O error: a bad argument, a missing or unreadable input, an
  invalid input file, a write that failed (``yambda-data <command>: error: ...``).

Each error is one line on stderr, naming the flag, file, field or value at fault; a Python
traceback is printed too only with ``--debug`` or the environment variable ``DLRMV4_DEBUG=1`` (the
convention of :mod:`dlrmv4_cli`).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

import dlrmv4_cli
from dlrmv4_cli import DEBUG_ENV, EXIT_FAILED, OneLineParser, debug_requested
from yambda_data._cli_common import _check_creatable, _check_dir_arg, _check_int, _Failed, _progress
from yambda_data._io import InputFileError, StoreError, first_line, reading
from yambda_data._synth_config import YAMBDA_USERS, SynthConfig, SynthPaths, yambda_shape
from yambda_data.download import PINNED_REVISION, SIZES, DownloadError, download
from yambda_data.preprocess import preprocess
from yambda_data.schema import (
    SchemaError,
    duplicate_rows_warning,
    mapping_path,
    multi_event_path,
    validate_mapping,
    validate_multi_event,
)

__all__ = ["DEBUG_ENV", "main", "run"]


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="yambda-data",
        description="Yambda dataset tools: download, synthetic data, validation, preprocessing. "
        "Exit status: 0 done or the data passed, 1 validate/verify found the data wrong, 2 a "
        f"usage, input or I/O error (one line on stderr; the traceback with --debug or "
        f"{DEBUG_ENV}=1).",
    )
    dlrmv4_cli.add_debug_option(parser)
    common = argparse.ArgumentParser(add_help=False)
    dlrmv4_cli.add_debug_option(common, subcommand=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    synth = add("synth", help="write a synthetic dataset in the public Yambda layout")
    synth.add_argument(
        "--users", type=int, default=None, help="number of users (required without --shape)"
    )
    synth.add_argument("--out", required=True, help="dataset root to write")
    synth.add_argument("--seed", type=int, required=True, help="random seed")
    synth.add_argument(
        "--size",
        default=None,
        help="size label of flat/<size>/ (default: the --shape, else 50m)",
    )
    synth.add_argument(
        "--shape",
        choices=tuple(YAMBDA_USERS),
        default=None,
        help="the published shape of a Yambda size: its users (unless --users), per-user "
        "spread and catalogue size",
    )
    synth.add_argument(
        "--stream",
        action="store_true",
        help="hold one block of users in memory at a time (any size; the file's row groups "
        "differ from the default in-memory write, its rows do not)",
    )
    synth.add_argument(
        "--median-events",
        type=int,
        default=None,
        help=f"median listens per user (default {SynthConfig.median_events_per_user})",
    )
    synth.add_argument(
        "--items", type=int, default=None, help=f"catalogue size (default {SynthConfig.items})"
    )
    synth.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the dataset files already in --out (refused without it)",
    )

    down = add("download", help="fetch a Yambda size from the Hugging Face Hub (or a local mirror)")
    down.add_argument("--size", required=True, choices=SIZES, help="dataset size")
    down.add_argument("--dest", required=True, help="dataset root to write")
    down.add_argument(
        "--revision", default=PINNED_REVISION, help="dataset revision (default: the reference's)"
    )
    down.add_argument("--embeddings", action="store_true", help="also fetch embeddings.parquet")
    down.add_argument("--source", help="copy from this local directory instead of the Hub")

    validate = add("validate", help="check a dataset against the public schema")
    validate.add_argument("--root", required=True, help="dataset root")
    validate.add_argument("--size", required=True, help="size label, e.g. 50m")

    prep = add(
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

    store = add(
        "build-store",
        help="build (or reuse) the memory-mapped sample store of a preprocess output",
    )
    store.add_argument("--preprocessed", required=True, help="preprocess output directory")
    store.add_argument(
        "--raw", required=True, help="dataset root holding the artist/album item mappings"
    )
    store.add_argument("--out", required=True, help="store directory (replaced atomically)")
    store.add_argument(
        "--min-history",
        type=int,
        required=True,
        help="earlier events (any type) a listen needs to be an anchor",
    )
    store.add_argument(
        "--window-seconds",
        type=int,
        default=86_400,
        help="width of the train-anchor time windows (default 86400)",
    )
    store.add_argument(
        "--verify", action="store_true", help="recompute every array's sha256 after opening"
    )

    inspect = add(
        "inspect",
        help="summarize a preprocess output, a sample store or (with --size) a raw dataset",
    )
    inspect.add_argument(
        "path",
        help="a preprocess output (split_meta.json), a sample store (manifest.json + READY) "
        "or a dataset root (flat/<size>/multi_event.parquet, with --size)",
    )
    inspect.add_argument("--size", help="size label of a raw dataset root, e.g. 50m")
    inspect.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )

    verify = add(
        "verify",
        help="check a sample store (every array's sha256) or a preprocess output (its counts)",
    )
    verify.add_argument(
        "path", help="a sample store (manifest.json + READY) or a preprocess output"
    )
    verify.add_argument(
        "--preprocessed",
        help="for a store: also check that it was built from this preprocess output (with --raw)",
    )
    verify.add_argument(
        "--raw", help="for a store: the dataset root holding the mappings it was built from"
    )
    verify.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )
    return parser


_SYNTH_FLAGS = {
    "users": "--users",
    "seed": "--seed",
    "size": "--size",
    "median_events_per_user": "--median-events",
    "items": "--items",
}


def _synth(args: argparse.Namespace) -> None:
    if args.users is None and args.shape is None:
        raise ValueError("--users: required without --shape")
    overrides = {"seed": args.seed}
    if args.users is not None:
        overrides["users"] = args.users
    if args.size is not None or args.shape is None:
        overrides["size"] = args.size or "50m"
    if args.median_events is not None:
        overrides["median_events_per_user"] = args.median_events
    if args.items is not None:
        overrides["items"] = args.items
    try:
        base = SynthConfig() if args.shape is None else yambda_shape(args.shape)
        config = dataclasses.replace(base, **overrides)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0].removeprefix("SynthConfig.")
        flag = _SYNTH_FLAGS.get(field)
        raise ValueError(f"{flag}: {exc}" if flag else str(exc)) from None
    root = Path(args.out)
    _check_creatable("--out", root)
    paths = SynthPaths.of(root, config)
    try:
        paths.check_writable()
    except ValueError as exc:
        raise ValueError(f"--out {root}: {exc}") from None
    present = [t for t in paths.files if t.exists()]
    if present and not args.overwrite:
        raise ValueError(
            f"--out {root}: {present[0]} exists; refusing to replace a dataset (pass "
            "--overwrite to replace its files)"
        )
    from yambda_data._synth_write import synthesize  # the generator: only this command's

    start = time.perf_counter()
    paths = synthesize(root, config, stream=args.stream)
    elapsed = time.perf_counter() - start
    print(f"wrote {paths.multi_event}")
    print(f"wrote {paths.artist_item_mapping}")
    print(f"wrote {paths.album_item_mapping}")
    print(f"in {elapsed:.1f} s")


def _download(args: argparse.Namespace) -> None:
    dest = Path(args.dest)
    _check_creatable("--dest", dest)
    if args.source is not None:
        _check_dir_arg("--source", Path(args.source))
    if not args.revision.strip():
        raise ValueError("--revision: must not be empty")
    paths = download(
        args.size, dest, revision=args.revision, embeddings=args.embeddings, source=args.source
    )
    for path in paths:
        print(f"{path}: {path.stat().st_size:,} bytes")


def _validate(args: argparse.Namespace) -> None:
    root = Path(args.root)
    _check_dir_arg("--root", root)
    files = [multi_event_path(root, args.size), mapping_path(root, "artist")]
    files.append(mapping_path(root, "album"))
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    try:
        summary = validate_multi_event(files[0])
        counts = ", ".join(f"{k} {v:,}" for k, v in summary.event_counts.items())
        print(f"{summary.source}: ok: {summary.num_events:,} events, {summary.num_users:,} users")
        print(f"  timestamps {summary.t_min}..{summary.t_max}; {counts}")
        repeated = summary.num_duplicate_rows
        print(f"  {repeated:,} rows repeat an earlier row in every column")
        warning = duplicate_rows_warning(summary.source, repeated, summary.num_events)
        if warning:
            _progress(warning)
        for kind in ("artist", "album"):
            path = mapping_path(root, kind)
            with reading(path):
                rows = validate_mapping(path, kind)
            print(f"{path}: ok: {rows:,} rows")
    except (SchemaError, InputFileError) as exc:
        raise _Failed(str(exc)) from exc


def _preprocess(args: argparse.Namespace) -> None:
    _check_dir_arg("--raw", Path(args.raw))
    _check_int("--partitions", args.partitions, 1)
    _check_creatable("--out", Path(args.out))
    start = time.perf_counter()
    meta = preprocess(args.raw, args.size, args.out, partitions=args.partitions, progress=_progress)
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


def _build_store(args: argparse.Namespace) -> None:
    _check_dir_arg("--preprocessed", Path(args.preprocessed))
    _check_dir_arg("--raw", Path(args.raw))
    _check_int("--min-history", args.min_history, 0)
    _check_int("--window-seconds", args.window_seconds, 1)
    _check_creatable("--out", Path(args.out))
    from yambda_data.store import build_store  # the store's modules: only the store commands'

    start = time.perf_counter()
    store = build_store(
        args.preprocessed,
        args.raw,
        args.out,
        min_history=args.min_history,
        window_seconds=args.window_seconds,
        progress=_progress,
    )
    elapsed = time.perf_counter() - start
    split = store.split
    disk = store.disk_bytes()
    m = store.manifest
    print(f"store {store.path}")
    print(
        f"  {store.num_users:,} users, {store.num_events:,} events "
        f"(train {split.num_train_events:,}, test {split.num_test_events:,})"
    )
    print(
        f"  anchors (min_history {store.min_history}): train {m['num_train_anchors']:,}, "
        f"test {m['num_test_anchors']:,}"
    )
    print(
        f"  {store.num_windows:,} windows of {store.window_seconds:,} s "
        f"from {store.first_window_start}"
    )
    print(f"  {disk:,} bytes on disk, {disk / max(store.num_events, 1):.1f} bytes/event")
    print(f"in {elapsed:.1f} s")
    if args.verify:
        start = time.perf_counter()
        _progress(f"verifying {store.path}")
        store.verify()
        print(f"verified {len(m['files'])} files in {time.perf_counter() - start:.1f} s")


# The reports load the store's modules, which the other commands do not need.
def _inspect(args: argparse.Namespace) -> None:
    from yambda_data._cli_reports import _inspect as inspect

    inspect(args)


def _verify(args: argparse.Namespace) -> None:
    from yambda_data._cli_reports import _verify as verify

    verify(args)


_COMMANDS = {
    "synth": _synth,
    "download": _download,
    "validate": _validate,
    "preprocess": _preprocess,
    "build-store": _build_store,
    "inspect": _inspect,
    "verify": _verify,
}


_EXPECTED = (
    SchemaError,
    DownloadError,
    StoreError,
    InputFileError,
    ValueError,
    OSError,
)
"""Errors whose message says what and where; anything else is reported with its type."""


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, pl.exceptions.PolarsError):
        return f"{type(exc).__name__}: {first_line(str(exc))}"
    return dlrmv4_cli.describe(exc, _EXPECTED)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status: 0 done (or the data passed), 1 ``validate`` or
    ``verify`` found the data wrong, 2 a usage, input or I/O error. Each error is one line on
    stderr; ``--debug`` or ``DLRMV4_DEBUG=1`` adds its traceback."""
    parser = _parser()
    args = parser.parse_args(argv)  # an argument error exits with status 2
    debug = debug_requested(getattr(args, "debug", False))
    prefix = f"yambda-data {args.command}"
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if on_main_thread else None
    try:
        _COMMANDS[args.command](args)
        sys.stdout.flush()
    except _Terminated:
        print(f"{prefix}: terminated", file=sys.stderr)
        return dlrmv4_cli.signal_status(signal.SIGTERM)
    except BrokenPipeError:
        return dlrmv4_cli.reader_gone()
    except _Failed as exc:
        if debug:
            traceback.print_exception(exc.__cause__ or exc)
        print(f"{prefix}: FAILED: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return dlrmv4_cli.interrupted(prefix)
    # every error is one line, its traceback on request (a reader's panic is no Exception)
    except (Exception, pl.exceptions.PanicException) as exc:
        return dlrmv4_cli.report_error(
            prefix, exc, debug=debug, expected=_EXPECTED, message=_one_line(exc)
        )
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


class _Terminated(BaseException):
    """SIGTERM, raised where the command is: its outputs' temporaries are removed on the way
    out (a killed command's would stay until the next one into the same output)."""


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
    raise _Terminated


def run() -> NoReturn:
    """The ``yambda-data`` command (and ``python -m yambda_data``): :func:`main` as a process
    of its own, which exits with main's status."""
    # What the imports made (polars' modules above all) lives as long as the process. Frozen,
    # it is traced by the collector neither during the run nor at exit, where tracing it took
    # a tenth of a second of a preprocess run.
    gc.freeze()
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
