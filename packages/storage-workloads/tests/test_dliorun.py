"""DLIO runs without DLIO: the results parser on a recorded run, datagen verification (sizes,
tfrecord indexes, parquet footers), the guard on the config DLIO ran, the refusals that protect
earlier results, the command line DLIO gets, the checkpointing config, the file-format helpers
of the DLIO extensions, reports, and the list/show/size commands."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import statistics
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads import (
    ASSUMED_FIELDS,
    WORKLOADS,
    Datagen,
    checkpoint_workload,
    to_datagen_config,
    to_dlio_config,
    workload,
)
from storage_workloads.cli import main
from storage_workloads.dlio_ext.sw_dlio_ext.formats import (
    DEFAULT_ROW_GROUP_SIZE,
    SchemaError,
    check_tfrecord_index,
    compare_parquet,
    jpeg_padding_segments,
    pad_jpeg,
    parquet_schema,
    tfrecord_index,
    tfrecord_records,
)
from storage_workloads.dliorun import (
    DLIO_VENV_ENV,
    DlioError,
    aggregate_results,
    apply_params,
    checkpoint_config,
    config_name,
    dlio_command,
    find_dlio,
    parse_dlio_output,
    parse_param,
    verify_dataset,
    verify_effective_config,
    write_report,
    write_results,
)
from storage_workloads.hosts import HostSpec

# Recorded from a real run: dlio-benchmark 2.0.0, `storage-workloads run dlrm --accelerator h100
# --num-files 16 --processes 2 --param train.epochs=2 --param reader.batch_size=2
# --param train.computation_time=0.01 --param reader.read_threads=1` (host details removed).
FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"


def test_parser_on_recorded_run() -> None:
    result = parse_dlio_output(FIXTURE, au_threshold=0.70, record_length_bytes=512)
    summary = json.loads((FIXTURE / "summary.json").read_text())["metric"]
    assert result.num_accelerators == 2
    assert [e.epoch for e in result.epochs] == [1, 2]
    assert [e.steps for e in result.epochs] == [8, 8]  # 16 files / batch 2 / 2 ranks, x2
    for epoch, au, samples in zip(
        result.epochs,
        summary["train_au_percentage"],
        summary["train_throughput_samples_per_second"],
        strict=True,
    ):
        assert epoch.au_percent == pytest.approx(au, rel=1e-9)
        assert epoch.samples_per_s == pytest.approx(samples, rel=1e-9)
        assert epoch.au_percent > 0 and epoch.samples_per_s > 0
    assert result.au_mean_percent == pytest.approx(summary["train_au_mean_percentage"])
    assert result.samples_per_s_mean == pytest.approx(
        summary["train_throughput_mean_samples_per_second"]
    )
    assert result.mb_per_s_mean == pytest.approx(summary["train_io_mean_MB_per_second"])
    assert result.consistent_with_summary is True
    assert result.passed is True  # 73.7% >= 70%
    assert result.au_mean_percent == pytest.approx(73.73426021489627)
    failed = parse_dlio_output(FIXTURE, au_threshold=0.9, record_length_bytes=512)
    assert failed.passed is False and failed.au_threshold_percent == 90


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
        assert result.epochs[int(epoch) - 1].au_percent == pytest.approx(expected)
    # A summary that the rank files do not reproduce is reported, not hidden.
    summary = json.loads((out / "summary.json").read_text())
    summary["metric"]["train_au_mean_percentage"] += 1
    (out / "summary.json").write_text(json.dumps(summary))
    result = parse_dlio_output(out, au_threshold=0.7, record_length_bytes=512)
    assert result.consistent_with_summary is False


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
        result = {
            "schema": "storage-workloads/dlio-results/1",
            **parse_dlio_output(FIXTURE, au_threshold=0.7, record_length_bytes=512).as_dict(),
            "model": "dlrm",
            "accelerator": "h100",
            "processes": 2,
            "verdict": "INVALID",
        }
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
    assert report.count == 2 and report.all_passed is True
    assert report.workloads == ["dlrm h100"]
    assert report.au_mean_percent is not None
    assert report.au_mean_percent.mean == pytest.approx(73.73426021489627)
    paths = write_report(tmp_path / "report", report)
    assert json.loads(paths["report.json"].read_text()) == report.as_dict()
    assert main(["report", str(runs[0]), str(runs[1])]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), all passed: True; AU mean 73.73%" in out
    with pytest.raises(DlioError, match=r"has no results\.json"):
        aggregate_results([tmp_path / "report"])
    assert main(["report", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nothing'}: does not exist" in err and len(err.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
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
    assert v.passed and v.files_found == 4 and v.file_bytes_expected == 80_000
    # Files of DLIO's default 64 KiB record (what a misspelt record-length key gives).
    write_npz_files(tmp_path / "default" / "train", 4, 256, 2)
    v = verify_dataset(tmp_path / "default", shape, num_files=4)
    assert not v.passed
    assert "DLIO did not take the record length" in v.problems[0]
    v = verify_dataset(tmp_path / "ok", shape, num_files=5)
    assert v.problems == [f"4 .npz files in {tmp_path / 'ok' / 'train'}, expected 5"]
    # jpeg: compared now that the generator writes the declared size (subfolders counted).
    jpeg = Datagen(
        model="t",
        framework="pytorch",
        format="jpeg",
        num_files_train=2,
        num_samples_per_file=1,
        record_length_bytes=153_600,
    )
    for sub in ("0", "1"):
        (tmp_path / "j" / "train" / sub).mkdir(parents=True)
        (tmp_path / "j" / "train" / sub / "a.jpeg").write_bytes(b"x" * 153_600)
    v = verify_dataset(tmp_path / "j", jpeg, num_files=2)
    assert v.passed and v.size_compared is True
    # DLIO 2.0.0's own jpeg generator: 45% below the record length, which the check rejects.
    for sub in ("0", "1"):
        (tmp_path / "j" / "train" / sub / "a.jpeg").write_bytes(b"x" * 84_480)
    v = verify_dataset(tmp_path / "j", jpeg, num_files=2)
    assert not v.passed and "mean file size 84,480 B" in v.problems[0]
    png = dataclasses.replace(jpeg, format="png")
    (tmp_path / "p" / "train").mkdir(parents=True)
    (tmp_path / "p" / "train" / "a.png").write_bytes(b"x" * 10)
    v = verify_dataset(tmp_path / "p", png, num_files=1)
    assert v.passed and v.size_compared is False


def tfrecord_file(path: Path, payloads: list[int]) -> None:
    """A TFRecord-framed file (length, its CRC, payload, payload CRC; the CRCs are zero)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for n in payloads:
            fh.write(struct.pack("<Q", n) + b"\0" * 4 + b"x" * n + b"\0" * 4)


