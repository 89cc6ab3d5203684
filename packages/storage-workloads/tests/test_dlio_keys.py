"""``--param``: every override is typed and ranged against the DLIO key it sets before anything
runs (one line, exit 2); the engine must be the DLIO flavour installed; a run's changes reach
DLIO as Hydra overrides of the published workload file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storage_workloads import check_params
from storage_workloads.cli import main
from storage_workloads.dlio.keys import DLIO_KEYS, SECTIONS, check_param, parse_param
from storage_workloads.dliorun import hydra_overrides, installed_engine


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the issue's three: a value that does not parse, a key without its section, a section
        ("reader.read_threads=[", "reader.read_threads must be an integer >= 0"),
        ("read_threads=-2", "unknown DLIO key 'read_threads'; did you mean reader.read_threads?"),
        ("dataset=5", "dataset is a section of the DLIO config, not a value"),
        ("reader.read_threads=-2", "reader.read_threads must be an integer >= 0"),
        ("reader.batch_size=2.5", "reader.batch_size must be an integer >= 1"),
        ("reader.file_shuffle=sometimes", "must be one of off, seed, random"),
        ("framework=jax", "framework must be one of pytorch, tensorflow"),
        ("train.computation_time=-1", "train.computation_time must be a number >= 0"),
        ("metric.au=.nan", "metric.au must be a number >= 0"),
        ("reader.dont_use_mmap=yes please", "reader.dont_use_mmap must be true or false"),
        ("reader.foo=1", "the keys of reader are: batch_size"),
        ("foo.bar=1", "unknown DLIO key 'foo.bar' (DLIO would ignore it)"),
        ("reader.read_threads=", "has no value"),
        ("model.parallelism=3", "set a key in it (--param model.parallelism.tensor=...)"),
        ("workflow.train=false", "is set by the command"),
        ("dataset.data_folder=/x", "is set by --data-dir"),
        ("output.folder=/x", "is the run directory"),
        ("novalue", "--param takes KEY=VALUE"),
        # dlio-benchmark 2.0.0 ignores the fork's keys: they would change nothing
        (
            "model.num_layers=2",
            "dlio-benchmark 2.0.0 (--engine dlio) does not read model.num_layers",
        ),
        ("checkpoint.mode=subset", "does not read checkpoint.mode"),
    ],
)
def test_bad_params_are_one_line_and_create_nothing(
    text: str, message: str, tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--data-dir", str(tmp_path / "d"), "--dlio-venv", str(venv)]
    for command in (
        ["run", "dlrm", "--run-dir", str(tmp_path / "r")],
        ["datagen", "dlrm", "--results-dir", str(tmp_path / "res")],
    ):
        assert main([*command, *common, "--param", text]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv"]


@pytest.mark.parametrize(
    ("model", "runs"),
    [("resnet50", True), ("cosmoflow", True), ("dlrm", False), ("unet3d", False)],
)
def test_read_threads_minus_one_runs_where_dlio_can_run_it(
    model: str, runs: bool, tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-1 is CLOSED to the checker (as to mlpstorage). DLIO runs it as tf.data's AUTOTUNE
    where the tensorflow loader reads tfrecord files (resnet50, cosmoflow); elsewhere it is
    refused before anything is created, saying why and where it would run."""
    args = ["run", model, "--data-dir", str(tmp_path / "d"), "--run-dir", str(tmp_path / "r")]
    status = main(
        [*args, "--dlio-venv", str(venv), "--param", "reader.read_threads=-1", "--what-if"]
    )
    captured = capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv"]
    if runs:
        assert status == 0, captured.err
        assert "++workload.reader.read_threads=-1" in captured.out.splitlines()[0]
    else:
        assert status == 2
        assert captured.err.count("\n") == 1
        assert "DLIO runs -1 (tf.data's AUTOTUNE) only with the tensorflow data loader" in (
            captured.err
        )
        assert "the rules checker calls -1 CLOSED, as mlpstorage does" in captured.err
    params = {"model": model, "accelerator": "h100", "num_accelerators": 1, "host_memory_gb": 1}
    verdict = check_params({**params, "overrides": {"reader.read_threads": -1}})
    assert [i.rule for i in verdict.issues if "read_threads" in i.parameter] == []


