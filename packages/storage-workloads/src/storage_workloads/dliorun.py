"""Real runs of the DLIO engine: data generation, training runs, their results and reports.

DLIO (``dlio_benchmark``) is an external program, run as a subprocess from its own virtual
environment (``scripts/install-dlio.sh`` makes one), under ``mpirun -n N`` or as one process.
This module writes the workload YAML into a run directory, starts DLIO on it, checks what it
wrote and turns DLIO's ``summary.json`` and per-rank ``<rank>_output.json`` into a result.

A run directory holds:

- ``run.json``: what was run (the parameters the rules checker reads, the command line);
- ``configs/workload/<name>.yaml``: the DLIO workload YAML;
- ``dlio/``: DLIO's output folder (``summary.json``, ``per_epoch_stats.json``,
  ``<rank>_output.json``, ``dlio.log``, the Hydra record ``.hydra/``);
- ``dlio-console.log``: DLIO's stdout and stderr;
- ``results.json`` and ``results.csv`` (runs) or ``datagen.json`` (data generation), each
  written atomically, last.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from storage_workloads._atomic import write_text_atomic
from storage_workloads.checker import RUN_RECORD, check_path
from storage_workloads.dlio import (
    RECORD_LENGTH_KEYS,
    Engine,
    dump_yaml,
    to_datagen_config,
    to_dlio_config,
)
from storage_workloads.workloads import Datagen, Workload

__all__ = [
    "DLIO_VENV_ENV",
    "REPORT_CSV_COLUMNS",
    "RESULTS_CSV_COLUMNS",
    "SIZE_CHECKED_FORMATS",
    "DlioError",
    "aggregate_results",
    "apply_params",
    "dlio_command",
    "find_dlio",
    "parse_dlio_output",
    "parse_param",
    "run_datagen",
    "run_training",
    "verify_dataset",
    "write_report",
    "write_results",
]

#: Environment variable naming the DLIO virtual environment (``--dlio-venv`` wins over it).
DLIO_VENV_ENV: Final = "STORAGE_WORKLOADS_DLIO_VENV"
#: Formats whose files hold the sample bytes as they are, so their size can be checked.
SIZE_CHECKED_FORMATS: Final = frozenset({"npz", "npy", "hdf5", "tfrecord", "indexed_binary"})
#: Columns of ``results.csv``: one row per epoch, then a ``mean`` row.
RESULTS_CSV_COLUMNS: Final = (
    "epoch",
    "au_percent",
    "samples_per_s",
    "mb_per_s",
    "steps",
    "au_threshold_percent",
    "passed",
)
_RESULTS_SCHEMA: Final = "storage-workloads/dlio-results/1"
_DATAGEN_SCHEMA: Final = "storage-workloads/dlio-datagen/1"

Log = Callable[[str], None]


class DlioError(RuntimeError):
    """DLIO could not be found, started, or did not produce what a run needs."""


def _quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Finding and starting DLIO


def find_dlio(dlio_venv: str | os.PathLike[str] | None = None) -> Path:
    """The ``dlio_benchmark`` executable: in ``dlio_venv``, else in the virtual environment
    named by ``$STORAGE_WORKLOADS_DLIO_VENV``, else on ``PATH``.

    Raises :class:`DlioError` naming where it looked and how to install DLIO.
    """
    venv = dlio_venv if dlio_venv is not None else os.environ.get(DLIO_VENV_ENV) or None
    hint = "install it with packages/storage-workloads/scripts/install-dlio.sh VENV_DIR"
    if venv is not None:
        exe = Path(os.path.abspath(venv)) / "bin" / "dlio_benchmark"
        if not exe.is_file():
            source = "--dlio-venv" if dlio_venv is not None else f"${DLIO_VENV_ENV}"
            raise DlioError(f"no dlio_benchmark in {venv} ({source}); {hint}")
        return exe
    found = shutil.which("dlio_benchmark")
    if found is None:
        raise DlioError(
            f"dlio_benchmark is not on PATH and neither --dlio-venv nor ${DLIO_VENV_ENV} is set; "
            + hint
        )
    return Path(os.path.abspath(found))


def _hydra_value(path: Path) -> str:
    text = str(path)
    if "'" in text or "\\" in text:
        raise DlioError(f"path {text!r} contains a quote or backslash, which Hydra cannot take")
    return f"'{text}'"


def dlio_command(
    dlio: str | os.PathLike[str],
    *,
    config_dir: str | os.PathLike[str],
    workload_name: str,
    output_dir: str | os.PathLike[str],
    processes: int = 1,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
) -> list[str]:
    """The command line that runs DLIO on ``config_dir/workload/<workload_name>.yaml``.

    With ``mpi`` (required for more than one process) it is ``mpirun -n PROCESSES`` plus
    ``--allow-run-as-root`` when run as root, ``--oversubscribe`` when there are more processes
    than CPUs, and ``mpi_args``. DLIO's output folder and Hydra's run directory are both
    ``output_dir``.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be an integer >= 1, got {processes!r}")
    if processes > 1 and not mpi:
        raise ValueError(f"{processes} processes need mpirun; drop --no-mpi")
    out = Path(output_dir).resolve()
    cmd: list[str] = []
    if mpi:
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            raise DlioError(
                "mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin), or "
                "run one process with --no-mpi"
            )
        cmd = [mpirun, "-n", str(processes)]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if processes > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        cmd.extend(mpi_args)
    cmd += [
        str(dlio),
        "--config-dir",
        str(Path(config_dir).resolve()),
        f"workload={workload_name}",
        f"++workload.output.folder={_hydra_value(out)}",
        f"hydra.run.dir={_hydra_value(out)}",
    ]
    return cmd


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no output)"
    return "\n".join(text[-lines:]) or "(no output)"


