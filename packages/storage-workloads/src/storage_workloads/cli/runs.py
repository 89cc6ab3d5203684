"""``storage-workloads datagen``, ``run`` and ``checkpoint``: DLIO runs (or, with
``--what-if``, what they would do)."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from storage_workloads.checkpoint import NUM_CHECKPOINTS, checkpoint_workload
from storage_workloads.cli.options import (
    PROG,
    _columns,
    _default_accelerator,
    _flag_int,
    _int_at_least,
    _positive_float,
    _seconds,
)
from storage_workloads.dlio import ENGINES, dump_yaml
from storage_workloads.dliorun import (
    DLIO_VENV_ENV,
    DlioError,
    RunPlan,
    TrainingResult,
    parse_param,
    plan_checkpointing,
    plan_datagen,
    plan_training,
    read_hosts,
    run_checkpointing,
    run_datagen,
    run_training,
)
from storage_workloads.hosts import HostSpec, parse_hosts
from storage_workloads.workloads import workload


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


def _add_datagen(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``datagen``: generate a dataset with DLIO and check it."""
    datagen = commands.add_parser(
        "datagen",
        help="generate a workload's dataset with DLIO and verify the files",
        description="Generate a dataset with DLIO, then check file counts and sizes on disk.",
    )
    _dlio_options(datagen)
    datagen.add_argument(
        "--accelerator", metavar="A", help="whose dataset (default: the model's first)"
    )


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``run``: a training run with DLIO."""
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


def _add_checkpoint(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``checkpoint``: a checkpointing run with DLIO."""
    ckpt = commands.add_parser(
        "checkpoint",
        help="run a checkpointing workload (llama3 8b/70b/405b/1t) with DLIO",
        description="Write then read checkpoints of a llama3 model as mlpstorage runs them, "
        "with the MLPerf DLIO fork (--engine mlperf-dlio, the default); dlio-benchmark 2.0.0 "
        "lacks the workflow and runs this package's emulation, only with --emulation. "
        "checkpoint-results.json holds the seconds and GB/s of each checkpoint.",
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
        "--engine",
        choices=ENGINES,
        default="mlperf-dlio",
        help="DLIO flavour: mlperf-dlio (the MLPerf DLIO fork, default) or dlio "
        "(dlio-benchmark 2.0.0, with --emulation only)",
    )
    ckpt.add_argument(
        "--emulation",
        action="store_true",
        help="with --engine dlio: this package's emulation of the workload (no submission)",
    )
    ckpt.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="mlperf-dlio: set a dotted DLIO parameter (model.num_layers=2 for a small trial; "
        "the checker judges it); repeatable",
    )
    ckpt.add_argument(
        "--scale",
        default="1",
        metavar="S",
        help="--emulation: fraction in (0, 1] of the bytes each rank writes (default 1; below "
        "1 is no submission)",
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


def _params(pairs: Sequence[str], engine: str) -> dict[str, Any]:
    """``--param KEY=VALUE`` items, each checked against the DLIO key it sets (one line naming
    the key and value, exit 2, before anything runs); a key given twice is refused."""
    params: dict[str, Any] = {}
    for text in pairs:
        key, value = parse_param(text, engine=engine)
        if key in params:
            raise ValueError(f"--param {key} is given twice ({params[key]!r} and {value!r})")
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
    }


def _dlio_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **_launch_kwargs(args),
        "data_folder": args.data_dir,
        "num_files": args.num_files,
        "num_subfolders": args.subfolders,
        "engine": args.engine,
        "params": _params(args.param, args.engine),
    }


def _print_plan(plan: RunPlan, heading: str = "") -> None:
    """Print a plan (``--what-if``): the command line (shell-quoted, one line), then the
    workload YAML it would write, under ``#`` comment lines (so all after the command reads as
    YAML)."""
    if heading:
        print(f"# {heading}")
    print(shlex.join(plan.command))
    for note in plan.notes:
        print(f"# note: {note}")
    for key, value in plan.env.items():
        print(f"# environment: {key}={value}")
    print(f"# config it would write, {plan.config_file}:")
    print(dump_yaml(plan.config), end="")


def _what_if_done() -> None:
    print(f"{PROG}: what-if: nothing was run, created or changed", file=sys.stderr)


def _cmd_datagen(args: argparse.Namespace) -> int:
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    if args.what_if:
        _print_plan(plan_datagen(w, **_dlio_kwargs(args)))
        _what_if_done()
        return 0
    result = run_datagen(w, **_dlio_kwargs(args))
    v = result.verification
    print(
        f"{v.files_found:,} of {v.files_expected:,} .{v.format} files, mean "
        f"{v.file_bytes_mean:,.0f} B (expected {v.file_bytes_expected:,} B"
        f"{'' if v.size_compared else ', not compared for this format'}), "
        f"{v.bytes_total:,} B in all, {result.wall_s:.1f} s; run folder {result.run_dir}"
    )
    for problem in v.problems:
        print(f"{PROG}: datagen check failed: {problem}", file=sys.stderr)
    return 0 if v.passed else 1


