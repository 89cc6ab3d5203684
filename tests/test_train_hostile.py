"""tools/train.py against hostile inputs: every value checked before the first file, only its
own entries removed, a save cut short by a signal or a file-size limit ended cleanly, and a
resume on other data refused."""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import hstu_model
from hstu_model import checkpoint as ck
from hstu_model.config import preset
from hstu_model.memory import dense_parameter_count, training_memory
from mlperf_compliance import read_log

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "tools" / "train.py")]
SYNTH = [sys.executable, "-m", "yambda_data", "synth", "--users", "40"]
RUN = ["--users", "40", "--steps", "2", "--evals", "1", "--workers", "0", "--target-auc", "0.99"]


def train(*args: str, cwd: Path, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TRAIN, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=os.environ | (env or {}),
        **({"timeout": 600} | kwargs),
    )


def refused(result: subprocess.CompletedProcess, *said: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    for text in said:
        assert text in lines[0], lines[0]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        (["--set", "optimizer.dense_lr=1e400"], {}, "dense_lr: must be finite, got inf"),
        (["--set", "optimizer.sparse_lr=inf"], {}, "sparse_lr: must be finite, got inf"),
        ([], {"HSTU_OPTIMIZER__DENSE_LR": "inf"}, "dense_lr: must be finite, got inf"),
        (["--set", "model.loss_scale=nan"], {}, "loss_scale: must be finite, got nan"),
        (["--set", "model.task_weights=inf"], {}, "task_weights: must be finite"),
        (["--set", "sharding.hbm_cap_gb=inf"], {}, "hbm_cap_gb: must be finite, got inf"),
        (["--config", "inf.toml"], {}, "dense_lr: must be finite, got inf"),
        (["--config", "inf.json"], {}, "eps: must be finite, got inf"),
        (["--config", "twice.yaml"], {}, "twice.yaml: model.num_layers is given twice"),
        (["--config", "twice.json"], {}, "twice.json: optimizer is given twice"),
        (
            ["--checkpoint-dir", "c", "--checkpoint-seconds", "inf"],
            {},
            "--checkpoint-seconds: must be finite, got inf",
        ),
        (["--dist-timeout-seconds", "inf"], {}, "--dist-timeout-seconds: must be finite, got inf"),
        (["--steps", str(10**30)], {}, "--steps: 1,000,000,000,000,000,000,000,000,000,000 steps"),
        (["--steps", "10000000", "--evals", "10000000"], {}, "--evals: must be at most 100,000"),
        (["--set", "model.num_layers=1000000000"], {}, "the model needs at least"),
        (["--min-history", "1000000000"], {}, "--min-history: no listen of the dataset can"),
        (["--set", "model.loss_scale=-1"], {}, "loss_scale: must be > 0, got -1.0"),
    ],
)
def test_every_value_is_checked_before_anything_is_created(argv, env, said, tmp_path):
    (tmp_path / "inf.toml").write_text("[optimizer]\ndense_lr = inf\n")
    (tmp_path / "inf.json").write_text('{"optimizer": {"eps": Infinity}}')
    (tmp_path / "twice.yaml").write_text("model:\n  num_layers: 2\n  num_layers: 5\n")
    (tmp_path / "twice.json").write_text('{"optimizer": {"eps": 1e-8}, "optimizer": {}}')
    before = tree(tmp_path)
    refused(train(*RUN, *argv, cwd=tmp_path, env=env), said)
    assert tree(tmp_path) == before


def test_the_memory_check_counts_without_allocating():
    """The dense parameters of a head 200,000,000 wide and of 100,000 layers, counted from
    two small models built for real: a parameter count is linear in each of the two."""
    model = preset("tiny").model

    def built(**change) -> int:
        ranker = hstu_model.HSTURanker(
            dataclasses.replace(model, **change),
            {"uid": 1, "item_id": 1, "artist_id": 1, "album_id": 1},
        )
        return sum(p.numel() for p in ranker.dense_parameters())

    per_unit = built(head_hidden_dim=16) - built(head_hidden_dim=8)
    big = dataclasses.replace(model, head_hidden_dim=200_000_000)
    assert (
        dense_parameter_count(big) == built(head_hidden_dim=8) + (200_000_000 - 8) // 8 * per_unit
    )
    per_layer = built(num_layers=2) - built(num_layers=1)
    deep = dataclasses.replace(model, num_layers=100_000)
    assert dense_parameter_count(deep) == built(num_layers=1) + 99_999 * per_layer
    assert training_memory(big, {"uid": 1, "item_id": 1, "artist_id": 1, "album_id": 1})


def test_a_model_too_large_for_the_machine_is_refused_before_anything(tmp_path):
    result = train(*RUN, "--set", "model.head_hidden_dim=200000000", cwd=tmp_path)
    refused(result, "needs at least")
    assert tree(tmp_path) == []


def test_a_batch_larger_than_the_data_is_refused_before_anything(tmp_path):
    result = train(*RUN, "--set", "train.batch_size=100000000", cwd=tmp_path)
    refused(result, "train.batch_size")
    assert tree(tmp_path) == []


@pytest.mark.parametrize("where", ["out", "checkpoint_dir"])
def test_a_folder_under_a_file_is_refused_before_anything(where, tmp_path):
    (tmp_path / "file").write_text("mine")
    folders = {"out": tmp_path / "run", "checkpoint_dir": tmp_path / "ckpt"}
    folders[where] = tmp_path / "file" / "sub"
    result = train(
        *RUN,
        *("--out", str(folders["out"]), "--checkpoint-dir", str(folders["checkpoint_dir"])),
        cwd=tmp_path,
    )
    refused(result, str(tmp_path / "file"), "not a directory")
    assert tree(tmp_path) == ["file"]