def _launch(
    config: Mapping[str, Any],
    *,
    run_dir: Path,
    name: str,
    processes: int,
    dlio_venv: str | os.PathLike[str] | None,
    mpi: bool,
    mpi_args: Sequence[str],
    timeout_s: float | None,
    log: Log,
) -> tuple[list[str], float]:
    """Write the workload YAML into ``run_dir`` and run DLIO on it; returns the command and
    its wall time. Raises :class:`DlioError` when DLIO fails or times out."""
    dlio = find_dlio(dlio_venv)
    config_dir = run_dir / "configs"
    write_text_atomic(config_dir / "workload" / f"{name}.yaml", dump_yaml(config))
    out = run_dir / "dlio"
    out.mkdir(parents=True, exist_ok=True)
    cmd = dlio_command(
        dlio,
        config_dir=config_dir,
        workload_name=name,
        output_dir=out,
        processes=processes,
        mpi=mpi,
        mpi_args=mpi_args,
    )
    env = dict(os.environ)
    env["PATH"] = f"{dlio.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("PYTHONUNBUFFERED", "1")
    console = run_dir / "dlio-console.log"
    log(f"running: {' '.join(cmd)}")
    started = time.monotonic()
    try:
        with console.open("w", encoding="utf-8") as fh:
            done = subprocess.run(
                cmd,
                cwd=run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise DlioError(
            f"dlio_benchmark ran past {timeout_s:g} s and was stopped; last lines of {console}:\n"
            + _tail(console)
        ) from None
    except OSError as exc:
        raise DlioError(f"cannot start {cmd[0]}: {exc}") from None
    wall = time.monotonic() - started
    if done.returncode != 0:
        tail = _tail(console)
        hint = ""
        if "No module named 'torch'" in tail:
            hint = (
                "\nhint: the pytorch framework needs torch in DLIO's environment "
                "(DLIO_WITH_TORCH=1 install-dlio.sh VENV_DIR), or run the tensorflow framework "
                "and data loader (--param framework=tensorflow --param "
                "reader.data_loader=tensorflow, an open-division change)"
            )
        raise DlioError(
            f"dlio_benchmark exited with status {done.returncode}; last lines of {console}:\n"
            + tail
            + hint
        )
    log(f"dlio_benchmark finished in {wall:.1f} s")
    return cmd, wall


def apply_params(config: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Set dotted parameters (``{"train.epochs": 1}``) in a DLIO mapping, in place; returns it.

    A parameter whose path runs through a value that is not a mapping raises ``ValueError``.
    """
    for key, value in params.items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ValueError(f"parameter names are dotted DLIO keys like train.epochs, got {key!r}")
        node: dict[str, Any] = config
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"parameter {key}: {part} is a value ({child!r}), not a section")
            node = child
        node[parts[-1]] = value
    return config


def _write_record(run_dir: Path, record: Mapping[str, Any]) -> None:
    write_text_atomic(run_dir / RUN_RECORD, json.dumps(record, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Data generation


def verify_dataset(
    data_folder: str | os.PathLike[str],
    dataset: Datagen,
    *,
    num_files: int,
) -> dict[str, Any]:
    """Count and measure the files DLIO generated under ``data_folder/train``.

    DLIO ignores keys it does not know, so a misspelt record length silently gives files of
    its default size: this is the check that the emitted YAML took effect. The file count must
    equal ``num_files``. For :data:`SIZE_CHECKED_FORMATS` the mean file size must be within 2%
    plus 4 KiB of ``num_samples_per_file * record_length_bytes`` (plus a margin for the
    standard deviation of the sizes); for the encoded formats (jpeg, png, csv, parquet) the
    sizes are reported, not compared. Returns ``{"passed": bool, "problems": [...], ...}``.
    """
    train = Path(data_folder) / "train"
    files = (
        sorted(p for p in train.rglob(f"*.{dataset.format}") if p.is_file())
        if train.is_dir()
        else []
    )
    sizes = [p.stat().st_size for p in files]
    expected_bytes = dataset.file_bytes
    problems: list[str] = []
    if len(files) != num_files:
        problems.append(
            f"{len(files):,} .{dataset.format} files in {train}, expected {num_files:,}"
        )
    mean = statistics.fmean(sizes) if sizes else 0.0
    compared = dataset.format in SIZE_CHECKED_FORMATS
    tolerance = 0.02 * expected_bytes + 4096
    if dataset.record_length_bytes_stdev and sizes:
        tolerance += (
            4
            * dataset.record_length_bytes_stdev
            * dataset.num_samples_per_file
            / math.sqrt(len(sizes))
        )
    if compared and sizes and abs(mean - expected_bytes) > tolerance:
        problems.append(
            f"mean file size {mean:,.0f} B, expected {expected_bytes:,} B "
            f"({dataset.num_samples_per_file} x {dataset.record_length_bytes:,} B) within "
            f"{tolerance:,.0f} B: DLIO did not take the record length (wrong key for this engine?)"
        )
    return {
        "data_folder": str(Path(data_folder)),
        "format": dataset.format,
        "files_expected": num_files,
        "files_found": len(files),
        "bytes_total": sum(sizes),
        "file_bytes_mean": mean,
        "file_bytes_min": min(sizes) if sizes else 0,
        "file_bytes_max": max(sizes) if sizes else 0,
        "file_bytes_expected": expected_bytes,
        "size_compared": compared,
        "passed": not problems,
        "problems": problems,
    }


def run_datagen(
    dataset: Workload | Datagen,
    *,
    run_dir: str | os.PathLike[str],
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    processes: int = 1,
    params: Mapping[str, Any] | None = None,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    log: Log = _quiet,
) -> dict[str, Any]:
    """Generate ``dataset`` with DLIO into ``data_folder`` and verify the files on disk.

    Writes ``run.json``, the datagen YAML and, last, ``datagen.json`` (this function's return
    value: the command, wall time and :func:`verify_dataset`'s findings) into ``run_dir``.
    Raises :class:`DlioError` if DLIO fails; a failed verification is reported, not raised.
    """
    d = dataset.datagen if isinstance(dataset, Workload) else dataset
    run = Path(run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    folder = Path(data_folder).resolve()
    config = to_datagen_config(
        d, data_folder=folder, num_files=num_files, num_subfolders=num_subfolders, engine=engine
    )
    apply_params(config, params or {})
    name = f"{d.model}_datagen"
    record: dict[str, Any] = {
        "command": "datagen",
        "engine": engine,
        "config_file": f"configs/workload/{name}.yaml",
        "params": {
            "model": d.model,
            "accelerator": dataset.accelerator if isinstance(dataset, Workload) else None,
        },
    }
    if record["params"]["accelerator"] is None:
        del record["params"]["accelerator"]
    _write_record(run, record)
    cmd, wall = _launch(
        config,
        run_dir=run,
        name=name,
        processes=processes,
        dlio_venv=dlio_venv,
        mpi=mpi,
        mpi_args=mpi_args,
        timeout_s=timeout_s,
        log=log,
    )
    files = config["dataset"]["num_files_train"]
    shape = Datagen(
        model=d.model,
        framework=str(config.get("framework", d.framework)),
        format=str(config["dataset"].get("format", d.format)),
        num_files_train=files,
        num_samples_per_file=int(
            config["dataset"].get("num_samples_per_file", d.num_samples_per_file)
        ),
        record_length_bytes=int(
            config["dataset"].get(RECORD_LENGTH_KEYS[engine][0], d.record_length_bytes)
        ),
        record_length_bytes_stdev=int(
            config["dataset"].get(RECORD_LENGTH_KEYS[engine][1], d.record_length_bytes_stdev)
        ),
    )
    result = {
        "schema": _DATAGEN_SCHEMA,
        "command": cmd,
        "wall_s": wall,
        "engine": engine,
        "processes": processes,
        "verification": verify_dataset(folder, shape, num_files=files),
    }
    write_text_atomic(run / "datagen.json", json.dumps(result, indent=2) + "\n")
    return result


# ---------------------------------------------------------------------------------------------
# Results


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise DlioError(f"{what} is not a finite number: {value!r}")
    return float(value)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DlioError(f"{path} is missing: DLIO did not finish the run") from None
    except (OSError, ValueError) as exc:
        raise DlioError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise DlioError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _rank_epoch(output: Mapping[str, Any], epoch: str, source: Path) -> tuple[float, float, int]:
    """One rank's AU (%), samples/s and steps in one epoch, weighting blocks by their steps,
    as DLIO does."""
    stats = output.get(epoch)
    if not isinstance(stats, Mapping):
        raise DlioError(f"{source}: no statistics for epoch {epoch}")
    au, throughput, proc = stats.get("au"), stats.get("throughput"), stats.get("proc")
    if not (
        isinstance(au, Mapping) and isinstance(throughput, Mapping) and isinstance(proc, Mapping)
    ):
        raise DlioError(f"{source}: epoch {epoch} lacks the au, throughput or proc sections")
    blocks = [b for b in au if b != "eval"]
    steps = [len(proc.get(b, ())) for b in blocks]
    total = sum(steps)
    if total == 0:
        return 0.0, 0.0, 0
    au_w = sum(_number(au[b], f"{source}: au {b}") * s for b, s in zip(blocks, steps, strict=True))
    tp_w = sum(
        _number(throughput[b], f"{source}: throughput {b}") * s
        for b, s in zip(blocks, steps, strict=True)
    )
    return au_w / total, tp_w / total, total


def parse_dlio_output(
    output_dir: str | os.PathLike[str],
    *,
    au_threshold: float,
    record_length_bytes: int,
) -> dict[str, Any]:
    """The result of a DLIO training run from its output folder.

    Reads ``summary.json`` and every ``<rank>_output.json``. Per epoch, a rank's accelerator
    utilisation (AU) and samples/s are its block figures weighted by steps; the epoch's AU is
    the mean over ranks and its samples/s the sum, which is how DLIO builds ``summary.json``.
    MB/s is samples/s times ``record_length_bytes`` in MiB (DLIO's "MB"). The run passes when
    the mean AU reaches ``au_threshold`` (a fraction, 0.9 for 90%). The figures recomputed from
    the rank files are compared with ``summary.json`` (``consistent_with_summary``).

    Raises :class:`DlioError` for a missing or malformed file.
    """
    out = Path(output_dir)
    summary = _load_json(out / "summary.json")
    metric = summary.get("metric")
    if not isinstance(metric, Mapping) or "train_au_percentage" not in metric:
        raise DlioError(
            f"{out / 'summary.json'} has no training metrics (metric.train_au_percentage)"
        )
    n = summary.get("num_accelerators")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DlioError(f"{out / 'summary.json'}: num_accelerators is {n!r}")
    ranks = []
    for rank in range(n):
        path = out / f"{rank}_output.json"
        ranks.append((path, _load_json(path)))
    epoch_keys = sorted({k for _, data in ranks for k in data if k.isdigit()}, key=int)
    if not epoch_keys:
        raise DlioError(f"{out}: the rank files hold no epochs")
    epochs = []
    for key in epoch_keys:
        per_rank = [_rank_epoch(data, key, path) for path, data in ranks]
        au = statistics.fmean(r[0] for r in per_rank)
        samples = sum(r[1] for r in per_rank)
        epochs.append(
            {
                "epoch": int(key),
                "au_percent": au,
                "samples_per_s": samples,
                "mb_per_s": samples * record_length_bytes / 2**20,
                "steps": sum(r[2] for r in per_rank),
            }
        )
    au_mean = statistics.fmean(e["au_percent"] for e in epochs)
    samples_mean = statistics.fmean(e["samples_per_s"] for e in epochs)
    dlio = {
        key: metric.get(key)
        for key in (
            "train_au_percentage",
            "train_au_mean_percentage",
            "train_au_meet_expectation",
            "train_throughput_samples_per_second",
            "train_throughput_mean_samples_per_second",
            "train_io_mean_MB_per_second",
        )
    }

    def close(a: float, b: object) -> bool:
        return isinstance(b, int | float) and math.isclose(a, float(b), rel_tol=1e-6, abs_tol=1e-9)

    consistent = (
        close(au_mean, dlio["train_au_mean_percentage"])
        and close(samples_mean, dlio["train_throughput_mean_samples_per_second"])
        and isinstance(dlio["train_au_percentage"], list)
        and len(dlio["train_au_percentage"]) == len(epochs)
        and all(
            close(e["au_percent"], v)
            for e, v in zip(epochs, dlio["train_au_percentage"], strict=False)
        )
    )
    threshold = au_threshold * 100
    return {
        "num_accelerators": n,
        "epochs": epochs,
        "au_mean_percent": au_mean,
        "au_stdev_percent": statistics.pstdev(e["au_percent"] for e in epochs),
        "samples_per_s_mean": samples_mean,
        "mb_per_s_mean": samples_mean * record_length_bytes / 2**20,
        "record_length_bytes": record_length_bytes,
        "au_threshold_percent": threshold,
        "passed": au_mean >= threshold,
        "consistent_with_summary": consistent,
        "dlio_summary": dlio,
        "host_memory_gb": summary.get("host_memory_GB"),
        "start": summary.get("start"),
        "end": summary.get("end"),
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _results_csv(result: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RESULTS_CSV_COLUMNS)
    threshold = result["au_threshold_percent"]
    for e in result["epochs"]:
        writer.writerow(
            [
                e["epoch"],
                _fmt(e["au_percent"]),
                _fmt(e["samples_per_s"]),
                _fmt(e["mb_per_s"]),
                e["steps"],
                _fmt(threshold),
                e["au_percent"] >= threshold,
            ]
        )
    writer.writerow(
        [
            "mean",
            _fmt(result["au_mean_percent"]),
            _fmt(result["samples_per_s_mean"]),
            _fmt(result["mb_per_s_mean"]),
            sum(e["steps"] for e in result["epochs"]),
            _fmt(threshold),
            result["passed"],
        ]
    )
    return buf.getvalue()


def write_results(run_dir: str | os.PathLike[str], result: Mapping[str, Any]) -> dict[str, Path]:
    """Write ``results.csv`` and then ``results.json`` into ``run_dir``, each atomically."""
    run = Path(run_dir)
    paths = {"results.csv": run / "results.csv", "results.json": run / "results.json"}
    write_text_atomic(paths["results.csv"], _results_csv(result))
    write_text_atomic(paths["results.json"], json.dumps(result, indent=2, allow_nan=False) + "\n")
    return paths


def run_training(
    workload: Workload,
    *,
    run_dir: str | os.PathLike[str],
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    processes: int = 1,
    division: str = "closed",
    hosts: int = 1,
    host_memory_gb: float | None = None,
    params: Mapping[str, Any] | None = None,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    log: Log = _quiet,
) -> dict[str, Any]:
    """Run ``workload`` with DLIO on an existing dataset and write its results.

    ``params`` are dotted DLIO parameters set on top of the workload (``train.epochs``; the
    rules checker judges them). The result (:func:`parse_dlio_output` plus the workload, the
    command, the wall time and the checker's verdict on the run) is written to
    ``results.json``/``results.csv`` in ``run_dir`` and returned.
    """
    run = Path(run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    config = to_dlio_config(
        workload,
        data_folder=Path(data_folder).resolve(),
        num_files=num_files,
        num_subfolders=num_subfolders,
        engine=engine,
    )
    apply_params(config, params or {})
    name = f"{workload.model}_{workload.accelerator}"
    run_params: dict[str, Any] = {
        "model": workload.model,
        "accelerator": workload.accelerator,
        "division": division,
        "num_accelerators": processes,
        "hosts": hosts,
    }
    if host_memory_gb is not None:
        run_params["host_memory_gb"] = host_memory_gb
    _write_record(
        run,
        {
            "command": "run",
            "engine": engine,
            "config_file": f"configs/workload/{name}.yaml",
            "params": run_params,
        },
    )
    for stale in ("results.json", "results.csv"):
        (run / stale).unlink(missing_ok=True)
    cmd, wall = _launch(
        config,
        run_dir=run,
        name=name,
        processes=processes,
        dlio_venv=dlio_venv,
        mpi=mpi,
        mpi_args=mpi_args,
        timeout_s=timeout_s,
        log=log,
    )
    record_key = RECORD_LENGTH_KEYS[engine][0]
    record = config.get("dataset", {}).get(record_key, workload.record_length_bytes)
    result = parse_dlio_output(
        run / "dlio",
        au_threshold=workload.au_threshold,
        record_length_bytes=int(record),
    )
    report = check_path(run)
    result = {
        "schema": _RESULTS_SCHEMA,
        "model": workload.model,
        "accelerator": workload.accelerator,
        "engine": engine,
        "processes": processes,
        "params": dict(params or {}),
        "command": cmd,
        "wall_s": wall,
        **result,
        "verdict": report.verdict,
        "issues": [issue.as_dict() for issue in report.issues],
    }
    write_results(run, result)
    return result


# ---------------------------------------------------------------------------------------------
# Reports over several runs

REPORT_CSV_COLUMNS: Final = (
    "run",
    "model",
    "accelerator",
    "processes",
    "epochs",
    "au_mean_percent",
    "samples_per_s_mean",
    "mb_per_s_mean",
    "passed",
    "verdict",
)


def aggregate_results(run_dirs: Sequence[str | os.PathLike[str]]) -> dict[str, Any]:
    """Gather the ``results.json`` of several runs into one report.

    A directory without ``results.json`` whose subfolders have one (a submission) contributes
    those subfolders. The report lists each run and, over all runs, the count, whether all
    passed, the mean, minimum and maximum of the mean AU, samples/s and MB/s, and the workloads
    seen. Raises :class:`DlioError` when a run has no readable ``results.json``.
    """
    paths: list[Path] = []
    for given in run_dirs:
        p = Path(given)
        if (p / "results.json").is_file():
            paths.append(p)
            continue
        children = (
            sorted(c for c in p.iterdir() if (c / "results.json").is_file()) if p.is_dir() else []
        )
        if not children:
            raise DlioError(f"{p} has no results.json (and no run folders that have one)")
        paths.extend(children)
    runs = []
    for p in paths:
        data = _load_json(p / "results.json")
        if data.get("schema") != _RESULTS_SCHEMA:
            raise DlioError(f"{p / 'results.json'} is not a storage-workloads DLIO result")
        runs.append(
            {
                "run": str(p),
                "model": data.get("model"),
                "accelerator": data.get("accelerator"),
                "processes": data.get("processes"),
                "epochs": len(data.get("epochs", [])),
                "au_mean_percent": data.get("au_mean_percent"),
                "samples_per_s_mean": data.get("samples_per_s_mean"),
                "mb_per_s_mean": data.get("mb_per_s_mean"),
                "passed": data.get("passed"),
                "verdict": data.get("verdict"),
            }
        )

    def stats(key: str) -> dict[str, float]:
        values = [float(r[key]) for r in runs if isinstance(r[key], int | float)]
        if not values:
            return {}
        return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}

    return {
        "runs": runs,
        "count": len(runs),
        "all_passed": all(r["passed"] is True for r in runs),
        "workloads": sorted({f"{r['model']} {r['accelerator']}" for r in runs}),
        "au_mean_percent": stats("au_mean_percent"),
        "samples_per_s_mean": stats("samples_per_s_mean"),
        "mb_per_s_mean": stats("mb_per_s_mean"),
    }


def write_report(out_dir: str | os.PathLike[str], report: Mapping[str, Any]) -> dict[str, Path]:
    """Write ``report.csv`` (one row per run) and then ``report.json``, each atomically."""
    out = Path(out_dir)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(REPORT_CSV_COLUMNS)
    for r in report["runs"]:
        writer.writerow([_fmt(r[c]) for c in REPORT_CSV_COLUMNS])
    paths = {"report.csv": out / "report.csv", "report.json": out / "report.json"}
    write_text_atomic(paths["report.csv"], buf.getvalue())
    write_text_atomic(paths["report.json"], json.dumps(report, indent=2, allow_nan=False) + "\n")
    return paths


def parse_param(text: str) -> tuple[str, Any]:
    """``"train.epochs=1"`` as ``("train.epochs", 1)``: the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--param takes KEY=VALUE (a dotted DLIO key), got {text!r}")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed
