"""tools/train.py under hostile use: one process per run folder and checkpoint directory,
every refusal before the first write, runs that a requeued cluster job repeats."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hstu_model
from dlrmv4_train import folder_lock
from dlrmv4_train.run import RunConfig, RunRefused, flag
from dlrmv4_train.run_folders import RUN_RECORD, newest_unfinished_run, write_run_record
from mlperf_compliance import read_log

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # fault_support: process trees
_spec = importlib.util.spec_from_file_location("train_tool", ROOT / "tools" / "train.py")
train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train)

TINY_RUN = ["--users", "40", "--steps", "4", "--evals", "1", "--workers", "0"]
CHECKPOINTED = [*TINY_RUN, "--checkpoint-every", "2"]


def tree_digest(*folders: Path) -> dict[str, str]:
    """sha256 of every file under `folders` (the lock files aside: they say who ran last)."""
    return {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != folder_lock.LOCK_FILE
    }


def stop_at_step(monkeypatch, step: int):
    """Make the next run raise KeyboardInterrupt when it reaches `step` (a crash); returns the
    function that undoes it."""
    real_step = hstu_model.Trainer.train_step

    def crash(self, batch):
        if self.step == step:
            raise KeyboardInterrupt
        return real_step(self, batch)

    monkeypatch.setattr(hstu_model.Trainer, "train_step", crash)
    return lambda: monkeypatch.setattr(hstu_model.Trainer, "train_step", real_step)


def crashed_run(tmp_path, monkeypatch, step: int = 3, extra: tuple = ()) -> list[str]:
    """A checkpointed run (checkpoints every 2 steps) that crashed at `step`; its argv."""
    argv = [*CHECKPOINTED, "--out", str(tmp_path / "run")]
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt"), *extra]
    undo = stop_at_step(monkeypatch, step)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    undo()
    return argv


HOLDER = """
import sys, time
from dlrmv4_train import folder_lock
folder_lock.lock_folder(sys.argv[1], "test")
print("locked", flush=True)
time.sleep(600)
"""


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process that holds `folder`'s lock until it is killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_every_option_is_named_by_its_flag():
    """Messages name the options that exist (--set, --config), never a field name."""
    options = {a.dest: a.option_strings for a in train.build_parser()._actions}
    fields = set(RunConfig.__dataclass_fields__)
    assert fields <= set(options)
    for field in fields:
        assert flag(field) in options[field], (field, options[field])
    assert flag("overrides") == "--set" and flag("config_file") == "--config"


@pytest.mark.slow
def test_help_works_with_a_bad_environment_variable_and_a_run_is_one_line(tmp_path):
    env = {**os.environ, "HSTU_MODEL__NUM_LAYERS": "abc"}
    command = [sys.executable, str(ROOT / "tools" / "train.py")]
    shown = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, env=env, timeout=300
    )
    assert shown.returncode == 0 and "Exit status:" in shown.stdout, shown.stderr
    refused = subprocess.run(
        [*command, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "train.py: error: environment variable HSTU_MODEL__NUM_LAYERS: model.num_layers: "
        "expected int, got 'abc' (see --help)"
    ]
    assert list(tmp_path.iterdir()) == []


CONTEXTUAL_TRILLION = (
    "model.contextual_features=user_x_artist=1000000000000,user_x_album=4000,user_x_hour=2400,"
    "item_x_hour=4000,artist_x_hour=3200,user_x_is_organic=2000,user_x_artist_x_hour=4000"
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--users", "1000000000"], "--users: must be in 1..10,000,000, got 1000000000"),
        (["--seed", str(2**64)], f"--seed: must be in 0..2**63-1, got {2**64}"),
        (["--size", "../x"], "--size: must be a plain directory name, got '../x'"),
        (["--set", CONTEXTUAL_TRILLION], "the model needs at least "),
    ],
)
def test_what_cannot_run_is_refused_before_anything_is_created(
    argv, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises((SystemExit, RunRefused)) as info:
        train.main([*TINY_RUN, *argv])
    text = str(info.value) if isinstance(info.value, RunRefused) else capsys.readouterr().err
    assert message in text
    assert list(tmp_path.iterdir()) == []


def test_the_memory_refusal_says_the_need_and_what_is_available(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunRefused) as info:
        train.main([*TINY_RUN, "--set", CONTEXTUAL_TRILLION])
    text = str(info.value)
    assert "TiB per rank" in text and "available on this host" in text
    assert "model.contextual_features" in text


def test_a_missing_mapping_of_data_is_refused_before_anything(tmp_path):
    root = tmp_path / "yambda"
    (root / "flat" / "50m").mkdir(parents=True)
    (root / "flat" / "50m" / "multi_event.parquet").write_bytes(b"")
    out = tmp_path / "run"
    with pytest.raises(RunRefused, match=r"no file .*artist_item_mapping\.parquet"):
        train.main([*TINY_RUN, "--data", str(root), "--out", str(out)])
    assert not out.exists()


@pytest.mark.slow
def test_a_second_process_on_the_run_folder_or_checkpoints_is_refused_naming_the_first(
    tmp_path,
):
    out, checkpoints = tmp_path / "run", tmp_path / "ckpt"
    for locked in (out, checkpoints):
        holder = hold_lock(locked)
        try:
            with pytest.raises(RunRefused, match=rf"is in use by process {holder.pid} "):
                train.main([*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)])
        finally:
            holder.kill()
            holder.wait()
        assert not (out / "mlperf.log").exists()
    # The holder died by SIGKILL: the kernel dropped its lock, nothing to clean up.
    summary = train.main([*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)])
    assert summary["status"] in ("success", "aborted")


FORKING_HOLDER = """
import os, sys, time
from dlrmv4_train import folder_lock
folder_lock.lock_folder(sys.argv[1], "test")
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
print(child, flush=True)
time.sleep(600)
"""


def test_a_forked_child_that_outlives_the_holder_does_not_keep_the_lock(tmp_path):
    """A loader worker left behind by a killed trainer must not block the resume."""
    process = subprocess.Popen(
        [sys.executable, "-c", FORKING_HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    child = int(process.stdout.readline())
    try:
        assert f"process {process.pid}" in folder_lock.holder(tmp_path)
        process.kill()
        process.wait()
        assert Path(f"/proc/{child}").exists()  # the child lives on
        assert folder_lock.holder(tmp_path) is None
        with folder_lock.lock_folder(tmp_path, "test"):
            assert folder_lock.holder(tmp_path) is None  # this process's own lock
    finally:
        os.kill(child, signal.SIGKILL)


def test_resume_without_out_passes_over_a_run_that_is_running(tmp_path):
    checkpoints = tmp_path / "ckpt"
    runs = tmp_path / "runs"
    for name in ("train-20260101-000000", "train-20260101-000001"):
        folder = runs / name
        folder.mkdir(parents=True)
        write_run_record(folder, name)
        (folder / "config.json").write_text(
            json.dumps({"run": {"checkpoint_dir": str(checkpoints)}})
        )
        time.sleep(0.01)  # the second is the newest
    newest = runs / "train-20260101-000001"
    assert newest_unfinished_run(checkpoints, base=runs) == newest
    holder = hold_lock(newest)
    try:
        assert newest_unfinished_run(checkpoints, base=runs) == runs / "train-20260101-000000"
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_changed_config_on_resume_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    config_file = tmp_path / "c.toml"
    config_file.write_text("[optimizer]\nwarmup_steps = 10\n")
    argv = crashed_run(tmp_path, monkeypatch, extra=("--config", str(config_file)))
    before = tree_digest(tmp_path / "run", tmp_path / "ckpt")
    monkeypatch.setenv("HSTU_OPTIMIZER__DENSE_LR", "0.5")
    with pytest.raises(RunRefused, match=r"checkpoint of another run: optimizer\.dense_lr: "):
        train.main([*argv, "--resume", "auto"])
    monkeypatch.delenv("HSTU_OPTIMIZER__DENSE_LR")
    config_file.write_text("[optimizer]\nwarmup_steps = 11\n")
    with pytest.raises(RunRefused, match=r"optimizer\.warmup_steps: 10 then, 11 now"):
        train.main([*argv, "--resume", "auto"])
    assert tree_digest(tmp_path / "run", tmp_path / "ckpt") == before


@pytest.mark.slow
def test_overwrite_and_resume_together_are_refused_when_there_is_a_checkpoint(
    tmp_path, monkeypatch
):
    argv = crashed_run(tmp_path, monkeypatch)
    before = tree_digest(tmp_path / "run", tmp_path / "ckpt")
    with pytest.raises(RunRefused, match=r"--overwrite replaces the run in .* pass one of them"):
        train.main([*argv, "--resume", "auto", "--overwrite"])
    assert tree_digest(tmp_path / "run", tmp_path / "ckpt") == before


@pytest.mark.slow
def test_a_checkpoint_of_another_run_folder_is_refused(tmp_path, monkeypatch):
    argv = crashed_run(tmp_path, monkeypatch)
    other = tmp_path / "other"
    other.mkdir()
    for name in ("mlperf.log", "config.json", RUN_RECORD):
        (other / name).write_bytes((tmp_path / "run" / name).read_bytes())
    record = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(record | {"run_id": "another"}))
    out_at = argv.index("--out") + 1
    argv[out_at] = str(other)
    with pytest.raises(RunRefused, match=r"is a checkpoint of another run than the one in "):
        train.main([*argv, "--resume", "auto"])


@pytest.mark.slow
def test_a_requeued_run_without_a_checkpoint_starts_again_then_resumes(
    tmp_path, monkeypatch, capsys
):
    """A job killed before its first checkpoint repeats its command line (--resume auto): the
    run starts again, saying so; killed again after a checkpoint, it resumes from it. It ends
    as the run that was never stopped."""
    whole = train.main([*CHECKPOINTED, "--out", str(tmp_path / "whole")])
    argv = crashed_run(tmp_path, monkeypatch, step=1)
    argv += ["--resume", "auto"]
    assert not list((tmp_path / "ckpt").glob("step-*"))
    capsys.readouterr()
    undo = stop_at_step(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    undo()
    assert "saved no checkpoint in --checkpoint-dir" in capsys.readouterr().err
    resumed = train.main(argv)
    assert resumed["resumed_from_step"] == 2
    assert resumed["weights_sha256"] == whole["weights_sha256"]
    records = read_log(tmp_path / "run" / "mlperf.log")
    assert [r["key"] for r in records].count("run_start") == 1
    assert [r["key"] for r in records].count("run_stop") == 1
    # Requeued once more after its end: the run is done, nothing of it changes; with other
    # settings it is refused.
    finished = tree_digest(tmp_path / "run", tmp_path / "ckpt")
    capsys.readouterr()
    assert train.main(argv) == resumed
    assert "holds this run, finished" in capsys.readouterr().err
    with pytest.raises(RunRefused, match=r"--seed 0 then, 3 now"):
        train.main([*argv, "--seed", "3"])
    assert tree_digest(tmp_path / "run", tmp_path / "ckpt") == finished


def test_a_requeued_run_with_other_settings_is_refused(tmp_path, monkeypatch):
    argv = crashed_run(tmp_path, monkeypatch, step=1)
    before = tree_digest(tmp_path / "run")
    with pytest.raises(RunRefused, match=r"unfinished run of other settings: --seed 0 then"):
        train.main([*argv, "--resume", "auto", "--seed", "3"])
    assert tree_digest(tmp_path / "run") == before


def test_an_out_that_is_a_file_is_refused_naming_it(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    with pytest.raises(SystemExit):
        train.parse_args(["--out", str(taken)])
    assert f"--out: {taken} exists and is not a folder" in capsys.readouterr().err
    assert taken.read_text() == "mine"


def _living(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


@pytest.mark.slow
def test_loader_workers_die_with_a_killed_trainer(tmp_path):
    """kill -9 of the trainer leaves no loader worker running on, reparented."""
    from fault_support import descendants

    command = [sys.executable, str(ROOT / "tools" / "train.py"), *TINY_RUN[:2]]
    command += ["--steps", "2000", "--evals", "1", "--workers", "2", "--out", str(tmp_path / "r")]
    trainer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while len(workers := descendants(trainer.pid)) < 2:
            assert trainer.poll() is None and time.monotonic() < deadline, "no workers started"
            time.sleep(0.2)
    finally:
        trainer.kill()
        trainer.wait()
    deadline = time.monotonic() + 2  # (the DataLoader's own watchdog polls every 5 s)
    while _living(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _living(workers) == []


RECORDLESS_HOLDER = """
import fcntl, os, sys, time
fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


