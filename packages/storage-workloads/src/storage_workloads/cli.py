"""``storage-workloads``: the command line.

    storage-workloads object list
    storage-workloads object prepare|get|run WORKLOAD --bucket B --out DIR [--endpoint URL]
        [--clients N] [--concurrency C] [--duration S | --ops N] [--objects N] [--seed S] ...

Exit status: 0 when the run completed without a failed operation, 1 when it completed but some
operations failed (the results files say which), 2 when it could not run (bad arguments,
unreachable endpoint, missing bucket or objects, ...), 130 when interrupted. Errors are one
line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from storage_workloads.objects import OBJECT_WORKLOADS, ObjectWorkload, object_workload
from storage_workloads.objresults import BUCKET_SCHEMES, PERCENTILES

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="MLPerf Storage workloads: object-storage runner."
    )
    commands = parser.add_subparsers(dest="area", required=True, metavar="{object}")
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
        "--duration", type=_seconds, metavar="S", help="GET phase length (default: 300 s)"
    )
    stop.add_argument(
        "--ops", type=_int_at_least(1), metavar="N", help="GET operations in all, not timed"
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


def _workload(args: argparse.Namespace) -> ObjectWorkload:
    base = object_workload(args.workload)
    prefix = args.prefix
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return base.override(
        prefix=prefix,
        clients=args.clients,
        concurrency=args.concurrency,
        duration_s=args.duration,
        ops=args.ops,
        num_objects=args.objects,
        scale_with_clients=args.scale_with_clients or None,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _table(results: dict[str, Any]) -> str:
    lines = []
    head = ["bucket", "ops", "ops/s", "MiB/s", "mean", *[f"p{p}" for p in PERCENTILES], "max"]
    for phase in results["phases"]:
        lines.append(
            f"{phase['phase']} ({phase['op']}), {phase['elapsed_s']:.2f} s, latency in ms:"
        )
        rows = [head]
        for row in [*phase["buckets"], {"bucket": "all", **phase["totals"]}]:
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
    failed = sum(phase["errors"]["count"] for phase in results["phases"])
    if failed:
        samples = [s for phase in results["phases"] for s in phase["errors"]["samples"]]
        print(
            f"{PROG}: {failed:,} operations failed, for example: {samples[0]}",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``storage-workloads``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return _list()
        return _run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, never a traceback
        from storage_workloads.s3 import ObjectStoreError
        from storage_workloads.workloads import UnknownWorkloadError

        if isinstance(exc, ObjectStoreError | UnknownWorkloadError | ValueError | TypeError):
            print(f"{PROG}: error: {exc}", file=sys.stderr)
        else:
            print(f"{PROG}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
