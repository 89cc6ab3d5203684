"""The real DLIO engine: one tiny datagen and training run per file format (npz, jpeg,
tfrecord, parquet), the config-name guard, and the checkpointing workload.

Needs a DLIO virtual environment made by ``scripts/install-dlio.sh VENV_DIR``, named by
``$STORAGE_WORKLOADS_DLIO_VENV``, and Open MPI's ``mpirun``; skipped (saying why) otherwise.
The base install has TensorFlow and no torch, so the runs switch the pytorch workloads to the
tensorflow framework and data loader (open-division parameters, which the checker reports).
Each run prints ``timing: ...`` (see with ``pytest -s``); docs/dlio-runs.md records them.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads import checkpoint_workload
from storage_workloads.cli import main
from storage_workloads.dlio import launch as launch_module
from storage_workloads.dlio_ext.sw_dlio_ext.formats import check_tfrecord_index
from storage_workloads.dliorun import DLIO_VENV_ENV, DlioError, run_checkpointing
from storage_workloads.dotted import apply_params
from storage_workloads.hosts import local_host_memory

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


@pytest.fixture(scope="module", autouse=True)
def loopback_mpi() -> Any:
    """Open MPI stays on this host: its TCP transports on the loopback interface only."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMPI_MCA_btl_tcp_if_include", "lo")
        mp.setenv("OMPI_MCA_oob_tcp_if_include", "lo")
        yield


TF = ["--param", "framework=tensorflow"]
TF_RUN = [*TF, "--param", "reader.data_loader=tensorflow"]
FILES = 16


def datagen(root: Path, model: str, *args: str, accelerator: str = "h100") -> dict[str, Any]:
    code = main(
        [
            "datagen",
            model,
            "--accelerator",
            accelerator,
            "--data-dir",
            str(root / "data"),
            "--run-dir",
            str(root / "datagen"),
            "--quiet",
            *args,
        ]
    )
    console = root / "datagen" / "dlio-console.log"
    assert code == 0, console.read_text()[-3000:] if console.exists() else code
    record = json.loads((root / "datagen" / "datagen.json").read_text())
    print(f"timing: datagen {model} {accelerator}: {record['wall_s']:.1f} s")
    return record


