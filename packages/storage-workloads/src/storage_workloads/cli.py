"""``storage-workloads``: the command line.

    storage-workloads list [--format text|json]
    storage-workloads show MODEL [--accelerator A] [--format yaml|json] [--engine E] [--datagen]
    storage-workloads size MODEL --accelerators N --host-memory-gb M [--hosts H] [--accelerator A]
    storage-workloads check RUN_DIR_OR_PARAMS [--format text|json]
    storage-workloads datagen MODEL --data-dir DIR (--run-dir DIR | --results-dir ROOT)
        [--processes N] [--hosts H|HOST:SLOTS,...] ...
    storage-workloads run MODEL --accelerator A --data-dir DIR (--run-dir DIR | --results-dir
        ROOT) [--processes N] [--hosts H|HOST:SLOTS,...] [--host-memory-gb M] [--loops N] ...
    storage-workloads checkpoint MODEL (--run-dir DIR | --results-dir ROOT)
        --checkpoint-folder DIR [--processes N] [--hosts H|HOST:SLOTS,...] [--scale S] ...
    (datagen, run and checkpoint take --what-if: validate, print the command and the config,
    write nothing; --results-dir ROOT puts the run into a new folder of an mlpstorage results
    tree; a --hosts list goes to mpirun as --host, and each host's memory is read first)
    storage-workloads report RUN_DIR_OR_TREE... [--format text|json] [--out DIR]
    storage-workloads object list
    storage-workloads object prepare|get|run WORKLOAD --bucket B --out DIR [--endpoint URL]
        [--clients N] [--concurrency C] [--duration S | --ops N] [--objects N] [--seed S]
        [--size-distribution lognormal|uniform|fixed] [--mix get=70,put=20,...]
        [--warmup-period S | --warmup-ops N] ...

Exit status: 0 on success (``check``: CLOSED or OPEN; ``run``: the AU threshold met; ``object``:
no failed operation), 1 when the command completed with a negative outcome (``check``:
INVALID; ``run``: AU below the threshold; ``datagen``: the files on disk do not match;
``object``: some operations failed), 2 when it could not run (bad arguments, DLIO missing or
failing, unreachable endpoint, ...), 130 when interrupted. Errors are one line on stderr (DLIO
failures add the tail of its log), never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from storage_workloads.checker import check_path
from storage_workloads.checkpoint import (
    CHECKPOINT_WORKLOADS,
    NUM_CHECKPOINTS,
    checkpoint_workload,
    to_checkpoint_config,
)
from storage_workloads.dlio import ENGINES, dump_yaml, to_datagen_config, to_dlio_config
from storage_workloads.dliorun import (
    DLIO_VENV_ENV,
    DlioError,
    aggregate_results,
    parse_param,
    run_checkpointing,
    run_datagen,
    run_training,
    write_report,
)
from storage_workloads.hosts import HostMemory, HostSpec, parse_hosts
from storage_workloads.objects import (
    MAX_LIST_KEYS,
    MAX_OBJECT_SIZE,
    OBJECT_WORKLOADS,
    SIZE_DISTRIBUTIONS,
    ObjectWorkload,
    object_workload,
    parse_mix,
)
from storage_workloads.objresults import BUCKET_SCHEMES, PERCENTILES
from storage_workloads.sizing import (
    ACCELERATOR_SAMPLES_FACTOR,
    HOST_MEMORY_FACTOR,
    required_num_files,
    suggested_subfolders,
)
from storage_workloads.workloads import (
    ASSUMED_FIELDS,
    WORKLOADS,
    UnknownWorkloadError,
    workload,
)

__all__ = ["main"]

PROG = "storage-workloads"


def _int_at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def _size_bytes(minimum: int) -> Any:
    """An object size: an integer of bytes, or with a KiB, MiB or GiB suffix (``64KiB``)."""

    def parse(text: str) -> int:
        body = text.strip()
        digits = body.rstrip("BbIiKkMmGg")
        unit = body[len(digits) :].lower()
        if not digits.strip().isdigit() or unit not in _UNITS:
            raise argparse.ArgumentTypeError(
                f"must be a size in bytes such as 65536 or 64KiB, got {text!r}"
            )
        value = int(digits) * _UNITS[unit]
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum} bytes, got {text!r}")
        if value > MAX_OBJECT_SIZE:
            raise argparse.ArgumentTypeError(
                f"must be at most 5GiB (the largest single S3 PUT), got {text!r}"
            )
        return value

    return parse


def _mix(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_mix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_int(flag: str, text: str, minimum: int) -> int:
    """``text`` as an integer >= ``minimum``; a ``ValueError`` naming ``flag`` otherwise (one
    line on stderr, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{flag} must be an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"{flag} must be an integer >= {minimum}, got {text!r}")
    return value


def _what_if_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--what-if",
        action="store_true",
        help="validate as a real run would, print the command and the config it would write, "
        "and stop: no file or folder is created",
    )


