"""``--what-if`` (datagen, run, checkpoint), ``run --loops`` and the ``checkpoint`` command,
without DLIO: a stand-in DLIO environment for the command line, and a stand-in for the DLIO
launch (``storage_workloads.dlio.runs._execute``) that leaves a recorded run's output."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads import (
    checkpoint_workload,
    to_datagen_config,
    to_dlio_config,
    workload,
)
from storage_workloads.cli import main
from storage_workloads.dlio import dump_yaml, published_data_folder
from storage_workloads.dlio_ext import LAUNCHER, PLUGIN_PATH
from storage_workloads.dliorun import (
    checkpoint_config,
    config_name,
    dlio_command,
)

FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"


def _snapshot(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def _plan(out: str) -> tuple[list[str], dict[str, Any]]:
    """The command (first line) and the config (the rest, YAML) of a what-if's stdout."""
    first, _, rest = out.partition("\n")
    return shlex.split(first), yaml.safe_load(rest)


def test_what_if_run_and_datagen_write_nothing(
    tmp_path: Path, venv: Path, npz_dataset: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    npz_dataset(data, 2)
    before = _snapshot(tmp_path)
    common = ["--data-dir", str(data), "--run-dir", str(run), "--dlio-venv", str(venv)]
    args = ["run", "dlrm", "--accelerator", "h100", *common, "--num-files", "2"]
    assert main([*args, "--processes", "2", "--what-if"]) == 0
    captured = capsys.readouterr()
    assert "nothing was run, created or changed" in captured.err
    cmd, config = _plan(captured.out)
    # The workload file as published; the run's changes as Hydra overrides, as mlpstorage
    # passes them (so Hydra's overrides.yaml records each).
    assert cmd == dlio_command(
        venv.resolve() / "bin" / "dlio_benchmark",
        config_dir=run / "configs",
        workload_name=config_name("dlrm", "h100"),
        output_dir=run,
        processes=2,
        overrides={"dataset.data_folder": str(data.resolve()), "dataset.num_files_train": 2},
    )
    assert cmd[:3] == ["/opt/bin/mpirun", "-n", "2"]
    published = to_dlio_config(
        workload("dlrm", "h100"), data_folder=published_data_folder("dlrm"), num_subfolders=0
    )
    assert config == yaml.safe_load(dump_yaml(published))
    assert not run.exists() and _snapshot(tmp_path) == before

    new_data = tmp_path / "new-data"
    assert main(["datagen", "dlrm", *common[2:], "--data-dir", str(new_data), "--what-if"]) == 0
    cmd, config = _plan(capsys.readouterr().out)
    assert cmd == dlio_command(
        venv.resolve() / "bin" / "dlio_benchmark",
        config_dir=run / "configs",
        workload_name=config_name(workload("dlrm", "h100").datagen.model, "datagen"),
        output_dir=run,
        # dlrm's 65,536 files go into 7 subfolders (suggested_subfolders)
        overrides={
            "dataset.data_folder": str(new_data.resolve()),
            "dataset.num_subfolders_train": 7,
        },
    )
    expected = to_datagen_config(
        workload("dlrm", "h100").datagen,
        data_folder=published_data_folder("dlrm"),
        num_subfolders=0,
    )
    assert config == yaml.safe_load(dump_yaml(expected))
    assert not run.exists() and not new_data.exists() and _snapshot(tmp_path) == before


def test_what_if_plans_datagen_and_run_together(
    tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The run's data does not exist yet: the plan says so, and the run itself refuses.
    data, run = tmp_path / "data", tmp_path / "run"
    common = ["--data-dir", str(data), "--dlio-venv", str(venv), "--num-files", "3"]
    assert main(["datagen", "dlrm", *common, "--run-dir", str(tmp_path / "gen"), "--what-if"]) == 0
    capsys.readouterr()
    assert main(["run", "dlrm", *common, "--run-dir", str(run), "--what-if"]) == 0
    out = capsys.readouterr().out
    assert f"# note: the dataset is missing: {data.resolve() / 'train'} holds 0 .npz files" in out
    assert main(["run", "dlrm", *common, "--run-dir", str(run)]) == 2
    assert "holds 0 .npz files and the run reads 3" in capsys.readouterr().err
    assert not data.exists() and not run.exists()


def test_what_if_validates_as_a_run(
    tmp_path: Path, venv: Path, npz_dataset: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    npz_dataset(data, 2)
    common = ["--data-dir", str(data), "--run-dir", str(run), "--what-if"]
    # No DLIO, a populated data folder for datagen: the real run's errors.
    assert main(["run", "dlrm", *common, "--num-files", "2", "--dlio-venv", "/nope"]) == 2
    err = capsys.readouterr().err
    assert "no dlio_benchmark in /nope" in err and err.count("\n") == 1
    assert main(["datagen", "dlrm", *common, "--dlio-venv", str(venv)]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert not run.exists()


def test_run_loops(
    tmp_path: Path,
    venv: Path,
    fake_dlio: None,
    npz_dataset: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    npz_dataset(data, 16)
    args = ["run", "dlrm", "--data-dir", str(data), "--run-dir", str(run)]
    args += ["--num-files", "16", "--processes", "2", "--dlio-venv", str(venv), "--quiet"]
    for bad in ("0", "-1", "two", "1.5"):
        assert main([*args, "--loops", bad]) == 2
        err = capsys.readouterr().err
        assert err == f"storage-workloads: error: --loops must be an integer >= 1, got {bad!r}\n"
    assert not run.exists()

    assert main([*args, "--loops", "2", "--what-if"]) == 0
    out = capsys.readouterr().out
    assert "# loop 1 of 2" in out and "# loop 2 of 2" in out
    assert str(run / "loop-2" / "configs") in out and not run.exists()

    code = main([*args, "--loops", "2"])
    out = capsys.readouterr().out
    assert code in (0, 1)
    assert "loop 1 of 2" in out and "loop 2 of 2" in out
    assert sorted(p.name for p in run.iterdir()) == ["loop-1", "loop-2"]
    for loop in ("loop-1", "loop-2"):
        assert (run / loop / "results.json").is_file() and (run / loop / "run.json").is_file()
    assert main(["report", str(run), "--format", "json"]) == 0
    assert '"count": 2' in capsys.readouterr().out

    # An earlier run in any loop folder stops everything before the first loop runs.
    again = tmp_path / "again"
    (again / "loop-3").mkdir(parents=True)
    (again / "loop-3" / "results.json").write_text("{}")
    assert main([*args[:4], "--run-dir", str(again), *args[6:], "--loops", "3"]) == 2
    assert "already holds an earlier run" in capsys.readouterr().err
    assert sorted(p.name for p in again.iterdir()) == ["loop-3"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--scale", "0"], "--scale must be a number in (0, 1], got '0'"),
        (["--scale", "1.5"], "--scale must be a number in (0, 1], got '1.5'"),
        (["--scale", "nan"], "--scale must be a number in (0, 1], got 'nan'"),
        (["--scale", "half"], "--scale must be a number in (0, 1], got 'half'"),
        (["--checkpoints-write", "0"], "--checkpoints-write must be an integer >= 1, got '0'"),
        (["--checkpoints-read", "x"], "--checkpoints-read must be an integer >= 0, got 'x'"),
        (["--checkpoints-read", "11"], "--checkpoints-read 11 > --checkpoints-write 10"),
        (["--checkpoints-write", "3", "--checkpoints-read", "4"], "--checkpoints-read 4 >"),
        (["--no-such-flag"], None),
    ],
)
def test_checkpoint_argument_errors(
    tmp_path: Path, extra: list[str], message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["checkpoint", "llama3_8b", "--run-dir", str(tmp_path / "r")]
    args += ["--checkpoint-folder", str(tmp_path / "c"), "--dlio-venv", "/nope"]
    if message is None:  # argparse: an unknown flag
        with pytest.raises(SystemExit) as exc:
            main([*args, *extra])
        assert exc.value.code == 2
    else:
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()


def test_checkpoint_unknown_model_and_missing_dlio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--run-dir", str(tmp_path / "r"), "--checkpoint-folder", str(tmp_path / "c")]
    assert main(["checkpoint", "llama2_7b", *args]) == 2
    assert "unknown checkpointing workload 'llama2_7b'" in capsys.readouterr().err
    assert main(["checkpoint", "llama3-70b", *args, "--dlio-venv", "/nope", "--what-if"]) == 2
    assert "no dlio_benchmark in /nope" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["checkpoint", "llama3_8b", *args, "--processes", "0"])
    assert exc.value.code == 2
    assert not (tmp_path / "r").exists()


def test_checkpoint_what_if(tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, folder = tmp_path / "run", tmp_path / "ckpt"
    before = _snapshot(tmp_path)
    args = ["checkpoint", "llama3_8b", "--run-dir", str(run), "--checkpoint-folder", str(folder)]
    args += ["--processes", "2", "--scale", "0.001", "--dlio-venv", str(venv), "--what-if"]
    args += ["--engine", "dlio", "--emulation"]
    assert main(args) == 0
    out = capsys.readouterr().out
    cmd, config = _plan(out)
    python = str(venv.resolve() / "bin" / "python")
    assert cmd == dlio_command(
        [python, "-m", LAUNCHER],
        config_dir=run / "configs",
        workload_name=config_name("llama3_8b", "checkpoint"),
        output_dir=run,
        processes=2,
    )
    assert f"# environment: PYTHONPATH={PLUGIN_PATH}" in out
    expected = checkpoint_config(
        checkpoint_workload("llama3_8b"),
        checkpoint_folder=folder.resolve(),
        steps_folder=run.resolve() / "steps-data",
        processes=2,
        scale=0.001,
    )
    assert config == yaml.safe_load(dump_yaml(expected))
    assert not run.exists() and not folder.exists() and _snapshot(tmp_path) == before
    # A non-empty checkpoint folder is refused, what-if or not.
    folder.mkdir()
    (folder / "old.bin").write_bytes(b"x")
    assert main(args) == 2
    assert "is not empty" in capsys.readouterr().err
