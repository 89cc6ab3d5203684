"""Wall time, throughput and peak memory of ``preprocess`` at several input sizes and partition
counts.

For each ``USERS`` value, synthesizes that many users (``--median`` listens per user, the
SynthConfig default when omitted; cached under ``--work DIR`` when given, else in a temporary
directory), then runs each case in its own child process and reads the child's peak RSS from
its resource usage (``os.wait4``), so cases do not share an allocator or a high-water mark.
Cases: ``import`` (the interpreter with yambda_data and polars imported, the floor under every
other figure; once), ``validate`` (``validate_multi_event`` on the whole file, the
pre-partition validation, for comparison; skipped with ``--no-validate``) and one
``preprocess`` run per ``--partitions`` value (``default`` = ``default_partitions`` of the row
count, one partition per 5M rows; ``rows:R`` = one per R rows, so that the partition size is
the same at every input size). Throughput is input events per second of wall time, the
child's interpreter start and imports included. With ``--repeat N`` each case runs N times and
the fastest run is reported (with the largest peak RSS of the N). Each row also gives the
child's CPU time and how many cores other processes kept busy meanwhile (``/proc/stat``): on a
small shared machine that is the main source of noise.

With ``--raw ROOT ...`` the inputs also (or, without ``USERS``, only) include existing raw
datasets: a file another generator wrote, with its own distributions of items, sessions and
repeated timestamps, or a download.

With ``--shaped USERS ...`` the inputs also (or only) include files shaped like Yambda's
by a generator of this script (:func:`shaped_events`: listening sessions on the 5-second grid
with ``--same-stamp`` of their events at the timestamp of the one before, uint16/uint32 columns,
dictionary-encoded ``event_type``, 50,000-row row groups), one per value of ``--same-stamp``
(few or many rows sharing their (uid, timestamp)) and of ``--repeated`` (the share of rows that
repeat an earlier row in every column, as real logs hold some); cached under ``--work``.

A project run is the ``yambda-data preprocess`` command (:func:`yambda_data.cli.run`, as the
installed script runs it) in its child. Every project run also reports the seconds of each
phase of ``preprocess`` (:data:`PHASES`; a table after the main one), so that a slower run
names the phase that slowed. With ``--count-cost PAIRS`` each preprocess case also runs in
alternated pairs with the repeated-row count and with it replaced by a count of none: what it
adds to the run's wall and CPU time. Its own time in the phase table is not that: it shares the
cores with polars' writer threads, which it slows as they slow it.

With ``--layout`` each input is first rewritten (once, cached under ``--work``) in each layout
given as ``EVENT_TYPE[:ROW_GROUP_ROWS[:ORDER]]``: ``event_type`` stored as ``enum``,
``dictionary``, ``string`` or ``large_string``, row groups of that many rows (default
1,000,000), ``sorted``, ``unsorted`` (the uids' blocks of rows in a random order) or ``time``
(every row in timestamp order, as a log is written; see
:mod:`yambda_data._layouts`); ``synth`` (the default) is the file as synthesized. Every case
runs on every layout, and the outputs of the layouts are compared file by file (their
``checksums.json``): they must be byte-identical.

With ``--reference PATH`` (a checkout of the MLPerf training repository, or its
``recommendation_v4`` directory), each size is also preprocessed by the reference's Yambda
processor on the same raw file (its download step skipped: the file is in place), in its own
child process as well. Project and reference runs alternate (project, reference, project, ...)
so that both see the same load, each reports its best of ``--repeat`` runs, and a ratio row per
size gives project over reference in events/s (wall), events per CPU second, and peak RSS; the
split figures of the two outputs (event, session and user counts, the time bounds) are compared
and printed. With ``--repeat`` above 1, a line per size also gives the ratio of each alternated
pair of runs and their median, which a drift of the machine's speed over the repeats moves less.

Run from the repository root::

    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 2000 --partitions default 8
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 2000 40000 --median 500 \\
        --partitions default --no-validate --repeat 3 --work /tmp/yambda-bench \\
        --reference ../training
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 200 2000 10000 \\
        --median 2900 --partitions default rows:1000000 --repeat 2 --work /tmp/yambda-bench
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py --shaped 16000 40000 \\
        --same-stamp 0.02 0.35 --partitions default --no-validate --repeat 2 \\
        --work /tmp/yambda-bench --reference ../training
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py --shaped 16000 \\
        --same-stamp 0.35 --repeated 0.005 0.01 0.05 --partitions default --no-validate \\
        --repeat 2 --work /tmp/yambda-bench --reference ../training
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py --shaped 16000 \\
        --same-stamp 0.35 --repeated 0.005 0.05 --partitions default --no-validate \\
        --work /tmp/yambda-bench --count-cost 3
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 40000 --median 500 \\
        --partitions default --no-validate --repeat 2 --work /tmp/yambda-bench \\
        --reference ../training --layout enum:50000 dictionary:50000 string:50000 \\
        large_string:50000 dictionary:1000000 dictionary:50000:unsorted
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import tempfile
from contextlib import nullcontext
from pathlib import Path

import _common

from yambda_data._layouts import EVENT_TYPE_LAYOUTS, ORDERS
from yambda_data.preprocess import CHECKSUMS_FILE, default_partitions
from yambda_data.schema import multi_event_path

_IMPORT = "import yambda_data.preprocess"
_REFERENCE = (
    "import logging, sys\n"
    "logging.disable(logging.CRITICAL)\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "import preprocess_public_data as reference\n"
    "processor = reference.DLRMYambdaProcessor(sys.argv[2], sys.argv[3])\n"
    "processor.download = lambda: None  # the raw file is in place\n"
    "processor.preprocess()\n"
)
_REFERENCE_SCRIPT = "preprocess_public_data.py"
SPLIT_FIGURES = (
    "num_train_events",
    "num_test_events",
    "num_sessions",
    "num_users",
    "t_min",
    "t_max",
    "train_end",
    "test_start",
    "test_end",
)
"""split_meta.json fields that mean the same in both outputs (the reference's train_start is
train_end minus 300 days, the project's the first train event)."""
_WRITE_LAYOUT = (
    "import os, sys\n"
    "import polars as pl\n"
    "from yambda_data._layouts import write_layout\n"
    "src, dst, event_type, rows, order, seed = sys.argv[1:]\n"
    "write_layout(pl.read_parquet(src), dst + '.tmp', event_type=event_type,\n"
    "             row_group_rows=int(rows), order=order, seed=int(seed))\n"
    "os.replace(dst + '.tmp', dst)\n"
)
_LAYOUT_SOURCE = "layout-source.json"
"""Written into a rewritten layout's root once it is complete: :func:`source_identity`."""
_PREPROCESS_PHASES = (
    "import atexit, json, sys, threading, time\n"
    "import yambda_data.preprocess as prep\n"
    "phases = json.loads(sys.argv[5])\n"
    "if sys.argv[6] == 'without-count':  # what the run costs without it; outputs otherwise alike\n"
    "    prep._repeated_rows = lambda part, user_start: 0\n"
    "spent = dict.fromkeys(phases.values(), 0.0)\n"
    "cpu = dict.fromkeys(phases.values(), 0.0)\n"
    "on_main = [0.0]\n"
    "local = threading.local()  # per thread: time of the timed calls inside the current one\n"
    "def timed(phase, fn):\n"
    "    def run(*args, **kwargs):\n"
    "        outer, local.inner = getattr(local, 'inner', (0.0, 0.0)), (0.0, 0.0)\n"
    "        start, start_cpu = time.perf_counter(), time.thread_time()\n"
    "        try:\n"
    "            return fn(*args, **kwargs)\n"
    "        finally:\n"
    "            took = time.perf_counter() - start\n"
    "            took_cpu = time.thread_time() - start_cpu\n"
    "            spent[phase] += took - local.inner[0]\n"
    "            cpu[phase] += took_cpu - local.inner[1]\n"
    "            if threading.current_thread() is threading.main_thread():\n"
    "                on_main[0] += took - local.inner[0]\n"
    "            local.inner = (outer[0] + took, outer[1] + took_cpu)\n"
    "    return run\n"
    "for name, phase in phases.items():\n"
    "    setattr(prep, name, timed(phase, getattr(prep, name)))\n"
    "untimed = prep.preprocess\n"
    "def preprocess(*args, **kwargs):\n"
    "    start = time.perf_counter()\n"
    "    try:\n"
    "        return untimed(*args, **kwargs)\n"
    "    finally:\n"
    "        spent['other'] = time.perf_counter() - start - on_main[0]\n"
    "prep.preprocess = preprocess  # before the command line binds the name\n"
    "import yambda_data.cli as cli\n"
    "raw, size, out, parts = sys.argv[1:5]\n"
    "sys.argv = ['yambda-data', 'preprocess', '--raw', raw, '--size', size, '--out', out]\n"
    "sys.argv += [] if parts == 'default' else ['--partitions', parts]\n"
    "atexit.register(lambda: print(json.dumps({'wall': spent, 'cpu': cpu})))\n"
    "cli.run()\n"
)
PHASES = {
    "_bounds": "validate",
    "_spill_uid_ranges": "spill",
    "_read_partition": "read",
    "_normalized": "read",
    "_in_order": "sort",
    "_train_rows": "split",
    "_test_rows": "split",
    "_session_index": "split",
    "_repeated_rows": "repeated rows",
    "_write_parts": "write (beside)",
    "_finish_partition": "hash, sync (beside)",
    "_wait_read": "read wait",
    "_wait_files": "write wait",
    "_wait_written": "write wait",
    "_write_totals": "totals",
    "fsync_tree": "fsync",
}
"""The functions of ``yambda_data.preprocess`` timed in a project run, by phase: each phase's time
excludes the timed calls it makes (the split, its repeated-row count). ``validate`` is the
check pass, which also decodes the rows of the partitions it keeps. Partitions are read (or,
when kept, only converted) and sorted in a reader thread (``read``, ``sort``; ``read wait`` is
the main thread's wait for it); the part files are written in a thread beside the main one and
hashed and synced in another: ``write (beside)`` and ``hash, sync (beside)`` are those threads'
times, which overlap the others (the second includes its wait for the first), and ``write
wait`` is the main thread's wait for them. ``totals`` writes the item popularity and split
metadata. ``other`` is the rest of the main thread's ``preprocess`` (the argument checks, the
lock, the item counts, the rename), imports excluded."""
_WRITE_SHAPED = (
    "import sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from bench_preprocess import write_shaped\n"
    "users, same_stamp, seed, repeated = sys.argv[3:]\n"
    "write_shaped(sys.argv[2], int(users), float(same_stamp), int(seed), float(repeated))\n"
)
SHAPED_ROW_GROUP_ROWS = 50_000
SHAPED_TIME_SPAN = 300 * 86_400
SHAPED_EVENT_TYPE_SHARES = (0.9733, 0.019, 0.002, 0.005, 0.0007)  # in EVENT_TYPES order
_VALIDATE = (
    "import sys\n"
    "from yambda_data.schema import multi_event_path, validate_multi_event\n"
    "validate_multi_event(multi_event_path(sys.argv[1], sys.argv[2]))\n"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "users",
        nargs="*",
        type=int,
        help="synthetic users, one size per value (default 2000 unless --raw is given)",
    )
    parser.add_argument(
        "--raw",
        nargs="+",
        type=Path,
        default=[],
        metavar="ROOT",
        help="also (or instead) preprocess these raw datasets: ROOT/flat/50m/multi_event.parquet"
        " written by another generator, or a download",
    )
    parser.add_argument(
        "--shaped",
        nargs="+",
        type=int,
        default=[],
        metavar="USERS",
        help="also (or instead) preprocess Yambda-shaped files of this many users each, written"
        " by this script's own generator (shaped_events)",
    )
    parser.add_argument(
        "--same-stamp",
        nargs="+",
        type=float,
        default=[0.35],
        metavar="SHARE",
        help="for --shaped: the shares of a session's events at the timestamp of the event "
        "before (one input per value; default 0.35)",
    )
    parser.add_argument(
        "--repeated",
        nargs="+",
        type=float,
        default=[0.0],
        metavar="SHARE",
        help="for --shaped: the shares of rows that repeat an earlier row in every column (one "
        "input per value and --same-stamp value; default 0)",
    )
    parser.add_argument("--median", type=int, default=None, help="median listens per user")
    parser.add_argument(
        "--partitions",
        nargs="+",
        default=["default", "8"],
        help=(
            "partition counts to run: N, 'default' (default_partitions of the row count) or "
            "rows:R (ceil(rows / R), a fixed partition size at every input size)"
        ),
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="cache the synthetic inputs here")
    parser.add_argument("--no-validate", action="store_true", help="skip the whole-file case")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per case; the fastest is reported"
    )
    parser.add_argument(
        "--count-cost",
        type=int,
        default=0,
        metavar="PAIRS",
        help="also run each preprocess case PAIRS times with the repeated-row count and without"
        " it, alternated, and print what the count adds to the wall and CPU time",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        help=(
            "a checkout of the MLPerf training repository (or its recommendation_v4 directory):"
            " also run its Yambda preprocessing on the same input and print the ratios"
        ),
    )
    parser.add_argument(
        "--layout",
        nargs="+",
        default=["synth"],
        help=(
            "input layouts: 'synth' (the file as synthesized) or EVENT_TYPE[:ROW_GROUP_ROWS"
            f"[:ORDER]], EVENT_TYPE one of {', '.join(EVENT_TYPE_LAYOUTS)}, ORDER one of "
            f"{', '.join(ORDERS)} (default 1000000 rows, sorted)"
        ),
    )
    args = parser.parse_args(argv)
    if not args.users and not args.raw and not args.shaped:
        args.users = [2000]
    if any(users < 1 for users in args.shaped):
        parser.error("--shaped: users must be at least 1")
    if any(not 0 <= share < 1 for share in args.same_stamp):
        parser.error("--same-stamp: each share must be in [0, 1)")
    if args.count_cost < 0:
        parser.error("--count-cost: PAIRS must be at least 0")
    if any(not 0 <= share < 1 for share in args.repeated):
        parser.error("--repeated: each share must be in [0, 1)")
    for root in args.raw:
        if not multi_event_path(root, _common.SIZE).is_file():
            parser.error(f"--raw: {multi_event_path(root, _common.SIZE)}: no such file")
    for spec in args.layout:
        if spec != "synth" and parse_layout(spec) is None:
            parser.error(f"--layout: {spec!r} is not 'synth' or EVENT_TYPE[:ROWS[:ORDER]]")
    if args.reference is not None:
        found = reference_module_dir(args.reference)
        if found is None:
            parser.error(f"--reference: no {_REFERENCE_SCRIPT} under {args.reference}")
        args.reference = found
    for p in args.partitions:
        if resolve_partitions(p, 1) is None:
            parser.error(
                f"--partitions: {p!r} is not 'default', a positive integer or rows:<positive int>"
            )
    return args


