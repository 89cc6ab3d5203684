"""The command line without a server: listing, argument errors, and what importing loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from storage_workloads import OBJECT_WORKLOADS
from storage_workloads.cli import main
from storage_workloads.objpresets import OBJECT_PRESETS

REQUIRED = ["--bucket", "bench", "--out", "out"]


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["object", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    workloads = {name: w.as_dict() for name, w in OBJECT_WORKLOADS.items()}
    assert listed == workloads | {name: p.as_dict() for name, p in OBJECT_PRESETS.items()}
    assert listed["resnet50_object"]["total_objects"] == 614_400


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: must be >= 1, got 0"),
        (["--clients", "two"], "argument --clients: must be an integer, got 'two'"),
        (["--duration", "-1"], "argument --duration: must be > 0 seconds"),
        (["--duration", "5", "--ops", "9"], "not allowed with argument"),
        (["--objects", "0"], "argument --objects: must be >= 1"),
        (["--buckets", "decimal"], "argument --buckets: invalid choice"),
    ],
)
def test_bad_arguments(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["object", "get", "resnet50", *REQUIRED, *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_required_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["object", "run", "resnet50", "--out", "x"])
    assert "the following arguments are required: --bucket" in capsys.readouterr().err


def test_unknown_workload_and_bad_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--bucket", "bench", "--out", str(tmp_path / "o")]
    assert main(["object", "get", "bert", *out]) == 2
    err = capsys.readouterr().err
    assert err == (
        "storage-workloads: error: unknown object workload 'bert'; known object workloads: "
        "resnet50_object, unet3d_object\n"
    )
    assert main(["object", "get", "unet3d", *out, "--prefix", "/abs"]) == 2
    assert "ObjectWorkload.prefix must not start with '/'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "storage_workloads", "object", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert set(json.loads(done.stdout)) == set(OBJECT_WORKLOADS) | set(OBJECT_PRESETS)


def test_import_loads_neither_boto3_nor_torch() -> None:
    code = (
        "import sys, storage_workloads, storage_workloads.s3, storage_workloads.cli\n"
        "loaded = {'torch', 'boto3', 'botocore', 'moto'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mix", "get=70,copy=30"], "argument --mix: op mix: unknown op 'copy'"),
        (["--mix", "get=x"], "argument --mix: op mix weight of 'get' must be an integer"),
        (["--mix", "get=0"], "argument --mix: op mix needs at least one weight > 0"),
        (["--size-distribution", "normal"], "argument --size-distribution: invalid choice"),
        (["--size-min", "0"], "argument --size-min: must be >= 1 bytes, got '0'"),
        (["--size-max", "6GiB"], "argument --size-max: must be at most 5GiB"),
        (["--object-size", "12k"], "argument --object-size: must be a size in bytes such as"),
        (["--size-stdev", "-5"], "argument --size-stdev: must be a size in bytes"),
        (["--warmup-period", "0"], "argument --warmup-period: must be > 0 seconds"),
        (["--warmup-ops", "0"], "argument --warmup-ops: must be >= 1, got 0"),
        (["--warmup-ops", "5", "--warmup-period", "1"], "not allowed with argument"),
        (["--list-max-keys", "0"], "argument --list-max-keys: must be >= 1, got 0"),
    ],
)
def test_bad_mix_size_and_warmup_arguments(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["object", "get", "resnet50", *REQUIRED, *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not Path("out").exists()


def test_size_arguments_take_binary_units() -> None:
    from storage_workloads.cli import _parser
    from storage_workloads.cli.objects import _workload

    sizes = ["--size-distribution", "uniform", "--size-min", "4KiB", "--size-max", "2MiB"]
    args = _parser().parse_args(
        ["object", "get", "resnet50", *REQUIRED, *sizes, "--mix", "stat=1,get=3"]
    )
    w = _workload(args)
    assert (w.size_distribution, w.size_min, w.size_max) == ("uniform", 4096, 2 * 1024 * 1024)
    assert w.mix == (("get", 3), ("stat", 1))
    args = _parser().parse_args(
        ["object", "get", "unet3d", *REQUIRED, "--size-mean", "2MiB", "--size-stdev", "1048576b"]
    )
    w = _workload(args)
    assert (w.size_distribution, w.size_mean, w.size_stdev) == ("lognormal", 2 << 20, 1 << 20)
    assert (w.size_min, w.size_max) == (OBJECT_WORKLOADS["unet3d_object"].size_min, 32 << 20)
    fixed = ["--size-distribution", "fixed", "--object-size", "1GiB"]
    args = _parser().parse_args(
        [
            "object",
            "get",
            "resnet50",
            *REQUIRED,
            *fixed,
            "--warmup-period",
            "2.5",
            "--put-prefix",
            "w",
        ]
    )
    w = _workload(args)
    assert (w.size_distribution, w.size_min, w.size_max) == ("fixed", 1 << 30, 1 << 30)
    assert (w.warmup_period_s, w.put_prefix) == (2.5, "w/")


@pytest.mark.parametrize("args", [["show", "unet3d"], ["list"]])
def test_a_closed_pipe_stops_quietly(args: list[str]) -> None:
    """``storage-workloads show ... | head -1``: the reader closes the pipe; the command stops
    with status 141 (128 + SIGPIPE) and no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "storage_workloads", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before anything is written: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=60), err) == (141, "")
