"""The rules checker: parameters files, run directories and submissions; never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads import (
    CHECKPOINT_WORKLOADS,
    check_params,
    check_path,
    checkpoint_workload,
    to_checkpoint_config,
    to_dlio_config,
    workload,
)
from storage_workloads.cli import main

FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"
BASE = {"model": "unet3d", "accelerator": "h100", "num_accelerators": 8, "host_memory_gb": 128}


def run_check(params: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    report = check_params(params)
    return report.verdict, [(i.parameter, i.level, i.rule) for i in report.issues]


# The verdict table: one override (or setting) per row, the verdict in each division, and
# the rule that fires.
VERDICT_TABLE = [
    # allowed in the closed division
    ({"dataset.num_files_train": 28_000}, "closed", "CLOSED", None),
    ({"dataset.num_subfolders_train": 3}, "closed", "CLOSED", None),
    ({"dataset.data_folder": "/mnt/data"}, "closed", "CLOSED", None),
    ({"reader.read_threads": 16}, "closed", "CLOSED", None),
    ({"reader.computation_threads": 2}, "closed", "CLOSED", None),
    ({"reader.transfer_size": 262_144}, "closed", "CLOSED", None),
    ({"reader.prefetch_size": 2}, "closed", "CLOSED", None),
    ({"reader.prefetch_size": 4}, "closed", "INVALID", "value-kind"),
    ({"reader.odirect": True}, "closed", "CLOSED", None),
    ({"checkpoint.checkpoint_folder": "ckpt"}, "closed", "CLOSED", None),
    ({"storage.storage_type": "local_fs"}, "closed", "CLOSED", None),
    ({"storage.storage_root": "/mnt"}, "closed", "CLOSED", None),
    # open-only
    ({"framework": "tensorflow"}, "closed", "OPEN", "open-parameters"),
    ({"framework": "tensorflow"}, "open", "OPEN", "open-parameters"),
    ({"dataset.format": "hdf5"}, "open", "OPEN", "open-parameters"),
    ({"dataset.num_samples_per_file": 4}, "closed", "INVALID", "open-parameters samples-per-file"),
    ({"reader.data_loader": "dali"}, "open", "OPEN", "open-parameters"),
    # forbidden in both
    ({"reader.batch_size": 8}, "closed", "INVALID", "allowed-overrides"),
    ({"reader.batch_size": 8}, "open", "INVALID", "allowed-overrides"),
    ({"train.computation_time": 0.1}, "open", "INVALID", "allowed-overrides"),
    ({"train.epochs": 1}, "closed", "INVALID", "allowed-overrides"),
    ({"metric.au": 0.5}, "closed", "INVALID", "allowed-overrides"),
    ({"dataset.record_length": 1}, "closed", "INVALID", "allowed-overrides"),
    ({"reader.read_threads": "4"}, "closed", "INVALID", "value-kind"),
    # no range in the rules text: mlpstorage's verdict
    ({"reader.read_threads": -1}, "closed", "CLOSED", None),
    ({"framework": "jax"}, "open", "OPEN", "open-parameters"),
]


@pytest.mark.parametrize(("override", "division", "expected", "rule"), VERDICT_TABLE)
def test_verdict_table(
    override: dict[str, Any], division: str, expected: str, rule: str | None
) -> None:
    overrides = {"dataset.num_files_train": 28_000, **override}  # sized for BASE
    verdict, issues = run_check({**BASE, "division": division, "overrides": overrides})
    assert verdict == expected
    assert [r for _, _, r in issues] == ([] if rule is None else rule.split())


def test_odirect_only_for_unet3d() -> None:
    params = {
        **BASE,
        "model": "resnet50",
        "overrides": {"reader": {"odirect": True}, "dataset": {"num_files_train": 5000}},
    }
    report = check_params(params)
    assert report.verdict == "INVALID"
    (issue,) = report.issues
    assert (issue.parameter, issue.rule, issue.expected, issue.actual) == (
        "reader.odirect",
        "odirect",
        False,
        True,
    )


def test_expected_names_the_workloads_value() -> None:
    overrides = {"reader.batch_size": 8, "dataset.num_files_train": 28_000}
    (issue,) = check_params({**BASE, "overrides": overrides}).issues
    assert (issue.expected, issue.actual) == (7, 8)
    assert issue.as_dict() == {
        "parameter": "reader.batch_size",
        "level": "INVALID",
        "rule": "allowed-overrides",
        "expected": 7,
        "actual": 8,
        "message": "reader.batch_size may not be changed in the closed or open division",
    }


def test_sizing_rule() -> None:
    # unet3d, 8 accelerators, one 128 GiB host: 28,000 files (the steps term).
    assert run_check({**BASE, "overrides": {"dataset.num_files_train": 28_000}})[0] == "CLOSED"
    verdict, issues = run_check({**BASE, "overrides": {"dataset.num_files_train": 27_999}})
    assert (verdict, issues) == (
        "INVALID",
        [("dataset.num_files_train", "INVALID", "sizing")],
    )
    # 1 TiB in all (8 hosts of 128 GiB) needs 37,500 files (37,500.2 floored): the memory term.
    params = {**BASE, "hosts": 8, "overrides": {"dataset.num_files_train": 37_499}}
    report = check_params(params)
    assert report.verdict == "INVALID"
    assert report.issues[0].expected == ">= 37500"
    # Undeclared memory: cannot be checked, which a run must not leave open.
    report = check_params({"model": "unet3d", "accelerator": "h100"})
    assert report.verdict == "INVALID"
    assert "num_accelerators and host_memory_gb not declared" in report.issues[0].message


def test_model_and_accelerator_recognized() -> None:
    report = check_params({**BASE, "model": "bert"})
    assert report.verdict == "INVALID"
    assert report.issues[0].rule == "model-recognized"
    assert "unknown model 'bert'" in report.issues[0].message
    report = check_params({**BASE, "accelerator": "v100"})
    assert [i.rule for i in report.issues] == ["accelerator-recognized"]
    assert "unknown accelerator 'v100' for unet3d" in report.issues[0].message
    report = check_params({**BASE, "model": "resnet50", "accelerator": "mi355"})
    assert "no public workload for accelerator 'mi355'" in report.issues[0].message
    assert check_params({**BASE, "accelerator": "B200"}).verdict == "INVALID"  # sizing: 7,200
    report = check_params(
        {**BASE, "accelerator": "b200", "overrides": {"dataset.num_files_train": 28_000}}
    )
    assert report.verdict == "CLOSED"


def test_closed_models_on_b200() -> None:
    params = {"model": "flux", "accelerator": "b200", "num_accelerators": 1, "host_memory_gb": 1}
    report = check_params(params)
    assert report.verdict == "OPEN"
    assert [i.rule for i in report.issues] == ["closed-models"]


def test_unknown_keys_and_bad_values_are_invalid() -> None:
    report = check_params({**BASE, "hosts": 0, "colour": "red", "division": "mixed"})
    assert report.verdict == "INVALID"
    messages = [i.message for i in report.issues]
    assert any("unknown key 'colour'; known keys: model, accelerator" in m for m in messages)
    assert any("hosts must be an integer >= 1, got 0" in m for m in messages)
    assert any("division must be one of closed, open, got 'mixed'" in m for m in messages)


def test_full_config_is_diffed_against_the_workload() -> None:
    w = workload("unet3d", "h100")
    config = to_dlio_config(w, data_folder="/mnt/x", num_files=28_000, engine="mlperf-dlio")
    config["reader"]["read_threads"] = 8
    assert check_params({**BASE, "config": config}).verdict == "CLOSED"
    config["reader"]["file_shuffle"] = "random"  # the published YAML's is "seed"
    config["train"]["computation_time"] = 0.1
    del config["metric"]
    report = check_params({**BASE, "config": config})
    assert report.verdict == "INVALID"
    found = {(i.parameter, i.rule) for i in report.issues}
    assert found == {
        ("reader.file_shuffle", "allowed-overrides"),
        ("train.computation_time", "allowed-overrides"),
        ("metric.au", "allowed-overrides"),
    }


@pytest.mark.parametrize(
    ("processes", "hosts", "expected", "rule"),
    [
        (8, 1, "CLOSED", None),  # subset mode
        (64, 8, "CLOSED", None),  # full scale
        (128, 16, "OPEN", "checkpoint-processes"),  # a multiple of TP x PP = 8
        (12, 2, "INVALID", "checkpoint-processes"),
        (64, 32, "INVALID", "processes-per-host"),
        (8, 2, "INVALID", "checkpoint-processes"),  # subset runs on one host
    ],
)
def test_checkpoint_process_counts(
    processes: int, hosts: int, expected: str, rule: str | None
) -> None:
    params = {"model": "llama3-70b", "num_processes": processes, "hosts": hosts}
    report = check_params(params)
    assert report.verdict == expected
    assert [i.rule for i in report.issues] == ([] if rule is None else [rule])
    assert report.model == "llama3_70b"


def test_checkpoint_memory_and_counts() -> None:
    ok = {"model": "llama3_8b", "num_processes": 8, "accelerator_memory_gb": 80}
    assert check_params(ok).verdict == "CLOSED"
    report = check_params({**ok, "accelerator_memory_gb": 13})  # 104 GB < 105 GB
    assert [i.rule for i in report.issues] == ["checkpoint-memory"]
    assert report.issues[0].expected == ">= 105.0 GB in all"
    # subset mode of llama3_405b: 8/512 of 5,288 GB = 82.6 GB over 8 accelerators
    subset = {"model": "llama3_405b", "num_processes": 8, "accelerator_memory_gb": 10.4}
    assert check_params(subset).verdict == "CLOSED"
    assert check_params({**subset, "accelerator_memory_gb": 10.3}).verdict == "INVALID"
    without = check_params({"model": "llama3_8b", "num_processes": 8})
    assert without.verdict == "CLOSED" and without.skipped[0].startswith("checkpoint-memory")
    for writes, reads, expected in [(10, 0, "CLOSED"), (0, 10, "CLOSED"), (5, 5, "INVALID")]:
        params = {**ok, "num_checkpoints_write": writes, "num_checkpoints_read": reads}
        assert check_params(params).verdict == expected
    assert check_params({**ok, "fsync": False}).issues[0].rule == "fsync"


def test_checkpoint_config_diff() -> None:
    w = checkpoint_workload("llama3_8b")
    config = to_checkpoint_config(w, checkpoint_folder="/mnt/ckpt", num_processes=8)
    params = {"model": "llama3_8b", "num_processes": 8, "config": config}
    assert check_params(params).verdict == "CLOSED"
    config["model"]["num_layers"] = 16
    report = check_params(params)
    assert [(i.parameter, i.expected, i.actual) for i in report.issues] == [
        ("model.num_layers", 32, 16)
    ]
    assert set(CHECKPOINT_WORKLOADS) == {"llama3_8b", "llama3_70b", "llama3_405b", "llama3_1t"}


# ---------------------------------------------------------------------------------------------
# Files and directories


_ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n"
    for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            _ALIAS_BOMB,
            "its aliases expand to more than 100,000 values; such a file holds a few hundred",
        ),
        ("model: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 64 levels"),
        ("model: &a [*a]\n", "an alias contains the node it names"),
    ],
)
def test_a_yaml_bomb_or_deep_nesting_is_invalid_in_one_line(tmp_path, text, problem) -> None:
    """A few hundred bytes of nested aliases (10^9 values expanded), a document nested 200
    deep, an alias inside the node it names: refused at once in one line, as JSON is."""
    path = tmp_path / "params.yaml"
    path.write_text(text)
    (issue,) = check_path(path).issues
    assert (issue.rule, issue.message) == ("parse", f"cannot parse it: {problem}")
    deep_json = tmp_path / "params.json"
    deep_json.write_text('{"model": ' + "[" * 200 + "]" * 200 + "}")
    (issue,) = check_path(deep_json).issues
    assert issue.message == "cannot parse it: nested deeper than 64 levels"


def test_malformed_yaml_is_invalid_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("model: unet3d\naccelerator: [h100\n")
    report = check_path(path)
    assert report.verdict == "INVALID"
    (issue,) = report.issues
    assert issue.rule == "parse"
    assert "malformed YAML" in issue.message and "line 3" in issue.message
    # The issue names the file once: as its parameter, not again in the message.
    assert str(path) == issue.parameter and str(path) not in issue.message
    assert str(issue).count(str(path)) == 1
    path.write_text("- a list\n")
    assert "expected a mapping at the top level, got list" in check_path(path).issues[0].message
    bad_json = tmp_path / "params.json"
    bad_json.write_text('{"model": ')
    assert "malformed JSON" in check_path(bad_json).issues[0].message
    missing = check_path(tmp_path / "nope.yaml")
    assert missing.verdict == "INVALID" and "does not exist" in missing.issues[0].message


def test_params_file(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({**BASE, "overrides": {"reader": {"read_threads": 8}}}))
    assert check_path(path).verdict == "INVALID"  # 168 files < 28,000
    path.write_text(yaml.safe_dump({**BASE, "overrides": {"dataset": {"num_files_train": 28_000}}}))
    assert check_path(path).verdict == "CLOSED"


def make_run(root: Path, name: str, *, files: int = 16, epochs: int = 2) -> Path:
    """A run directory as `storage-workloads run` writes it, from the recorded DLIO output."""
    run = root / name
    shutil.copytree(FIXTURE, run / "dlio")
    w = workload("dlrm", "h100")
    config = to_dlio_config(w, data_folder="/data", num_files=files)
    config["train"]["epochs"] = epochs
    (run / "configs" / "workload").mkdir(parents=True)
    (run / "configs" / "workload" / "dlrm_h100.yaml").write_text(yaml.safe_dump(config))
    record = {
        "command": "run",
        "engine": "dlio",
        "config_file": "configs/workload/dlrm_h100.yaml",
        "params": {"model": "dlrm", "accelerator": "h100", "num_accelerators": 2, "hosts": 1},
    }
    (run / "run.json").write_text(json.dumps(record))
    return run


def test_run_directory(tmp_path: Path) -> None:
    run = make_run(tmp_path, "run1", files=400_000_000, epochs=1)
    report = check_path(run)
    # The recorded run: 2 accelerators on a host of 23.5 GiB (from summary.json), AU 73.7%.
    assert report.kind == "run"
    assert (report.model, report.accelerator) == ("dlrm", "h100")
    assert report.verdict == "CLOSED", report.to_text()
    run2 = make_run(tmp_path, "run2")
    report = check_path(run2)
    assert report.verdict == "INVALID"
    assert {i.rule for i in report.issues} == {"allowed-overrides", "sizing"}
    # Declared accelerators must match what DLIO ran.
    record = json.loads((run2 / "run.json").read_text())
    record["params"]["num_accelerators"] = 4
    (run2 / "run.json").write_text(json.dumps(record))
    assert "num-accelerators" in {i.rule for i in check_path(run2).issues}


def test_run_directory_au_below_threshold(tmp_path: Path) -> None:
    run = make_run(tmp_path, "run", files=400_000_000, epochs=1)
    summary = json.loads((run / "dlio" / "summary.json").read_text())
    summary["metric"]["train_au_mean_percentage"] = 12.5
    (run / "dlio" / "summary.json").write_text(json.dumps(summary))
    report = check_path(run)
    assert report.verdict == "INVALID"
    (issue,) = report.issues
    assert (issue.rule, issue.actual, issue.expected) == ("au", 12.5, ">= 70%")


@pytest.mark.parametrize("hydra_only", [False, True])
def test_a_truncated_summary_is_one_finding(
    tmp_path: Path, hydra_only: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged summary.json is one INVALID line; the rest of the run is still judged, and no
    second line says that it is missing."""
    run = make_run(tmp_path, "run", files=400_000_000, epochs=1)
    if hydra_only:  # as DLIO alone leaves a run: its Hydra record, no run.json
        config = yaml.safe_load((run / "configs" / "workload" / "dlrm_h100.yaml").read_text())
        (run / "dlio" / ".hydra").mkdir()
        (run / "dlio" / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"workload": config}))
        (run / "run.json").unlink()
    summary = run / "dlio" / "summary.json"
    summary.write_bytes(summary.read_bytes()[:40])
    report = check_path(run)
    assert (report.model, report.accelerator) == ("dlrm", "h100")
    problems = [i for i in report.issues if "summary.json" in i.parameter + i.message]
    assert [i.rule for i in problems] == ["parse"]
    assert not any("summary.json" in s for s in report.skipped), report.skipped
    main(["check", str(run)])
    out = capsys.readouterr().out
    assert sum("summary.json" in line for line in out.splitlines()) == 1, out