def test_tfrecord_index_in_dali_format(tmp_path: Path) -> None:
    payloads = [100, 7, 4096]
    assert tfrecord_index(payloads) == "0 116\n116 23\n139 4112\n"
    data = tmp_path / "data"
    tfrecord_file(data / "train" / "a.tfrecord", payloads)
    index = data / "index" / "train" / "a.tfrecord.idx"
    index.parent.mkdir(parents=True)
    index.write_text(tfrecord_index(payloads))
    assert tfrecord_records(data / "train" / "a.tfrecord") == [(0, 116), (116, 23), (139, 4112)]
    assert check_tfrecord_index(data / "train" / "a.tfrecord", index) is None
    shape = Datagen(
        model="t",
        framework="tensorflow",
        format="tfrecord",
        num_files_train=1,
        num_samples_per_file=3,
        record_length_bytes=1401,
    )
    v = verify_dataset(data, shape, num_files=1)
    assert v.passed and v.content_checked_files == 1
    index.write_text(tfrecord_index(payloads[:2]))  # a stale index
    v = verify_dataset(data, shape, num_files=1)
    assert not v.passed and "do not match the 3 records" in v.problems[0]
    index.unlink()
    assert "no index file" in verify_dataset(data, shape, num_files=1).problems[0]
    index.write_text(tfrecord_index(payloads))
    (data / "train" / "a.tfrecord").write_bytes(struct.pack("<Q", 999) + b"x" * 10)
    assert "runs past the end" in (check_tfrecord_index(data / "train" / "a.tfrecord", index) or "")