def _run_options(sub: argparse.ArgumentParser) -> None:
    """The options of every DLIO launch: DLIO's environment, MPI, timeout, quiet, what-if."""
    sub.add_argument(
        "--dlio-venv",
        metavar="DIR",
        help=f"DLIO's virtual environment (default: ${DLIO_VENV_ENV}, else PATH)",
    )
    sub.add_argument("--no-mpi", action="store_true", help="run one DLIO process without mpirun")
    sub.add_argument(
        "--mpi-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra mpirun argument (--mpi-arg=--host --mpi-arg=a,b); repeatable",
    )
    sub.add_argument(
        "--timeout", type=_seconds, metavar="S", help="stop DLIO after S seconds (default: none)"
    )
    sub.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _what_if_option(sub)


def _where_options(sub: argparse.ArgumentParser) -> None:
    """``--run-dir`` or ``--results-dir``, one of the two."""
    where = sub.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-dir", metavar="DIR", help="where the run's files go")
    where.add_argument(
        "--results-dir",
        metavar="ROOT",
        help="a results tree as mlpstorage writes it: the run goes into a new "
        "ROOT/training/<model>/<command>/<datetime> (checkpointing: "
        "ROOT/checkpointing/<model>/<datetime>)",
    )


def _hosts_option(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--hosts",
        metavar="H|HOST:SLOTS,...",
        help=f"{what}: a host count (default 1), or the client hosts as host:slots,... "
        "(mpirun --host), whose slots add up to the process count; their memory is read "
        "from each of them before the run",
    )


def _processes_option(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--processes",
        type=_int_at_least(1),
        metavar="N",
        help=f"{what} (default: the slots of a --hosts list, else 1)",
    )


