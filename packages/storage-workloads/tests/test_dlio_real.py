"""The real DLIO engine: a tiny datagen and training run through the command line.

Needs a DLIO virtual environment made by ``scripts/install-dlio.sh VENV_DIR``, named by
``$STORAGE_WORKLOADS_DLIO_VENV``, and Open MPI's ``mpirun``; skipped (saying why) otherwise.
The base install has TensorFlow and no torch, so the runs switch the dlrm workload to the
tensorflow framework and data loader (open-division parameters, which the checker reports).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from storage_workloads.cli import main
from storage_workloads.dliorun import DLIO_VENV_ENV

VENV = os.environ.get(DLIO_VENV_ENV)
if not VENV:
    pytest.skip(
        f"${DLIO_VENV_ENV} is not set: no DLIO environment (make one with "
        "packages/storage-workloads/scripts/install-dlio.sh VENV_DIR)",
        allow_module_level=True,
    )
if not (Path(VENV) / "bin" / "dlio_benchmark").is_file():
    pytest.skip(f"no dlio_benchmark in ${DLIO_VENV_ENV} ({VENV})", allow_module_level=True)
if shutil.which("mpirun") is None:
    pytest.skip("mpirun not found (Debian: openmpi-bin)", allow_module_level=True)

TF = ["--param", "framework=tensorflow"]
FILES = 16


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dlio")
    code = main(
        [
            "datagen",
            "dlrm",
            "--data-dir",
            str(root / "data"),
            "--run-dir",
            str(root / "datagen"),
            "--num-files",
            str(FILES),
            "--quiet",
            *TF,
        ]
    )
    assert code == 0, (root / "datagen" / "dlio-console.log").read_text()[-3000:]
    return root


def test_datagen_files_on_disk(dataset: Path) -> None:
    files = sorted((dataset / "data" / "train").glob("*.npz"))
    assert len(files) == FILES
    sizes = [p.stat().st_size for p in files]
    # 512-byte records: DLIO writes a 22 x 22 uint8 array (484 B) plus the npz framing, far
    # from the 64 KiB of its default record length.
    assert all(900 < size < 1100 for size in sizes), sizes
    record = json.loads((dataset / "datagen" / "datagen.json").read_text())
    assert record["verification"]["passed"] is True
    assert record["verification"]["files_found"] == FILES


def test_wrong_record_length_key_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dlio-benchmark 2.0.0 ignores record_length_bytes (the MLPerf fork's key) silently."""
    code = main(
        [
            "datagen",
            "dlrm",
            "--engine",
            "mlperf-dlio",
            "--data-dir",
            str(tmp_path / "data"),
            "--run-dir",
            str(tmp_path / "run"),
            "--num-files",
            "2",
            "--quiet",
            *TF,
        ]
    )
    assert code == 1
    assert "DLIO did not take the record length" in capsys.readouterr().err
    sizes = [p.stat().st_size for p in (tmp_path / "data" / "train").glob("*.npz")]
    assert len(sizes) == 2 and min(sizes) > 65_536  # DLIO's default 64 KiB records


def test_training_run(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = dataset / "run"
    code = main(
        [
            "run",
            "dlrm",
            "--accelerator",
            "h100",
            "--data-dir",
            str(dataset / "data"),
            "--run-dir",
            str(run),
            "--num-files",
            str(FILES),
            "--processes",
            "2",
            "--quiet",
            *TF,
            "--param",
            "reader.data_loader=tensorflow",
            "--param",
            "reader.batch_size=2",
            "--param",
            "reader.read_threads=1",
            "--param",
            "train.epochs=2",
            "--param",
            "train.computation_time=0.01",
        ]
    )
    out = capsys.readouterr().out
    result = json.loads((run / "results.json").read_text())
    assert code == (0 if result["passed"] else 1), out
    summary = json.loads((run / "dlio" / "summary.json").read_text())["metric"]
    # Parsed AU and throughput are positive and agree with DLIO's own summary.json.
    assert result["num_accelerators"] == 2 and len(result["epochs"]) == 2
    assert all(e["steps"] == 8 for e in result["epochs"])  # 16 files / batch 2 / 2 ranks, x2
    assert all(e["au_percent"] > 0 and e["samples_per_s"] > 0 for e in result["epochs"])
    assert result["consistent_with_summary"] is True
    assert result["au_mean_percent"] == pytest.approx(summary["train_au_mean_percentage"])
    assert result["samples_per_s_mean"] == pytest.approx(
        summary["train_throughput_mean_samples_per_second"]
    )
    assert result["mb_per_s_mean"] == pytest.approx(summary["train_io_mean_MB_per_second"])
    assert result["passed"] == (result["au_mean_percent"] >= 70)
    with (run / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["epoch"] for r in rows] == ["1", "2", "mean"]
    assert float(rows[-1]["au_percent"]) == pytest.approx(result["au_mean_percent"], rel=1e-5)
    # The rules: the tiny run changed the workload, so it is no submission.
    assert result["verdict"] == "INVALID"
    rules = {(i["parameter"], i["rule"]) for i in result["issues"]}
    assert ("train.epochs", "allowed-overrides") in rules
    assert ("framework", "open-parameters") in rules
    assert main(["check", str(run), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "INVALID"
    assert main(["report", str(run), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["count"] == 1
    assert report["samples_per_s_mean"]["mean"] == pytest.approx(result["samples_per_s_mean"])
