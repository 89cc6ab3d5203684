"""The mlpstorage results layout without DLIO: results-tree folders, the metadata file and the
system description of each run, and ``report`` over a tree (training runs of this package and
of mlpstorage, checkpointing runs, data generation). DLIO's launch is replaced by a stand-in
that leaves a recorded run's output (``storage_workloads.dlio.runs._execute``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads import checkpoint_workload, workload
from storage_workloads.cli import main
from storage_workloads.dliorun import (
    DlioError,
    aggregate_results,
    run_checkpointing,
    run_datagen,
    run_training,
    write_report,
)
from storage_workloads.hosts import HostMemory, HostReading, HostSpec
from storage_workloads.layout import find_runs, run_datetime, tree_location

FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"
STAMP = re.compile(r"^\d{8}_\d{6}$")
GIB = 2**30
# Two hosts as a probe reads them (no mpirun needed when the reading is given).
MEMORY = HostMemory(
    "mpirun",
    (
        HostReading("h1", 1, "m1", 16 * GIB, cpus=8, kernel="6.1", arch="x86_64"),
        HostReading("h2", 1, "m2", 16 * GIB, cpus=8, kernel="6.1", arch="x86_64"),
    ),
)
HOSTS = (HostSpec("h1", 1), HostSpec("h2", 1))
# The keys of mlpstorage 2.0's metadata file of a training run, in its order.
MLPSTORAGE_KEYS = [
    "args",
    "debug",
    "run_datetime",
    "run_number",
    "runtime",
    "verification",
    "command_output_files",
    "run_result_output",
    "metadata_filename",
    "metadata_file_path",
    "_config_name",
    "base_command",
    "base_path",
    "base_command_path",
    "config_path",
    "per_host_mem_kB",
    "total_mem_kB",
    "cluster_information",
    "config_file",
    "params_dict",
    "yaml_params",
    "combined_params",
    "executed_command",
    "benchmark_type",
]
# The dotted keys of mlpstorage's system description template (system_configuration.yaml).
TEMPLATE_KEYS = {
    f"{section}.{key}"
    for section, keys in {
        "System": "name description type max_sequential_read max_sequential_write "
        "max_random_read max_random_write",
        "Nodes.dlio_client": "quantity hardware.model hardware.rack_units "
        "hardware.power_supplies hardware.psu_configuration hardware.psu_rating "
        "hardware.memory_capacity hardware.memory_configuration hardware.cpu_qty "
        "hardware.cpu_model hardware.cpu_cores networking.management.model "
        "networking.management.speed networking.management.qty operating_system.name "
        "operating_system.version operating_system.release_date "
        "operating_system.kernel_version operating_system.cpu_architecture "
        "tuning.mpi_configuration.environment_variables tuning.mpi_configuration.version "
        "tuning.sysctl_parameters",
        "PowerRequirements.dlio_client": "quantity psu1_nameplate_power psu2_nameplate_power "
        "psu3_nameplate_power design_power num_active_psus num_passive_psus",
    }.items()
    for key in keys.split()
}


def _keys(tree: Any, prefix: str = "") -> set[str]:
    """The dotted keys of a nested mapping, leaves and inner keys."""
    if not isinstance(tree, dict):
        return set()
    found = set()
    for key, value in tree.items():
        found.add(prefix + key)
        found |= _keys(value, f"{prefix}{key}.")
    return found


def _tree_run(
    run_dir: str, parent: Path, benchmark_type: str, model: str, command: str
) -> tuple[Path, dict[str, Any]]:
    """The run folder ``run_dir``, checked to be a new datetime folder of ``parent``, and its
    metadata file, checked to be the only one and to say what ran."""
    run = Path(run_dir)
    assert run.parent == parent and STAMP.match(run.name), run
    files = sorted(run.glob("*_metadata.json"))
    assert [f.name for f in files] == [f"{benchmark_type}_{run.name}_metadata.json"]
    meta = json.loads(files[0].read_text())
    assert (meta["benchmark_type"], meta["model"], meta["command"], meta["run_datetime"]) == (
        benchmark_type,
        model,
        command,
        run.name,
    )
    return run, meta


def test_tree_location(tmp_path: Path) -> None:
    run, stamp = tree_location(tmp_path, command="run", model="unet3d")
    assert STAMP.match(stamp) and run == tmp_path.resolve() / "training/unet3d/run" / stamp
    gen, _ = tree_location(tmp_path, command="datagen", model="dlrm")
    assert gen.parent == tmp_path.resolve() / "training/dlrm/datagen"
    ckpt, _ = tree_location(tmp_path, command="checkpoint", model="llama3_8b")
    assert ckpt.parent == tmp_path.resolve() / "checkpointing/llama3-8b"  # no command level
    # A folder of this second exists (an earlier run): the next second is taken, never it.
    taken = tmp_path / "training/unet3d/run" / run_datetime()
    taken.mkdir(parents=True)
    again, later = tree_location(tmp_path, command="run", model="unet3d", wait_s=3)
    assert later > taken.name and not again.exists()
    with pytest.raises(ValueError, match="command must be one of"):
        tree_location(tmp_path, command="datasize", model="unet3d")


def test_runs_into_a_results_tree(
    tmp_path: Path,
    venv: Path,
    fake_dlio: None,
    npz_dataset: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, data = tmp_path / "results", tmp_path / "data"
    tree = root.resolve()
    w = workload("dlrm", "h100")
    common: dict[str, Any] = {"results_dir": root, "dlio_venv": venv, "host_memory": MEMORY}
    # A datagen into the tree (the data folder is filled by hand: DLIO does not run here).
    gen = run_datagen(w, data_folder=data, num_files=16, hosts=HOSTS, **common)
    npz_dataset(data, 16)
    gen_dir, _ = _tree_run(
        gen.run_dir, tree / "training/dlrm/datagen", "training", "dlrm", "datagen"
    )

    # Two training runs: each gets a folder of its own second (the second waits if need be).
    results = [
        run_training(w, data_folder=data, num_files=16, hosts=HOSTS, params=P, **common)
        for _ in range(2)
    ]
    run_dirs = [Path(r.run_dir) for r in results]
    assert run_dirs[0] != run_dirs[1]
    for result, run in zip(results, run_dirs, strict=True):
        _, meta = _tree_run(result.run_dir, tree / "training/dlrm/run", "training", "dlrm", "run")
        assert meta["num_processes"] == 2 and meta["accelerator"] == "h100"
        assert meta["parameters"]["dataset"]["num_files_train"] == 16
        assert meta["override_parameters"]["train.epochs"] == 2
        assert meta["args"]["hosts"] == ["h1", "h2"] and meta["args"]["num_accelerators"] == 2
        assert meta["storage_workloads"]["args"]["hosts"] == "h1:1,h2:1"
        # mlpstorage 2.0's 24 keys, first and in its order, then the newer readers' and ours.
        assert list(meta)[:24] == MLPSTORAGE_KEYS
        assert meta["verification"] == result.verdict.lower()
        assert meta["per_host_mem_kB"] == [16 * 2**20] * 2
        cluster = meta["cluster_information"]
        assert cluster["total_memory_bytes"] == 32 * GIB and cluster["num_hosts"] == 2
        assert [h["meminfo"]["MemTotal"] for h in cluster["hosts"]] == [16 * 2**20] * 2
        assert meta["storage_workloads"]["result"] == "results.json"
        system = yaml.safe_load((run / "system-description.yaml").read_text())
        assert set(system) == {"System", "Nodes", "PowerRequirements"}
        client = system["Nodes"]["dlio_client"]
        assert client["quantity"] == 2 and client["hardware"]["memory_capacity"] == "16GiB"
        assert client["hardware"]["cpu_cores"] == 8 and client["hardware"]["cpu_model"] is None
        assert system["PowerRequirements"]["dlio_client"]["quantity"] == 2
        assert _keys(system) >= TEMPLATE_KEYS
        assert (run / "summary.json").is_file() and (run / "results.json").is_file()
        record = json.loads((run / "run.json").read_text())
        assert record["params"]["measured_host_memory_gb"] == [16.0, 16.0]
        assert record["run_datetime"] == run.name
    # The checker sized the run on the 32 GiB read from the hosts.
    sizing = [i for i in results[0].issues if i["rule"] == "sizing"]
    assert "2 host(s) of 16.00 + 16.00 GiB (read from them)" in sizing[0]["message"]

    # A checkpointing run: ROOT/checkpointing/llama3-8b/<datetime>.
    ckpt = run_checkpointing(
        checkpoint_workload("llama3_8b"),
        checkpoint_folder=tmp_path / "ckpt",
        engine="dlio",
        emulation=True,
        scale=1e-4,
        hosts=HOSTS,
        **common,
    )
    _tree_run(ckpt.run_dir, tree / "checkpointing/llama3-8b", "checkpointing", "llama3-8b", "run")
    assert ckpt.write.count == 10 and ckpt.hosts == "h1:1,h2:1"

    # A run made by mlpstorage: summary.json, the Hydra record in dlio_config/, a metadata file.
    other = root / "training" / "dlrm" / "run" / "20250101_000000"
    shutil.copytree(FIXTURE, other)
    _hydra(other, run_dirs[0])
    (other / "training_20250101_000000_metadata.json").write_text(
        json.dumps({"benchmark_type": "training", "command": "run", "model": "dlrm"})
    )
    # mlpstorage's reportgen leaves results.json (a list) and results.csv at the tree root.
    (root / "results.json").write_text("[]")
    (root / "results.csv").write_text("")

    report = aggregate_results([root])
    assert [r.run for r in report.runs] == [str(other), *map(str, run_dirs)]
    assert [r.source for r in report.runs] == ["dlio-summary", *["storage-workloads"] * 2]
    assert report.runs[0].au_mean_percent == pytest.approx(73.73426021489627)
    assert (report.runs[0].model, report.runs[0].accelerator) == ("dlrm", "h100")
    assert report.count == 3 and report.all_passed is True
    assert report.checkpoint_count == 1
    assert report.checkpoint_runs[0].write_gb_per_s_mean == pytest.approx(0.2)
    assert report.as_dict()["checkpoint_write_gb_per_s"]["mean"] == pytest.approx(0.2)
    assert report.as_dict()["skipped"] == [{"run": str(gen_dir), "reason": "data generation"}]
    # Any part of the tree, and run folders, read the same way.
    assert aggregate_results([root / "checkpointing"]).count == 0
    assert aggregate_results([root / "checkpointing"]).all_passed is None
    assert aggregate_results([run_dirs[1]]).count == 1
    paths = write_report(tmp_path / "out", report)
    assert sorted(paths) == ["checkpoint-report.csv", "report.csv", "report.json"]
    assert paths["checkpoint-report.csv"].read_text().splitlines()[0].startswith("run,model,")
    assert len(paths["report.csv"].read_text().splitlines()) == 4

    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    assert "3 run(s), all passed: True" in out
    assert "1 checkpointing run(s); write GB/s mean 0.200, read GB/s mean 0.400" in out
    assert f"skipped {gen_dir}: data generation" in out


P = {"train.epochs": 2, "reader.batch_size": 2}


def _hydra(folder: Path, run: Path) -> None:
    (folder / "dlio_config").mkdir()
    config = yaml.safe_load(next((run / "configs" / "workload").glob("*.yaml")).read_text())
    (folder / "dlio_config" / "config.yaml").write_text(yaml.safe_dump({"workload": config}))


def test_cli_results_dir(
    tmp_path: Path,
    venv: Path,
    fake_dlio: None,
    npz_dataset: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, data = tmp_path / "results", tmp_path / "data"
    npz_dataset(data, 16)
    args = ["run", "dlrm", "--data-dir", str(data), "--num-files", "16", "--processes", "2"]
    args += ["--dlio-venv", str(venv), "--quiet"]
    # --run-dir or --results-dir, one of the two.
    for both in ([], ["--run-dir", "r", "--results-dir", str(root)]):
        with pytest.raises(SystemExit) as exc:
            main([*args, *both])
        assert exc.value.code == 2
    assert "one of the arguments --run-dir --results-dir is required" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main([*args, "--results-dir", str(tmp_path / "afile")]) == 2
    assert f"--results-dir {tmp_path / 'afile'} is a file" in capsys.readouterr().err
    assert main([*args, "--results-dir", str(root), "--what-if"]) == 0
    assert "/training/dlrm/run/" in capsys.readouterr().out and not root.exists()
    assert main([*args, "--results-dir", str(root), "--loops", "2"]) in (0, 1)
    out = capsys.readouterr().out
    assert "loop 1 of 2" in out and "loop 2 of 2" in out
    runs = sorted((root / "training" / "dlrm" / "run").iterdir())
    assert len(runs) == 2 and all(STAMP.match(r.name) for r in runs)
    assert [kind for _, kind in find_runs(root)] == ["training", "training"]
    assert main(["report", str(root), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 2


def test_a_run_folder_with_a_metadata_file_is_not_reused(
    tmp_path: Path, venv: Path, npz_dataset: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    npz_dataset(data, 2)
    run.mkdir()
    (run / "training_20250101_000000_metadata.json").write_text("{}")
    args = ["run", "dlrm", "--data-dir", str(data), "--run-dir", str(run), "--num-files", "2"]
    assert main([*args, "--dlio-venv", str(venv)]) == 2
    assert "already holds an earlier run (training_20250101_000000_metadata.json)" in (
        capsys.readouterr().err
    )
    assert sorted(p.name for p in run.iterdir()) == ["training_20250101_000000_metadata.json"]


def test_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DlioError, match=r"has no results\.json, checkpoint-results\.json"):
        aggregate_results([tmp_path / "empty"])
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "run.json").write_text("{}")
    with pytest.raises(DlioError, match=r"skipped: .*failed \(no results \(an unfinished"):
        aggregate_results([failed])
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def _mlpstorage_folder(folder: Path, config: dict[str, Any], args: dict[str, Any]) -> None:
    """A run folder as mlpstorage 2.0 leaves it: DLIO's Hydra record and a metadata file whose
    command, model and accelerator are only in ``args``."""
    (folder / "dlio_config").mkdir(parents=True)
    (folder / "dlio_config" / "config.yaml").write_text(yaml.safe_dump({"workload": config}))
    meta = {"args": {"program": "training", **args}, "benchmark_type": "training"}
    (folder / f"training_{folder.name}_metadata.json").write_text(json.dumps(meta))


def test_an_mlpstorage_datagen_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from storage_workloads.dlio import to_datagen_config

    root = tmp_path / "results"
    gen = root / "training" / "unet3d" / "datagen" / "20250101_000000"
    config = to_datagen_config(workload("unet3d", "h100"), data_folder="d", engine="mlperf-dlio")
    _mlpstorage_folder(gen, config, {"command": "datagen", "model": "unet3d"})
    # report: a data generation, not an unfinished run.
    with pytest.raises(DlioError, match=r"skipped: .*20250101_000000 \(data generation\)"):
        aggregate_results([root])
    # check: a datagen, without an accelerator or AU verdict, saying what it checked.
    assert main(["check", str(gen)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"CLOSED  {gen} (datagen, unet3d)"
    assert "unknown accelerator" not in out
    assert "[skipped] accelerator: a datagen has none; its dataset is checked against " in out
    assert "unet3d's published datagen (that of h100, a100)" in out
    assert "[skipped] au: a datagen run has no accelerator utilisation" in out
    # The Hydra record alone (no metadata file) says it is a datagen too.
    next(gen.glob("*_metadata.json")).unlink()
    assert main(["check", str(gen)]) == 0
    assert "(datagen, unet3d)" in capsys.readouterr().out
    # A run folder of mlpstorage names its accelerator in args.accelerator_type.
    run = root / "training" / "unet3d" / "run" / "20250101_000100"
    ran = yaml.safe_load(yaml.safe_dump(config))
    ran["workflow"] = {"generate_data": False, "train": True}
    ran["train"] = {"computation_time": 0.01}
    _mlpstorage_folder(run, ran, {"command": "run", "model": "unet3d", "accelerator_type": "a100"})
    main(["check", str(run)])
    assert f"{run} (run, unet3d a100)" in capsys.readouterr().out