def _dlio_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("model", help="workload name (storage-workloads list)")
    sub.add_argument("--data-dir", required=True, metavar="DIR", help="dataset folder")
    _where_options(sub)
    sub.add_argument(
        "--num-files",
        type=_int_at_least(1),
        metavar="N",
        help="dataset.num_files_train (default: the workload's reference count)",
    )
    sub.add_argument(
        "--subfolders",
        type=_int_at_least(0),
        metavar="K",
        help="dataset.num_subfolders_train (default: one per 10,000 files above 10,000)",
    )
    _processes_option(sub, "MPI processes, one per emulated accelerator")
    _hosts_option(sub, "client hosts")
    sub.add_argument(
        "--engine",
        choices=ENGINES,
        default="dlio",
        help="DLIO flavour: dlio (dlio-benchmark 2.0.0, default) or mlperf-dlio",
    )
    sub.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a dotted DLIO parameter (value read as YAML); repeatable",
    )
    _run_options(sub)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="MLPerf Storage workloads: definitions, sizing, rules checker, DLIO runs "
        "and the object-storage runner.",
    )
    commands = parser.add_subparsers(
        dest="area",
        required=True,
        metavar="{list,show,size,check,datagen,run,checkpoint,report,object}",
    )
    listing = commands.add_parser("list", help="the training and checkpointing workloads")
    listing.add_argument("--format", choices=("text", "json"), default="text")

    show = commands.add_parser(
        "show", help="one workload: its fields and DLIO YAML", description="Show one workload."
    )
    show.add_argument("model", help="workload name")
    show.add_argument("--accelerator", metavar="A", help="accelerator (default: the model's first)")
    show.add_argument("--format", choices=("yaml", "json"), default="yaml")
    show.add_argument("--engine", choices=ENGINES, default="dlio", help="DLIO flavour of the YAML")
    show.add_argument(
        "--datagen", action="store_true", help="the data-generation config instead of the run"
    )
    show.add_argument(
        "--data-dir", default="data", metavar="DIR", help="dataset.data_folder (default: data)"
    )
    show.add_argument(
        "--processes",
        type=_int_at_least(1),
        metavar="N",
        help="checkpointing: MPI processes (fewer than the closed count selects subset mode)",
    )

    size = commands.add_parser(
        "size",
        help="dataset size for a system (sizing rule)",
        description="Files a closed run needs: the larger of 5x the hosts' memory and 500 steps "
        "per accelerator; subfolders above 10,000 files.",
    )
    size.add_argument("model", help="training workload name")
    size.add_argument("--accelerator", metavar="A", help="accelerator (default: the model's first)")
    size.add_argument(
        "--accelerators",
        type=_int_at_least(1),
        required=True,
        metavar="N",
        help="emulated accelerators in all hosts",
    )
    size.add_argument(
        "--host-memory-gb",
        type=_positive_float,
        required=True,
        metavar="M",
        help="memory of one host in GiB (2^30 bytes)",
    )
    size.add_argument(
        "--hosts", type=_int_at_least(1), default=1, metavar="H", help="hosts (default 1)"
    )
    size.add_argument("--format", choices=("text", "json"), default="text")

    check = commands.add_parser(
        "check",
        help="CLOSED, OPEN or INVALID: a parameters file, a run or a submission directory",
        description="Check a run against the MLPerf Storage rules.",
    )
    check.add_argument("path", metavar="RUN_DIR_OR_PARAMS")
    check.add_argument("--format", choices=("text", "json"), default="text")

    datagen = commands.add_parser(
        "datagen",
        help="generate a workload's dataset with DLIO and verify the files",
        description="Generate a dataset with DLIO, then check file counts and sizes on disk.",
    )
    _dlio_options(datagen)
    datagen.add_argument(
        "--accelerator", metavar="A", help="whose dataset (default: the model's first)"
    )

    run = commands.add_parser(
        "run",
        help="run a training workload with DLIO and write results.json/results.csv",
        description="Run a training workload with DLIO on a generated dataset.",
    )
    _dlio_options(run)
    run.add_argument("--accelerator", metavar="A", help="accelerator (default: the model's first)")
    run.add_argument("--division", choices=("closed", "open"), default="closed")
    run.add_argument(
        "--host-memory-gb",
        type=_positive_float,
        metavar="M",
        help="memory of one host in GiB, compared with what is read from the hosts (more than "
        "5%% below it is refused); without a --hosts list, for the sizing rule (default: what "
        "is read, else what DLIO measures)",
    )
    run.add_argument(
        "--loops",
        metavar="N",
        help="run N times, into RUN_DIR/loop-1 .. loop-N (default: once, into RUN_DIR)",
    )

    ckpt = commands.add_parser(
        "checkpoint",
        help="run a checkpointing workload (llama3 8b/70b/405b/1t) with DLIO",
        description="Write then read checkpoints of a llama3 model with dlio-benchmark 2.0.0 "
        "and the checkpoint mechanism of the DLIO extensions; checkpoint-results.json holds "
        "the seconds and GB/s of each.",
    )
    ckpt.add_argument("model", help="checkpointing workload (llama3_8b, llama3_70b, ...)")
    _where_options(ckpt)
    ckpt.add_argument(
        "--checkpoint-folder",
        required=True,
        metavar="DIR",
        help="where the checkpoints go: empty or missing (nothing is overwritten)",
    )
    _processes_option(ckpt, "MPI processes; fewer than the closed count select the subset mode")
    _hosts_option(ckpt, "client hosts")
    ckpt.add_argument(
        "--scale",
        default="1",
        metavar="S",
        help="fraction in (0, 1] of the bytes each rank writes (default 1; below 1 is no "
        "submission)",
    )
    ckpt.add_argument(
        "--checkpoints-write",
        default=str(NUM_CHECKPOINTS),
        metavar="N",
        help=f"checkpoints written (default {NUM_CHECKPOINTS})",
    )
    ckpt.add_argument(
        "--checkpoints-read",
        metavar="N",
        help=f"checkpoints read back, at most --checkpoints-write (default {NUM_CHECKPOINTS}, or "
        "--checkpoints-write when fewer)",
    )
    _run_options(ckpt)

    report = commands.add_parser(
        "report",
        help="aggregate the results of several runs",
        description="Aggregate the results of runs: run directories, or any folder above "
        "them (a submission, the loop folders of run --loops, a results tree and any part of "
        "it), training (results.json, or DLIO's summary.json of an mlpstorage run) and "
        "checkpointing (checkpoint-results.json).",
    )
    report.add_argument("runs", nargs="+", metavar="RUN_DIR_OR_TREE")
    report.add_argument("--format", choices=("text", "json"), default="text")
    report.add_argument(
        "--out",
        metavar="DIR",
        help="also write report.json, report.csv and (with checkpointing runs) "
        "checkpoint-report.csv here",
    )
    obj = commands.add_parser(
        "object",
        help="object-storage workloads (sai3-bench ResNet50/UNet3D) against an S3 endpoint",
        description="Object-storage workloads against an S3 endpoint (boto3; credentials from "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN or AWS_PROFILE).",
    )
    actions = obj.add_subparsers(dest="command", required=True, metavar="{list,prepare,get,run}")
    actions.add_parser("list", help="print the object workloads as JSON")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("workload", help=f"one of {', '.join(OBJECT_WORKLOADS)}")
    common.add_argument(
        "--endpoint",
        metavar="URL",
        help="S3 endpoint URL (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS)",
    )
    common.add_argument("--bucket", required=True, metavar="B", help="bucket name")
    common.add_argument(
        "--prefix", metavar="P", help="key prefix ending in '/' (default: the workload's)"
    )
    common.add_argument("--region", metavar="R", help="region (default: boto3's)")
    common.add_argument(
        "--addressing-style",
        choices=("path", "virtual", "auto"),
        default="path",
        help="S3 addressing style (default: path)",
    )
    common.add_argument(
        "--clients", type=_int_at_least(1), metavar="N", help="client processes (default 1)"
    )
    common.add_argument(
        "--concurrency",
        type=_int_at_least(1),
        metavar="C",
        help="requests in flight per client (default: the workload's)",
    )
    stop = common.add_mutually_exclusive_group()
    stop.add_argument(
        "--duration",
        type=_seconds,
        metavar="S",
        help="get phase length after any warm-up (default: 300 s)",
    )
    stop.add_argument(
        "--ops",
        type=_int_at_least(1),
        metavar="N",
        help="get phase operations in all after any warm-up, not timed",
    )
    common.add_argument(
        "--objects",
        type=_int_at_least(1),
        metavar="N",
        help="objects in the dataset (default: the workload's, width**depth * files_per_dir)",
    )
    common.add_argument(
        "--scale-with-clients",
        action="store_true",
        help="full-size dataset of files_per_dir objects per directory per client, as "
        "sai3-bench's multi-host configs (prepare and get need the same --clients)",
    )
    common.add_argument(
        "--seed", type=_int_at_least(0), default=0, metavar="S", help="seed (default 0)"
    )
    common.add_argument(
        "--buckets",
        choices=BUCKET_SCHEMES,
        default="pow2",
        help="size buckets of the report: pow2 (default) or sai3",
    )
    common.add_argument(
        "--skip-existing",
        action="store_true",
        help="prepare: keep objects already there with the right size",
    )
    sizes = common.add_argument_group(
        "object sizes", "the size distribution of the dataset and of PUTs (sizes: 65536, 64KiB)"
    )
    sizes.add_argument(
        "--size-distribution",
        choices=SIZE_DISTRIBUTIONS,
        help="lognormal (the workload's, default), uniform over --size-min..--size-max, or "
        "fixed at --object-size",
    )
    for flag, minimum, text in (
        ("--size-mean", 1, "lognormal mean, before clipping"),
        ("--size-stdev", 0, "lognormal standard deviation, before clipping"),
        ("--size-min", 1, "lognormal clip minimum or uniform minimum (default: the workload's)"),
        ("--size-max", 1, "lognormal clip maximum or uniform maximum (default: the workload's)"),
        ("--object-size", 1, "the size of fixed sizes"),
    ):
        sizes.add_argument(flag, type=_size_bytes(minimum), metavar="B", help=text)
    timed = common.add_argument_group("get phase", "get and run only")
    timed.add_argument(
        "--mix",
        type=_mix,
        metavar="OP=W,...",
        help="ops and relative weights, from get, put, list, stat, delete, e.g. "
        "get=70,put=20,list=5,stat=4,delete=1 (default: get=100)",
    )
    warm = timed.add_mutually_exclusive_group()
    warm.add_argument(
        "--warmup-period",
        type=_seconds,
        metavar="S",
        help="run the mix S seconds first, not counted",
    )
    warm.add_argument(
        "--warmup-ops",
        type=_int_at_least(1),
        metavar="N",
        help="run N ops in all first, not counted",
    )
    timed.add_argument(
        "--put-prefix",
        metavar="P",
        help="where PUTs write, outside the dataset (default: the prefix with '-put/')",
    )
    timed.add_argument(
        "--list-max-keys",
        type=_int_at_least(1),
        metavar="N",
        help=f"keys per LIST page, at most {MAX_LIST_KEYS} (default {MAX_LIST_KEYS})",
    )
    common.add_argument("--out", required=True, metavar="DIR", help="results directory")
    common.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    helps = {
        "prepare": "create the bucket if missing and upload the dataset",
        "get": "random GETs over a prepared dataset",
        "run": "prepare, then get",
    }
    for name, text in helps.items():
        actions.add_parser(name, parents=[common], help=text, description=text)
    return parser