def test_a_new_holder_is_named_before_it_writes_its_record(tmp_path):
    """Between taking the lock and writing its record, a resumed run leaves the record of the
    killed run it replaces in the lock file: a refused process must name the live holder, as
    the kernel knows it, and never the dead one."""
    killed = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE)
    assert killed.stdout.readline().strip() == b"locked"
    killed.kill()
    killed.wait()
    assert f'"pid": {killed.pid}' in (tmp_path / folder_lock.LOCK_FILE).read_text()
    live = subprocess.Popen(
        [sys.executable, "-c", RECORDLESS_HOLDER, str(tmp_path)], stdout=subprocess.PIPE
    )
    try:
        assert live.stdout.readline().strip() == b"locked"
        assert folder_lock.holder(tmp_path) == f"process {live.pid}"
        with pytest.raises(folder_lock.FolderInUse, match=rf"in use by process {live.pid};"):
            folder_lock.lock_folder(tmp_path, "test")
    finally:
        live.kill()
        live.wait()


def test_ctrl_c_inside_an_import_error_is_an_interrupt(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ImportError("partially initialized module 'torch'") from None
    except ImportError as error:
        caught = error
    assert caught.__context__ is not None  # `from None` hides it from the traceback only
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(SystemExit) as exited:
            train.exit_for(caught)  # it ignores SIGTERM and SIGINT from there on
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert exited.value.code == 130
    assert capsys.readouterr().err == "train.py: interrupted\n"
    assert not train.interrupted_by_ctrl_c(ValueError("x"))
