"""Closed/open override rules and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_workloads import (
    CLOSED_PARAMETERS,
    OPEN_PARAMETERS,
    Issue,
    UnknownWorkloadError,
    check_overrides,
    verdict,
)

CLOSED_VALUES = {
    "dataset.num_files_train": 28_000,
    "dataset.num_subfolders_train": 3,
    "dataset.data_folder": "/mnt/storage/unet3d",
    "reader.read_threads": 16,
    "reader.computation_threads": 2,
    "reader.transfer_size": 262_144,
    "reader.odirect": True,
    "reader.prefetch_size": 2,
    "checkpoint.checkpoint_folder": Path("checkpoints/unet3d"),
    "storage.storage_type": "local_fs",
    "storage.storage_root": "/mnt/storage",
    "storage.storage_options.prefetch_window": 16,
}
OPEN_VALUES = {
    "framework": "tensorflow",
    "dataset.format": "hdf5",
    "dataset.num_samples_per_file": 4,
    "reader.data_loader": "dali",
}
# resnet50 reads tfrecord with the tensorflow loader, where num_samples_per_file may change.
RESNET50_OPEN_VALUES = {
    **OPEN_VALUES,
    "dataset.format": "tfrecord",
    "reader.data_loader": "tensorflow",
}


def test_parameter_sets() -> None:
    assert set(CLOSED_VALUES) == CLOSED_PARAMETERS
    assert set(OPEN_VALUES) == OPEN_PARAMETERS
    assert not CLOSED_PARAMETERS & OPEN_PARAMETERS


@pytest.mark.parametrize("division", ["closed", "open"])
def test_every_closed_parameter_is_closed(division: str) -> None:
    issues = check_overrides("unet3d", CLOSED_VALUES, division=division)
    assert issues == []
    assert verdict(issues) == "CLOSED"


def test_open_parameters_make_the_run_open() -> None:
    issues = check_overrides("resnet50", RESNET50_OPEN_VALUES, division="closed")
    assert [(i.parameter, i.level) for i in issues] == [(p, "OPEN") for p in OPEN_VALUES]
    assert all("cannot be closed" in i.message for i in issues)
    assert verdict(issues) == "OPEN"
    issues = check_overrides("resnet50", RESNET50_OPEN_VALUES, division="open")
    assert {i.level for i in issues} == {"OPEN"}
    assert verdict(issues) == "OPEN"


@pytest.mark.parametrize("model", ["resnet50", "cosmoflow", "dlrm", "retinanet", "flux"])
def test_odirect_only_for_unet3d(model: str) -> None:
    (issue,) = check_overrides(model, {"reader.odirect": True}, division="open")
    assert issue.parameter == "reader.odirect" and issue.level == "INVALID"
    assert (issue.rule, issue.expected, issue.actual) == ("odirect", False, True)
    assert "unet3d" in issue.message
    # False is the default ("Enable ODIRECT mode for Unet3D Training", default False).
    assert check_overrides(model, {"reader.odirect": False}) == []
    (issue,) = check_overrides(model, {"reader.odirect": "no"})
    assert issue.rule == "value-kind"
    assert check_overrides("unet3d", {"reader.odirect": False}) == []
    assert check_overrides("unet3d", {"reader.odirect": True}) == []


def test_anything_else_is_invalid() -> None:
    issues = check_overrides(
        "cosmoflow",
        {"reader.batch_size": 2, "train.computation_time": 0.001, "reader.read_threads": 8},
        division="open",
    )
    assert [(i.parameter, i.level) for i in issues] == [
        ("reader.batch_size", "INVALID"),
        ("train.computation_time", "INVALID"),
    ]
    assert verdict(issues) == "INVALID"
    mixed = [*issues, *check_overrides("cosmoflow", {"framework": "pytorch"})]
    assert verdict(mixed) == "INVALID"


def test_nested_overrides_are_flattened() -> None:
    nested = {"reader": {"read_threads": 8, "data_loader": "pytorch"}, "dataset": {"x": 1}}
    issues = check_overrides("dlrm", nested)
    assert [(i.parameter, i.level) for i in issues] == [
        ("reader.data_loader", "OPEN"),
        ("dataset.x", "INVALID"),
    ]
    with pytest.raises(ValueError, match="more than once"):
        check_overrides("dlrm", {"reader": {"read_threads": 8}, "reader.read_threads": 8})


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("dataset.num_files_train", 1.5),
        ("dataset.num_subfolders_train", "3"),
        ("dataset.data_folder", ""),
        ("reader.read_threads", True),
        ("reader.read_threads", "4"),
        ("reader.prefetch_size", 3),
        ("reader.prefetch_size", 4),
        ("reader.prefetch_size", True),
        ("storage.storage_options.prefetch_window", 2.5),
        ("reader.odirect", "yes"),
        ("workflow.checkpoint", "yes"),
        ("framework", 5),
        ("dataset.format", ""),
    ],
)
def test_wrong_values_are_invalid(parameter: str, value: object) -> None:
    issues = check_overrides("unet3d", {parameter: value}, division="open")
    last = issues[-1]
    assert (last.parameter, last.level) == (parameter, "INVALID")
    assert last.message.startswith(f"{parameter} must be")
    assert verdict(issues) == "INVALID"


def test_unknown_model_and_division() -> None:
    with pytest.raises(UnknownWorkloadError, match="known models: unet3d"):
        check_overrides("bert", {})
    with pytest.raises(ValueError, match="division"):
        check_overrides("unet3d", {}, division="preview")


def test_verdict_of_nothing_is_closed() -> None:
    assert verdict([]) == "CLOSED"
    with pytest.raises(ValueError, match="levels"):
        verdict([Issue("x", "WARN", "?")])  # type: ignore[arg-type]


def test_a_parameter_given_twice_is_refused_in_either_order():
    import pytest

    from storage_workloads import check_overrides

    for overrides in (
        {"reader.read_threads": 8, "reader": {"read_threads": 4}},
        {"reader": {"read_threads": 4}, "reader.read_threads": 8},
    ):
        with pytest.raises(ValueError, match=r"'reader\.read_threads' is given more than once"):
            check_overrides("unet3d", overrides)


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        # The tables give no range, and mlpstorage imposes none (SG v2.0 10.1, 10.2): what DLIO
        # can run is the runner's check (storage_workloads.dlio.keys), not a rule.
        ("reader.read_threads", -1),
        ("dataset.num_subfolders_train", -1),
        ("storage.storage_options.prefetch_window", -2),
        ("framework", "jax"),
        ("dataset.format", "zip"),
        ("reader.data_loader", "custom"),  # "OPEN submissions can have custom data loaders"
    ],
)
def test_values_the_rules_leave_open(parameter: str, value: object) -> None:
    issues = check_overrides("unet3d", {parameter: value}, division="open")
    assert verdict(issues) in {"CLOSED", "OPEN"}, issues
    assert all(i.rule != "value-kind" for i in issues)


@pytest.mark.parametrize(
    ("model", "changes", "verdict_expected"),
    [
        # "supported only with Tensorflow, using tfrecord datasets ... only supports
        # num_samples_per_file = 1 for Pytorch data loader" (SG v2.0 10.2)
        ("unet3d", {"dataset.num_samples_per_file": 2}, "INVALID"),
        ("resnet50", {"dataset.num_samples_per_file": 2}, "OPEN"),
        ("cosmoflow", {"dataset.num_samples_per_file": 4}, "OPEN"),
        (
            "resnet50",
            {"dataset.num_samples_per_file": 2, "reader.data_loader": "pytorch"},
            "INVALID",
        ),
        ("resnet50", {"dataset.num_samples_per_file": 2, "dataset.format": "npz"}, "INVALID"),
        (
            "unet3d",
            {
                "dataset.num_samples_per_file": 2,
                "dataset.format": "tfrecord",
                "reader.data_loader": "tensorflow",
            },
            "OPEN",
        ),
    ],
)
def test_samples_per_file_needs_tensorflow_on_tfrecord(
    model: str, changes: dict[str, object], verdict_expected: str
) -> None:
    issues = check_overrides(model, changes, division="open")
    assert verdict(issues) == verdict_expected, issues
    rules = {i.rule for i in issues}
    assert ("samples-per-file" in rules) == (verdict_expected == "INVALID")


@pytest.mark.parametrize("model", ["unet3d", "resnet50", "cosmoflow", "dlrm", "retinanet", "flux"])
def test_workflow_flags(model: str) -> None:
    # The phase flags may be either; checkpoint false is every workload's.
    for flags in (
        {"workflow.generate_data": True, "workflow.train": False},
        {"workflow": {"generate_data": False, "train": True, "checkpoint": False}},
    ):
        assert check_overrides(model, flags) == []
    issues = check_overrides(model, {"workflow.checkpoint": True})
    if model == "unet3d":  # v2.0 unet3d YAMLs train with checkpoints
        assert issues == []
    else:
        ((parameter, level, rule),) = [(i.parameter, i.level, i.rule) for i in issues]
        assert (parameter, level, rule) == ("workflow.checkpoint", "INVALID", "workflow")
    (issue,) = check_overrides(model, {"workflow.evaluation": True}, division="open")
    assert (issue.level, issue.rule) == ("INVALID", "workflow")
