"""``storage-workloads report``: one report over many runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from storage_workloads.cli.options import _columns
from storage_workloads.dlio.report import Spread
from storage_workloads.dliorun import aggregate_results, write_report


def _add_report(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``report``: aggregate the results of runs."""
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


def _number(value: Any, spec: str) -> str:
    return (
        "-"
        if not isinstance(value, int | float) or isinstance(value, bool)
        else format(value, spec)
    )


def _of(spread: Spread | None, name: str, spec: str) -> str:
    """One of a spread's figures (``mean``, ``min``, ``max``), or ``-`` without one."""
    return _number(None if spread is None else getattr(spread, name), spec)


def _cmd_report(args: argparse.Namespace) -> int:
    report = aggregate_results(args.runs)
    if args.out:
        write_report(args.out, report)
    status = 1 if report.damaged else 0
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=2, allow_nan=False))
        return status
    if report.runs:
        rows = [["run", "workload", "procs", "AU %", "samples/s", "MB/s", "passed", "rules"]]
        for r in report.runs:
            rows.append(
                [
                    r.run,
                    f"{r.model} {r.accelerator}",
                    str(r.processes),
                    _number(r.au_mean_percent, ".2f"),
                    _number(r.samples_per_s_mean, ",.2f"),
                    _number(r.mb_per_s_mean, ",.2f"),
                    str(r.passed),
                    str(r.verdict),
                ]
            )
        print(_columns(rows))
        s, a, m = report.samples_per_s_mean, report.au_mean_percent, report.mb_per_s_mean
        print(
            f"{report.count} run(s), all passed: {report.all_passed}; AU mean "
            f"{_of(a, 'mean', '.2f')}% (min {_of(a, 'min', '.2f')}, max {_of(a, 'max', '.2f')}); "
            f"samples/s mean {_of(s, 'mean', ',.2f')} (min {_of(s, 'min', ',.2f')}, max "
            f"{_of(s, 'max', ',.2f')}); MB/s mean {_of(m, 'mean', ',.2f')}"
        )
    if report.checkpoint_runs:
        rows = [["run", "model", "procs", "write s", "write GB/s", "read s", "read GB/s"]]
        for c in report.checkpoint_runs:
            rows.append(
                [
                    c.run,
                    str(c.model),
                    str(c.processes),
                    _number(c.write_seconds_mean, ".3f"),
                    _number(c.write_gb_per_s_mean, ",.3f"),
                    _number(c.read_seconds_mean, ".3f"),
                    _number(c.read_gb_per_s_mean, ",.3f"),
                ]
            )
        if report.runs:
            print()
        print(_columns(rows))
        wr, rd = report.checkpoint_write_gb_per_s, report.checkpoint_read_gb_per_s
        print(
            f"{report.checkpoint_count} checkpointing run(s); write GB/s mean "
            f"{_of(wr, 'mean', ',.3f')}, read GB/s mean {_of(rd, 'mean', ',.3f')}"
        )
    for item in report.skipped:
        print(f"skipped {item.run}: {item.reason}")
    for damaged in report.damaged:
        print(f"damaged {damaged.run}: {damaged.reason} (left out of the report)")
    return status
