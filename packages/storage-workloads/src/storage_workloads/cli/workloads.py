"""``storage-workloads list``, ``show``, ``size`` and ``check``: the workloads, their DLIO
configs, dataset sizing and the rules checker."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from fractions import Fraction
from typing import Any

from storage_workloads.checker import check_path
from storage_workloads.checker.files import Assumed
from storage_workloads.checkpoint import CHECKPOINT_WORKLOADS, to_checkpoint_config
from storage_workloads.cli.options import (
    _columns,
    _default_accelerator,
    _int_at_least,
    _positive_float,
)
from storage_workloads.dlio import ENGINES, dump_yaml, to_datagen_config, to_dlio_config
from storage_workloads.sizing import (
    memory_term,
    record_length,
    required_num_files,
    steps_term,
    suggested_subfolders,
)
from storage_workloads.workloads import ACCELERATORS, ASSUMED_FIELDS, WORKLOADS, workload


def _add_list(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``list``: the training and checkpointing workloads."""
    listing = commands.add_parser("list", help="the training and checkpointing workloads")
    listing.add_argument("--format", choices=("text", "json"), default="text")


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


def _add_show(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``show``: one workload, its fields and DLIO config."""
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


def _add_size(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``size``: the dataset a system needs (the sizing rule)."""
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


def _bytes_text(value: Fraction) -> str:
    """A record length as published: whole bytes, or with its decimals (114,660.07)."""
    return f"{int(value):,}" if value.denominator == 1 else f"{float(value):,.2f}"


def _cmd_size(args: argparse.Namespace) -> int:
    w = workload(args.model, _default_accelerator(args.model, args.accelerator))
    memory = math.ceil(args.hosts * args.host_memory_gb * 2**30)
    file_bytes = w.num_samples_per_file * record_length(w)
    by_memory = memory_term(w, memory)
    by_steps = steps_term(w, args.accelerators)
    files = required_num_files(
        w, total_host_memory_bytes=memory, num_accelerators=args.accelerators
    )
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
        "dataset_bytes": math.floor(files * file_bytes),
    }
    if args.format == "json":
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"{w.model} on {w.accelerator}: {files:,} files ({float(files * file_bytes) / 1e9:,.1f} GB), "
        f"{subfolders} subfolders"
    )
    print(
        f"  memory term: floor(5 x {args.hosts} x {args.host_memory_gb:g} GiB / "
        f"({w.num_samples_per_file:,} x {_bytes_text(record_length(w))} B)) = {by_memory:,} files"
    )
    print(
        f"  steps term:  floor(500 x {args.accelerators} accelerators x batch {w.batch_size:,} / "
        f"{w.num_samples_per_file:,} samples per file) = {by_steps:,} files"
    )
    reason = (
        "the dataset must be 5x the memory of all hosts, so that it cannot be cached"
        if winner == "memory"
        else "every accelerator needs 500 steps of data"
    )
    print(f"  the {winner} term wins: {reason}")
    return 0


def _add_check(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``check``: the rules checker."""
    check = commands.add_parser(
        "check",
        help="CLOSED, OPEN or INVALID: a parameters file, a DLIO workload YAML, a Hydra "
        "record (dlio_config/), a run or a submission directory",
        description="Check a run against the MLPerf Storage rules. A DLIO workload YAML (as "
        "mlpstorage ships it) or a Hydra record does not say how many accelerators ran or the "
        "hosts' memory: the options below say it, and the report lists each value assumed.",
    )
    check.add_argument("path", metavar="RUN_DIR_OR_PARAMS")
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--accelerator",
        choices=ACCELERATORS,
        help="the emulated accelerator, where the file does not name it (its name does: "
        "resnet50_h100.yaml)",
    )
    check.add_argument(
        "--num-accelerators",
        type=_int_at_least(1),
        metavar="N",
        help="accelerators (MPI processes) of all hosts; a checkpointing run's processes",
    )
    check.add_argument("--hosts", type=_int_at_least(1), metavar="N", help="client hosts")
    check.add_argument(
        "--host-memory-gb", type=_positive_float, metavar="GIB", help="memory of one host, GiB"
    )


def _cmd_check(args: argparse.Namespace) -> int:
    given = Assumed(
        accelerator=args.accelerator,
        num_accelerators=args.num_accelerators,
        hosts=args.hosts,
        host_memory_gb=args.host_memory_gb,
    )
    report = check_path(args.path, given=given)
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.to_text())
    return 1 if report.verdict == "INVALID" else 0
