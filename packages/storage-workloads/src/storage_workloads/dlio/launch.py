"""Finding and starting DLIO, and checking that it ran the config that was written.

DLIO (``dlio_benchmark``) is an external program, run as a subprocess from its own virtual
environment (``scripts/install-dlio.sh`` makes one), under ``mpirun -n N`` (on the hosts of a
``--hosts`` list: :mod:`storage_workloads.hosts`) or as one process. :func:`_execute` writes
the workload YAML into a run directory, starts DLIO on it and checks that DLIO ran that config
(its Hydra record ``dlio_config/config.yaml``).

Where DLIO 2.0.0 lacks something a workload needs (the parquet format, tfrecord generation
without DALI, jpeg files of the declared size, the checkpointing workload), DLIO is started
through the launcher of :mod:`storage_workloads.dlio_ext` with that package on its
``PYTHONPATH``; see there.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

import dlrmv4_cli
from storage_workloads._atomic import write_text_atomic
from storage_workloads.dlio.config import ENGINE_NAMES, dump_yaml
from storage_workloads.dlio_ext import LAUNCHER, PLUGIN_PATH
from storage_workloads.dotted import apply_params, flatten
from storage_workloads.hosts import HostSpec, check_host_list, mpirun_prefix
from storage_workloads.layout import HYDRA_SUBDIR

#: Environment variable naming the DLIO virtual environment (``--dlio-venv`` wins over it).
DLIO_VENV_ENV: Final = "STORAGE_WORKLOADS_DLIO_VENV"

#: Prefix of the workload config names this module writes. DLIO 2.0.0 ships configs named
#: ``<model>_<accelerator>`` (unet3d_h100, resnet50_a100, ...), and Hydra's search path finds
#: DLIO's own before the run's ``--config-dir``: a config of the same name would silently run
#: DLIO's workload instead.
CONFIG_PREFIX: Final = "storage_workloads_"
#: The file of a run folder that holds DLIO's stdout and stderr.
CONSOLE_LOG: Final = "dlio-console.log"

Log = Callable[[str], None]


class DlioError(RuntimeError):
    """DLIO could not be found, started, or did not produce what a run needs."""


def _quiet(_: str) -> None:
    pass


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


#: Text Hydra takes as it is on its command line (a name or a path), when YAML reads it back
#: as the same text; anything else is single-quoted.
_PLAIN_TEXT: Final = re.compile(r"[A-Za-z0-9_./@~%+-]+")


def _hydra_value(value: object) -> str:
    """A Hydra override value: numbers and booleans as YAML reads them, text as it is where
    Hydra takes it so (as mlpstorage writes its overrides), else single-quoted. mlpstorage's
    reportgen splits each line of Hydra's ``overrides.yaml`` at ``=`` into exactly two parts,
    so a value holding ``=`` is refused: the run's results could not be read."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    if "=" in text:
        raise DlioError(
            f"{text!r} holds '=', which mlpstorage's reportgen cannot read back from Hydra's "
            "overrides.yaml; choose a path or value without it"
        )
    if "'" in text or "\\" in text:
        raise DlioError(f"{text!r} holds a quote or backslash, which Hydra cannot take")
    if _PLAIN_TEXT.fullmatch(text) and yaml.safe_load(text) == text:
        return text
    return f"'{text}'"


def hydra_overrides(base: Mapping[str, Any], full: Mapping[str, Any]) -> dict[str, Any]:
    """The dotted keys in which the config ``full`` differs from ``base`` (the workload file
    as written), in ``full``'s order: what a run passes to DLIO as ``++workload.KEY=VALUE``,
    as mlpstorage passes its changes, so that Hydra's ``overrides.yaml`` records each of them
    (SG v2.0 10.2: "The parameters can be changed only via the command line in order to
    more-explicitly document what was changed"). A key of ``base`` that ``full`` lacks cannot
    be an override and raises ``ValueError``."""
    written, wanted = flatten(base), flatten(full)
    missing = [key for key in written if key not in wanted]
    if missing:
        raise ValueError(f"a run cannot remove workload keys ({', '.join(missing)})")
    return {
        key: value for key, value in wanted.items() if _differs(written.get(key, _ABSENT), value)
    }


_ABSENT: Final = object()