def _cmd_run(args: argparse.Namespace) -> int:
    """One run into ``--run-dir``, or with ``--loops N`` N runs into ``RUN_DIR/loop-1`` ..
    ``loop-N`` (with ``--results-dir``: N new datetime folders of the tree). Every loop is
    validated (as ``--what-if`` does) before the first one runs, so a bad ``--loops`` or an
    earlier run in any loop folder stops everything up front; the hosts are read once."""
    loops = None if args.loops is None else _flag_int("--loops", args.loops, 1)
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    kwargs = _dlio_kwargs(args)
    count = 1 if loops is None else loops
    if args.results_dir is not None or loops is None:
        places = [{}] * count  # the tree gives each run a new folder; else RUN_DIR itself
    else:
        places = [{"run_dir": os.path.join(args.run_dir, f"loop-{i}")} for i in range(1, count + 1)]

    def options(place: Mapping[str, Any], memory: Any = None) -> dict[str, Any]:
        return {
            "division": args.division,
            "host_memory_gb": args.host_memory_gb,
            "host_memory": memory,
            **kwargs,
            **place,
        }

    first = plan_training(w, **options(places[0]))
    memory = None
    if not args.what_if:
        if first.missing_data:  # a plan notes it; a run cannot start without its data
            raise DlioError(first.missing_data)
        # A plan reads no host: the runs read them once, here.
        memory = read_hosts(_hosts(args), mpi_args=args.mpi_arg, log=_logger(args))
    plans = [first, *(plan_training(w, **options(place, memory)) for place in places[1:])]
    if args.what_if:
        for i, plan in enumerate(plans, 1):
            _print_plan(plan, f"loop {i} of {loops}" if loops is not None else "")
        _what_if_done()
        return 0
    passed = True
    for i, place in enumerate(places, 1):
        if loops is not None:
            print(f"loop {i} of {loops}", flush=True)
        result = run_training(w, **options(place, memory))
        print(_run_table(result), flush=True)
        passed = passed and result.figures.passed
    return 0 if passed else 1


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    """Validate the numeric options (one line naming the flag, exit 2), then
    :func:`run_checkpointing` (or, with ``--what-if``, :func:`plan_checkpointing`)."""
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
    options = {
        "checkpoint_folder": args.checkpoint_folder,
        "engine": args.engine,
        "emulation": args.emulation,
        "params": _params(args.param, args.engine),
        "scale": scale,
        "num_checkpoints_write": writes,
        "num_checkpoints_read": reads,
        **_launch_kwargs(args),
    }
    if args.what_if:
        _print_plan(plan_checkpointing(c, **options))
        _what_if_done()
        return 0
    result = run_checkpointing(c, **options)
    rows = [["phase", "checkpoints", "mean s", "mean GB/s"]]
    for phase in ("write", "read"):
        p = getattr(result, phase)
        rows.append(
            [
                phase,
                str(p.count),
                "-" if p.seconds_mean is None else f"{p.seconds_mean:.3f}",
                "-" if p.gb_per_s_mean is None else f"{p.gb_per_s_mean:,.3f}",
            ]
        )
    size = result.bytes_per_checkpoint
    how = "emulation on dlio-benchmark 2.0.0" if result.emulation else "MLPerf DLIO fork"
    print(
        f"{result.model}, {result.processes} process(es) ({how}), "
        f"{'?' if size is None else f'{size:,}'} B per checkpoint, rules: {result.verdict}; "
        f"run folder {result.run_dir}"
    )
    print(_columns(rows))
    return 0


def _run_table(result: TrainingResult) -> str:
    f = result.figures
    rows = [["epoch", "AU %", "samples/s", "MB/s", "steps"]]
    for e in f.epochs:
        rows.append(
            [
                str(e.epoch),
                f"{e.au_percent:.2f}",
                f"{e.samples_per_s:,.2f}",
                f"{e.mb_per_s:,.2f}",
                str(e.steps),
            ]
        )
    rows.append(
        [
            "mean",
            f"{f.au_mean_percent:.2f}",
            f"{f.samples_per_s_mean:,.2f}",
            f"{f.mb_per_s_mean:,.2f}",
            "",
        ]
    )
    verdict = "PASS" if f.passed else "FAIL"
    lines = [
        f"{result.model} {result.accelerator}, {f.num_accelerators} accelerator(s): "
        f"{verdict} (AU {f.au_mean_percent:.2f}% against {f.au_threshold_percent:g}%),"
        f" rules: {result.verdict}; run folder {result.run_dir}",
        _columns(rows),
    ]
    if not f.consistent_with_summary:
        lines.append("warning: the rank files do not reproduce DLIO's summary.json figures")
    return "\n".join(lines)
