"""The rules checker's verdicts, case by case, against the published MLPerf Storage rules.

Every row of ``CASES`` is one input, the verdict the rules text gives for it, the rule that
fires, what mlpstorage v2.0 decides on the same input and a one-line reason citing the text.
Sources (mlcommons/storage):

- SG v2.0: ``Submission_guidelines.md`` at caa90c9 (the v2.0 rules): 6.6 caching, 7 dataset
  size, 10.1 CLOSED parameters, 10.2 OPEN parameters ("The .yaml files cannot be changed").
- Rules.md: ``Rules.md`` at d3220b6 (v2.0) and 0366ccf (newest): 3.1.2 dataset size, 3.6.2
  CLOSED table (adds ``reader.odirect`` for Unet3D; newest adds
  ``storage.storage_options.prefetch_window``), 3.6.3 OPEN table; any other change fails.
- YAML: the published workload files (tests/data/rules-official-workloads.yaml names each).

The ``mlps`` column is mlpstorage 2.0.0b1's verdict (``mlpstorage/rules.py`` at caa90c9, its
``TrainingRulesChecker``, as ``mlpstorage training run --what-if --param ...`` prints it on the
same parameters, one host of 128 GiB, one accelerator); it is not run here. Where the rules
text is silent the two agree; where they differ the package's docs/rules.md ("Agreement with
mlpstorage") quotes the sentence of the rules that decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_workloads import (
    WORKLOADS,
    check_params,
    check_path,
    required_num_files,
    to_dlio_config,
    workload,
)
from storage_workloads.checker import OFFICIAL_WORKLOAD_VALUES, CheckReport
from storage_workloads.rules import CLOSED_PARAMETERS

DATA = Path(__file__).parent / "data" / "rules-official-workloads.yaml"
OFFICIAL: dict[str, dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))
GiB = 2**30
# The system of every case unless it says otherwise: one host of 128 GiB, one accelerator.
HOST_GB = 128


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"reader.batch_size": 7}`` as ``{"reader": {"batch_size": 7}}``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def sized(model: str, accelerator: str = "h100", memory_gb: int = HOST_GB) -> int:
    w = workload(model, accelerator)
    return required_num_files(w, total_host_memory_bytes=memory_gb * GiB, num_accelerators=1)


def system(model: str, accelerator: str = "h100", division: str = "closed") -> dict[str, Any]:
    return {
        "model": model,
        "accelerator": accelerator,
        "division": division,
        "num_accelerators": 1,
        "host_memory_gb": HOST_GB,
    }


Case = Callable[[Path], CheckReport]


def overrides(changes: Mapping[str, Any], model: str = "unet3d", division: str = "closed") -> Case:
    """A run of ``model`` on h100, sized for the system, with ``changes`` as overrides."""

    def run(_: Path) -> CheckReport:
        given = {"dataset.num_files_train": sized(model), **changes}
        return check_params({**system(model, division=division), "overrides": given})

    return run


def official(name: str, changes: Mapping[str, Any] | None = None) -> Case:
    """The published workload ``name`` (test data) as the run's DLIO config, sized."""

    def run(_: Path) -> CheckReport:
        entry = OFFICIAL[name]
        if (entry["model"], entry["accelerator"]) not in WORKLOADS:
            pytest.skip(f"the registry has no {entry['model']} {entry['accelerator']} workload")
        values = dict(entry["values"])
        need = sized(entry["model"], entry["accelerator"])
        values["dataset.num_files_train"] = max(values["dataset.num_files_train"], need)
        values.update(changes or {})
        params = {**system(entry["model"], entry["accelerator"]), "config": nest(values)}
        return check_params(params, datagen=bool(entry.get("datagen")))

    return run


def emitted(model: str, accelerator: str, engine: str, changes: Mapping[str, Any] | None = None):
    """The project's own config for the workload (``to_dlio_config``), sized."""

    def run(_: Path) -> CheckReport:
        w = workload(model, accelerator)
        config = to_dlio_config(
            w, data_folder="/mnt/data", num_files=sized(model, accelerator), engine=engine
        )
        for key, value in (changes or {}).items():
            section, leaf = key.split(".")
            config[section][leaf] = value
        return check_params({**system(model, accelerator), "config": config})

    return run


def files(model: str, count: int, memory_gb: int) -> Case:
    """A run of ``model`` on h100 with ``count`` files on one host of ``memory_gb`` GiB."""

    def run(_: Path) -> CheckReport:
        params = {**system(model), "host_memory_gb": memory_gb}
        return check_params({**params, "overrides": {"dataset.num_files_train": count}})

    return run