def test_pad_jpeg_to_an_exact_size() -> None:
    jpeg = b"\xff\xd8" + b"\xff\xdb" + b"q" * 300 + b"\xff\xd9"  # SOI, a table, EOI
    for target in (len(jpeg), len(jpeg) + 4, len(jpeg) + 65_537, len(jpeg) + 65_539, 400_000):
        out = pad_jpeg(jpeg, target, lambda n: b"r" * n)
        assert len(out) == target and out[:2] == b"\xff\xd8" and out.endswith(jpeg[2:])
        at = 2
        while out[at : at + 2] == b"\xff\xfe":  # comment segments, each a valid length
            at += 2 + int.from_bytes(out[at + 2 : at + 4], "big")
        assert out[at:] == jpeg[2:]
    with pytest.raises(ValueError, match="cannot pad a JPEG by 2 bytes"):
        pad_jpeg(jpeg, len(jpeg) + 2, lambda n: b"r" * n)
    with pytest.raises(ValueError, match="not a JPEG"):
        pad_jpeg(b"PNG", 10, lambda n: b"r" * n)
    assert jpeg_padding_segments(65_539) == [65_533, 6]  # never a 1 to 3 byte remainder


def test_parquet_schema_from_the_config() -> None:
    w = workload("dlrm", "b200")
    config = to_dlio_config(w, data_folder="d")
    schema = parquet_schema(config)
    assert schema.source == "config" and len(schema.columns) == 200
    assert schema.row_bytes == 761 == w.record_length_bytes
    assert schema.read_bytes == 160 and len(schema.read_columns) == 40
    assert (schema.row_group_size, schema.read_mode, schema.compression) == (
        config["dataset"]["parquet"]["row_group_size"],
        "row_group",
        "none",
    )
    flux = parquet_schema(to_dlio_config(workload("flux", "b200"), data_folder="d"))
    assert flux.row_bytes == 2_164_832 and flux.read_bytes == flux.row_bytes
    assert flux.row_group_size == DEFAULT_ROW_GROUP_SIZE  # the flux configs set none
    # No columns: one variable binary column of the record length.
    plain = parquet_schema({"dataset": {"format": "parquet", "record_length": 4096}})
    assert plain.source == "default:binary" and plain.row_bytes == 4096


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"record_length": 760}, r"dataset\.record_length is 760 B, but dataset\.parquet\.columns"),
        ({"record_length_stdev": 5}, "drop the stdev"),
        ({"compression": "lzf"}, "dataset.compression must be one of"),
        ({"parquet": {"read_mode": "rows"}}, "dataset.parquet.read_mode must be one of"),
        ({"parquet": {"row_group_size": 0}}, "dataset.parquet.row_group_size must be"),
        ({"parquet": {"colums": []}}, r"dataset\.parquet: unknown key\(s\) \['colums'\]"),
        ({"parquet": {"columns": [{"name": "a", "dtype": "float8"}]}}, r"columns\[0\]\.dtype"),
        ({"parquet": {"columns": [{"name": "a", "dtype": "int8", "read": False}]}}, "no column"),
    ],
)
def test_parquet_schema_errors_name_the_key(change: dict[str, Any], match: str) -> None:
    config = to_dlio_config(workload("dlrm", "b200"), data_folder="d")
    for key, value in change.items():
        if key == "parquet" and "columns" not in value:
            config["dataset"]["parquet"].update(value)
        else:
            config["dataset"][key] = value
    with pytest.raises(SchemaError, match=match):
        parquet_schema(config)


