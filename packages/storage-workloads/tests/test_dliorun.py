"""DLIO runs without DLIO: the results parser on a recorded run, datagen verification, the
command line DLIO gets, reports, and the list/show/size commands."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from storage_workloads import Datagen, to_datagen_config, workload
from storage_workloads.cli import main
from storage_workloads.dliorun import (
    DLIO_VENV_ENV,
    DlioError,
    aggregate_results,
    apply_params,
    dlio_command,
    find_dlio,
    parse_dlio_output,
    parse_param,
    verify_dataset,
    write_report,
    write_results,
)

# Recorded from a real run: dlio-benchmark 2.0.0, `storage-workloads run dlrm --accelerator h100
# --num-files 16 --processes 2 --param train.epochs=2 --param reader.batch_size=2
# --param train.computation_time=0.01 --param reader.read_threads=1` (host details removed).
FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"


def test_parser_on_recorded_run() -> None:
    result = parse_dlio_output(FIXTURE, au_threshold=0.70, record_length_bytes=512)
    summary = json.loads((FIXTURE / "summary.json").read_text())["metric"]
    assert result["num_accelerators"] == 2
    assert [e["epoch"] for e in result["epochs"]] == [1, 2]
    assert [e["steps"] for e in result["epochs"]] == [8, 8]  # 16 files / batch 2 / 2 ranks, x2
    for epoch, au, samples in zip(
        result["epochs"],
        summary["train_au_percentage"],
        summary["train_throughput_samples_per_second"],
        strict=True,
    ):
        assert epoch["au_percent"] == pytest.approx(au, rel=1e-9)
        assert epoch["samples_per_s"] == pytest.approx(samples, rel=1e-9)
        assert epoch["au_percent"] > 0 and epoch["samples_per_s"] > 0
    assert result["au_mean_percent"] == pytest.approx(summary["train_au_mean_percentage"])
    assert result["samples_per_s_mean"] == pytest.approx(
        summary["train_throughput_mean_samples_per_second"]
    )
    assert result["mb_per_s_mean"] == pytest.approx(summary["train_io_mean_MB_per_second"])
    assert result["consistent_with_summary"] is True
    assert result["passed"] is True  # 73.7% >= 70%
    assert result["au_mean_percent"] == pytest.approx(73.73426021489627)
    failed = parse_dlio_output(FIXTURE, au_threshold=0.9, record_length_bytes=512)
    assert failed["passed"] is False and failed["au_threshold_percent"] == 90


def test_parser_recomputes_from_the_rank_files(tmp_path: Path) -> None:
    """AU is the mean over ranks of each rank's step-weighted AU; samples/s the sum."""
    out = tmp_path / "out"
    shutil.copytree(FIXTURE, out)
    ranks = [json.loads((out / f"{r}_output.json").read_text()) for r in (0, 1)]
    for epoch in ("1", "2"):
        aus = []
        for data in ranks:
            steps = {b: len(v) for b, v in data[epoch]["proc"].items()}
            total = sum(steps.values())
            aus.append(sum(data[epoch]["au"][b] * n for b, n in steps.items()) / total)
        expected = statistics.fmean(aus)
        result = parse_dlio_output(out, au_threshold=0.7, record_length_bytes=512)
        assert result["epochs"][int(epoch) - 1]["au_percent"] == pytest.approx(expected)
    # A summary that the rank files do not reproduce is reported, not hidden.
    summary = json.loads((out / "summary.json").read_text())
    summary["metric"]["train_au_mean_percentage"] += 1
    (out / "summary.json").write_text(json.dumps(summary))
    result = parse_dlio_output(out, au_threshold=0.7, record_length_bytes=512)
    assert result["consistent_with_summary"] is False


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda d: (d / "summary.json").unlink(), "summary.json is missing"),
        (lambda d: (d / "1_output.json").unlink(), "1_output.json is missing"),
        (lambda d: (d / "0_output.json").write_text("{"), "cannot read"),
        (lambda d: (d / "summary.json").write_text('{"metric": {}}'), "no training metrics"),
    ],
)
def test_parser_errors(tmp_path: Path, damage: object, match: str) -> None:
    out = tmp_path / "out"
    shutil.copytree(FIXTURE, out)
    damage(out)  # type: ignore[operator]
    with pytest.raises(DlioError, match=match):
        parse_dlio_output(out, au_threshold=0.7, record_length_bytes=512)


