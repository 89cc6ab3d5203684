"""``storage-workloads object``: the object-storage workloads against an S3 endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import dlrmv4_cli
from storage_workloads.cli.options import PROG, _int_at_least, _seconds
from storage_workloads.objects import (
    MAX_LIST_KEYS,
    MAX_OBJECT_SIZE,
    OBJECT_WORKLOADS,
    SIZE_DISTRIBUTIONS,
    ObjectWorkload,
    object_workload,
    parse_mix,
)
from storage_workloads.objresults import BUCKET_SCHEMES, PERCENTILES, ObjectResults, OpStats

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


def _seconds_or_ops(
    group: argparse.ArgumentParser | argparse._ArgumentGroup,
    seconds: tuple[str, str],
    ops: tuple[str, str],
) -> None:
    """Two options of which one may be given: a length in seconds (``S``) and an operation
    count (``N``), each as ``(flag, help)``."""
    either = group.add_mutually_exclusive_group()
    either.add_argument(seconds[0], type=_seconds, metavar="S", help=seconds[1])
    either.add_argument(ops[0], type=_int_at_least(1), metavar="N", help=ops[1])


def _add_object(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``object list|prepare|get|run``."""
    obj = commands.add_parser(
        "object",
        help="object-storage workloads (sai3-bench ResNet50/UNet3D) against an S3 endpoint",
        description="Object-storage workloads against an S3 endpoint (boto3; credentials from "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN or AWS_PROFILE).",
    )
    actions = obj.add_subparsers(
        dest="command",
        required=True,
        metavar="{list,prepare,get,run}",
        parser_class=dlrmv4_cli.OneLineParser,
    )
    actions.add_parser("list", help="print the object workloads as JSON")
    common = _object_options()
    helps = {
        "prepare": "create the bucket if missing and upload the dataset",
        "get": "random GETs over a prepared dataset",
        "run": "prepare, then get",
    }
    for name, text in helps.items():
        actions.add_parser(name, parents=[common], help=text, description=text)


def _object_options() -> argparse.ArgumentParser:
    """The options of ``object prepare``, ``get`` and ``run``, as a parent parser."""
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
    _seconds_or_ops(
        common,
        ("--duration", "get phase length after any warm-up (default: 300 s)"),
        ("--ops", "get phase operations in all after any warm-up, not timed"),
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
    _seconds_or_ops(
        timed,
        ("--warmup-period", "run the mix S seconds first, not counted"),
        ("--warmup-ops", "run N ops in all first, not counted"),
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
    return common


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
    "num_objects": "--objects",
    "clients": "--clients",
    "concurrency": "--concurrency",
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


def _table(results: ObjectResults) -> str:
    lines = []
    head = ["bucket", "ops", "ops/s", "MiB/s", "mean", *[f"p{p}" for p in PERCENTILES], "max"]
    for phase in results.phases:
        warmup = getattr(phase, "warmup", None)  # a get phase's (GetSummary); prepare has none
        if warmup:
            lines.append(
                f"{phase.phase} warm-up: {warmup.ops:,} ops in {warmup.elapsed_s:.2f} s "
                f"({warmup.errors:,} failed), not counted below"
            )
        lines.append(f"{phase.phase} ({phase.op}), {phase.elapsed_s:.2f} s, latency in ms:")
        by_op = phase.by_op or {}
        parts: list[tuple[str, OpStats]]
        if len(by_op) > 1:  # a mix: one row per op
            parts = [(op, entry.totals) for op, entry in by_op.items()]
            first = "op"
        else:
            parts, first = [(b.bucket, b.stats) for b in phase.buckets], "bucket"
        rows = [[first, *head[1:]]]
        for label, stats in [*parts, ("all", phase.totals)]:
            rows.append(
                [
                    label,
                    f"{stats.ops:,}",
                    f"{stats.ops_per_s:,.1f}",
                    f"{stats.mib_per_s:,.1f}",
                    _ms(stats.mean_ms),
                    *[_ms(stats.percentile_ms(p)) for p in PERCENTILES],
                    _ms(stats.max_ms),
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
    failed = results.failed_ops
    if failed:
        samples = results.error_samples
        print(
            f"{PROG}: {failed:,} operations failed, for example: {samples[0]}",
            file=sys.stderr,
        )
        return 1
    return 0
