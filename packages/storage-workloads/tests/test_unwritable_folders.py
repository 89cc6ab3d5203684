"""A folder a run would write into but cannot (a read-only --data-dir for datagen, a read-only
--checkpoint-folder, --run-dir or --results-dir) is refused in one line before the run folder
or anything else is made, by the means the run writes (a file made and removed), not by
permission bits, which say nothing of read-only mounts or of what root may do."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from storage_workloads.cli import main


def _read_only_folder(tmp_path: Path) -> Path:
    """A folder that does not exist and cannot be made: under a folder without write
    permission, or, for root (whom permission bits do not stop), under /sys where the kernel
    refuses new files."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked / "folder"
    try:
        fd, probe = tempfile.mkstemp(dir="/sys")
    except OSError:
        return Path("/sys/storage-workloads-test-folder")
    os.close(fd)
    os.unlink(probe)
    pytest.skip("root may write in /sys here, and permission bits do not stop root")


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("what_if", [False, True])
@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["datagen", "dlrm", "--data-dir", "{ro}", "--run-dir", "{tmp}/run"], "--data-dir"),
        (["datagen", "dlrm", "--data-dir", "{tmp}/data", "--run-dir", "{ro}"], "--run-dir"),
        (["datagen", "dlrm", "--data-dir", "{tmp}/data", "--results-dir", "{ro}"], "--results-dir"),
        (
            ["checkpoint", "llama3_8b", "--checkpoint-folder", "{ro}", "--run-dir", "{tmp}/run"],
            "--checkpoint-folder",
        ),
        (
            [
                *("checkpoint", "llama3_8b", "--engine", "dlio", "--emulation"),
                *("--scale", "0.001", "--checkpoint-folder", "{ro}", "--run-dir", "{tmp}/run"),
            ],
            "--checkpoint-folder",
        ),
    ],
)
def test_an_unwritable_folder_is_refused_before_anything_is_made(
    command: list[str],
    flag: str,
    what_if: bool,
    tmp_path: Path,
    venv: Path,
    fake_dlio: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    read_only = _read_only_folder(tmp_path)
    args = [a.format(ro=read_only, tmp=tmp_path) for a in command]
    before = _listing(tmp_path)
    status = main([*args, "--dlio-venv", str(venv), *(["--what-if"] if what_if else [])])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"error: {flag} {read_only}: cannot write in {read_only.parent} (" in err, err
    assert _listing(tmp_path) == before
    assert not read_only.exists()


def test_training_reads_a_dataset_it_cannot_write(
    tmp_path: Path, venv: Path, fake_dlio: None, npz_dataset: object
) -> None:
    """`run` only reads its --data-dir: a dataset in a folder without write permission runs."""
    if os.geteuid() == 0:
        pytest.skip("permission bits do not stop root, and /sys holds no dataset")
    data = tmp_path / "data"
    npz_dataset(data, 16)  # type: ignore[operator]
    for folder in (data / "train", data):
        folder.chmod(0o555)
    try:
        args = ["run", "dlrm", "--data-dir", str(data), "--run-dir", str(tmp_path / "run")]
        assert main([*args, "--num-files", "16", "--dlio-venv", str(venv), "--processes", "2"]) in (
            0,
            1,
        )
        assert (tmp_path / "run" / "results.json").is_file()
    finally:
        for folder in (data, data / "train"):
            folder.chmod(0o755)
