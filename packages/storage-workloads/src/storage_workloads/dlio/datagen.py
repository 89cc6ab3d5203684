"""Data generation with DLIO: :func:`run_datagen`, and the check of the files it wrote."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage_workloads._atomic import write_text_atomic
from storage_workloads.dlio.config import RECORD_LENGTH_KEYS, Engine, to_datagen_config
from storage_workloads.dlio.launch import DlioError, Log, _quiet, config_name
from storage_workloads.dlio.runs import (
    RunPlan,
    _configs,
    _dataset_files,
    _extensions,
    _Options,
    _parquet,
    _refuse_earlier_run,
    _start,
    _validated_run,
    _where,
    _write_mlperf_files,
)
from storage_workloads.dlio_ext import PLUGIN_PATH
from storage_workloads.dlio_ext.sw_dlio_ext.formats import (
    ParquetSchema,
    check_tfrecord_index,
    compare_parquet,
)
from storage_workloads.hosts import HostMemory, HostSpec
from storage_workloads.workloads import Datagen, Workload

#: Formats whose files hold the declared sample bytes, so their size can be checked: the
#: sample bytes as they are, or (jpeg) files padded to the declared size by the generator of
#: :mod:`storage_workloads.dlio_ext`. Parquet files are checked against their schema instead.
SIZE_CHECKED_FORMATS: Final = frozenset(
    {"npz", "npy", "hdf5", "tfrecord", "indexed_binary", "jpeg"}
)

#: Most files whose content (parquet footer, tfrecord index) a datagen check reads.
_CONTENT_CHECKED_FILES: Final = 8

_DATAGEN_SCHEMA: Final = "storage-workloads/dlio-datagen/1"


@dataclass
class DatasetCheck:
    """What :func:`verify_dataset` found in a generated dataset (``problems`` empty: passed).

    Attributes:
        data_folder, format: the dataset checked.
        files_expected, files_found: the ``.<format>`` files under ``train/``.
        bytes_total, file_bytes_mean, file_bytes_min, file_bytes_max: their sizes.
        file_bytes_expected: ``num_samples_per_file x record_length_bytes``.
        size_compared: whether the mean size was compared (:data:`SIZE_CHECKED_FORMATS`).
        content_checked_files: files whose content was read (tfrecord index, parquet footer).
        problems: each finding, in words.
    """

    data_folder: str
    format: str
    files_expected: int
    files_found: int
    bytes_total: int
    file_bytes_mean: float
    file_bytes_min: int
    file_bytes_max: int
    file_bytes_expected: int
    size_compared: bool
    content_checked_files: int
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """The check as ``datagen.json`` holds it (``passed`` before ``problems``)."""
        data = dataclasses.asdict(self)
        problems = data.pop("problems")
        return {**data, "passed": self.passed, "problems": problems}


@dataclass(frozen=True)
class DatagenResult:
    """A data generation run (:func:`run_datagen`), as ``datagen.json`` holds it
    (:meth:`as_dict`): DLIO's command line and wall time, the engine, processes and hosts, the
    run folder, the DLIO extensions used, the check of the files on disk and, for parquet, the
    schema they must have."""

    command: list[str]
    wall_s: float
    engine: str
    processes: int
    hosts: int | str
    run_dir: str
    dlio_extensions: list[str]
    verification: DatasetCheck
    parquet_schema: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": _DATAGEN_SCHEMA,
            "command": list(self.command),
            "wall_s": self.wall_s,
            "engine": self.engine,
            "processes": self.processes,
            "hosts": self.hosts,
            "run_dir": self.run_dir,
            "dlio_extensions": list(self.dlio_extensions),
            "verification": self.verification.as_dict(),
        }
        if self.parquet_schema is not None:
            data["parquet_schema"] = dict(self.parquet_schema)
        return data


def _refuse_existing_dataset(folder: Path) -> None:
    for part in ("train", "valid"):
        sub = folder / part
        if sub.is_dir() and any(p.is_file() for p in sub.rglob("*")):
            raise DlioError(
                f"{sub} already holds files; datagen writes into an empty --data-dir only "
                "(DLIO would overwrite an existing dataset)"
            )


def _spread(files: Sequence[Path], count: int) -> list[Path]:
    """Up to ``count`` of ``files``, first and last included, evenly spread."""
    if len(files) <= count:
        return list(files)
    step = (len(files) - 1) / (count - 1)
    return [files[round(i * step)] for i in range(count)]


def verify_dataset(
    data_folder: str | os.PathLike[str],
    dataset: Datagen,
    *,
    num_files: int,
) -> DatasetCheck:
    """Count and measure the files DLIO generated under ``data_folder/train``.

    DLIO ignores keys it does not know, so a misspelt record length silently gives files of
    its default size: this is the check that the emitted YAML took effect. The file count must
    equal ``num_files``. For :data:`SIZE_CHECKED_FORMATS` the mean file size must be within 2%
    plus 4 KiB of ``num_samples_per_file * record_length_bytes`` (plus a margin for the
    standard deviation of the sizes); for png, csv and parquet the sizes are reported, not
    compared (:func:`run_datagen` checks parquet files against their schema). For tfrecord,
    up to 8 files must have a DALI index in ``data_folder/index/train`` that matches their
    records.
    """
    folder = Path(data_folder)
    train = folder / "train"
    files = _dataset_files(folder, dataset.format)
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
    content_checked = 0
    if dataset.format == "tfrecord":
        for path in _spread(files, _CONTENT_CHECKED_FILES):
            content_checked += 1
            problem = check_tfrecord_index(path, folder / "index" / "train" / f"{path.name}.idx")
            if problem:
                problems.append(problem)
    return DatasetCheck(
        data_folder=str(folder),
        format=dataset.format,
        files_expected=num_files,
        files_found=len(files),
        bytes_total=sum(sizes),
        file_bytes_mean=mean,
        file_bytes_min=min(sizes) if sizes else 0,
        file_bytes_max=max(sizes) if sizes else 0,
        file_bytes_expected=expected_bytes,
        size_compared=compared,
        content_checked_files=content_checked,
        problems=problems,
    )


def _check_parquet_files(
    python: Path, files: Sequence[Path], schema: ParquetSchema, rows: int, timeout_s: float
) -> tuple[int, list[str]]:
    """Read the footers of up to 8 of ``files`` with pyarrow (in DLIO's environment) and
    compare them with ``schema``; returns ``(files checked, problems)``."""
    chosen = _spread(files, _CONTENT_CHECKED_FILES)
    if not chosen:
        return 0, []
    env = dict(os.environ)
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PLUGIN_PATH) + (f"{os.pathsep}{previous}" if previous else "")
    try:
        done = subprocess.run(
            [str(python), "-m", "sw_dlio_ext.parquet_info", *map(str, chosen)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, [f"cannot read the parquet footers with {python}: {exc}"]
    if done.returncode != 0:
        return 0, [f"reading the parquet footers failed: {done.stderr.strip()[-500:]}"]
    problems: list[str] = []
    for line in done.stdout.splitlines():
        info = json.loads(line)
        if "error" in info:
            problems.append(f"{info['path']}: {info['error']}")
        else:
            problems.extend(compare_parquet(info, schema, rows=rows))
    return len(chosen), problems


def _datagen(
    dataset: Workload | Datagen,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    processes: int | None = None,
    hosts: int | Sequence[HostSpec] = 1,
    host_memory: HostMemory | None = None,
    params: Mapping[str, Any] | None = None,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    what_if: bool = False,
    log: Log = _quiet,
) -> DatagenResult | RunPlan:
    """Generate ``dataset`` with DLIO into ``data_folder`` and verify the files on disk (see
    :func:`run_datagen`), or with ``what_if`` return the plan (:func:`plan_datagen`).

    Writes ``run.json``, the datagen YAML, the metadata file, the system description and,
    last, ``datagen.json`` (this function's return value: the command, wall time and
    :func:`verify_dataset`'s findings, plus the parquet footer check) into ``run_dir``, or
    into a new ``results_dir/training/<model>/datagen/<datetime>`` (give one of the two).
    ``hosts`` is a host count or a host list (``HostSpec``), whose slots give the process
    count when ``processes`` is ``None``. Parquet, tfrecord and jpeg datasets are written by
    the generators of :mod:`storage_workloads.dlio_ext`. Everything is validated first: a
    ``run_dir`` with an earlier run's results, or a ``data_folder`` that already holds files,
    is refused before any file is written. Then the hosts are read (:func:`read_hosts`;
    ``host_memory`` gives a reading made before). Raises :class:`DlioError` if DLIO fails or
    runs another config; a failed verification is reported, not raised.
    """
    d = dataset.datagen if isinstance(dataset, Workload) else dataset
    where = _where(run_dir, results_dir, command="datagen", model=d.model)
    folder = Path(data_folder).resolve()
    build = functools.partial(to_datagen_config, d)
    configs = _configs(build, d.model, folder, num_files, num_subfolders, engine, params)
    config, written, overrides = configs.config, configs.written, configs.overrides
    fmt = str(config["dataset"].get("format", d.format))
    schema = _parquet(config)
    _refuse_earlier_run(where.run)
    _refuse_existing_dataset(folder)
    options = _Options(
        processes, hosts, host_memory, dlio_venv, mpi, mpi_args, timeout_s, what_if, log
    )
    writes = [("--data-dir", folder, "datagen writes the dataset there")]
    ctx = _validated_run(where, options, engine=engine, writes=writes)
    name = config_name(d.model, "datagen")
    extensions = _extensions(fmt, generate=True, train=False)
    record_params: dict[str, Any] = {"model": d.model}
    if isinstance(dataset, Workload):
        record_params["accelerator"] = dataset.accelerator
    started = _start(
        written,
        ctx,
        command="datagen",
        name=name,
        engine=engine,
        overrides=overrides,
        params=record_params,
        extensions=extensions,
        schema=schema,
    )
    if isinstance(started, RunPlan):
        return started
    files = config["dataset"]["num_files_train"]
    shape = Datagen(
        model=d.model,
        framework=str(config.get("framework", d.framework)),
        format=fmt,
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
    verification = verify_dataset(folder, shape, num_files=files)
    if schema is not None and started.launch.python is not None:
        checked, problems = _check_parquet_files(
            started.launch.python,
            _dataset_files(folder, fmt),
            schema,
            shape.num_samples_per_file,
            timeout_s or 300.0,
        )
        verification.content_checked_files = checked
        verification.problems.extend(problems)
    result = DatagenResult(
        command=started.launch.cmd,
        wall_s=started.wall,
        engine=engine,
        processes=ctx.mpi.processes,
        hosts=started.record["hosts"],
        run_dir=str(where.run),
        dlio_extensions=list(extensions),
        verification=verification,
        parquet_schema=None if schema is None else schema.as_dict(),
    )
    _write_mlperf_files(
        ctx,
        started,
        model=d.model,
        params=params or {},
        result_file="datagen.json",
        accelerator=record_params.get("accelerator"),
        data_folder=folder,
    )
    write_text_atomic(where.run / "datagen.json", json.dumps(result.as_dict(), indent=2) + "\n")
    return result


def run_datagen(dataset: Workload | Datagen, **options: Any) -> DatagenResult:
    """Generate ``dataset`` with DLIO and verify the files on disk.

    ``options`` are the keywords of the run (``run_dir`` or ``results_dir``, ``data_folder``,
    ``num_files``, ``num_subfolders``, ``engine``, ``processes``, ``hosts``, ``host_memory``,
    ``params``, ``dlio_venv``, ``mpi``, ``mpi_args``, ``timeout_s``, ``log``; see
    :func:`_datagen`). Returns what ``datagen.json`` holds (:meth:`DatagenResult.as_dict`).
    """
    result = _datagen(dataset, what_if=False, **options)
    assert isinstance(result, DatagenResult)
    return result


def plan_datagen(dataset: Workload | Datagen, **options: Any) -> RunPlan:
    """What :func:`run_datagen` with the same ``options`` would do, validated as the run
    validates it (a plan contacts no host of a host list), without creating any file or
    folder."""
    plan = _datagen(dataset, what_if=True, **options)
    assert isinstance(plan, RunPlan)
    return plan