def setup(work: Path, users: int, args: argparse.Namespace) -> tuple[Path, int]:
    """The synthetic input of ``users`` users under ``work`` (cached); (root, row count)."""
    raw, synth_s = _common.synth_cached(work, users, args.median, args.seed)
    how = "cached" if synth_s is None else f"synthesized in {synth_s:.1f} s"
    return raw, describe_input(raw, f"{users:,} users", how)


def describe_input(raw: Path, label: str, how: str) -> int:
    """Prints one line about the input ``raw``; returns its row count."""
    rows = _common.count_rows(raw)
    size = multi_event_path(raw, _common.SIZE).stat().st_size / 2**20
    print(f"input: {label}, {rows:,} rows, {size:.1f} MiB parquet ({how})")
    return rows


def source_identity(raw: Path) -> str:
    """What a layout rewritten from ``raw`` was made from: the synthetic input's stamp, or the
    size and modification time of a --raw input's events file."""
    stamp = raw / _common.SYNTH_STAMP
    if stamp.is_file():
        return stamp.read_text()
    st = multi_event_path(raw, _common.SIZE).stat()
    return json.dumps({"source": str(raw.resolve()), "size": st.st_size, "mtime": st.st_mtime_ns})


def parse_layout(spec: str) -> tuple[str, int, str] | None:
    """(event_type, row group rows, order) of a ``--layout`` value other than 'synth' (None:
    invalid)."""
    parts = spec.split(":")
    if len(parts) > 3:
        return None
    event_type = parts[0]
    rows = parts[1] if len(parts) > 1 else "1000000"
    order = parts[2] if len(parts) > 2 else "sorted"
    if event_type not in EVENT_TYPE_LAYOUTS or order not in ORDERS or not rows.isdigit():
        return None
    return (event_type, int(rows), order) if int(rows) > 0 else None