def test_hydra_output_directory_without_run_json(tmp_path: Path) -> None:
    out = tmp_path / "dlio-output"
    shutil.copytree(FIXTURE, out)
    w = workload("dlrm", "a100")
    config = to_dlio_config(w, data_folder="/d", num_files=400_000_000)
    (out / ".hydra").mkdir()
    (out / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"workload": config}))
    report = check_path(out)
    assert (report.model, report.accelerator, report.verdict) == ("dlrm", "a100", "CLOSED")
    (out / ".hydra" / "config.yaml").write_text("workload: {model: {name: dlrm\n")
    assert check_path(out).issues[0].rule == "parse"


def test_submission_needs_five_runs(tmp_path: Path) -> None:
    sub = tmp_path / "submission"
    for i in range(5):
        make_run(sub, f"run_{i}", files=400_000_000, epochs=1)
    report = check_path(sub)
    assert report.kind == "submission"
    assert report.verdict == "CLOSED"
    assert [Path(r.path).name for r in report.runs] == [f"run_{i}" for i in range(5)]
    shutil.rmtree(sub / "run_4")
    report = check_path(sub)
    assert report.verdict == "INVALID"
    assert [(i.rule, i.expected, i.actual) for i in report.issues] == [("five-runs", 5, 4)]
    make_run(sub, "run_4")  # a forbidden override in one run makes the submission INVALID
    report = check_path(sub)
    assert report.issues == () and report.verdict == "INVALID"
    assert [r.verdict for r in report.runs] == ["CLOSED"] * 4 + ["INVALID"]