def test_results_files_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for i in range(2):
        result = parse_dlio_output(FIXTURE, au_threshold=0.7, record_length_bytes=512)
        result.update(
            {
                "schema": "storage-workloads/dlio-results/1",
                "model": "dlrm",
                "accelerator": "h100",
                "processes": 2,
                "verdict": "INVALID",
            }
        )
        run = tmp_path / f"run_{i}"
        run.mkdir()
        write_results(run, result)
        runs.append(run)
    rows = (runs[0] / "results.csv").read_text().splitlines()
    assert rows[0] == "epoch,au_percent,samples_per_s,mb_per_s,steps,au_threshold_percent,passed"
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "mean"]
    assert rows[-1].endswith(",16,70,True")
    assert sorted(p.name for p in runs[0].iterdir()) == ["results.csv", "results.json"]
    report = aggregate_results([tmp_path])
    assert report["count"] == 2 and report["all_passed"] is True
    assert report["workloads"] == ["dlrm h100"]
    assert report["au_mean_percent"]["mean"] == pytest.approx(73.73426021489627)
    paths = write_report(tmp_path / "report", report)
    assert json.loads(paths["report.json"].read_text()) == report
    assert main(["report", str(runs[0]), str(runs[1])]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), all passed: True; AU mean 73.73%" in out
    with pytest.raises(DlioError, match=r"has no results\.json"):
        aggregate_results([tmp_path / "report"])
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "has no results.json" in capsys.readouterr().err


def write_npz_files(folder: Path, n: int, dim: int, samples: int) -> None:
    """Files of the size DLIO's npz generator writes: dim x dim x samples bytes of records
    plus the labels and the npz framing (506 B for two samples, measured)."""
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"img_{i}_of_{n}.npz").write_bytes(b"\0" * (dim * dim * samples + 506))


def test_verify_dataset(tmp_path: Path) -> None:
    # DLIO's npz generator writes dim x dim x samples bytes with dim = int(sqrt(record)).
    shape = Datagen(
        model="t",
        framework="pytorch",
        format="npz",
        num_files_train=4,
        num_samples_per_file=2,
        record_length_bytes=40_000,
    )
    write_npz_files(tmp_path / "ok" / "train", 4, 200, 2)
    v = verify_dataset(tmp_path / "ok", shape, num_files=4)
    assert v["passed"] and v["files_found"] == 4 and v["file_bytes_expected"] == 80_000
    # Files of DLIO's default 64 KiB record (what a misspelt record-length key gives).
    write_npz_files(tmp_path / "default" / "train", 4, 256, 2)
    v = verify_dataset(tmp_path / "default", shape, num_files=4)
    assert not v["passed"]
    assert "DLIO did not take the record length" in v["problems"][0]
    v = verify_dataset(tmp_path / "ok", shape, num_files=5)
    assert v["problems"] == [f"4 .npz files in {tmp_path / 'ok' / 'train'}, expected 5"]
    jpeg = Datagen(
        model="t",
        framework="pytorch",
        format="jpeg",
        num_files_train=1,
        num_samples_per_file=1,
        record_length_bytes=10,
    )
    (tmp_path / "j" / "train" / "0").mkdir(parents=True)
    (tmp_path / "j" / "train" / "0" / "a.jpeg").write_bytes(b"x" * 5000)
    v = verify_dataset(tmp_path / "j", jpeg, num_files=1)
    assert v["passed"] and v["size_compared"] is False  # subfolders counted, size not compared