_SIZE_FLAGS: dict[str, tuple[str, ...]] = {
    "fixed": ("--object-size",),
    "uniform": ("--size-min", "--size-max"),
    "lognormal": ("--size-mean", "--size-stdev", "--size-min", "--size-max"),
}
_GET_ONLY_FLAGS = ("mix", "warmup_period", "warmup_ops", "put_prefix", "list_max_keys")


def _with_sizes(args: argparse.Namespace, base: ObjectWorkload) -> ObjectWorkload:
    """``base`` with the size options applied; a ``ValueError`` naming the option if they
    do not fit together."""
    given = {
        flag: value
        for flag, value in (
            ("--object-size", args.object_size),
            ("--size-mean", args.size_mean),
            ("--size-stdev", args.size_stdev),
            ("--size-min", args.size_min),
            ("--size-max", args.size_max),
        )
        if value is not None
    }
    kind = args.size_distribution
    if kind is None:
        if not given:
            return base
        if "--object-size" in given:
            raise ValueError("--object-size needs --size-distribution fixed")
        kind = base.size_distribution
    extra = [flag for flag in given if flag not in _SIZE_FLAGS[kind]]
    if extra:
        raise ValueError(
            f"{extra[0]} does not apply to --size-distribution {kind}, which takes "
            f"{', '.join(_SIZE_FLAGS[kind])}"
        )
    if kind == "fixed":
        if args.object_size is None:
            raise ValueError("--size-distribution fixed needs --object-size")
        return base.with_sizes("fixed", size=args.object_size)
    low = base.size_min if args.size_min is None else args.size_min
    high = base.size_max if args.size_max is None else args.size_max
    if low > high:
        raise ValueError(
            f"the size minimum ({low}, --size-min) must be <= the size maximum ({high}, "
            "--size-max); an option not given is the workload's"
        )
    if kind == "lognormal":
        mean = base.size_mean if args.size_mean is None else args.size_mean
        if mean is None or not low <= mean <= high:
            raise ValueError(
                f"--size-mean ({mean}) must lie in [--size-min, --size-max] = [{low}, {high}]"
            )
    return base.with_sizes(
        kind, minimum=low, maximum=high, mean=args.size_mean, stdev=args.size_stdev
    )