def layout_input(work: Path, raw: Path, spec: str, seed: int) -> Path:
    """The input ``raw`` rewritten in the layout ``spec`` (cached under ``work``: written in
    a child once, next to a record of its source, :func:`source_identity`)."""
    if spec == "synth":
        return raw
    event_type, rows, order = parse_layout(spec)
    root = work / f"{raw.name}-{event_type}-rg{rows}-{order}"
    stamp = root / _LAYOUT_SOURCE
    if stamp.is_file() and stamp.read_text() == source_identity(raw):
        return root
    shutil.rmtree(root, ignore_errors=True)
    path = multi_event_path(root, _common.SIZE)
    path.parent.mkdir(parents=True)
    source = multi_event_path(raw, _common.SIZE)
    _common.run_code(
        _WRITE_LAYOUT, [str(source), str(path), event_type, str(rows), order, str(seed)]
    )
    stamp.write_text(source_identity(raw))
    return root


def shaped_events(users: int, same_stamp: float, seed: int, repeated: float = 0.0):
    """A Yambda-shaped events table (pyarrow) of ``users`` users, not the synthesizer's.

    Events per user log-normal (median 400, clipped to 3..20,000); timestamps on the 5-second
    grid, a new listening session (more than 30 minutes later) on one event in 30, and within
    a session ``same_stamp`` of the events at the timestamp of the one before (skips within
    the same 5 seconds), the others a geometric number of 5-second steps later; a user whose
    events would outlast 300 days has them squeezed onto the grid (more equal stamps). Items
    from a catalogue of 2M sparse ids, popular ones far more often; likes and other reactions
    are of the item just heard, at its timestamp. uid, timestamp, item_id and
    track_length_seconds uint32, played_ratio_pct uint16, is_organic uint8, event_type
    dictionary-encoded strings; sorted by uid, then time.

    ``repeated``: the share of the rows that are copies of an earlier row in every column, of
    rows drawn uniformly (so across users and timestamps; a row drawn twice is copied twice),
    each placed right after its row or, as often, after the last row of its (uid, timestamp)
    run (not adjacent where the run has more rows: listen, like, listen). They come from a
    stream of their own, so the rows they copy are the file of ``repeated`` 0.
    """
    import numpy as np
    import pyarrow as pa

    from yambda_data.schema import EVENT_TYPES, TIMESTAMP_QUANTUM

    rng = np.random.default_rng(seed)
    per_user = np.clip(rng.lognormal(np.log(400), 1.2, users), 3, 20_000).astype(np.int64)
    total = int(per_user.sum())
    first = np.r_[0, np.cumsum(per_user)[:-1]]
    last = first + per_user - 1
    uids = np.sort(rng.choice(users * 5 // 4, users, replace=False)).astype(np.uint32)
    uid = np.repeat(uids, per_user)

    steps = np.where(rng.random(total) < same_stamp, 0, rng.geometric(1 / 40, total))
    new_session = rng.random(total) < 1 / 30
    steps = np.where(new_session, 361 + rng.geometric(1 / 4_000, total), steps)
    steps[first] = 0
    elapsed = np.cumsum(steps)
    elapsed -= np.repeat(elapsed[first], per_user)
    grid = SHAPED_TIME_SPAN // TIMESTAMP_QUANTUM
    elapsed = elapsed * grid // np.repeat(np.maximum(elapsed[last], grid), per_user)
    room = grid - elapsed[last]  # where the user's first event may fall
    start = rng.integers(0, np.iinfo(np.int64).max, users) % (room + 1)
    timestamp = ((np.repeat(start, per_user) + elapsed) * TIMESTAMP_QUANTUM).astype(np.uint32)

    catalogue = 2_000_000
    item = (catalogue * rng.random(total) ** 4).astype(np.uint32) * 3 + 11
    kind = rng.choice(len(EVENT_TYPES), size=total, p=SHAPED_EVENT_TYPE_SHARES)
    reaction = np.flatnonzero((kind > 0) & np.r_[False, uid[1:] == uid[:-1]])
    item[reaction] = item[reaction - 1]
    timestamp[reaction] = timestamp[reaction - 1]
    is_listen = kind == 0
    skipped = np.r_[timestamp[1:] == timestamp[:-1], False]  # the next event within 5 s
    played = np.where(
        skipped,
        rng.integers(0, 10, total),
        np.where(rng.random(total) < 0.6, 100, rng.integers(0, 101, total)),
    ).astype(np.uint16)
    track_length = ((item.astype(np.uint64) * 2_654_435_761) >> 7) % 420 + 60
    listen_only = ~is_listen
    table = pa.table(
        {
            "uid": uid,
            "timestamp": timestamp,
            "item_id": item,
            "is_organic": (rng.random(total) < 0.45).astype(np.uint8),
            "played_ratio_pct": pa.array(played, mask=listen_only),
            "track_length_seconds": pa.array(track_length.astype(np.uint32), mask=listen_only),
            "event_type": pa.DictionaryArray.from_arrays(
                pa.array(kind.astype(np.int32)), pa.array(EVENT_TYPES)
            ),
        }
    )
    if not repeated:
        return table
    extra = np.random.default_rng([seed, 1])
    copies = round(total * repeated / (1 - repeated))
    source = extra.choice(total, copies)
    new_run = np.r_[True, (uid[1:] != uid[:-1]) | (timestamp[1:] != timestamp[:-1])]
    run_last = np.r_[np.flatnonzero(new_run)[1:], total] - 1
    after = np.where(extra.random(copies) < 0.5, source, run_last[np.cumsum(new_run)[source] - 1])
    # A copy goes right after the row ``after``, behind the copies before it that go there too.
    order = np.argsort(np.r_[2 * np.arange(total), 2 * after + 1], kind="stable")
    return table.take(np.r_[np.arange(total), source][order])


def write_shaped(
    root: str | Path, users: int, same_stamp: float, seed: int, repeated: float = 0.0
) -> None:
    """:func:`shaped_events` as the raw dataset ``root`` (zstd, 50,000-row row groups)."""
    import pyarrow.parquet as pq

    path = multi_event_path(root, _common.SIZE)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = shaped_events(users, same_stamp, seed, repeated)
    pq.write_table(table, path, compression="zstd", row_group_size=SHAPED_ROW_GROUP_ROWS)


def shaped_input(
    work: Path, users: int, same_stamp: float, repeated: float, seed: int
) -> tuple[Path, str]:
    """The Yambda-shaped input under ``work`` (written in a child once, cached); (root, how)."""
    name = f"shaped-u{users}-same{same_stamp:g}" + (f"-rep{repeated:g}" if repeated else "")
    root = work / f"{name}-s{seed}"
    stamp = root / _LAYOUT_SOURCE
    settings = {"users": users, "same_stamp": same_stamp, "seed": seed}
    spec = json.dumps(settings | ({"repeated": repeated} if repeated else {}))
    if stamp.is_file() and stamp.read_text() == spec:
        return root, "cached"
    shutil.rmtree(root, ignore_errors=True)
    here = str(Path(__file__).resolve().parent)
    result = _common.run_code(
        _WRITE_SHAPED, [here, str(root), str(users), str(same_stamp), str(seed), str(repeated)]
    )
    stamp.write_text(spec)
    return root, f"written in {result.wall_s:.1f} s"


def resolve_partitions(spec: str, rows: int) -> int | None:
    """The partition count of a ``--partitions`` value for ``rows`` rows (None: invalid)."""
    if spec == "default":
        return default_partitions(rows)
    count = spec.removeprefix("rows:")
    if not count.isdigit() or int(count) < 1:
        return None
    return -(-rows // int(count)) if spec.startswith("rows:") else int(count)


def reference_module_dir(path: Path) -> Path | None:
    """The directory that holds the reference's preprocessing script under ``path``."""
    for where in (
        "recommendation_v4/generative_recommenders/dlrm_v4",
        "generative_recommenders/dlrm_v4",
        ".",
    ):
        if (path / where / _REFERENCE_SCRIPT).is_file():
            return (path / where).resolve()
    return None


def reference_layout(work: Path, raw: Path) -> Path:
    """The reference's data root for ``raw``: its ``raw/<size>/multi_event.parquet`` is a link
    to the project's input, so both read the same bytes."""
    root = work / f"reference-data-{raw.name}"
    link = root / "raw" / _common.SIZE / "multi_event.parquet"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(multi_event_path(raw, _common.SIZE).resolve())
    return root


def run_reference(work: Path, raw: Path, module_dir: Path) -> tuple[_common.ChildResult, dict]:
    """One run of the reference's preprocessing of ``raw`` in a child; (result, its split
    metadata). Its output is removed afterwards."""
    root = reference_layout(work, raw)
    out = root / f"processed_{_common.SIZE}"
    shutil.rmtree(out, ignore_errors=True)
    try:
        result = _common.run_code(_REFERENCE, [str(module_dir), str(root), _common.SIZE])
        return result, json.loads((out / "split_meta.json").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_project(
    work: Path, raw: Path, partitions: str, *, count: bool = True
) -> tuple[_common.ChildResult, dict]:
    """One project preprocess run of ``raw`` in a child; (result, its split metadata with the
    output's file checksums under ``"files"``). ``count`` False: the repeated-row count
    replaced by a count of none."""
    out = work / f"bench-preprocess-out-{raw.name}"
    shutil.rmtree(out, ignore_errors=True)
    try:
        args = [str(raw), _common.SIZE, str(out), partitions, json.dumps(PHASES)]
        args.append("with-count" if count else "without-count")
        result = _common.run_code(_PREPROCESS_PHASES, args, capture=True)
        meta = json.loads((out / "split_meta.json").read_text())
        meta["files"] = json.loads((out / CHECKSUMS_FILE).read_text())["files"]
        meta["phases"] = json.loads(result.stdout.strip().splitlines()[-1])
        return result, meta
    finally:
        shutil.rmtree(out, ignore_errors=True)


def split_agreement(project: dict, reference: dict) -> str:
    """One line: how many of :data:`SPLIT_FIGURES` the two split metadata agree on, and the
    values (or, for those that differ, both values)."""
    differ = [f for f in SPLIT_FIGURES if project[f] != reference[f]]
    line = f"split figures, project and reference: {len(SPLIT_FIGURES) - len(differ)} of "
    line += f"{len(SPLIT_FIGURES)} agree"
    if differ:
        return (
            line + "; differ: " + ", ".join(f"{f} {project[f]} vs {reference[f]}" for f in differ)
        )
    return line + " (" + ", ".join(f"{f} {project[f]:,}" for f in SPLIT_FIGURES[:4]) + ")"


def compare_with_reference(
    work: Path, raw: Path, parts: str, args: argparse.Namespace
) -> tuple[_common.ChildResult, _common.ChildResult, dict]:
    """Project and reference runs of one input, alternating; the best of each, and the
    project's output checksums."""
    project_runs, reference_runs = [], []
    for _ in range(args.repeat):
        result, project_meta = run_project(work, raw, parts)
        project_runs.append(result)
        result, reference_meta = run_reference(work, raw, args.reference)
        reference_runs.append(result)
    print(split_agreement(project_meta, reference_meta))
    if args.repeat > 1:
        print(paired_ratios(project_runs, reference_runs))
    best = _common.best_of(project_runs), _common.best_of(reference_runs)
    return *best, project_meta["files"]


def paired_ratios(project: list[_common.ChildResult], reference: list[_common.ChildResult]) -> str:
    """One line: the events/s ratio, project over reference, of each alternated pair of runs,
    sorted, and their median. A pair's runs follow each other, so a drift of the machine's
    speed over the repeats moves both sides of a ratio alike, where it can favour either side
    of the fastest-of-each ratio."""
    ratios = sorted(r.wall_s / p.wall_s for p, r in zip(project, reference, strict=True))
    shown = ", ".join(f"{x:.2f}x" for x in ratios)
    return (
        f"events/s, project / reference, per alternated pair: {shown}; "
        f"median {statistics.median(ratios):.2f}x"
    )


def count_cost(work: Path, raw: Path, parts: str, pairs: int) -> str:
    """One line: what the repeated-row count adds to a project run's wall and CPU time, from
    ``pairs`` alternated pairs of runs with it and with it replaced by a count of none (the
    pair's order alternating too), as the median of the pairs' differences: the count's own
    time leaves out what it takes from polars' writer threads, which share the cores with it."""
    with_count, without = [], []
    for pair in range(pairs):
        for count in (True, False) if pair % 2 == 0 else (False, True):
            (with_count if count else without).append(run_project(work, raw, parts, count=count)[0])
    wall = [(w.wall_s - o.wall_s) / w.wall_s for w, o in zip(with_count, without, strict=True)]
    cpu = [(w.cpu_s - o.cpu_s) / w.cpu_s for w, o in zip(with_count, without, strict=True)]
    shown = ", ".join(f"{100 * x:.1f}%" for x in sorted(wall))
    return (
        f"the repeated-row count's cost, {pairs} alternated pairs with it and without: "
        f"{100 * statistics.median(wall):.1f}% of the wall time (pairs {shown}), "
        f"{100 * statistics.median(cpu):.1f}% of the CPU time; wall "
        f"{statistics.median(w.wall_s for w in with_count):.2f} s with, "
        f"{statistics.median(o.wall_s for o in without):.2f} s without"
    )


def run_case(
    work: Path, raw: Path, partitions: str | None
) -> tuple[_common.ChildResult, dict | None]:
    """Whole-file validation (``partitions`` None) or one preprocess run, in a child; (result,
    the output's file checksums or None)."""
    if partitions is None:
        return _common.run_code(_VALIDATE, [str(raw), _common.SIZE]), None
    result, meta = run_project(work, raw, partitions)
    return result, meta["files"]


def layouts_agreement(outputs: dict[str, dict]) -> str:
    """One line: whether the outputs of one case on every layout are byte-identical."""
    first, *rest = outputs
    differ = [spec for spec in rest if outputs[spec] != outputs[first]]
    if differ:
        return f"outputs DIFFER from those of layout {first}: {', '.join(differ)}"
    return f"outputs of the {len(outputs)} layouts byte-identical ({len(outputs[first])} files)"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    table = []
    floor = _common.best_of([_common.run_code(_IMPORT, []) for _ in range(args.repeat)])
    table.append(("-", "-", "-", "import (Python + polars)", "-", None, floor))
    holder = tempfile.TemporaryDirectory(prefix="bench-preprocess-") if args.work is None else None
    with holder or nullcontext():
        work = Path(holder.name) if holder else args.work
        sources = [(f"{users:,} users", *setup(work, users, args)) for users in args.users]
        sources += [
            (root.name, root, describe_input(root, root.name, "--raw")) for root in args.raw
        ]
        for users in args.shaped:
            for share, repeated in itertools.product(args.same_stamp, args.repeated):
                root, how = shaped_input(work, users, share, repeated, args.seed)
                label = f"shaped {users:,} users, same stamp {share:g}"
                label += f", repeated {repeated:g}" if repeated else ""
                sources.append((label, root, describe_input(root, label, how)))
        for label, raw, rows in sources:
            inputs = {spec: layout_input(work, raw, spec, args.seed) for spec in args.layout}
            cases = []
            if not args.no_validate:
                cases.append(("whole-file `validate_multi_event`", "-", None))
            for spec in args.partitions:
                parts = resolve_partitions(spec, rows)
                shown = str(parts) if spec.isdigit() else f"{parts} ({spec})"
                cases.append(("preprocess", shown, str(parts)))
            for case, shown, parts in cases:
                outputs = {}
                for layout, source in inputs.items():
                    row = (label, rows, layout)
                    if args.reference is not None and parts is not None:
                        project, reference, files = compare_with_reference(
                            work, source, parts, args
                        )
                        table.append((*row, "preprocess (project)", shown, rows, project))
                        table.append((*row, "reference", "-", rows, reference))
                        table.append((*row, "ratio", "-", rows, (project, reference)))
                    else:
                        runs = [run_case(work, source, parts) for _ in range(args.repeat)]
                        files = runs[-1][1]
                        best = _common.best_of([r for r, _ in runs])
                        table.append((*row, case, shown, rows, best))
                    if files is not None:
                        outputs[layout] = files
                if len(outputs) > 1:
                    print(f"{label}, {shown} partitions: {layouts_agreement(outputs)}")
                if args.count_cost and parts is not None:
                    for layout, source in inputs.items():
                        cost = count_cost(work, source, parts, args.count_cost)
                        print(f"{label}, {layout}, {shown} partitions: {cost}")
    print_table(table)


def print_table(table: list[tuple]) -> None:
    print(
        "\n| input | events | layout | case | partitions | wall s | events/s | CPU s "
        "| events per CPU s | peak RSS MiB | other load |"
        "\n|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|"
    )
    for label, rows, layout, case, parts, events, r in table:
        rows_s = rows if rows == "-" else f"{rows:,}"
        if case == "ratio":
            project, reference = r
            print(
                f"| {label} | {rows_s} | {layout} | project / reference | - | "
                f"{project.wall_s / reference.wall_s:.2f}x | "
                f"**{reference.wall_s / project.wall_s:.2f}x** | "
                f"{project.cpu_s / reference.cpu_s:.2f}x | "
                f"**{reference.cpu_s / project.cpu_s:.2f}x** | "
                f"{project.peak_rss_mib / reference.peak_rss_mib:.2f}x | - |"
            )
            continue
        rate_s = "-" if events is None else f"{events / r.wall_s / 1e6:.2f}M"
        per_cpu_s = "-" if events is None else f"{events / r.cpu_s / 1e6:.2f}M"
        load_s = "-" if r.others_cores is None else f"{r.others_cores:.2f}"
        print(
            f"| {label} | {rows_s} | {layout} | {case} | {parts} | {r.wall_s:.2f} | {rate_s} | "
            f"{r.cpu_s:.1f} | {per_cpu_s} | {r.peak_rss_mib:,.0f} | {load_s} |"
        )
    print(
        "\nother load: mean cores kept busy by other processes during the case "
        "(above ~0.1 the wall times are disturbed)"
    )
    print_phases(table)


def print_phases(table: list[tuple]) -> None:
    """Seconds per phase (:data:`PHASES`) of each project run in ``table`` (the fastest of
    its repeats), so that a slower run names the phase that slowed; and the repeated-row
    count's share of the run, in wall time and in CPU time. The count runs while polars
    writes the partition's train part, so its wall time includes waits for a core: its CPU
    share is what it costs."""
    names = [*dict.fromkeys(PHASES.values()), "other"]
    rows = []
    for label, _, layout, case, parts, _, r in table:
        if case.startswith("preprocess") and r.stdout.strip():
            spent = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append((label, layout, parts, spent, r))
    if not rows:
        return
    print(
        "\nphases of the project runs above, seconds (the writer threads' `write (beside)` and"
        " `hash, sync (beside)` overlap the rest)\n\n| input | layout | partitions | "
        + " | ".join(names)
        + " | repeated rows, share of wall | share of CPU |\n|---|---|---|"
        + "---:|" * (len(names) + 2)
    )
    for label, layout, parts, spent, r in rows:
        wall, cpu = spent["wall"], spent["cpu"]
        cells = " | ".join(f"{wall.get(name, 0.0):.2f}" for name in names)
        share = 100 * wall["repeated rows"] / r.wall_s
        cpu_share = 100 * cpu["repeated rows"] / r.cpu_s
        print(f"| {label} | {layout} | {parts} | {cells} | {share:.1f}% | {cpu_share:.1f}% |")


if __name__ == "__main__":
    main()