def test_compare_parquet_footer() -> None:
    schema = parquet_schema(
        {
            "dataset": {
                "format": "parquet",
                "record_length": 12,
                "parquet": {
                    "row_group_size": 2,
                    "columns": [
                        {"name": "a", "dtype": "float32"},
                        {"name": "v", "dtype": "int16", "size": 4, "read": False},
                    ],
                },
            }
        }
    )
    info = {
        "path": "f.parquet",
        "rows": 5,
        "row_group_rows": [2, 2, 1],
        "columns": [
            {"name": "a", "type": "float", "row_bytes": 4},
            {"name": "v", "type": "fixed_size_binary[8]", "row_bytes": 8},
        ],
        "compression": ["UNCOMPRESSED"],
    }
    assert compare_parquet(info, schema, rows=5) == []
    assert "4 rows, expected 5" in compare_parquet({**info, "rows": 4}, schema, rows=5)[0]
    bad = {**info, "row_group_rows": [3, 2], "compression": ["SNAPPY"]}
    problems = compare_parquet(bad, schema, rows=5)
    assert any("row groups of [2, 3] rows" in p for p in problems)
    assert any("compression ['snappy'], expected none" in p for p in problems)
    wrong = {**info, "columns": [info["columns"][0], {**info["columns"][1], "row_bytes": 4}]}
    assert "column v holds 4 B per row" in compare_parquet(wrong, schema, rows=5)[0]


def hydra_record(out: Path, workload_config: dict[str, Any], name: str) -> None:
    (out / ".hydra").mkdir(parents=True)
    (out / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"workload": workload_config}))
    hydra = {"hydra": {"runtime": {"choices": {"workload": name, "hydra/env": "default"}}}}
    (out / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))


def test_verify_effective_config(tmp_path: Path) -> None:
    written = to_dlio_config(workload("unet3d", "h100"), data_folder="/d", num_files=4)
    expected = apply_params(copy.deepcopy(written), {"output.folder": str(tmp_path / "a")})
    name = config_name("unet3d", "h100")
    assert name == "storage_workloads_unet3d_h100"
    hydra_record(tmp_path / "a", expected, name)
    verify_effective_config(tmp_path / "a", name=name, expected=expected)
    # What DLIO 2.0.0 does with a config named like its packaged unet3d_h100.yaml.
    packaged = copy.deepcopy(expected)
    packaged["dataset"].update({"data_folder": "data/unet3d/", "num_files_train": 168})
    packaged["dataset"].pop("num_subfolders_train", None)
    hydra_record(tmp_path / "b", packaged, "unet3d_h100")
    with pytest.raises(DlioError) as err:
        verify_effective_config(tmp_path / "b", name=name, expected=expected)
    message = str(err.value)
    assert "Hydra chose workload 'unet3d_h100', not 'storage_workloads_unet3d_h100'" in message
    assert "dataset.num_files_train: written 4, DLIO ran 168" in message
    assert "dataset.data_folder: written '/d', DLIO ran 'data/unet3d/'" in message
    hydra_record(tmp_path / "c", {**expected, "extra": 1}, name)
    with pytest.raises(DlioError, match="extra: not written, DLIO ran 1"):
        verify_effective_config(tmp_path / "c", name=name, expected=expected)
    with pytest.raises(DlioError, match="left no Hydra record"):
        verify_effective_config(tmp_path / "none", name=name, expected=expected)