def _workload(args: argparse.Namespace) -> ObjectWorkload:
    if args.command == "prepare":
        for name in _GET_ONLY_FLAGS:
            if getattr(args, name) is not None:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} applies to get and run, not prepare")
    base = object_workload(args.workload)
    prefix, put_prefix = args.prefix, args.put_prefix
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if put_prefix and not put_prefix.endswith("/"):
        put_prefix += "/"
    if args.list_max_keys is not None and args.list_max_keys > MAX_LIST_KEYS:
        raise ValueError(
            f"--list-max-keys must be <= {MAX_LIST_KEYS} (S3's MaxKeys limit), "
            f"got {args.list_max_keys}"
        )
    try:
        workload = _override(base, args, prefix, put_prefix)
    except (TypeError, ValueError) as exc:  # name the option as well as the field
        field = str(exc).removeprefix("ObjectWorkload.").split(" ", 1)[0].rstrip(":")
        flag = _FLAG_OF_FIELD.get(field)
        raise ValueError(f"{flag}: {exc}" if flag else str(exc)) from None
    return _with_sizes(args, workload)


_FLAG_OF_FIELD = {
    "prefix": "--prefix",
    "mix": "--mix",
    "put_prefix": "--put-prefix",
    "warmup_period_s": "--warmup-period",
    "warmup_ops": "--warmup-ops",
}