def test_the_fork_reads_its_own_keys() -> None:
    assert parse_param("model.num_layers=2", engine="mlperf-dlio") == ("model.num_layers", 2)
    with pytest.raises(ValueError, match=r"it reads dataset\.record_length_bytes$"):
        parse_param("dataset.record_length=4096", engine="mlperf-dlio")
    # dlio-benchmark 2.0.0's config carries both spellings; either sets the record length.
    for key in ("dataset.record_length", "dataset.record_length_bytes"):
        assert parse_param(f"{key}=4096", engine="dlio") == (key, 4096)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reader.read_threads=8", ("reader.read_threads", 8)),
        ("train.computation_time=0.01", ("train.computation_time", 0.01)),
        ("reader.odirect=true", ("reader.odirect", True)),
        ("checkpoint.checkpoint_folder=/mnt/a:b", ("checkpoint.checkpoint_folder", "/mnt/a:b")),
        ("checkpoint.checkpoint_folder=123", ("checkpoint.checkpoint_folder", "123")),
        ("checkpoint.checkpoint_folder=[x", ("checkpoint.checkpoint_folder", "[x")),
        ("reader.file_shuffle=random", ("reader.file_shuffle", "random")),
    ],
)
def test_good_params(text: str, expected: tuple[str, Any]) -> None:
    assert parse_param(text, engine="mlperf-dlio") == expected


def test_every_key_is_in_a_known_section_and_describes_itself() -> None:
    tops = {s for s in SECTIONS if "." not in s}
    assert tops == {
        "checkpoint", "dataset", "evaluation", "metric", "model", "output", "profiling",
        "reader", "storage", "train", "workflow",
    }  # fmt: skip
    for key, spec in DLIO_KEYS.items():
        assert key.split(".")[0] in tops or key == "framework"
        assert spec.describe()
    with pytest.raises(ValueError, match="dotted DLIO key"):
        check_param("a..b", 1, engine="dlio")


def test_hydra_overrides_are_the_changes() -> None:
    written = {"dataset": {"data_folder": "data/x/", "num_files_train": 8}, "reader": {"a": 1}}
    full = {
        "dataset": {"data_folder": "/mnt/x", "num_files_train": 8, "num_subfolders_train": 2},
        "reader": {"a": True},
    }
    assert hydra_overrides(written, full) == {
        "dataset.data_folder": "/mnt/x",
        "dataset.num_subfolders_train": 2,
        "reader.a": True,  # True is no 1
    }
    with pytest.raises(ValueError, match="cannot remove workload keys"):
        hydra_overrides(written, {"dataset": {}})


def _site_packages(venv: Path, reads_bytes: bool) -> None:
    config = venv / "lib" / "python3.11" / "site-packages" / "dlio_benchmark" / "utils"
    config.mkdir(parents=True)
    spelling = "record_length_bytes" if reads_bytes else "record_length"
    (config / "config.py").write_text(f"if '{spelling}' in config['dataset']: pass\n")


@pytest.mark.parametrize(
    ("installed", "engine"), [("dlio", "mlperf-dlio"), ("mlperf-dlio", "dlio")]
)
def test_the_engine_must_be_the_installed_flavour(
    installed: str,
    engine: str,
    tmp_path: Path,
    venv: Path,
    npz_dataset: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _site_packages(venv, reads_bytes=installed == "mlperf-dlio")
    assert installed_engine(venv / "bin" / "dlio_benchmark") == installed
    npz_dataset(tmp_path / "d", 2)
    args = ["run", "dlrm", "--data-dir", str(tmp_path / "d"), "--run-dir", str(tmp_path / "r")]
    assert main([*args, "--num-files", "2", "--dlio-venv", str(venv), "--engine", engine]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--engine {engine} writes configs for" in err
    assert f"pass --engine {installed}" in err
    assert not (tmp_path / "r").exists()


def test_an_unknown_flavour_is_not_refused(tmp_path: Path) -> None:
    # No dlio_benchmark package beside the executable (DLIO installed elsewhere): not judged.
    assert installed_engine(tmp_path / "bin" / "dlio_benchmark") is None