def test_cli_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**BASE, "overrides": {"framework": "tensorflow"}}))
    assert main(["check", str(path)]) == 1  # sizing: INVALID
    out = capsys.readouterr().out
    assert out.startswith(f"INVALID  {path} (params, unet3d h100)")
    assert "[OPEN] open-parameters: framework:" in out
    path.write_text(yaml.safe_dump({**BASE, "overrides": {"dataset.num_files_train": 28_000}}))
    assert main(["check", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["verdict"], data["issues"], data["kind"]) == ("CLOSED", [], "params")
    path.write_text("model: [unet3d\n")
    assert main(["check", str(path), "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["issues"][0]["rule"] == "parse"
    assert "Traceback" not in captured.err


def _shipped(tmp_path: Path, name: str, config: dict[str, Any]) -> Path:
    """A workload YAML as mlpstorage ships it: the DLIO mapping itself, named for its config."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_shipped_workload_yaml_is_read_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = to_dlio_config(
        workload("resnet50", "h100"), data_folder="data/resnet50", engine="mlperf-dlio"
    )
    shipped = _shipped(tmp_path, "resnet50_h100", config)
    # Without the counts: the accelerator from the file's name, and what is missing said.
    report = check_path(shipped)
    assert (report.model, report.accelerator, report.kind) == ("resnet50", "h100", "params")
    assert report.assumed == (
        "accelerator: h100 (from the file name 'resnet50_h100'; --accelerator sets another)",
        "the file holds no accelerator count or host memory: give --num-accelerators and "
        "--host-memory-gb",
    )
    assert [i.rule for i in report.issues] == ["sizing"]
    assert not any("unknown key" in i.message for i in report.issues)
    # With them, from the command line: the sizing rule as mlpstorage computes it.
    args = ["check", str(shipped), "--num-accelerators", "8", "--hosts", "2"]
    assert main([*args, "--host-memory-gb", "256"]) == 1
    out = capsys.readouterr().out
    assert "[assumed] num_accelerators: 8 (--num-accelerators)" in out
    assert "[assumed] host_memory_gb: 256 (--host-memory-gb)" in out
    assert "fewer than the 19,163 that 2 host(s) of 256 GiB and 8 accelerator(s)" in out
    # A renamed file is known by its computation time; an unknown one asks for --accelerator.
    renamed = _shipped(tmp_path, "mine", config)
    assert check_path(renamed).accelerator == "h100"
    config["train"]["computation_time"] = 0.3
    odd = check_path(_shipped(tmp_path, "odd", config))
    assert (
        "the file names no accelerator (by its name or computation time): give " in (odd.assumed[0])
    )
    assert (
        check_path(_shipped(tmp_path, "odd", config), given=_given(accelerator="a100")).assumed[0]
        == "accelerator: a100 (--accelerator)"
    )


def _given(**values: Any) -> Any:
    from storage_workloads.checker.files import Assumed

    return Assumed(**values)


def test_a_shipped_checkpointing_yaml(tmp_path: Path) -> None:
    w = checkpoint_workload("llama3_70b")
    shipped = _shipped(
        tmp_path, "llama3_70b", to_checkpoint_config(w, checkpoint_folder="checkpoints/llama_70b")
    )
    report = check_path(shipped)
    assert (report.verdict, report.model) == ("CLOSED", "llama3_70b")
    assert report.assumed == (
        "num_processes: 64 (the closed count; --num-accelerators sets another)",
    )
    # On 8 processes mlpstorage adds the subset mode's keys; the check assumes them too.
    subset = check_path(shipped, given=_given(num_accelerators=8))
    assert subset.verdict == "CLOSED"
    assert subset.assumed == (
        "num_processes: 8 (--num-accelerators)",
        "checkpoint.mode: 'subset' (mlpstorage adds it on 8 processes)",
        "model.parallelism.data: 8 (mlpstorage adds it on 8 processes)",
    )


def test_a_hydra_record_folder(tmp_path: Path) -> None:
    record = tmp_path / "dlio_config"
    record.mkdir()
    config = to_dlio_config(workload("unet3d", "a100"), data_folder="/d", engine="mlperf-dlio")
    config["dataset"]["num_files_train"] = 3500  # 500 steps of 1 accelerator
    (record / "config.yaml").write_text(yaml.safe_dump({"workload": config}))
    (record / "overrides.yaml").write_text(
        "- workload=unet3d_a100\n- ++workload.dataset.data_folder=/d\n"
    )
    report = check_path(record, given=_given(num_accelerators=1, host_memory_gb=1))
    assert (report.verdict, report.model, report.accelerator) == ("CLOSED", "unet3d", "a100")
    assert report.assumed[0].startswith("accelerator: a100 (from the file name 'unet3d_a100'")
    # A config.yaml without a workload mapping: one INVALID issue naming the file.
    (record / "config.yaml").write_text("workload: 5\n")
    bad = check_path(record)
    assert bad.verdict == "INVALID" and "config.yaml: no workload mapping" in bad.issues[0].message
