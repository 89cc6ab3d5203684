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
        [--warmup-period S | --warmup-ops N] [--hosts HOST:SLOTS,... [--host-timeout S]] ...
    (WORKLOAD: an object workload or a preset of sai3-bench's 1-, 4- and 8-host configurations;
    a --hosts list runs one agent per host through mpirun and merges their results)

Exit status: 0 on success (``check``: CLOSED or OPEN; ``run``: the AU threshold met; ``object``:
no failed operation), 1 when the command completed with a negative outcome (``check``:
INVALID; ``run``: AU below the threshold; ``datagen``: the files on disk do not match;
``object``: some operations failed), 2 when it could not run (bad arguments, DLIO missing or
failing, unreachable endpoint, ...), 130 when interrupted (the statuses of :mod:`dlrmv4_cli`).
Errors are one line on stderr (DLIO failures add the tail of its log), never a traceback.

Each subcommand has its parser builder (``_add_<command>``) and handler (``_cmd_<command>``)
in one module: :mod:`~storage_workloads.cli.workloads` (list, show, size, check),
:mod:`~storage_workloads.cli.runs` (datagen, run, checkpoint),
:mod:`~storage_workloads.cli.report` and :mod:`~storage_workloads.cli.objects` (object).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import dlrmv4_cli
from storage_workloads.cli.objects import _add_object, _list, _run
from storage_workloads.cli.options import PROG
from storage_workloads.cli.report import _add_report, _cmd_report
from storage_workloads.cli.runs import (
    _add_checkpoint,
    _add_datagen,
    _add_run,
    _cmd_checkpoint,
    _cmd_datagen,
    _cmd_run,
)
from storage_workloads.cli.workloads import (
    _add_check,
    _add_list,
    _add_show,
    _add_size,
    _cmd_check,
    _cmd_list,
    _cmd_show,
    _cmd_size,
)
from storage_workloads.dliorun import DlioError
from storage_workloads.workloads import UnknownWorkloadError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = dlrmv4_cli.OneLineParser(
        prog=PROG,
        description="MLPerf Storage workloads: definitions, sizing, rules checker, DLIO runs "
        "and the object-storage runner.",
    )
    commands = parser.add_subparsers(
        parser_class=dlrmv4_cli.OneLineParser,
        dest="area",
        required=True,
        metavar="{list,show,size,check,datagen,run,checkpoint,report,object}",
    )
    for add in (
        _add_list,
        _add_show,
        _add_size,
        _add_check,
        _add_datagen,
        _add_run,
        _add_checkpoint,
        _add_report,
        _add_object,
    ):
        add(commands)
    return parser


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
        # SIGTERM and SIGHUP unwind as Ctrl-C does: DLIO, mpirun and the object clients are
        # ended on the way out, and the status is 128 + the signal's number.
        with dlrmv4_cli.stop_on_signals():
            if args.area != "object":
                status = int(_COMMANDS[args.area](args))
            elif args.command == "list":
                status = _list()
            else:
                status = _run(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except KeyboardInterrupt:
        return dlrmv4_cli.interrupted(PROG)
    except dlrmv4_cli.Stopped as exc:
        return dlrmv4_cli.stopped(PROG, exc)
    except BrokenPipeError:
        return dlrmv4_cli.reader_gone()
    except Exception as exc:  # one line (DLIO: plus its log's tail), never a traceback
        from storage_workloads.s3 import ObjectStoreError

        if isinstance(
            exc, ObjectStoreError | UnknownWorkloadError | DlioError | ValueError | TypeError
        ):
            print(dlrmv4_cli.error_line(PROG, str(exc)), file=sys.stderr)
        else:
            print(dlrmv4_cli.error_line(PROG, f"{type(exc).__name__}: {exc}"), file=sys.stderr)
        return dlrmv4_cli.EXIT_REFUSED