def run(root: Path, model: str, *args: str, accelerator: str = "h100") -> dict[str, Any]:
    """A 2-rank training run; returns results.json after checking it against DLIO's own
    summary.json and the Hydra record of the config that ran."""
    out = root / "run"
    code = main(
        [
            "run",
            model,
            "--accelerator",
            accelerator,
            "--data-dir",
            str(root / "data"),
            "--run-dir",
            str(out),
            "--processes",
            "2",
            "--quiet",
            *args,
        ]
    )
    console = out / "dlio-console.log"
    assert (out / "results.json").is_file(), console.read_text()[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert code == (0 if result["passed"] else 1)
    summary = json.loads((out / "summary.json").read_text())["metric"]
    assert result["num_accelerators"] == 2
    assert all(e["au_percent"] > 0 and e["samples_per_s"] > 0 for e in result["epochs"])
    assert result["consistent_with_summary"] is True
    assert result["au_mean_percent"] == pytest.approx(summary["train_au_mean_percentage"])
    # What DLIO ran is the config the run wrote (the guard raises otherwise; shown here too).
    hydra = yaml.safe_load((out / "dlio_config" / "hydra.yaml").read_text())
    name = f"storage_workloads_{model}_{accelerator}"
    assert hydra["hydra"]["runtime"]["choices"]["workload"] == name
    ran = yaml.safe_load((out / "dlio_config" / "config.yaml").read_text())["workload"]
    wrote = yaml.safe_load((out / "configs" / "workload" / f"{name}.yaml").read_text())
    # The published file, and the run's changes as Hydra overrides (recorded in run.json).
    overrides = json.loads((out / "run.json").read_text())["dlio_overrides"]
    expected = apply_params(wrote, overrides)
    assert ran["dataset"] == expected["dataset"] and ran["train"] == expected["train"]
    print(
        f"timing: run {model} {accelerator} (2 ranks, {len(result['epochs'])} epochs): "
        f"{result['wall_s']:.1f} s, AU {result['au_mean_percent']:.1f}%"
    )
    return result


# ---------------------------------------------------------------------------------------------
# npz: dlrm (DLIO's own generator and reader)


@pytest.fixture(scope="module")
def npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("npz")
    datagen(root, "dlrm", "--num-files", str(FILES), *TF)
    return root


def test_npz_datagen_files_on_disk(npz: Path) -> None:
    files = sorted((npz / "data" / "train").glob("*.npz"))
    assert len(files) == FILES
    sizes = [p.stat().st_size for p in files]
    # 512-byte records: DLIO writes a 22 x 22 uint8 array (484 B) plus the npz framing, far
    # from the 64 KiB of its default record length.
    assert all(900 < size < 1100 for size in sizes), sizes
    record = json.loads((npz / "datagen" / "datagen.json").read_text())
    assert record["verification"]["passed"] is True
    assert record["verification"]["files_found"] == FILES
    assert record["dlio_extensions"] == []  # plain dlio_benchmark


def test_wrong_record_length_key_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dlio-benchmark 2.0.0 ignores record_length_bytes (the MLPerf fork's key) silently: a run
    for the fork on it is refused before anything is written."""
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
    assert code == 2
    err = capsys.readouterr().err
    assert "writes configs for the MLPerf DLIO fork, but" in err
    assert "is dlio-benchmark 2.0.0: pass --engine dlio" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


def test_npz_training_run(npz: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(
        npz,
        "dlrm",
        "--num-files",
        str(FILES),
        *TF_RUN,
        "--param",
        "reader.batch_size=2",
        "--param",
        "reader.read_threads=1",
        "--param",
        "train.epochs=2",
        "--param",
        "train.computation_time=0.01",
    )
    run_dir = npz / "run"
    summary = json.loads((run_dir / "summary.json").read_text())["metric"]
    assert len(result["epochs"]) == 2
    assert all(e["steps"] == 8 for e in result["epochs"])  # 16 files / batch 2 / 2 ranks, x2
    assert result["samples_per_s_mean"] == pytest.approx(
        summary["train_throughput_mean_samples_per_second"]
    )
    assert result["mb_per_s_mean"] == pytest.approx(summary["train_io_mean_MB_per_second"])
    assert result["passed"] == (result["au_mean_percent"] >= 70)
    with (run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["epoch"] for r in rows] == ["1", "2", "mean"]
    assert float(rows[-1]["au_percent"]) == pytest.approx(result["au_mean_percent"], rel=1e-5)
    # The rules: the tiny run changed the workload, so it is no submission.
    assert result["verdict"] == "INVALID"
    rules = {(i["parameter"], i["rule"]) for i in result["issues"]}
    assert ("train.epochs", "allowed-overrides") in rules
    assert ("framework", "open-parameters") in rules
    capsys.readouterr()
    assert main(["check", str(run_dir), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "INVALID"
    assert main(["report", str(run_dir), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["count"] == 1
    assert report["samples_per_s_mean"]["mean"] == pytest.approx(result["samples_per_s_mean"])
    # The run directory now holds results: a second run into it is refused, nothing touched.
    before = (run_dir / "results.json").read_bytes()
    again = ["run", "dlrm", "--data-dir", str(npz / "data"), "--run-dir", str(run_dir)]
    assert main([*again, "--num-files", str(FILES), "--quiet", *TF_RUN]) == 2
    assert "already holds an earlier run" in capsys.readouterr().err
    assert (run_dir / "results.json").read_bytes() == before


def test_config_name_clash_is_caught(
    npz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the project prefix the unet3d h100 config is named like DLIO's packaged one,
    which Hydra picks: DLIO then runs its own workload (with the run's Hydra overrides), and
    the check of the Hydra record says so instead of reporting that run."""
    monkeypatch.setattr(launch_module, "CONFIG_PREFIX", "")
    args = ["--data-dir", str(npz / "data"), "--run-dir", str(tmp_path / "run")]
    code = main(["run", "unet3d", "--accelerator", "h100", *args, "--num-files", "4", *TF_RUN])
    err = capsys.readouterr().err
    assert code == 2
    assert "DLIO did not run the workload config that was written (unet3d_h100.yaml)" in err
    # The run's changes reach DLIO's own config too (Hydra overrides); the file's keys do not.
    assert "dataset.record_length_bytes: written 146600628, missing from what DLIO ran" in err
    assert not (tmp_path / "run" / "results.json").exists()


# ---------------------------------------------------------------------------------------------
# Two client hosts on the loopback: mpirun --host localhost:1,127.0.0.1:1

LOOPBACK = "localhost:1,127.0.0.1:1"


def test_two_loopback_hosts(
    npz: Path, tmp_path: Path, no_remote_launch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 2-rank run over two named hosts into a results tree: the memory of each host is read
    through mpirun before the run, recorded, and summed by the sizing check; DLIO's own reading
    agrees; a declared memory below it is refused before anything is created."""
    local = local_host_memory()
    assert local is not None
    gib = local.per_host_gib[0]
    root = tmp_path / "results"
    args = ["run", "dlrm", "--data-dir", str(npz / "data"), "--results-dir", str(root)]
    args += ["--hosts", LOOPBACK, "--num-files", str(FILES), "--quiet", *TF_RUN]
    args += ["--param", "reader.batch_size=2", "--param", "reader.read_threads=1"]
    args += ["--param", "train.epochs=1", "--param", "train.computation_time=0.01"]
    assert main([*args, "--host-memory-gb", f"{gib / 2:.3f}"]) == 2
    assert "declares" in capsys.readouterr().err and not root.exists()

    code = main([*args, "--host-memory-gb", f"{gib:.3f}"])
    err = capsys.readouterr().err
    runs = list((root / "training" / "dlrm" / "run").iterdir())
    assert len(runs) == 1, err
    run = runs[0]
    result = json.loads((run / "results.json").read_text())
    assert code == (0 if result["passed"] else 1)
    assert result["hosts"] == LOOPBACK and result["num_accelerators"] == 2
    assert result["command"][1:5] == ["-n", "2", "--host", LOOPBACK]
    assert result["consistent_with_summary"] is True
    assert (run / "0_output.json").is_file() and (run / "1_output.json").is_file()
    record = json.loads((run / "run.json").read_text())
    memory = record["host_memory"]
    assert memory["method"] == "mpirun"
    assert [h["host"] for h in memory["hosts"]] == ["localhost", "127.0.0.1"]
    assert [h["mem_total_bytes"] for h in memory["hosts"]] == [local.total_bytes] * 2
    assert memory["same_machine"] == [["localhost", "127.0.0.1"]]
    assert record["params"]["hosts"] == 2
    assert record["params"]["measured_host_memory_gb"] == pytest.approx([gib, gib])
    # DLIO reads the same memory (psutil's total is MemTotal); it sees one machine.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["host_memory_GB"][0] == pytest.approx(gib, rel=1e-9)
    # The sizing check summed what was read from the two hosts.
    sizing = [i for i in result["issues"] if i["rule"] == "sizing"]
    assert f"2 host(s) of {gib:,.2f} + {gib:,.2f} GiB (read from them)" in sizing[0]["message"]
    meta = json.loads(next(run.glob("training_*_metadata.json")).read_text())
    assert meta["cluster_information"]["num_hosts"] == 2
    assert meta["cluster_information"]["total_memory_bytes"] == 2 * local.total_bytes
    assert not no_remote_launch.exists()  # nothing was launched through ssh
    assert main(["report", str(root), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 1
    print(f"timing: run dlrm h100 on {LOOPBACK} (1 epoch): {result['wall_s']:.1f} s")


# ---------------------------------------------------------------------------------------------
# jpeg: retinanet (the sized jpeg generator, DLIO's image reader)


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpeg")
    # Without the stdev every file must be exactly the 153,600-byte record.
    datagen(root, "retinanet", "--num-files", "8", *TF, "--param", "dataset.record_length_stdev=0")
    return root


def test_jpeg_files_have_the_declared_size(jpeg: Path) -> None:
    files = sorted((jpeg / "data" / "train").glob("*.jpeg"))
    assert len(files) == 8
    assert {p.stat().st_size for p in files} == {153_600}  # DLIO's own: about 85,000
    record = json.loads((jpeg / "datagen" / "datagen.json").read_text())
    assert record["verification"]["size_compared"] is True
    assert record["verification"]["passed"] is True
    assert record["dlio_extensions"] == ["jpeg-generator"]
    for path in files:  # image data, and a few KB of comment padding at most
        assert padding(path.read_bytes()) < 0.1 * 153_600
    image = pytest.importorskip("PIL.Image")
    with image.open(files[0]) as img:  # a real JPEG: it decodes
        img.load()
        assert img.format == "JPEG" and img.width * img.height > 100_000


def padding(data: bytes) -> int:
    """Bytes of the comment (COM) segments right after a JPEG's start-of-image marker."""
    assert data[:2] == b"\xff\xd8"
    at, total = 2, 0
    while data[at : at + 2] == b"\xff\xfe":
        size = 2 + int.from_bytes(data[at + 2 : at + 4], "big")
        total += size
        at += size
    return total


def test_jpeg_training_run(jpeg: Path) -> None:
    result = run(
        jpeg,
        "retinanet",
        "--num-files",
        "8",
        *TF_RUN,
        "--param",
        "dataset.record_length_stdev=0",
        "--param",
        "reader.batch_size=2",
        "--param",
        "reader.read_threads=1",
        "--param",
        "train.epochs=2",
        "--param",
        "train.computation_time=0.05",
    )
    assert [e["steps"] for e in result["epochs"]] == [4, 4]  # 8 files / batch 2: 2 a rank, x2


# ---------------------------------------------------------------------------------------------
# tfrecord: resnet50 (the tfrecord generator without DALI, DLIO's tf.data reader)

TFRECORD = ["--param", "dataset.num_samples_per_file=8", "--param", "dataset.record_length=16384"]


@pytest.fixture(scope="module")
def tfrecord(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tfrecord")
    datagen(root, "resnet50", "--num-files", "4", *TFRECORD)
    return root


def test_tfrecord_datagen_without_dali(tfrecord: Path) -> None:
    files = sorted((tfrecord / "data" / "train").glob("*.tfrecord"))
    assert len(files) == 4
    for path in files:  # DALI's index format, matching the records
        index = tfrecord / "data" / "index" / "train" / f"{path.name}.idx"
        assert check_tfrecord_index(path, index) is None
        lines = index.read_text().splitlines()
        assert len(lines) == 8 and lines[0].startswith("0 ")
        assert 16_384 < path.stat().st_size / 8 < 16_384 + 64  # the record plus framing
    record = json.loads((tfrecord / "datagen" / "datagen.json").read_text())
    assert record["verification"]["passed"] is True
    assert record["verification"]["content_checked_files"] == 4
    assert record["dlio_extensions"] == ["tfrecord-generator"]


def test_tfrecord_training_run(tfrecord: Path) -> None:
    result = run(
        tfrecord,
        "resnet50",
        "--num-files",
        "4",
        *TFRECORD,
        "--param",
        "reader.batch_size=4",
        "--param",
        "reader.read_threads=1",
        "--param",
        "train.epochs=2",
        "--param",
        "train.computation_time=0.02",
    )
    assert [e["steps"] for e in result["epochs"]] == [8, 8]  # 32 samples / batch 4: 4 a rank, x2
    assert result["dlio_extensions"] == []  # DLIO reads tfrecord itself


# ---------------------------------------------------------------------------------------------
# parquet: dlrm b200 (the parquet generator and reader)

PARQUET = [
    "--param",
    "dataset.num_samples_per_file=1024",
    "--param",
    "dataset.parquet.row_group_size=256",
]


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parquet")
    datagen(root, "dlrm", "--num-files", "4", *TF, *PARQUET, accelerator="b200")
    return root


def test_parquet_datagen(parquet: Path) -> None:
    files = sorted((parquet / "data" / "train").glob("*.parquet"))
    assert len(files) == 4
    record = json.loads((parquet / "datagen" / "datagen.json").read_text())
    v = record["verification"]
    assert v["passed"] is True, v["problems"]
    assert v["content_checked_files"] == 4  # footers read back: rows, columns, row groups
    schema = record["parquet_schema"]
    assert schema["source"] == "config"  # the columns storage-workloads emits (v3.0)
    assert len(schema["columns"]) == 200 and schema["row_bytes"] == 761
    assert schema["read_bytes"] == 160 and schema["row_group_size"] == 256
    assert record["dlio_extensions"] == ["parquet-generator"]
    # 1,024 rows x 761 B of column data, plus the footer of 200 columns x 4 row groups.
    assert all(1024 * 761 < p.stat().st_size < 1024 * 761 * 1.5 for p in files)


def test_parquet_training_run(parquet: Path) -> None:
    result = run(
        parquet,
        "dlrm",
        "--num-files",
        "4",
        *TF_RUN,
        *PARQUET,
        "--param",
        "reader.batch_size=128",
        "--param",
        "reader.read_threads=1",
        "--param",
        "train.epochs=2",
        "--param",
        "train.computation_time=0.002",
        accelerator="b200",
    )
    # 4,096 rows / batch 128 / 2 ranks = 16 steps a rank, summed over the ranks, x2 epochs
    assert [e["steps"] for e in result["epochs"]] == [32, 32]
    assert result["dlio_extensions"] == ["parquet-reader"]
    written = next((parquet / "run" / "configs" / "workload").glob("*.yaml")).read_text()
    assert yaml.safe_load(written)["reader"]["reader_classname"] == (
        "sw_dlio_ext.parquet.ParquetReader"
    )
    log = (parquet / "run" / "dlio.log").read_text()
    assert "custom data reader ParquetReader" in log


def test_parquet_vector_columns(tmp_path: Path) -> None:
    """flux's schema (five float32 vectors, 2,164,832 B a row) written with the generator's
    column code in DLIO's environment, and its footer read back: no DLIO run needed."""
    from storage_workloads import to_datagen_config, workload
    from storage_workloads.dlio_ext import PLUGIN_PATH
    from storage_workloads.dlio_ext.sw_dlio_ext.formats import compare_parquet, parquet_schema

    config = to_datagen_config(workload("flux", "b200"), data_folder=tmp_path)
    schema = parquet_schema(config)
    assert schema.row_bytes == 2_164_832 and len(schema.columns) == 5
    (tmp_path / "config.json").write_text(json.dumps(config))
    script = """
import json, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from sw_dlio_ext.formats import parquet_schema
from sw_dlio_ext.parquet import arrow_schema, column_array
from sw_dlio_ext.parquet_info import describe
schema = parquet_schema(json.load(open(sys.argv[1])))
rng = np.random.default_rng(0)
with pq.ParquetWriter(sys.argv[2], arrow_schema(schema), compression="NONE") as w:
    arrays = [column_array(c, 3, rng) for c in schema.columns]
    w.write_table(pa.Table.from_arrays(arrays, schema=arrow_schema(schema)))
print(json.dumps(describe(sys.argv[2])))
"""
    python = Path(VENV) / "bin" / "python"  # type: ignore[arg-type]
    done = subprocess.run(
        [str(python), "-c", script, str(tmp_path / "config.json"), str(tmp_path / "f.parquet")],
        env={**os.environ, "PYTHONPATH": str(PLUGIN_PATH)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads(done.stdout.splitlines()[-1])
    assert info["rows"] == 3 and info["row_group_rows"] == [3]
    assert [c["row_bytes"] for c in info["columns"]] == [4 * c.size for c in schema.columns]
    assert compare_parquet(info, schema, rows=3) == []
    assert 3 * 2_164_832 < (tmp_path / "f.parquet").stat().st_size < 3 * 2_164_832 + 65_536


# ---------------------------------------------------------------------------------------------
# checkpointing: llama3 8b, scaled down (the checkpoint mechanism)


def test_checkpointing_run(tmp_path: Path) -> None:
    w = checkpoint_workload("llama3_8b")
    result = run_checkpointing(
        w,
        run_dir=tmp_path / "run",
        checkpoint_folder=tmp_path / "checkpoints",
        processes=2,
        engine="dlio",
        emulation=True,
        scale=1e-4,
    )
    # 2 of 8 ranks (subset mode): a quarter of 105 GB, times 1e-4.
    assert result.bytes_per_checkpoint == pytest.approx(105e9 * 2 / 8 * 1e-4, rel=1e-6)
    assert result.write.count == 10 and result.read.count == 10
    assert all(s > 0 for s in result.write.seconds + result.read.seconds)
    assert result.write.gb_per_s_mean > 0 and result.read.gb_per_s_mean > 0
    assert result.files_written == 2 * 2 * 10  # ranks x (model, optimizer) x checkpoints
    assert result.bytes_on_disk == 10 * result.bytes_per_checkpoint
    assert result.fsync is True
    assert len(result.dlio_checkpoint_durations_s) == 10  # DLIO saw each one too
    saved = json.loads((tmp_path / "run" / "checkpoint-results.json").read_text())
    assert saved == result.as_dict()
    print(
        f"timing: checkpointing llama3_8b (2 ranks, scale 1e-4, 10+10): {result.wall_s:.1f} s,"
        f" write {result.write.gb_per_s_mean:.3f} GB/s,"
        f" read {result.read.gb_per_s_mean:.3f} GB/s"
    )
    with pytest.raises(DlioError, match="is not empty"):
        run_checkpointing(
            w,
            run_dir=tmp_path / "again",
            checkpoint_folder=tmp_path / "checkpoints",
            processes=2,
            engine="dlio",
            emulation=True,
        )