def test_dlio_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/bin/{name}")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    cmd = dlio_command(
        "/v/bin/dlio_benchmark",
        config_dir=tmp_path / "configs",
        workload_name="dlrm_h100",
        output_dir=tmp_path / "out",
        processes=4,
        mpi_args=["--host", "a,b"],
    )
    assert cmd == [
        "/opt/bin/mpirun",
        "-n",
        "4",
        "--allow-run-as-root",
        "--oversubscribe",
        "--host",
        "a,b",
        "/v/bin/dlio_benchmark",
        "--config-dir",
        str((tmp_path / "configs").resolve()),
        "workload=dlrm_h100",
        f"++workload.output.folder='{(tmp_path / 'out').resolve()}'",
        f"hydra.run.dir='{(tmp_path / 'out').resolve()}'",
    ]
    single = dlio_command(
        "d", config_dir="c", workload_name="w", output_dir=tmp_path, processes=1, mpi=False
    )
    assert single[0] == "d"
    with pytest.raises(ValueError, match="2 processes need mpirun"):
        dlio_command("d", config_dir="c", workload_name="w", output_dir="o", processes=2, mpi=False)
    with pytest.raises(DlioError, match="quote"):
        dlio_command("d", config_dir="c", workload_name="w", output_dir="it's", mpi=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(DlioError, match="mpirun not found: install Open MPI"):
        dlio_command("d", config_dir="c", workload_name="w", output_dir="o")


def test_find_dlio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DLIO_VENV_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(DlioError, match=r"dlio_benchmark is not on PATH.*install-dlio\.sh"):
        find_dlio()
    with pytest.raises(DlioError, match=r"no dlio_benchmark in .*\(--dlio-venv\)"):
        find_dlio(tmp_path)
    exe = tmp_path / "venv" / "bin" / "dlio_benchmark"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv(DLIO_VENV_ENV, str(tmp_path / "venv"))
    assert find_dlio() == exe
    monkeypatch.setenv(DLIO_VENV_ENV, str(tmp_path / "missing"))
    with pytest.raises(DlioError, match=rf"\(\${DLIO_VENV_ENV}\)"):
        find_dlio()


def test_cli_run_without_dlio_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(DLIO_VENV_ENV, raising=False)
    args = ["--data-dir", str(tmp_path / "d"), "--run-dir", str(tmp_path / "r")]
    code = main(["run", "dlrm", *args, "--dlio-venv", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "no dlio_benchmark in" in err
    assert main(["datagen", "bert", *args]) == 2
    assert "unknown model 'bert'" in capsys.readouterr().err
    assert main(["run", "dlrm", *args, "--param", "novalue"]) == 2
    assert "--param takes KEY=VALUE" in capsys.readouterr().err


def test_params() -> None:
    assert parse_param("train.epochs=1") == ("train.epochs", 1)
    assert parse_param("reader.odirect=true") == ("reader.odirect", True)
    assert parse_param("dataset.data_folder=/x:y") == ("dataset.data_folder", "/x:y")
    config = {"train": {"epochs": 5}, "framework": "pytorch"}
    apply_params(config, {"train.epochs": 1, "reader.read_threads": 2})
    assert config == {"train": {"epochs": 1}, "framework": "pytorch", "reader": {"read_threads": 2}}
    with pytest.raises(ValueError, match="framework is a value"):
        apply_params(config, {"framework.x": 1})
    with pytest.raises(ValueError, match="dotted DLIO keys"):
        apply_params(config, {"a..b": 1})


def test_datagen_config() -> None:
    config = to_datagen_config(workload("retinanet", "mi355"), data_folder="d", num_files=20_001)
    assert config == {
        "model": {"name": "retinanet"},
        "framework": "pytorch",
        "workflow": {"generate_data": True, "train": False, "checkpoint": False},
        "dataset": {
            "data_folder": "d",
            "format": "jpeg",
            "num_files_train": 20_001,
            "num_samples_per_file": 1,
            "record_length": 322_957,
            "num_subfolders_train": 3,
        },
    }
    fork = to_datagen_config(workload("unet3d", "h100"), data_folder="d", engine="mlperf-dlio")
    assert fork["dataset"]["record_length_bytes_stdev"] == 68_341_808


def test_cli_list_show_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "hstu_yambda  any" in out and "llama3_1t" in out
    assert main(["list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed["training"]) == 18 and len(listed["checkpointing"]) == 4
    assert main(["show", "retinanet", "--accelerator", "b200"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["dlio_config"]["dataset"]["record_length"] == 322_957
    assert shown["assumed"]["read_threads"] == "not public: DLIO's default"
    assert main(["show", "unet3d", "--format", "json", "--engine", "mlperf-dlio", "--datagen"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["dlio_config"]["workflow"]["generate_data"] is True
    assert shown["dlio_config"]["dataset"]["record_length_bytes"] == 146_600_628
    assert main(["show", "llama3-8b"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["dlio_config"]["checkpoint"]["fsync"] is True
    assert main(["show", "dlrm", "--accelerator", "mi355"]) == 2
    assert "no dlrm workload for accelerator 'mi355'" in capsys.readouterr().err
    assert main(["size", "unet3d", "--accelerators", "8", "--host-memory-gb", "128"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("unet3d on h100: 28,000 files")
    assert "the steps term wins" in out
    assert main(["size", "unet3d", "--accelerators", "8", "--host-memory-gb", "128",
                 "--hosts", "8", "--format", "json"]) == 0  # fmt: skip
    sized = json.loads(capsys.readouterr().out)
    assert (sized["num_files_train"], sized["winner"]) == (37_501, "memory")
    assert sized["num_subfolders_train"] == 4
    with pytest.raises(SystemExit):
        main(["size", "unet3d", "--accelerators", "0", "--host-memory-gb", "1"])
    assert "--accelerators: must be >= 1" in capsys.readouterr().err