def test_refuses_to_overwrite(
    tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An earlier run's results, an existing dataset and a missing dataset are refused before
    any file is written."""
    data = tmp_path / "data"
    write_npz_files(data / "train", 2, 22, 1)
    common = ["--data-dir", str(data), "--dlio-venv", str(venv)]
    assert main(["datagen", "dlrm", "--run-dir", str(tmp_path / "g"), *common]) == 2
    assert "already holds files; datagen writes into an empty --data-dir" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "g").exists()
    assert main(["run", "dlrm", "--run-dir", str(tmp_path / "r"), "--num-files", "4", *common]) == 2
    assert "holds 2 .npz files and the run reads 4" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "results.json").write_text("{}")
    assert main(["run", "dlrm", "--run-dir", str(earlier), "--num-files", "2", *common]) == 2
    assert "already holds an earlier run (results.json)" in capsys.readouterr().err
    assert (earlier / "results.json").read_text() == "{}"
    assert sorted(p.name for p in earlier.iterdir()) == ["results.json"]
    # A bad parquet schema is refused the same way, naming the key.
    args = ["--run-dir", str(tmp_path / "p"), "--data-dir", str(tmp_path / "pd")]
    bad = ["--param", "dataset.parquet.read_mode=rows"]
    assert main(["datagen", "dlrm", "--accelerator", "b200", *args, *bad]) == 2
    assert "dataset.parquet.read_mode must be one of" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_checkpoint_config() -> None:
    w = checkpoint_workload("llama3_8b")
    config = checkpoint_config(
        w, checkpoint_folder="/c", steps_folder="/s", processes=2, scale=1e-3
    )
    section = config["checkpoint"]
    # 2 of the closed 8 processes (subset mode): a quarter of 15 + 90 GB, split over 2 ranks.
    assert section["model_bytes_per_rank"] == round(15e9 / 4 / 2 * 1e-3)
    assert section["optimizer_bytes_per_rank"] == round(90e9 / 4 / 2 * 1e-3)
    assert section["checkpoint_mechanism_classname"] == "sw_dlio_ext.checkpoint.ShardCheckpointing"
    assert (section["num_checkpoints_write"], section["num_checkpoints_read"]) == (10, 10)
    assert section["fsync"] is True and section["steps_between_checkpoints"] == 1
    assert config["train"]["total_training_steps"] == 10
    assert config["dataset"]["num_files_train"] == 20  # a step per checkpoint and rank
    full = checkpoint_config(w, checkpoint_folder="/c", steps_folder="/s", processes=16)
    assert full["checkpoint"]["model_bytes_per_rank"] == round(15e9 / 16)  # all of it, shared
    with pytest.raises(ValueError, match="only written checkpoints can be read"):
        checkpoint_config(
            w, checkpoint_folder="/c", steps_folder="/s", processes=2, num_checkpoints_read=11
        )
    with pytest.raises(ValueError, match=r"scale must be a number in \(0, 1\]"):
        checkpoint_config(w, checkpoint_folder="/c", steps_folder="/s", processes=2, scale=0)


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
        f"hydra.run.dir={(tmp_path / 'out').resolve()}",
        "hydra.output_subdir=dlio_config",
    ]
    # A host list: mpirun --host with the slots, no --oversubscribe (the slots place the
    # processes, not this host's CPU count).
    hosts = (HostSpec("h1", 2), HostSpec("h2", 2))
    listed = dlio_command(
        "d", config_dir="c", workload_name="w", output_dir="o", processes=4, hosts=hosts
    )
    assert listed[:6] == [
        "/opt/bin/mpirun",
        "-n",
        "4",
        "--host",
        "h1:2,h2:2",
        "--allow-run-as-root",
    ]
    assert "--oversubscribe" not in listed
    with pytest.raises(
        ValueError, match=r"5 processes do not fit the 4 slots of --hosts h1:2,h2:2"
    ):
        dlio_command(
            "d", config_dir="c", workload_name="w", output_dir="o", processes=5, hosts=hosts
        )
    with pytest.raises(ValueError, match="--mpi-arg --hostfile and --hosts h1:2,h2:2 both choose"):
        dlio_command(
            "d", config_dir="c", workload_name="w", output_dir="o", processes=4, hosts=hosts,
            mpi_args=["--hostfile", "f"],
        )  # fmt: skip
    with pytest.raises(ValueError, match="--hosts h1:2,h2:2 needs mpirun"):
        dlio_command("d", config_dir="c", workload_name="w", output_dir="o", hosts=hosts, mpi=False)
    single = dlio_command(
        "d", config_dir="c", workload_name="w", output_dir=tmp_path, processes=1, mpi=False
    )
    assert single[0] == "d"
    launcher = dlio_command(
        ["/v/bin/python", "-m", "sw_dlio_ext.launch"],
        config_dir="c",
        workload_name="w",
        output_dir=tmp_path,
        mpi=False,
        overrides={
            "reader.reader_classname": "sw_dlio_ext.parquet.ParquetReader",
            "x.n": 3,
            "a.path": "/mnt/my data",
            "a.text": "true",
        },
    )
    assert launcher[:3] == ["/v/bin/python", "-m", "sw_dlio_ext.launch"]
    # Names and paths as they are (as mlpstorage writes them); quoted where Hydra would read
    # them otherwise (a space, text that reads as a boolean).
    assert launcher[-4:] == [
        "++workload.reader.reader_classname=sw_dlio_ext.parquet.ParquetReader",
        "++workload.x.n=3",
        "++workload.a.path='/mnt/my data'",
        "++workload.a.text='true'",
    ]
    # mlpstorage's reportgen splits each line of Hydra's overrides.yaml at '=' into two.
    with pytest.raises(DlioError, match="holds '=', which mlpstorage's reportgen cannot read"):
        dlio_command(
            "d", config_dir="c", workload_name="w", output_dir="o", mpi=False,
            overrides={"dataset.data_folder": "/mnt/a=b"},
        )  # fmt: skip
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
    code = main(["datagen", "dlrm", *args, "--dlio-venv", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "no dlio_benchmark in" in err
    assert not (tmp_path / "r").exists()  # nothing written before DLIO was found
    code = main(["run", "dlrm", *args, "--dlio-venv", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no dlio_benchmark in" in err
    assert main(["datagen", "bert", *args]) == 2
    assert "unknown model 'bert'" in capsys.readouterr().err
    assert main(["run", "dlrm", *args, "--param", "novalue"]) == 2
    assert "--param takes KEY=VALUE" in capsys.readouterr().err


def test_params() -> None:
    assert parse_param("train.epochs=1", engine="dlio") == ("train.epochs", 1)
    assert parse_param("reader.odirect=true", engine="mlperf-dlio") == ("reader.odirect", True)
    folder = parse_param("checkpoint.checkpoint_folder=/x:y", engine="dlio")
    assert folder == ("checkpoint.checkpoint_folder", "/x:y")
    config = {"train": {"epochs": 5}, "framework": "pytorch"}
    apply_params(config, {"train.epochs": 1, "reader.read_threads": 2})
    assert config == {"train": {"epochs": 1}, "framework": "pytorch", "reader": {"read_threads": 2}}
    with pytest.raises(ValueError, match="framework is a value"):
        apply_params(config, {"framework.x": 1})
    with pytest.raises(ValueError, match="dotted DLIO keys"):
        apply_params(config, {"a..b": 1})


def test_datagen_config() -> None:
    config = to_datagen_config(workload("retinanet", "mi355"), data_folder="d", num_files=20_001)
    assert config["model"]["name"] == "retinanet"
    assert config["workflow"] == {"generate_data": True, "train": False, "checkpoint": False}
    assert {k: config[k] for k in ("framework", "dataset")} == {
        "framework": "pytorch",
        "dataset": {
            "data_folder": "d",
            "format": "jpeg",
            "num_files_train": 20_001,
            "num_samples_per_file": 1,
            "record_length_bytes": 322_957,
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
    assert len(listed["training"]) == len(WORKLOADS) and len(listed["checkpointing"]) == 4
    assert main(["show", "retinanet", "--accelerator", "b200"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["dlio_config"]["dataset"]["record_length"] == 322_957
    assert shown["assumed"] == dict(ASSUMED_FIELDS.get(("retinanet", "b200"), {}))
    assert main(["show", "unet3d", "--format", "json", "--engine", "mlperf-dlio", "--datagen"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["dlio_config"]["workflow"]["generate_data"] is True
    assert shown["dlio_config"]["dataset"]["record_length_bytes"] == 146_600_628
    assert main(["show", "llama3-8b"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["dlio_config"]["checkpoint"]["fsync"] is True
    assert main(["show", "resnet50", "--accelerator", "b200"]) == 2
    assert "no resnet50 workload for accelerator 'b200'" in capsys.readouterr().err
    assert main(["size", "unet3d", "--accelerators", "8", "--host-memory-gb", "128"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("unet3d on h100: 28,000 files")
    assert "the steps term wins" in out
    assert main(["size", "unet3d", "--accelerators", "8", "--host-memory-gb", "128",
                 "--hosts", "8", "--format", "json"]) == 0  # fmt: skip
    sized = json.loads(capsys.readouterr().out)
    assert (sized["num_files_train"], sized["winner"]) == (37_500, "memory")
    assert sized["num_subfolders_train"] == 4
    with pytest.raises(SystemExit):
        main(["size", "unet3d", "--accelerators", "0", "--host-memory-gb", "1"])
    assert "--accelerators: must be >= 1" in capsys.readouterr().err