def _differs(a: object, b: object) -> bool:
    return type(a) is not type(b) or a != b  # True is no 1, 1.0 no 1


#: What each flavour's ``dlio_benchmark/utils/config.py`` holds that the other's does not: the
#: MLPerf DLIO fork reads ``record_length_bytes``; dlio-benchmark 2.0.0 only ``record_length``.
_FORK_MARK: Final = "record_length_bytes"


def installed_engine(dlio: str | os.PathLike[str]) -> str | None:
    """The flavour of DLIO installed in the environment of the ``dlio_benchmark`` executable
    ``dlio`` (``"dlio"`` or ``"mlperf-dlio"``), read from its ``dlio_benchmark`` package
    without starting Python; ``None`` when that package is not found beside it."""
    root = Path(dlio).resolve().parent.parent
    for source in sorted(root.glob("lib/python*/site-packages/dlio_benchmark/utils/config.py")):
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        return "mlperf-dlio" if _FORK_MARK in text else "dlio"
    return None


def check_engine(dlio: str | os.PathLike[str], engine: str, *, fallback: str = "") -> None:
    """Raise :class:`DlioError` when the DLIO at ``dlio`` is not the flavour ``engine`` writes
    configs for: each flavour silently ignores the other's record-length keys and the fork's
    checkpointing keys, so the run would not be the workload. ``fallback`` adds what else the
    caller can do."""
    found = installed_engine(dlio)
    if found is None or found == engine:
        return
    raise DlioError(
        f"--engine {engine} writes configs for {ENGINE_NAMES[engine]}, but {dlio} is "
        f"{ENGINE_NAMES[found]}: pass --engine {found}{fallback}, or a DLIO environment of "
        f"{ENGINE_NAMES[engine]} (--dlio-venv)"
    )


def config_name(model: str, suffix: str) -> str:
    """The name of a run's workload config: ``storage_workloads_<model>_<suffix>``, unique
    against the configs DLIO ships (see :data:`CONFIG_PREFIX`)."""
    return f"{CONFIG_PREFIX}{model}_{suffix}"


def dlio_command(
    dlio: str | os.PathLike[str] | Sequence[str],
    *,
    config_dir: str | os.PathLike[str],
    workload_name: str,
    output_dir: str | os.PathLike[str],
    processes: int = 1,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    hosts: Sequence[HostSpec] = (),
    overrides: Mapping[str, Any] | None = None,
) -> list[str]:
    """The command line that runs DLIO on ``config_dir/workload/<workload_name>.yaml``.

    ``dlio`` is the ``dlio_benchmark`` executable, or the program as a list (the extension
    launcher: ``[python, "-m", "sw_dlio_ext.launch"]``). With ``mpi`` (required for more than
    one process, and for a host list) it is :func:`storage_workloads.hosts.mpirun_prefix`:
    ``mpirun -n PROCESSES``, ``--host h1:2,h2:2`` for ``hosts``, ``--allow-run-as-root`` when
    run as root, ``--oversubscribe`` when more processes than CPUs run on this host, and
    ``mpi_args``. Hydra's run directory is ``output_dir``, which is also DLIO's output folder
    (DLIO's default, so no ``output.folder`` override is needed), with Hydra's record in its
    ``dlio_config/``, as mlpstorage runs DLIO; ``overrides`` are further workload keys
    (``{"reader.reader_classname": ...}``), passed as ``++workload.KEY=VALUE``.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be an integer >= 1, got {processes!r}")
    if processes > 1 and not mpi:
        raise ValueError(f"{processes} processes need mpirun; drop --no-mpi")
    check_host_list(hosts, mpi=mpi, mpi_args=mpi_args)
    out = Path(output_dir).resolve()
    cmd: list[str] = []
    if mpi:
        try:
            cmd = mpirun_prefix(processes, hosts=hosts, mpi_args=mpi_args)
        except RuntimeError as exc:
            raise DlioError(str(exc)) from None
    program = [os.fspath(dlio)] if isinstance(dlio, str | os.PathLike) else list(dlio)
    cmd += [
        *program,
        "--config-dir",
        str(Path(config_dir).resolve()),
        f"workload={workload_name}",
        f"hydra.run.dir={_hydra_value(out)}",
        f"hydra.output_subdir={HYDRA_SUBDIR}",
    ]
    for key, value in (overrides or {}).items():
        cmd.append(f"++workload.{key}={_hydra_value(value)}")
    return cmd


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no output)"
    return "\n".join(text[-lines:]) or "(no output)"


def _dlio_python(dlio: Path) -> Path:
    """The interpreter of DLIO's environment: ``python`` beside ``dlio_benchmark``, else the
    one its ``#!`` line names."""
    beside = dlio.parent / "python"
    if beside.is_file():
        return beside
    try:
        first = dlio.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        first = ""
    if first.startswith("#!"):
        candidate = Path(first[2:].strip().split()[0]) if first[2:].strip() else None
        if candidate is not None and candidate.name.startswith("python") and candidate.is_file():
            return candidate
    raise DlioError(
        f"cannot find the Python interpreter of DLIO's environment (no {beside}); the DLIO "
        "extensions (parquet, tfrecord and jpeg generation, checkpointing) run in it"
    )


