"""Damaged inputs: a file that is not UTF-8, a truncated results or summary file. Each is one
finding in `check` and one line in `report`, the same for every results file, and never a
traceback or another file read in its place."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from storage_workloads import check_path
from storage_workloads.cli import main
from storage_workloads.dliorun import DlioError, aggregate_results

FIXTURE = Path(__file__).parent / "data" / "dlio-2ranks-2epochs"
NOT_UTF8 = b"model: dlrm\naccelerator: h\xff100\n"


@pytest.mark.parametrize("name", ["params.yaml", "params.json"])
def test_check_names_a_file_that_is_not_utf8(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(NOT_UTF8)
    report = check_path(path)
    (issue,) = report.issues
    assert (report.verdict, issue.rule, issue.parameter) == ("INVALID", "readable", str(path))
    assert "not UTF-8 text (byte 0xff at offset 26)" in issue.message
    assert main(["check", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "not UTF-8 text" in captured.out


def test_check_of_a_run_whose_run_json_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    (run / "run.json").write_bytes(b'{"command": "run\xe9"}')
    assert main(["check", str(run)]) == 1
    out = capsys.readouterr().out
    assert f"{run / 'run.json'}: cannot read it: not UTF-8 text" in out


def _training_run(folder: Path) -> Path:
    """A finished `run` folder: DLIO's output, a metadata file and this package's results."""
    shutil.copytree(FIXTURE, folder)
    (folder / "training_20250101_000000_metadata.json").write_text(
        json.dumps({"benchmark_type": "training", "command": "run", "model": "dlrm"})
    )
    result = {
        "schema": "storage-workloads/dlio-results/1",
        "model": "dlrm",
        "accelerator": "h100",
        "processes": 2,
        "epochs": [{"epoch": 1}, {"epoch": 2}],
        "au_mean_percent": 73.7,
        "passed": True,
        "verdict": "INVALID",
    }
    (folder / "results.json").write_text(json.dumps(result, indent=2))
    return folder


def _checkpoint_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    result = {
        "schema": "storage-workloads/dlio-checkpoint/1",
        "model": "llama3_8b",
        "processes": 8,
        "write": {"count": 10, "seconds_mean": 1.0, "gb_per_s_mean": 105.0},
        "read": {"count": 10, "seconds_mean": 0.5, "gb_per_s_mean": 210.0},
        "verdict": "CLOSED",
    }
    (folder / "checkpoint-results.json").write_text(json.dumps(result))
    return folder


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:40])


@pytest.mark.parametrize(
    ("damaged", "damage"),
    [
        ("training/results.json", _truncate),
        ("training/results.json", lambda p: p.write_bytes(b"\xff" + p.read_bytes())),
        ("checkpoint/checkpoint-results.json", _truncate),
        ("mlpstorage/summary.json", _truncate),
    ],
)
def test_report_lists_a_damaged_results_file_and_goes_on(
    tmp_path: Path, damaged: str, damage: object, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    _training_run(root / "training")
    _checkpoint_run(root / "checkpoint")
    mlpstorage = _training_run(root / "mlpstorage")
    (mlpstorage / "results.json").unlink()  # as mlpstorage leaves a run: DLIO's summary.json
    path = root / damaged
    damage(path)  # type: ignore[operator]
    report = aggregate_results([root])
    (entry,) = report.damaged
    assert entry.run == str(path.parent) and entry.file == path.name
    # Never another file in its place: the damaged run has no row.
    runs = {r.run for r in report.runs} | {r.run for r in report.checkpoint_runs}
    assert str(path.parent) not in runs
    assert len(runs) == 2
    assert main(["report", str(root)]) == 1
    captured = capsys.readouterr()
    (line,) = [x for x in captured.out.splitlines() if x.startswith("damaged ")]
    assert line.startswith(f"damaged {path.parent}: {path.name}: cannot read it: ")
    assert line.endswith(" (left out of the report)")
    assert captured.err == ""


def test_report_of_damaged_runs_only_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _training_run(tmp_path / "run")
    _truncate(run / "results.json")
    with pytest.raises(DlioError, match=r"damaged: .*run \(results\.json: cannot read it"):
        aggregate_results([run])
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "results.json" in err


def _nested(path: Path) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data)[:-1] + ', "x": ' + "[" * 3000 + "]" * 3000 + "}")


def _au(value: str) -> object:
    def damage(path: Path) -> None:
        text = path.read_text()
        path.write_text(text.replace('"au_mean_percent": 73.7', f'"au_mean_percent": {value}'))

    return damage


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dangling(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "gone.json")


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_nested, "nested deeper than 64 levels"),
        (_au("Infinity"), "Infinity is not a finite number"),
        (_au("NaN"), "NaN is not a finite number"),
        (_au("1e400"), "1e400 is not a finite number"),
        (_fifo, "a FIFO, not a regular file"),
        (_dangling, "a dangling symbolic link"),
    ],
)
def test_report_names_a_hostile_results_file_and_reports_the_rest(
    tmp_path: Path, damage: object, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    _training_run(root / "good")
    victim = _training_run(root / "victim") / "results.json"
    damage(victim)  # type: ignore[operator]
    report = aggregate_results([root])
    assert [r.run for r in report.runs] == [str(root / "good")] and report.all_passed
    (entry,) = report.damaged
    assert entry.run == str(victim.parent) and reason in entry.reason
    assert main(["report", str(root), "--format", "json"]) == 1
    json.loads(capsys.readouterr().out, parse_constant=pytest.fail)  # no NaN, no Infinity


def test_report_reads_no_fifo_in_place_of_metadata(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run")
    (run / "results.json").unlink()  # an mlpstorage run: summary.json and its metadata
    metadata = run / "training_20250101_000000_metadata.json"
    metadata.unlink()
    os.mkfifo(metadata)
    (run / "x_metadata.json").write_text(json.dumps({"model": "dlrm"}))
    report = aggregate_results([run])  # returns: nothing waits on the FIFO
    assert [r.run for r in report.runs] == [str(run)]


def test_report_names_a_results_file_of_the_wrong_shape(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _training_run(root / "good")
    victim = _training_run(root / "victim") / "results.json"
    victim.write_text(victim.read_text().replace('"epochs": [', '"epochs": 5, "x": ['))
    report = aggregate_results([root])
    (entry,) = report.damaged
    assert entry.run == str(victim.parent) and entry.file == "results.json"
    assert [r.run for r in report.runs] == [str(root / "good")]