@pytest.mark.slow
def test_a_users_entries_in_the_checkpoint_dir_are_kept(tmp_path):
    checkpoints = tmp_path / "C"
    (checkpoints / "step-100").mkdir(parents=True)
    (checkpoints / "step-100" / "notes.txt").write_text("mine")
    (checkpoints / ".tmp-mywork").mkdir()
    (checkpoints / ".tmp-mywork" / "draft.txt").write_text("mine")
    (checkpoints / ".trash-can.txt").write_text("mine")
    argv = ["--checkpoint-every", "1", "--keep-checkpoints", "1"]
    result = train(*RUN, *argv, "--out", "n", "--checkpoint-dir", "C", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    left = tree(checkpoints)
    for mine in ("step-100/notes.txt", ".tmp-mywork/draft.txt", ".trash-can.txt"):
        assert mine in left
    assert [c.step for c in ck.list_checkpoints(checkpoints)] == [2]


def test_a_users_folder_where_a_checkpoint_goes_is_refused_before_anything(tmp_path):
    (tmp_path / "C" / "step-2").mkdir(parents=True)
    (tmp_path / "C" / "step-2" / "notes.txt").write_text("mine")
    argv = ["--checkpoint-every", "1", "--out", "n", "--checkpoint-dir", "C"]
    refused(train(*RUN, *argv, cwd=tmp_path), str(Path("C") / "step-2"))
    assert tree(tmp_path) == ["C", "C/step-2", "C/step-2/notes.txt"]


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000 * 1024, resource.RLIM_INFINITY))


@pytest.mark.slow
def test_a_file_size_limit_during_a_save_is_one_line_and_leaves_no_temporary(tmp_path):
    data = tmp_path / "data"
    made = subprocess.run(
        [*SYNTH, "--seed", "0", "--out", str(data)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    argv = ["--data", "data", "--checkpoint-every", "1", "--out", "n", "--checkpoint-dir", "C"]
    result = train(*RUN, *argv, cwd=tmp_path, preexec_fn=_limit_file_size)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr[-3000:]
    assert "file-size limit" in lines[-1] and "Traceback" not in result.stderr
    assert not [p for p in (tmp_path / "C").iterdir() if p.name.startswith(".tmp-")]
    stop = read_log(tmp_path / "n" / "mlperf.log")[-1]
    assert stop["key"] == "run_stop" and stop["metadata"]["status"] == "aborted"


SIGNALLED_TRAIN = """
import os, runpy, signal, sys
from torch.distributed.checkpoint.filesystem import FileSystemWriter

write_data = FileSystemWriter.write_data


def signal_then_write(self, plan, planner):  # the signal arrives while DCP writes
    os.kill(os.getpid(), signal.SIGTERM)
    return write_data(self, plan, planner)


FileSystemWriter.write_data = signal_then_write
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_sigterm_during_a_save_exits_143_in_one_line_and_the_resume_is_right(tmp_path):
    (tmp_path / "signalled.py").write_text(SIGNALLED_TRAIN)
    argv = [*RUN, "--checkpoint-every", "1", "--out", "n", "--checkpoint-dir", "C"]
    result = subprocess.run(
        [sys.executable, "signalled.py", str(ROOT / "tools" / "train.py"), *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert "SIGTERM" in lines[-1] and "Traceback" not in result.stderr
    assert sorted(p.name for p in (tmp_path / "C").iterdir()) == [".lock"]
    resumed = train(*argv, "--resume", "auto", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "starting it again" in resumed.stderr


@pytest.mark.slow
def test_a_resume_on_other_data_is_refused_naming_the_file(tmp_path):
    def synth(seed: int) -> None:
        made = subprocess.run(
            [*SYNTH, "--seed", str(seed), "--out", str(tmp_path / "data"), "--overwrite"],
            capture_output=True,
            text=True,
        )
        assert made.returncode == 0, made.stderr

    synth(0)
    argv = [*RUN, "--steps", "4", "--data", "data", "--checkpoint-every", "2"]
    argv += ["--keep-checkpoints", "5", "--out", "n", "--checkpoint-dir", "C"]
    first = train(*argv, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (tmp_path / "n" / "result.json").unlink()  # as if killed after its last checkpoint
    synth(1)
    before = {p: p.read_bytes() for p in (tmp_path / "n").rglob("*") if p.is_file()}
    result = train(*argv, "--resume", "auto", cwd=tmp_path)
    refused(result, "multi_event.parquet", "bytes")
    after = {p: p.read_bytes() for p in (tmp_path / "n").rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_config_that_is_no_regular_file_is_refused_without_reading_it(kind, tmp_path):
    """/dev/zero would be read until memory runs out, a FIFO waited on forever."""
    config = tmp_path / "config.toml"
    if kind == "device":
        config.symlink_to("/dev/zero")
    else:
        os.mkfifo(config)
    before = tree(tmp_path)
    refused(train(*RUN, "--config", str(config), cwd=tmp_path, timeout=300), "not a regular file")
    assert tree(tmp_path) == before


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only tmpfs (mounting needs root; skipped where it cannot be made): even root
    cannot write there."""
    mount = tmp_path / "read-only"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("option", ["--out", "--checkpoint-dir"])
def test_a_read_only_folder_is_refused_before_anything(option, read_only_folder, tmp_path):
    argv = ["--out", str(tmp_path / "run"), option, str(read_only_folder / "sub")]
    refused(train(*RUN, *argv, cwd=tmp_path), f"{read_only_folder} is not writable")
    assert tree(tmp_path) == ["read-only"]