def raw(params: Mapping[str, Any]) -> Case:
    return lambda _: check_params(params)


def params_file(text: str) -> Case:
    def run(tmp: Path) -> CheckReport:
        path = tmp / "params.yaml"
        path.write_text(text, encoding="utf-8")
        return check_path(path)

    return run


# (id, input, expected verdict, rules that fire, mlpstorage v2.0, reason citing the rule)
# fmt: off
CASES: list[tuple[str, Case, str, list[str], str, str]] = [
    # --- closed-allowed overrides ------------------------------------------------------------
    ("closed-num-files", overrides({}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: dataset.num_files_train is CLOSED-tunable; 4,687 meets the size rule"),
    ("closed-subfolders", overrides({"dataset.num_subfolders_train": 3}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: dataset.num_subfolders_train is CLOSED-tunable"),
    ("closed-data-folder", overrides({"dataset.data_folder": "/mnt/d"}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: dataset.data_folder is CLOSED-tunable"),
    ("closed-read-threads", overrides({"reader.read_threads": 16}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: reader.read_threads is CLOSED-tunable (Rules.md newest: uncapped)"),
    ("closed-read-threads-0", overrides({"reader.read_threads": 0}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: 0 threads is a number of threads (DLIO loads in the main process)"),
    ("closed-computation-threads", overrides({"reader.computation_threads": 2}), "CLOSED", [],
     "CLOSED", "SG v2.0 10.1: reader.computation_threads is CLOSED-tunable"),
    ("closed-transfer-size", overrides({"reader.transfer_size": 262_144}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: reader.transfer_size (bytes of the read buffer) is CLOSED-tunable"),
    ("closed-prefetch-size", overrides({"reader.prefetch_size": 2}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: reader.prefetch_size is CLOSED-tunable, values 0, 1 or 2"),
    ("closed-checkpoint-folder", overrides({"checkpoint.checkpoint_folder": "/mnt/c"}), "CLOSED",
     [], "CLOSED", "SG v2.0 10.1: checkpoint.checkpoint_folder is CLOSED-tunable"),
    ("closed-storage",
     overrides({"storage.storage_type": "local_fs", "storage.storage_root": "/m"}),
     "CLOSED", [], "CLOSED", "SG v2.0 10.1: storage.storage_type/storage_root are CLOSED-tunable"),
    ("closed-prefetch-window", overrides({"storage.storage_options.prefetch_window": 8}),
     "CLOSED", [], "INVALID",
     "Rules.md newest 3.6.2 adds storage.storage_options.prefetch_window to the CLOSED table"),
    # --- reader.odirect: unet3d only --------------------------------------------------------
    ("odirect-unet3d", overrides({"reader.odirect": True}), "CLOSED", [], "CLOSED",
     "Rules.md 3.6.2: reader.odirect, 'Enable ODIRECT mode for Unet3D Training'"),
    ("odirect-resnet50", overrides({"reader.odirect": True}, "resnet50"), "INVALID", ["odirect"],
     "INVALID", "Rules.md 3.6.2: ODIRECT is for Unet3D training only"),
    ("odirect-resnet50-false", overrides({"reader.odirect": False}, "resnet50"), "CLOSED", [],
     "CLOSED", "Rules.md 3.6.2: default False; setting the default enables nothing"),
    ("odirect-cosmoflow-open", overrides({"reader.odirect": True}, "cosmoflow", "open"),
     "INVALID", ["odirect"], "INVALID",
     "Rules.md 3.6.3: OPEN adds only four parameters; ODIRECT stays Unet3D-only"),
    # --- open-only overrides ----------------------------------------------------------------
    ("open-framework", overrides({"framework": "tensorflow"}), "OPEN", ["open-parameters"],
     "OPEN", "SG v2.0 10.2: framework may change in OPEN only"),
    ("open-format", overrides({"dataset.format": "hdf5"}, division="open"), "OPEN",
     ["open-parameters"], "OPEN", "SG v2.0 10.2: dataset.format may change in OPEN only"),
    ("open-samples-per-file", overrides({"dataset.num_samples_per_file": 4}, "resnet50"), "OPEN",
     ["open-parameters"], "INVALID",
     "SG v2.0 10.2: num_samples_per_file is OPEN-only, 'supported only with Tensorflow, using "
     "tfrecord datasets' (mlpstorage: its size check fails on the text value)"),
    ("samples-per-file-pytorch", overrides({"dataset.num_samples_per_file": 2}), "INVALID",
     ["open-parameters", "samples-per-file"], "INVALID",
     "SG v2.0 10.2: 'only supports num_samples_per_file = 1 for Pytorch data loader'"),
    ("open-data-loader", overrides({"reader.data_loader": "dali"}, division="open"), "OPEN",
     ["open-parameters"], "OPEN", "SG v2.0 10.2: reader.data_loader is OPEN-only"),
    ("open-and-closed", overrides({"framework": "tensorflow", "reader.read_threads": 8}), "OPEN",
     ["open-parameters"], "OPEN", "SG v2.0 10.2: OPEN allows the CLOSED changes as well"),
    # --- forbidden in both divisions --------------------------------------------------------
    ("forbidden-batch-size", overrides({"reader.batch_size": 8}), "INVALID",
     ["allowed-overrides"], "INVALID", "Rules.md 3.6.2: not in the table, so the run fails"),
    ("forbidden-compute-open", overrides({"train.computation_time": 0.1}, division="open"),
     "INVALID", ["allowed-overrides"], "INVALID",
     "Rules.md 3.6.3: not in the OPEN table either; SG v2.0 10.2: the workload cannot change"),
    ("forbidden-epochs", overrides({"train.epochs": 1}), "INVALID", ["allowed-overrides"],
     "INVALID", "Rules.md 3.6.2: train.epochs is not tunable"),
    ("forbidden-au", overrides({"metric.au": 0.5}), "INVALID", ["allowed-overrides"], "INVALID",
     "Rules.md 3.6.2: metric.au is not tunable"),
    ("forbidden-record-length", overrides({"dataset.record_length_bytes": 1}), "INVALID",
     ["allowed-overrides"], "INVALID", "Rules.md 3.6.2: the sample size is not tunable"),
    ("forbidden-file-shuffle", overrides({"reader.file_shuffle": "random"}), "INVALID",
     ["allowed-overrides"], "INVALID", "Rules.md 3.6.2: the YAML's file_shuffle is not tunable"),
    ("forbidden-workflow-evaluation", overrides({"workflow.evaluation": True}), "INVALID",
     ["workflow"], "CLOSED",
     "SG v2.0 10.2: evaluation adds reads the published workload does not do"),
    # --- bad values -------------------------------------------------------------------------
    ("read-threads-negative", overrides({"reader.read_threads": -1}), "CLOSED", [], "CLOSED",
     "SG v2.0 10.1: 'Number of threads to load the data' gives no range: mlpstorage's verdict"),
    ("bad-num-files-zero", overrides({"dataset.num_files_train": 0}), "INVALID",
     ["sizing"], "INVALID", "SG v2.0 7: 0 files hold no 500 steps"),
    ("bad-prefetch-size", overrides({"reader.prefetch_size": 4}), "INVALID", ["value-kind"],
     "CLOSED", "SG v2.0 10.1: prefetch_size takes 'values of 0, 1, or 2'"),
    ("bad-odirect-text", overrides({"reader.odirect": "yes"}), "INVALID", ["value-kind"],
     "CLOSED", "Rules.md 3.6.2: ODIRECT mode is enabled or not (default False)"),
    ("framework-any", overrides({"framework": "jax"}, division="open"), "OPEN",
     ["open-parameters"], "OPEN",
     "SG v2.0 10.2: 'The machine learning framework' names no values: mlpstorage's verdict"),
    ("bad-read-threads-text", overrides({"reader.read_threads": "4"}), "INVALID",
     ["value-kind"], "CLOSED", "SG v2.0 10.1: a number of threads, not text"),
    # --- malformed input: INVALID with a structured issue, never a traceback ----------------
    # (a malformed overrides mapping is not applied, so the 168 files also fail the size rule)
    ("malformed-overrides-list", raw({**system("unet3d"), "overrides": ["a=1"]}), "INVALID",
     ["parse", "sizing"], "-", "malformed input: overrides must be a mapping"),
    ("malformed-given-twice",
     raw({**system("unet3d"), "overrides": {"reader": {"read_threads": 4},
                                            "reader.read_threads": 8}}),
     "INVALID", ["parse", "sizing"], "-", "malformed input: one parameter given twice"),
    ("malformed-key", raw({**system("unet3d"), "overrides": {1: 2}}), "INVALID",
     ["parse", "sizing"], "-", "malformed input: a parameter name must be text"),
    ("malformed-config", raw({**system("unet3d"), "config": "unet3d_h100.yaml"}), "INVALID",
     ["parse", "sizing"], "-", "malformed input: config must be the DLIO mapping"),
    ("malformed-yaml", params_file("model: unet3d\naccelerator: [h100\n"), "INVALID", ["parse"],
     "-", "malformed input: YAML that does not parse"),
    ("malformed-unknown-key", raw({**system("unet3d"), "colour": "red",
                                   "overrides": {"dataset.num_files_train": 4688}}),
     "INVALID", ["known-keys"], "-", "malformed input: a parameters key the checker does not know"),
    # --- measured case 1: each other's unet3d config ----------------------------------------
    ("official-unet3d-h100-v2.0", official("unet3d_h100_v2.0"), "CLOSED", [], "CLOSED",
     "SG v2.0 10.2: the published YAML is the workload; only num_files_train is changed"),
    ("official-unet3d-h100-v3.0", official("unet3d_h100_v3.0"), "CLOSED", [], "INVALID",
     "YAML v3.0 (7e73663): the published unet3d workload with workflow.checkpoint false"),
    ("official-unet3d-changed", official("unet3d_h100_v2.0", {"reader.batch_size": 8}),
     "INVALID", ["allowed-overrides"], "INVALID",
     "SG v2.0 10.2: 'The .yaml files cannot be changed'"),
    # (mlpstorage: CLOSED, as the emitted unet3d config sets workflow.checkpoint true)
    ("emitted-unet3d-mlperf-dlio", emitted("unet3d", "h100", "mlperf-dlio"), "CLOSED", [],
     "CLOSED", "SG v2.0 10.2: the project's config carries the published workload's values"),
    ("emitted-unet3d-upstream", emitted("unet3d", "h100", "dlio"), "CLOSED", [], "INVALID",
     "the record-length key is spelled for upstream DLIO; the workload is the same"),
    # --- measured case 2: workflow.checkpoint -----------------------------------------------
    ("workflow-checkpoint-unet3d", overrides({"workflow.checkpoint": True}), "CLOSED", [],
     "CLOSED", "YAML v2.0 unet3d_h100: workflow.checkpoint True is the workload's value"),
    ("workflow-checkpoint-false-unet3d", overrides({"workflow.checkpoint": False}), "CLOSED", [],
     "INVALID", "YAML v3.0 unet3d_h100/b200 set workflow.checkpoint False"),
    ("workflow-checkpoint-resnet50", overrides({"workflow.checkpoint": True}, "resnet50"),
     "INVALID", ["workflow"], "CLOSED",
     "SG v2.0 10.2 / Rules.md 3.6.2: resnet50's YAML has no checkpoints; adding them changes it"),
    ("workflow-phase", overrides({"workflow.generate_data": False, "workflow.train": True}),
     "CLOSED", [], "CLOSED", "the phase flags select datagen or run; no table covers them"),
    # --- measured case 4: sizing floors, as the script the rules make normative --------------
    ("sizing-4687-files", files("unet3d", 4687, 128), "CLOSED", [], "CLOSED",
     "SG v2.0 7: 'The MLPerf Storage benchmark script must be used ... since it calculates "
     "the minimum dataset size': 4,687.53 floors to 4,687"),
    ("sizing-4686-files", files("unet3d", 4686, 128), "INVALID", ["sizing"], "INVALID",
     "SG v2.0 7: one file below the script's minimum"),
    ("sizing-3500-files", files("unet3d", 3500, 1), "CLOSED", [], "CLOSED",
     "SG v2.0 7: 500 steps x batch 7 x 1 accelerator = 3,500 files exactly"),
    ("sizing-3499-files", files("unet3d", 3499, 1), "INVALID", ["sizing"], "INVALID",
     "SG v2.0 7: one file short of 500 steps"),
    ("sizing-resnet50-4790", files("resnet50", 4790, 128), "CLOSED", [], "CLOSED",
     "SG v2.0 7: 5 x 128 GiB / (1251 x 114,660.07 B) = 4,790.8 files, floored to 4,790"),
    ("sizing-resnet50-4789", files("resnet50", 4789, 128), "INVALID", ["sizing"], "INVALID",
     "SG v2.0 7: one file below the script's minimum"),
]
# fmt: on


@pytest.mark.parametrize(
    ("case", "expected", "rules", "mlps", "reason"),
    [pytest.param(*row[1:], id=row[0]) for row in CASES],
)
def test_verdict(
    case: Case, expected: str, rules: list[str], mlps: str, reason: str, tmp_path: Path
) -> None:
    report = case(tmp_path)
    assert report.verdict == expected, f"{reason}\n{report.to_text()}"
    assert sorted({i.rule for i in report.issues}) == sorted(rules), report.to_text()
    for issue in report.issues:  # structured: every issue names its parameter and rule
        assert issue.parameter and issue.rule and issue.message
        assert set(issue.as_dict()) == {
            "parameter",
            "level",
            "rule",
            "expected",
            "actual",
            "message",
        }
    assert mlps in {"CLOSED", "OPEN", "INVALID", "-"} and reason


def test_the_table_is_large_and_its_ids_unique() -> None:
    ids = [row[0] for row in CASES]
    assert len(ids) >= 25 and len(set(ids)) == len(ids)
    assert {row[2] for row in CASES} == {"CLOSED", "OPEN", "INVALID"}


def test_sizing_cases_match_the_formula() -> None:
    # The rows above use these numbers; recompute them from the text's formula.
    memory = 5 * 128 * GiB
    assert memory / 146_600_628 == pytest.approx(4687.53, abs=0.01)
    assert sized("unet3d") == math.floor(memory / 146_600_628) == 4687
    assert math.floor(memory / (1251 * 114_660.07)) == 4790
    assert sized("resnet50") == 4790
    assert sized("unet3d", memory_gb=1) == 500 * 7 == 3500


# ---------------------------------------------------------------------------------------------
# Every published workload and every emitted config


def _closed_or_open(model: str, accelerator: str) -> str:
    # v3.0 closed admits only unet3d and retinanet on b200 and mi355.
    limited = accelerator in {"b200", "mi355"} and model not in {"unet3d", "retinanet"}
    return "OPEN" if limited else "CLOSED"


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_every_published_workload_is_accepted(name: str, tmp_path: Path) -> None:
    entry = OFFICIAL[name]
    report = official(name)(tmp_path)
    assert report.verdict == _closed_or_open(entry["model"], entry["accelerator"]), report.to_text()
    assert {i.rule for i in report.issues} <= {"closed-models"}


@pytest.mark.parametrize("engine", ["dlio", "mlperf-dlio"])
@pytest.mark.parametrize("key", sorted(WORKLOADS), ids="-".join)
def test_every_emitted_config_is_accepted(key: tuple[str, str], engine: str) -> None:
    model, accelerator = key
    report = emitted(model, accelerator, engine)(Path("."))
    assert report.verdict == _closed_or_open(model, accelerator), report.to_text()


@pytest.mark.parametrize("name", [n for n in sorted(OFFICIAL) if "datagen" not in n])
def test_a_changed_published_value_is_an_override(name: str, tmp_path: Path) -> None:
    # The published keys are the workload only at their published values.
    entry = OFFICIAL[name]
    key = "train.computation_time"
    changed = official(name, {key: entry["values"][key] * 2})(tmp_path)
    assert changed.verdict == "INVALID"
    found = [i for i in changed.issues if i.rule != "closed-models"]
    assert [(i.parameter, i.rule) for i in found] == [(key, "allowed-overrides")]
    assert found[0].expected == entry["values"][key]


def test_test_data_agrees_with_the_checkers_table() -> None:
    # Two records of the same files, written separately: the checker's table (the keys a run
    # may not change) and the test data (everything the files set).
    for name, entry in OFFICIAL.items():
        if entry.get("datagen"):
            continue
        table = OFFICIAL_WORKLOAD_VALUES[(entry["model"], entry["accelerator"])]
        values = {
            k: v
            for k, v in entry["values"].items()
            if k not in CLOSED_PARAMETERS and not k.startswith("workflow.")
        }
        assert dict(table) == values, name


def test_a_missing_published_key_is_invalid(tmp_path: Path) -> None:
    values = dict(OFFICIAL["unet3d_h100_v2.0"]["values"])
    del values["reader.batch_size"]
    values["dataset.num_files_train"] = 4688
    report = check_params({**system("unet3d"), "config": nest(values)})
    assert report.verdict == "INVALID"
    assert [(i.parameter, i.rule, i.expected) for i in report.issues] == [
        ("reader.batch_size", "allowed-overrides", 7)
    ]