def verify_effective_config(
    output_dir: str | os.PathLike[str], *, name: str, expected: Mapping[str, Any]
) -> None:
    """Check that DLIO ran the workload config ``expected`` under the name ``name``.

    Hydra records the config it composed in ``output_dir/dlio_config/config.yaml`` (the
    workload under ``workload``; ``.hydra/`` in runs made before this layout) and the config
    it chose in ``hydra.yaml`` beside it (``hydra.runtime.choices.workload``). Both must
    match: same name, and every key with the same value, no key missing or added. Raises
    :class:`DlioError` naming the differences, which is what happens when Hydra finds another
    config of the same name first.
    """
    record = Path(output_dir) / HYDRA_SUBDIR
    if not record.is_dir() and (Path(output_dir) / ".hydra").is_dir():
        record = Path(output_dir) / ".hydra"
    try:
        composed = yaml.safe_load((record / "config.yaml").read_text(encoding="utf-8"))
        hydra = yaml.safe_load((record / "hydra.yaml").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DlioError(
            f"DLIO left no Hydra record ({exc.filename}): cannot confirm which config it ran"
        ) from None
    except (OSError, yaml.YAMLError) as exc:
        raise DlioError(f"cannot read DLIO's Hydra record in {record}: {exc}") from None
    choices = (
        hydra.get("hydra", {}).get("runtime", {}).get("choices", {})
        if isinstance(hydra, Mapping)
        else {}
    )
    chosen = choices.get("workload") if isinstance(choices, Mapping) else None
    workload = composed.get("workload") if isinstance(composed, Mapping) else None
    problems = []
    if chosen != name:
        problems.append(f"Hydra chose workload {chosen!r}, not {name!r}")
    if not isinstance(workload, Mapping):
        problems.append(f"{record / 'config.yaml'} has no workload mapping")
    else:
        ran, wrote = flatten(workload), flatten(expected)
        # Values that differ first, then keys missing, then keys DLIO had and the run did not.
        problems += [
            f"{key}: written {wrote[key]!r}, DLIO ran {ran[key]!r}"
            for key in sorted(set(ran) & set(wrote))
            if ran[key] != wrote[key]
        ]
        problems += [
            f"{key}: written {wrote[key]!r}, missing from what DLIO ran"
            for key in sorted(set(wrote) - set(ran))
        ]
        problems += [
            f"{key}: not written, DLIO ran {ran[key]!r}" for key in sorted(set(ran) - set(wrote))
        ]
    if problems:
        shown = "; ".join(problems[:6])
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        raise DlioError(
            f"DLIO did not run the workload config that was written ({name}.yaml): {shown}"
            f"{more}. Another config named {name} on Hydra's search path (DLIO's packaged "
            "configs come first) would do this."
        )


@dataclass(frozen=True)
class _Mpi:
    """How DLIO is started: its environment, the process count and hosts, and MPI."""

    processes: int
    hosts: tuple[HostSpec, ...]
    dlio_venv: str | os.PathLike[str] | None
    mpi: bool
    mpi_args: tuple[str, ...]


@dataclass(frozen=True)
class _Launch:
    """Everything needed to start DLIO, prepared (and validated) before any file is written."""

    cmd: list[str]
    env: dict[str, str]
    name: str
    config: dict[str, Any]
    overrides: dict[str, Any]
    extensions: tuple[str, ...]
    python: Path | None

    @property
    def expected(self) -> dict[str, Any]:
        return apply_params(copy.deepcopy(self.config), self.overrides)


def _prepare(
    config: dict[str, Any],
    *,
    run_dir: Path,
    name: str,
    mpi: _Mpi,
    extensions: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
) -> _Launch:
    dlio = find_dlio(mpi.dlio_venv)
    all_overrides = dict(overrides or {})
    env = dict(os.environ)
    env["PATH"] = f"{dlio.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("PYTHONUNBUFFERED", "1")
    python: Path | None = None
    program: list[str] = [str(dlio)]
    if extensions:
        python = _dlio_python(dlio)
        program = [str(python), "-m", LAUNCHER]
        previous = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(PLUGIN_PATH) + (f"{os.pathsep}{previous}" if previous else "")
    cmd = dlio_command(
        program,
        config_dir=run_dir / "configs",
        workload_name=name,
        output_dir=run_dir,
        processes=mpi.processes,
        mpi=mpi.mpi,
        mpi_args=mpi.mpi_args,
        hosts=mpi.hosts,
        overrides=overrides,
    )
    return _Launch(
        cmd=cmd,
        env=env,
        name=name,
        config=config,
        overrides=all_overrides,
        extensions=tuple(extensions),
        python=python,
    )


def _execute(launch: _Launch, *, run_dir: Path, timeout_s: float | None, log: Log) -> float:
    """Write the workload YAML into ``run_dir``, run DLIO on it and check that DLIO ran it;
    returns the wall time. Raises :class:`DlioError` when DLIO fails, times out or ran another
    config."""
    write_text_atomic(
        run_dir / "configs" / "workload" / f"{launch.name}.yaml", dump_yaml(launch.config)
    )
    out = run_dir
    console = run_dir / CONSOLE_LOG
    log(f"running: {' '.join(launch.cmd)}")
    record = out / HYDRA_SUBDIR / "config.yaml"
    launched_at = time.time()
    started = time.monotonic()
    try:
        with console.open("w", encoding="utf-8") as fh:
            # DLIO, or mpirun and its ranks, in a process group ended with this process
            # (Ctrl-C, SIGTERM, SIGHUP, the timeout): none is left running on its own.
            done = dlrmv4_cli.run_child(
                launch.cmd,
                cwd=run_dir,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
            )
    except subprocess.TimeoutExpired:
        raise DlioError(
            f"dlio_benchmark ran past {timeout_s:g} s and was stopped; last lines of {console}:\n"
            + _tail(console)
        ) from None
    except OSError as exc:
        raise DlioError(f"cannot start {launch.cmd[0]}: {exc}") from None
    wall = time.monotonic() - started

    def fresh() -> bool:  # Hydra's record of this launch, not of an earlier, failed one
        try:
            return record.stat().st_mtime >= launched_at - 2
        except OSError:
            return False

    if done.returncode != 0:
        tail = _tail(console)
        if fresh():
            try:  # a config clash is the likelier cause of the failure: say so first
                verify_effective_config(out, name=launch.name, expected=launch.expected)
            except DlioError as exc:
                raise DlioError(f"{exc}\nlast lines of {console}:\n{tail}") from None
        hint = ""
        if "No module named 'torch'" in tail:
            hint = (
                "\nhint: the pytorch framework needs torch in DLIO's environment "
                "(DLIO_WITH_TORCH=1 install-dlio.sh VENV_DIR), or run the tensorflow framework "
                "and data loader (--param framework=tensorflow --param "
                "reader.data_loader=tensorflow, an open-division change)"
            )
        elif "No module named 'pyarrow'" in tail:
            hint = (
                "\nhint: parquet needs pyarrow in DLIO's environment; re-run "
                "scripts/install-dlio.sh VENV_DIR"
            )
        raise DlioError(
            f"dlio_benchmark exited with status {done.returncode}; last lines of {console}:\n"
            + tail
            + hint
        )
    if record.exists() and not fresh():
        raise DlioError(f"{record} predates this run: DLIO left no record of the config it ran")
    verify_effective_config(out, name=launch.name, expected=launch.expected)
    log(f"dlio_benchmark finished in {wall:.1f} s")
    return wall