def _override(
    base: ObjectWorkload, args: argparse.Namespace, prefix: str | None, put_prefix: str | None
) -> ObjectWorkload:
    return base.override(
        prefix=prefix,
        clients=args.clients,
        concurrency=args.concurrency,
        duration_s=args.duration,
        ops=args.ops,
        num_objects=args.objects,
        scale_with_clients=args.scale_with_clients or None,
        mix=args.mix,
        warmup_period_s=args.warmup_period,
        warmup_ops=args.warmup_ops,
        put_prefix=put_prefix,
        list_max_keys=args.list_max_keys,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _table(results: dict[str, Any]) -> str:
    lines = []
    head = ["bucket", "ops", "ops/s", "MiB/s", "mean", *[f"p{p}" for p in PERCENTILES], "max"]
    for phase in results["phases"]:
        warmup = phase.get("warmup")
        if warmup:
            lines.append(
                f"{phase['phase']} warm-up: {warmup['ops']:,} ops in {warmup['elapsed_s']:.2f} s "
                f"({warmup['errors']:,} failed), not counted below"
            )
        lines.append(
            f"{phase['phase']} ({phase['op']}), {phase['elapsed_s']:.2f} s, latency in ms:"
        )
        by_op = phase.get("by_op") or {}
        if len(by_op) > 1:  # a mix: one row per op
            parts = [{"bucket": op, **entry["totals"]} for op, entry in by_op.items()]
            first = "op"
        else:
            parts, first = phase["buckets"], "bucket"
        rows = [[first, *head[1:]]]
        for row in [*parts, {"bucket": "all", **phase["totals"]}]:
            rows.append(
                [
                    row["bucket"],
                    f"{row['ops']:,}",
                    f"{row['ops_per_s']:,.1f}",
                    f"{row['mib_per_s']:,.1f}",
                    _ms(row["mean_ms"]),
                    *[_ms(row[f"p{p}_ms"]) for p in PERCENTILES],
                    _ms(row["max_ms"]),
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        for r in rows:
            lines.append(
                "  "
                + "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
    return "\n".join(lines)


def _list() -> int:
    print(json.dumps({name: w.as_dict() for name, w in OBJECT_WORKLOADS.items()}, indent=2))
    return 0


def _run(args: argparse.Namespace) -> int:
    from storage_workloads.s3 import S3Target, run

    workload = _workload(args)
    target = S3Target(
        bucket=args.bucket,
        endpoint=args.endpoint,
        region=args.region,
        addressing_style=args.addressing_style,
    )

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    results = run(
        args.command,
        workload,
        target,
        out_dir=args.out,
        seed=args.seed,
        skip_existing=args.skip_existing,
        bucket_scheme=args.buckets,
        log=log,
    )
    print(_table(results))
    failed = sum(
        phase["errors"]["count"] + ((phase.get("warmup") or {}).get("errors") or 0)
        for phase in results["phases"]
    )
    if failed:
        samples = [
            sample
            for phase in results["phases"]
            for sample in [
                *phase["errors"]["samples"],
                *(phase.get("warmup") or {}).get("error_samples", []),
            ]
        ]
        print(
            f"{PROG}: {failed:,} operations failed, for example: {samples[0]}",
            file=sys.stderr,
        )
        return 1
    return 0


def _default_accelerator(model: str, accelerator: str | None) -> str:
    if accelerator is not None:
        return accelerator
    m = model.strip().lower()
    for mod, acc in WORKLOADS:
        if mod == m:
            return acc
    workload(model, "h100")  # raises UnknownWorkloadError naming the known models
    raise AssertionError("unreachable")


def _cmd_list(args: argparse.Namespace) -> int:
    if args.format == "json":
        data = {
            "training": [
                {**dataclasses.asdict(w), "assumed": dict(ASSUMED_FIELDS.get(w.key, {}))}
                for w in WORKLOADS.values()
            ],
            "checkpointing": [
                {**dataclasses.asdict(c), "closed_processes": c.closed_processes}
                for c in CHECKPOINT_WORKLOADS.values()
            ],
        }
        print(json.dumps(data, indent=2))
        return 0
    rows = [
        [
            "model",
            "accelerator",
            "format",
            "files x samples",
            "record B",
            "batch",
            "compute s",
            "AU",
            "epochs",
        ]
    ]
    for w in WORKLOADS.values():
        rows.append(
            [
                w.model,
                w.accelerator,
                w.format,
                f"{w.num_files_train:,} x {w.num_samples_per_file:,}",
                f"{w.record_length_bytes:,}",
                f"{w.batch_size:,}",
                f"{w.computation_time_s:g}",
                f"{w.au_threshold:g}",
                str(w.epochs),
            ]
        )
    print("training workloads (DLIO):")
    print(_columns(rows))
    rows = [["model", "model GB", "optimizer GB", "closed processes", "TPxPPxDP", "ZeRO"]]
    for c in CHECKPOINT_WORKLOADS.values():
        rows.append(
            [
                c.name,
                f"{c.model_gb:,}",
                f"{c.optimizer_gb:,}",
                f"{c.closed_processes:,}",
                f"{c.tensor_parallelism}x{c.pipeline_parallelism}x{c.data_parallelism}",
                str(c.zero_stage),
            ]
        )
    print("\ncheckpointing workloads (10 writes then 10 reads, fsync):")
    print(_columns(rows))
    return 0


def _columns(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  "
        + "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )


def _emit(data: Any, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(data, indent=2))
    else:
        print(dump_yaml(data), end="")


def _cmd_show(args: argparse.Namespace) -> int:
    name = args.model.strip().lower().replace("-", "_")
    if name in CHECKPOINT_WORKLOADS:
        c = CHECKPOINT_WORKLOADS[name]
        config = to_checkpoint_config(
            c,
            checkpoint_folder=f"checkpoints/{c.name}",
            num_processes=args.processes,
            engine="mlperf-dlio",
        )
        data = {
            "workload": {**dataclasses.asdict(c), "closed_processes": c.closed_processes},
            "dlio_config": config,
            "engine": "mlperf-dlio",
            "note": "dlio-benchmark 2.0.0 has no checkpoint-only workflow; this config is for "
            "the MLPerf Storage DLIO",
        }
        _emit(data, args.format)
        return 0
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    if args.datagen:
        config = to_datagen_config(w, data_folder=args.data_dir, engine=args.engine)
    else:
        config = to_dlio_config(w, data_folder=args.data_dir, engine=args.engine)
    data = {
        "workload": dataclasses.asdict(w),
        "assumed": dict(ASSUMED_FIELDS.get(w.key, {})),
        "engine": args.engine,
        "dlio_config": config,
    }
    _emit(data, args.format)
    return 0


def _cmd_size(args: argparse.Namespace) -> int:
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    memory = math.ceil(args.hosts * args.host_memory_gb * 2**30)
    file_bytes = w.num_samples_per_file * w.record_length_bytes
    by_memory = -(-HOST_MEMORY_FACTOR * memory // file_bytes)
    by_steps = -(
        -ACCELERATOR_SAMPLES_FACTOR * args.accelerators * w.batch_size // w.num_samples_per_file
    )
    files = required_num_files(
        w, total_host_memory_bytes=memory, num_accelerators=args.accelerators
    )
    assert files == max(by_memory, by_steps)
    winner = "memory" if by_memory >= by_steps else "steps"
    subfolders = suggested_subfolders(files)
    data = {
        "model": w.model,
        "accelerator": w.accelerator,
        "accelerators": args.accelerators,
        "hosts": args.hosts,
        "host_memory_gb": args.host_memory_gb,
        "files_by_memory": by_memory,
        "files_by_steps": by_steps,
        "num_files_train": files,
        "winner": winner,
        "num_subfolders_train": subfolders,
        "dataset_bytes": files * file_bytes,
    }
    if args.format == "json":
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"{w.model} on {w.accelerator}: {files:,} files ({files * file_bytes / 1e9:,.1f} GB), "
        f"{subfolders} subfolders"
    )
    print(
        f"  memory term: ceil(5 x {args.hosts} x {args.host_memory_gb:g} GiB / "
        f"({w.num_samples_per_file:,} x {w.record_length_bytes:,} B)) = {by_memory:,} files"
    )
    print(
        f"  steps term:  ceil(500 x {args.accelerators} accelerators x batch {w.batch_size:,} / "
        f"{w.num_samples_per_file:,} samples per file) = {by_steps:,} files"
    )
    reason = (
        "the dataset must be 5x the memory of all hosts, so that it cannot be cached"
        if winner == "memory"
        else "every accelerator needs 500 steps of data"
    )
    print(f"  the {winner} term wins: {reason}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    report = check_path(args.path)
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.to_text())
    return 1 if report.verdict == "INVALID" else 0


def _params(pairs: Sequence[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for text in pairs:
        key, value = parse_param(text)
        params[key] = value
    return params


def _logger(args: argparse.Namespace) -> Any:
    def log(message: str) -> None:
        if not args.quiet:
            print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    return log


def _hosts(args: argparse.Namespace) -> int | tuple[HostSpec, ...]:
    return 1 if args.hosts is None else parse_hosts(args.hosts)


def _launch_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The options of every DLIO launch (datagen, run, checkpoint)."""
    return {
        "run_dir": args.run_dir,
        "results_dir": args.results_dir,
        "processes": args.processes,
        "hosts": _hosts(args),
        "dlio_venv": args.dlio_venv,
        "mpi": not args.no_mpi,
        "mpi_args": args.mpi_arg,
        "timeout_s": args.timeout,
        "log": _logger(args),
        "what_if": args.what_if,
    }


def _dlio_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **_launch_kwargs(args),
        "data_folder": args.data_dir,
        "num_files": args.num_files,
        "num_subfolders": args.subfolders,
        "engine": args.engine,
        "params": _params(args.param),
    }


def _print_plan(plan: Mapping[str, Any], heading: str = "") -> None:
    """Print a ``what_if`` plan: the command line (shell-quoted, one line), then the workload
    YAML it would write, under ``#`` comment lines (so all after the command reads as YAML)."""
    if heading:
        print(f"# {heading}")
    print(shlex.join(plan["command"]))
    for key, value in plan.get("env", {}).items():
        print(f"# environment: {key}={value}")
    print(f"# config it would write, {plan['config_file']}:")
    print(dump_yaml(plan["config"]), end="")


def _what_if_done() -> None:
    print(f"{PROG}: what-if: nothing was run, created or changed", file=sys.stderr)


def _cmd_datagen(args: argparse.Namespace) -> int:
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    result = run_datagen(w, **_dlio_kwargs(args))
    if args.what_if:
        _print_plan(result)
        _what_if_done()
        return 0
    v = result["verification"]
    print(
        f"{v['files_found']:,} of {v['files_expected']:,} .{v['format']} files, mean "
        f"{v['file_bytes_mean']:,.0f} B (expected {v['file_bytes_expected']:,} B"
        f"{'' if v['size_compared'] else ', not compared for this format'}), "
        f"{v['bytes_total']:,} B in all, {result['wall_s']:.1f} s; run folder {result['run_dir']}"
    )
    for problem in v["problems"]:
        print(f"{PROG}: datagen check failed: {problem}", file=sys.stderr)
    return 0 if v["passed"] else 1


def _cmd_run(args: argparse.Namespace) -> int:
    """One run into ``--run-dir``, or with ``--loops N`` N runs into ``RUN_DIR/loop-1`` ..
    ``loop-N`` (with ``--results-dir``: N new datetime folders of the tree). Every loop is
    validated (as ``--what-if`` does) before the first one runs, so a bad ``--loops`` or an
    earlier run in any loop folder stops everything up front; the hosts are read once."""
    loops = None if args.loops is None else _flag_int("--loops", args.loops, 1)
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    kwargs = _dlio_kwargs(args)
    what_if = kwargs.pop("what_if")
    count = 1 if loops is None else loops
    if args.results_dir is not None or loops is None:
        places = [{}] * count  # the tree gives each run a new folder; else RUN_DIR itself
    else:
        places = [{"run_dir": os.path.join(args.run_dir, f"loop-{i}")} for i in range(1, count + 1)]

    def training(place: Mapping[str, Any], *, plan: bool, memory: Any = None) -> dict[str, Any]:
        return run_training(
            w,
            division=args.division,
            host_memory_gb=args.host_memory_gb,
            host_memory=memory,
            **{**kwargs, **place, "what_if": plan},
        )

    first = training(places[0], plan=True)
    read = first["run_record"].get("host_memory")
    memory = None if read is None else HostMemory.from_dict(read)
    plans = [first, *(training(place, plan=True, memory=memory) for place in places[1:])]
    if what_if:
        for i, plan in enumerate(plans, 1):
            _print_plan(plan, f"loop {i} of {loops}" if loops is not None else "")
        _what_if_done()
        return 0
    passed = True
    for i, place in enumerate(places, 1):
        if loops is not None:
            print(f"loop {i} of {loops}", flush=True)
        result = training(place, plan=False, memory=memory)
        print(_run_table(result), flush=True)
        passed = passed and bool(result["passed"])
    return 0 if passed else 1


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    """Validate the numeric options (one line naming the flag, exit 2), then
    :func:`run_checkpointing` (or its ``what_if`` plan)."""
    try:
        scale = float(args.scale)
    except ValueError:
        scale = math.nan
    if not math.isfinite(scale) or not 0 < scale <= 1:
        raise ValueError(f"--scale must be a number in (0, 1], got {args.scale!r}")
    writes = _flag_int("--checkpoints-write", args.checkpoints_write, 1)
    reads = (
        min(writes, NUM_CHECKPOINTS)
        if args.checkpoints_read is None
        else _flag_int("--checkpoints-read", args.checkpoints_read, 0)
    )
    if reads > writes:
        raise ValueError(
            f"--checkpoints-read {reads} > --checkpoints-write {writes}: only written "
            "checkpoints can be read"
        )
    c = checkpoint_workload(args.model)
    result = run_checkpointing(
        c,
        checkpoint_folder=args.checkpoint_folder,
        scale=scale,
        num_checkpoints_write=writes,
        num_checkpoints_read=reads,
        **_launch_kwargs(args),
    )
    if args.what_if:
        _print_plan(result)
        _what_if_done()
        return 0
    rows = [["phase", "checkpoints", "mean s", "mean GB/s"]]
    for phase in ("write", "read"):
        p = result[phase]
        rows.append(
            [
                phase,
                str(p["count"]),
                "-" if p["seconds_mean"] is None else f"{p['seconds_mean']:.3f}",
                "-" if p["gb_per_s_mean"] is None else f"{p['gb_per_s_mean']:,.3f}",
            ]
        )
    print(
        f"{result['model']}, {result['processes']} process(es), "
        f"{result['bytes_per_checkpoint']:,} B per checkpoint, {result['verdict']}; run folder "
        f"{result['run_dir']}"
    )
    print(_columns(rows))
    return 0


def _run_table(result: Mapping[str, Any]) -> str:
    rows = [["epoch", "AU %", "samples/s", "MB/s", "steps"]]
    for e in result["epochs"]:
        rows.append(
            [
                str(e["epoch"]),
                f"{e['au_percent']:.2f}",
                f"{e['samples_per_s']:,.2f}",
                f"{e['mb_per_s']:,.2f}",
                str(e["steps"]),
            ]
        )
    rows.append(
        [
            "mean",
            f"{result['au_mean_percent']:.2f}",
            f"{result['samples_per_s_mean']:,.2f}",
            f"{result['mb_per_s_mean']:,.2f}",
            "",
        ]
    )
    verdict = "PASS" if result["passed"] else "FAIL"
    lines = [
        f"{result['model']} {result['accelerator']}, {result['num_accelerators']} accelerator(s): "
        f"{verdict} (AU {result['au_mean_percent']:.2f}% against {result['au_threshold_percent']:g}%),"
        f" rules: {result['verdict']}; run folder {result['run_dir']}",
        _columns(rows),
    ]
    if not result["consistent_with_summary"]:
        lines.append("warning: the rank files do not reproduce DLIO's summary.json figures")
    return "\n".join(lines)


def _number(value: Any, spec: str) -> str:
    return (
        "-"
        if not isinstance(value, int | float) or isinstance(value, bool)
        else format(value, spec)
    )


def _cmd_report(args: argparse.Namespace) -> int:
    report = aggregate_results(args.runs)
    if args.out:
        write_report(args.out, report)
    if args.format == "json":
        print(json.dumps(report, indent=2))
        return 0
    if report["runs"]:
        rows = [["run", "workload", "procs", "AU %", "samples/s", "MB/s", "passed", "rules"]]
        for r in report["runs"]:
            rows.append(
                [
                    r["run"],
                    f"{r['model']} {r['accelerator']}",
                    str(r["processes"]),
                    _number(r["au_mean_percent"], ".2f"),
                    _number(r["samples_per_s_mean"], ",.2f"),
                    _number(r["mb_per_s_mean"], ",.2f"),
                    str(r["passed"]),
                    str(r["verdict"]),
                ]
            )
        print(_columns(rows))
        s = report["samples_per_s_mean"]
        a = report["au_mean_percent"]
        m = report["mb_per_s_mean"]
        print(
            f"{report['count']} run(s), all passed: {report['all_passed']}; AU mean "
            f"{_number(a.get('mean'), '.2f')}% (min {_number(a.get('min'), '.2f')}, max "
            f"{_number(a.get('max'), '.2f')}); samples/s mean {_number(s.get('mean'), ',.2f')} "
            f"(min {_number(s.get('min'), ',.2f')}, max {_number(s.get('max'), ',.2f')}); MB/s "
            f"mean {_number(m.get('mean'), ',.2f')}"
        )
    if report["checkpoint_runs"]:
        rows = [["run", "model", "procs", "write s", "write GB/s", "read s", "read GB/s"]]
        for r in report["checkpoint_runs"]:
            rows.append(
                [
                    r["run"],
                    str(r["model"]),
                    str(r["processes"]),
                    _number(r["write_seconds_mean"], ".3f"),
                    _number(r["write_gb_per_s_mean"], ",.3f"),
                    _number(r["read_seconds_mean"], ".3f"),
                    _number(r["read_gb_per_s_mean"], ",.3f"),
                ]
            )
        if report["runs"]:
            print()
        print(_columns(rows))
        wr, rd = report["checkpoint_write_gb_per_s"], report["checkpoint_read_gb_per_s"]
        print(
            f"{report['checkpoint_count']} checkpointing run(s); write GB/s mean "
            f"{_number(wr.get('mean'), ',.3f')}, read GB/s mean {_number(rd.get('mean'), ',.3f')}"
        )
    for item in report["skipped"]:
        print(f"skipped {item['run']}: {item['reason']}")
    return 0


_COMMANDS: dict[str, Any] = {
    "list": _cmd_list,
    "show": _cmd_show,
    "size": _cmd_size,
    "check": _cmd_check,
    "datagen": _cmd_datagen,
    "run": _cmd_run,
    "checkpoint": _cmd_checkpoint,
    "report": _cmd_report,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``storage-workloads``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.area != "object":
            return int(_COMMANDS[args.area](args))
        if args.command == "list":
            return _list()
        return _run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # one line (DLIO: plus its log's tail), never a traceback
        from storage_workloads.s3 import ObjectStoreError

        if isinstance(
            exc, ObjectStoreError | UnknownWorkloadError | DlioError | ValueError | TypeError
        ):
            print(f"{PROG}: error: {exc}", file=sys.stderr)
        else:
            print(f"{PROG}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
