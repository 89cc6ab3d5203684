"""``storage-workloads object``: the object-storage workloads against an S3 endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import dlrmv4_cli
from storage_workloads.cli.options import PROG, _int_at_least, _seconds
from storage_workloads.hosts import HostSpec, format_hosts, parse_hosts
from storage_workloads.objects import (
    MAX_LIST_KEYS,
    MAX_OBJECT_SIZE,
    OBJECT_WORKLOADS,
    SIZE_DISTRIBUTIONS,
    ObjectWorkload,
    object_workload,
    parse_mix,
)
from storage_workloads.objpresets import OBJECT_PRESETS, ObjectPreset, object_preset
from storage_workloads.objresults import BUCKET_SCHEMES, PERCENTILES, ObjectResults, OpStats

if TYPE_CHECKING:
    from storage_workloads.s3.multihost import MultiHostResults

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
    actions.add_parser("list", help="print the object workloads and presets as JSON")
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
    common.add_argument(
        "workload",
        help=f"one of {', '.join(OBJECT_WORKLOADS)}, or a preset of sai3-bench's 1-, 4- and "
        "8-host configurations (object list): "
        + ", ".join(name for name in OBJECT_PRESETS if not name.endswith("_get"))
        + ", each also as NAME_get (get only)",
    )
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
        help="size buckets of the report: pow2 (default) or sai3 (a preset's default)",
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
    hosts = common.add_argument_group(
        "client hosts", "a run over several hosts, one agent each through mpirun"
    )
    hosts.add_argument(
        "--hosts",
        metavar="HOST:SLOTS,...",
        help="the client hosts (as for `run --hosts`); SLOTS client processes on each (1 when "
        "left out), each with --concurrency requests in flight; each host prepares the "
        "objects of its own clients and every host reads the whole dataset; the results "
        "of all hosts are merged into --out",
    )
    hosts.add_argument(
        "--mpi-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra mpirun argument for the agents' launch (--mpi-arg=--mca "
        "--mpi-arg=plm_rsh_agent --mpi-arg=ssh); repeatable",
    )
    hosts.add_argument(
        "--host-timeout",
        type=_seconds,
        metavar="S",
        help="a host that says nothing for S seconds is stopped and named, the run marked "
        "incomplete (default: 60)",
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


def _host_list(args: argparse.Namespace) -> tuple[HostSpec, ...]:
    """The ``--hosts`` list (empty without one); the options that need one are refused
    without it."""
    if args.hosts is None:
        for flag, given in (
            ("--mpi-arg", args.mpi_arg),
            ("--host-timeout", args.host_timeout is not None),
        ):
            if given:
                raise ValueError(f"{flag} applies to a run over a --hosts list")
        return ()
    hosts = parse_hosts(args.hosts)
    if isinstance(hosts, int):
        raise ValueError(
            f"object --hosts takes the client hosts as host:slots,..., got the count {hosts}: "
            "a count names no host to start the agents on (one host: --clients N)"
        )
    slots = sum(h.slots for h in hosts)
    if args.clients is not None and args.clients != slots:
        raise ValueError(
            f"--clients {args.clients} does not match --hosts {format_hosts(hosts)} ({slots} "
            "slots in all): the slots are the client processes; leave --clients out"
        )
    return hosts


def _preset_for(args: argparse.Namespace, hosts: tuple[HostSpec, ...]) -> ObjectPreset | None:
    """The preset named by the workload argument, checked against the host list."""
    preset = object_preset(args.workload)
    if preset is None:
        return None
    given = len(hosts) or 1
    if given != preset.hosts:
        named = f"--hosts names {given}" if hosts else "no --hosts list was given"
        raise ValueError(
            f"{preset.name} is sai3-bench's {preset.hosts}-host configuration but {named}: "
            f"give {preset.hosts} hosts, or the workload {preset.workload.name.split('_')[0]}"
            "_object with --scale-with-clients"
        )
    if args.scale_with_clients:
        raise ValueError(
            f"--scale-with-clients does not apply to {preset.name}, whose dataset is already "
            f"that of {preset.hosts} host(s)"
        )
    return preset


def _workload(args: argparse.Namespace, preset: ObjectPreset | None = None) -> ObjectWorkload:
    if args.command == "prepare":
        for name in _GET_ONLY_FLAGS:
            if getattr(args, name) is not None:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} applies to get and run, not prepare")
    base = preset.workload if preset is not None else object_workload(args.workload)
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
    listed = {name: w.as_dict() for name, w in OBJECT_WORKLOADS.items()}
    listed.update({name: p.as_dict() for name, p in OBJECT_PRESETS.items()})
    print(json.dumps(listed, indent=2))
    return 0


def _hosts_table(results: MultiHostResults) -> str:
    """One row per host and phase: how it ended, its figures, its start and end."""
    rows = [["host", "phase", "status", "ops", "ops/s", "MiB/s", "p99", "started", "finished"]]
    for host in results.hosts:
        for part in host.phases:
            t = part.totals
            rows.append(
                [
                    host.host,
                    part.phase,
                    part.status,
                    "-" if t is None else f"{t.ops:,}",
                    "-" if t is None else f"{t.ops_per_s:,.1f}",
                    "-" if t is None else f"{t.mib_per_s:,.1f}",
                    "-" if t is None else _ms(t.p99_ms),
                    part.started_at or "-",
                    part.finished_at or "-",
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["hosts (p99 in ms; times on each host's clock):"]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from storage_workloads.s3 import S3Target, run
    from storage_workloads.s3.multihost import (
        DEFAULT_HOST_TIMEOUT_S,
        MultiHostResults,
        run_on_hosts,
    )

    hosts = _host_list(args)
    preset = _preset_for(args, hosts)
    workload = _workload(args, preset)
    if hosts:
        workload = workload.override(clients=sum(h.slots for h in hosts))
    command = args.command
    if preset is not None and command == "run" and "prepare" not in preset.phases:
        command = "get"  # a get-only configuration: its run has no prepare stage
    target = S3Target(
        bucket=args.bucket,
        endpoint=args.endpoint,
        region=args.region,
        addressing_style=args.addressing_style,
    )

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    how: dict[str, Any] = {
        "out_dir": args.out,
        "seed": args.seed,
        "skip_existing": args.skip_existing,
        "bucket_scheme": args.buckets or ("sai3" if preset is not None else "pow2"),
        "log": log,
    }
    if hosts:
        timeout = args.host_timeout or DEFAULT_HOST_TIMEOUT_S
        results: ObjectResults = run_on_hosts(
            command, workload, target, hosts, mpi_args=args.mpi_arg, host_timeout_s=timeout, **how
        )
    else:
        results = run(command, workload, target, **how)
    print(_table(results))
    if isinstance(results, MultiHostResults):
        print(_hosts_table(results))
        if not results.complete:
            missing = "; ".join(results.incomplete_hosts) or "a phase did not run"
            print(
                f"{PROG}: the run is incomplete ({missing}); the results of the other hosts are "
                f"in {args.out}",
                file=sys.stderr,
            )
            return 1
    failed = results.failed_ops
    if failed:
        samples = results.error_samples
        print(
            f"{PROG}: {failed:,} operations failed, for example: {samples[0]}",
            file=sys.stderr,
        )
        return 1
    return 0
