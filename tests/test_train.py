"""tools/train.py: its command-line surface, and short end-to-end runs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hstu_model
from dlrmv4_train.run import RunRefused
from dlrmv4_train.run_folders import write_run_record
from hstu_model import checkpoint as ck
from mlperf_compliance import check_log, read_log

ROOT = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_tool", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = load_tool("train")
faults = load_tool("fault_injection")
"""Its process-tree helpers (`children`, `descendants`) find a torchrun run's processes."""
fault_support = sys.modules["fault_support"]  # beside it, imported by it: `stat_fields`


def test_command_line_surface_is_frozen():
    defaults = vars(train.build_parser().parse_args([]))
    assert defaults == {
        "preset": "tiny",
        "config_file": None,
        "overrides": [],
        "data": None,
        "size": "50m",
        "users": 400,
        "seed": 0,
        "steps": 600,
        "evals": 3,
        "kernel": "auto",
        "workers": 1,
        "target_auc": None,
        "out": None,
        "overwrite": False,
        "checkpoint_dir": None,
        "checkpoint_every": 100,
        "checkpoint_seconds": 0.0,
        "checkpoint_every_window": False,
        "keep_checkpoints": 2,
        "resume": "never",
        "dist_timeout_seconds": 300.0,
        "min_history": 16,
        "history_strategy": "interleaved",
        "division": "open",
        "debug": False,
    }
    assert train.parse_args(["--steps", "epoch"]).config.steps is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps: must be >= 1, got 0"),
        (["--steps", "2", "--evals", "3"], "--evals: need 1 <= evals <= steps (2), got 3"),
        (["--steps", "all"], "--steps: expected a number of steps or 'epoch', got 'all'"),
        (["--min-history", "0"], "--min-history: must be >= 1, got 0"),
        (
            ["--division", "closed"],
            "--division: closed needs data=<the Yambda download> (got None); size=5b (got 50m); "
            "steps=None (one pass over the data; --steps epoch) (got 600); evals=1000, one "
            "every 0.1% of the data (got 3); min_history=4086, the reference's samples (got 16)",
        ),
        (
            [
                *("--division", "closed", "--data", "d", "--size", "5b", "--steps", "epoch"),
                *("--evals", "1000", "--min-history", "4086", "--target-auc", "0.7"),
                *("--preset", "yambda-5b", "--set", "optimizer.dense_lr=2e-6"),
            ],
            "--division: closed needs target_auc=0.75 (got 0.7)",
        ),
        (
            [
                *("--division", "closed", "--data", "d", "--size", "5b", "--steps", "epoch"),
                *("--evals", "1000", "--min-history", "4086", "--preset", "tiny"),
            ],
            "--division: closed needs preset=yambda-5b, the reference's model (got tiny); "
            "model.embedding_dim=64 (reference: 512), not the reference's",
        ),
        (
            [
                *("--division", "closed", "--data", "d", "--size", "5b", "--steps", "epoch"),
                *("--evals", "1000", "--min-history", "4086", "--preset", "yambda-5b"),
                *("--history-strategy", "last_n", "--set", "model.num_layers=5"),
                *("--set", "optimizer.warmup_steps=10", "--set", "train.batch_size=512"),
            ],
            "--division: closed needs history_strategy=interleaved, the reference's samples "
            "(got last_n); model.num_layers=5 (reference: 3), not the reference's; "
            "optimizer.warmup_steps=10 (reference: 24000), not the reference's",
        ),
    ],
)
def test_bad_schedule_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        train.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--resume", "auto"], "--resume: auto needs checkpoint_dir"),
        (
            ["--checkpoint-dir", "c", "--checkpoint-every", "0"],
            "--checkpoint-dir: needs checkpoint_every > 0, checkpoint_seconds > 0 or",
        ),
        (["--keep-checkpoints", "0"], "--keep-checkpoints: must be >= 1"),
    ],
)
def test_bad_checkpoint_flags_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        train.parse_args(argv)
    assert message in capsys.readouterr().err


def test_auto_kernel_is_native_on_the_cpu_and_resumes_native_checkpoints():
    """The identity a checkpoint stores names the kernel that ran: a run started with the old
    default (native) resumes under auto on the CPU, and only there."""
    auto = train.parse_args([])
    native = train.training.resolve_run(train.training.RunConfig(kernel="native"))
    assert auto.config.kernel == "auto" and auto.hstu.model.kernel == "native"
    assert auto.identity()["kernel"] == "native"
    assert auto.identity() == native.identity()


@pytest.mark.slow
def test_triton_on_the_cpu_without_the_interpreter_is_one_line_and_creates_nothing(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [sys.executable, str(ROOT / "tools" / "train.py"), "--kernel", "triton"]
    result = subprocess.run(
        [*command, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,  # where a fresh runs/ folder would appear
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("train.py: error: --kernel triton cannot run on the cpu device: ")
    assert (
        "TRITON_INTERPRET=1" in lines[0] and "use --kernel native or --kernel pytorch" in lines[0]
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []


SHORT = ["--users", "80", "--steps", "12", "--evals", "2"]
"""A short run: 12 steps of 256 samples, evaluated at steps 6 and 12. With 80 users the time
window of steps 10 and 11 holds two batches, so a checkpoint at step 10 is mid-window."""


def short_run(out: Path, seed: int = 0, kernel: str = "auto", extra: tuple = ()) -> dict:
    args = [*SHORT, "--seed", str(seed), "--kernel", kernel]
    return train.main([*args, "--out", str(out), *extra])


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The default kernel, auto: native on the CPU."""
    out = tmp_path_factory.mktemp("run")
    return out, short_run(out)


@pytest.mark.slow
def test_short_run_reports_and_logs(first_run, capsys):
    out, summary = first_run
    assert set(summary) >= {"eval_auc", "train_samples", "samples_per_s", "mlperf_log"}
    assert len(summary["weights_sha256"]) == 64 and summary["resumed_from_step"] is None
    assert 0.0 <= summary["eval_auc"] <= 1.0
    assert summary["train_samples"] == 12 * 256
    records = read_log(summary["mlperf_log"])
    keys = [r["key"] for r in records]
    for key in ("init_start", "init_stop", "run_start", "eval_accuracy", "run_stop"):
        assert key in keys
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert {r["metadata"]["file"] for r in records} == {"dlrmv4_train/run.py"}
    assert keys.index("global_batch_size") < keys.index("opt_base_learning_rate")
    assert keys[:2] == ["cache_clear", "init_start"]  # the reference's order
    assert next(
        r["value"] for r in records if r["key"] == "lowest_numerical_precision_in_comm"
    ) == ("fp32")
    accuracies = [r for r in records if r["key"] == "eval_accuracy"]
    assert [r["metadata"]["samples_count"] for r in accuracies] == [6 * 256, 12 * 256]
    # each evaluation inside its own records: eval_start before it, eval_stop after
    starts = [r for r in records if r["key"] == "eval_start"]
    for start, accuracy in zip(starts, accuracies, strict=True):
        assert start["metadata"]["samples_count"] == accuracy["metadata"]["samples_count"]
        assert keys[records.index(start) - 1] == "block_stop"
        assert keys[records.index(accuracy) + 1] == "eval_stop"
    assert accuracies[-1]["value"] == pytest.approx(summary["eval_auc"], abs=1e-6)
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,samples,split,name,value"
    eval_rows = [r.split(",") for r in rows if ",eval," in r]
    assert [(r[0], r[3]) for r in eval_rows] == [
        (step, name) for step in ("6", "12") for name in ("auc", "loss", "ne")
    ]
    assert float(eval_rows[-3][4]) == pytest.approx(summary["eval_auc"], abs=1e-6)
    assert float(eval_rows[-1][4]) == pytest.approx(summary["eval_ne"], abs=1e-6)
    assert any(r.startswith("12,3072,train,lifetime_auc,") for r in rows)
    assert Path(summary["metrics_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["history_length"] == 32 and config["run"]["seed"] == 0
    assert config["run"]["history_strategy"] == "interleaved"
    # What auto chose is recorded, so that a reader (and a resume) knows what ran.
    assert config["run"]["kernel"] == config["model"]["kernel"] == "native"


@pytest.mark.slow
def test_log_passes_the_dev_ruleset(first_run):
    _, summary = first_run
    result = check_log(summary["mlperf_log"], ruleset="dev")
    assert result.passed, result.summary()


@pytest.mark.slow
def test_same_seed_same_result(first_run, tmp_path):
    _, summary = first_run
    again = short_run(tmp_path)
    assert again["eval_auc"] == summary["eval_auc"]
    assert again["weights_sha256"] == summary["weights_sha256"]


@pytest.mark.slow
def test_kernels_give_the_same_run(first_run, tmp_path):
    """The NATIVE attention sums in another order than the PyTorch reference: the same run to
    rounding, so the same AUC to a few 1e-4."""
    _, summary = first_run
    other = short_run(tmp_path, kernel="pytorch")["eval_auc"]
    assert other == pytest.approx(summary["eval_auc"], abs=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["interleaved", "last_n"])
def test_the_run_cuts_its_samples_with_the_history_strategy(strategy, tmp_path, monkeypatch):
    """The training and evaluation loaders get the run's SampleConfig: interleaved (the
    reference's) by default, with the model's history_length; its batches' histories then hold
    at most history_length // 3 events of each pool."""
    import dlrmv4_train.run as run_module

    seen = []

    def recording_loader(path, sample_config, plan, **kwargs):
        loader = real_loader(path, sample_config, plan, **kwargs)
        seen.append((sample_config, list(loader)))
        return seen[-1][1]

    real_loader = run_module.make_loader
    monkeypatch.setattr(run_module, "make_loader", recording_loader)
    argv = ["--users", "80", "--steps", "2", "--evals", "1", "--workers", "0"]
    extra = [] if strategy == "interleaved" else ["--history-strategy", strategy]
    train.main([*argv, *extra, "--out", str(tmp_path / "run")])
    assert seen and all(c.strategy == strategy and c.history_length == 32 for c, _ in seen)
    per_pool = []
    for _, batches in seen:
        for batch in batches:
            uih = batch.uih.to_dict()
            bits = uih["action_weight"].values()
            for b, n in enumerate(uih["action_weight"].lengths().tolist()):
                start = int(uih["action_weight"].offsets()[b])
                per_pool.append([int((bits[start : start + n] == bit).sum()) for bit in (1, 2, 4)])
    most = max(max(counts) for counts in per_pool)
    if strategy == "interleaved":
        assert most == 32 // 3  # some pool fills its share, none goes beyond it
    else:
        assert most > 32 // 3


@pytest.mark.slow
def test_an_epoch_of_a_store_built_for_min_history(tmp_path):
    """--steps epoch: train_samples is the train windows' anchor count (the closed rules' kind
    of count), the run ends at the last eval point not beyond it, and --min-history reaches
    the store."""
    out = tmp_path / "run"
    argv = ["--users", "40", "--steps", "epoch", "--evals", "2", "--min-history", "600"]
    summary = train.main([*argv, "--workers", "0", "--target-auc", "1", "--out", str(out)])
    manifest = json.loads((out / "prepared" / "store" / "manifest.json").read_text())
    assert manifest["min_history"] == 600
    records = {r["key"]: r for r in read_log(summary["mlperf_log"])}
    train_samples = records["train_samples"]["value"]
    assert train_samples == manifest["num_train_anchors"]
    interval = -(-train_samples // 2 // 256) * 256  # eval every 50%, on the batch grid
    assert summary["train_samples"] == interval * (train_samples // interval)
    assert summary["status"] == "aborted"  # the schedule ended below target AUC 1
    assert check_log(summary["mlperf_log"], ruleset="dev").passed
    config = json.loads((out / "config.json").read_text())["run"]
    assert (config["steps"], config["min_history"], config["division"]) == (None, 600, "open")


@pytest.mark.slow
def test_a_batch_no_window_holds_is_refused_and_the_corrected_command_runs_there(tmp_path):
    """Refused before the run writes a file of its own: the same --out then takes the command
    with a batch that fits, on the data already prepared."""
    out = tmp_path / "run"
    argv = ["--users", "20", "--min-history", "1200", "--workers", "0", "--out", str(out)]
    argv += ["--steps", "1", "--evals", "1", "--target-auc", "0.99"]
    refused = (
        r"train\.batch_size: a global batch of 256 samples \(1 rank\(s\) x 256\) is more "
        r"than any time window of .*store holds \(the largest of its [\d,]+ windows has "
        r"(\d+) train anchors at min_history 1200\); use a smaller train\.batch_size, .*"
    )
    with pytest.raises(RunRefused, match=refused) as error:
        train.main(argv)
    assert "\n" not in str(error.value)
    left = sorted(p.name for p in out.iterdir())
    assert left == [".lock", "data", "prepared"]  # its lock and the data: no run
    largest = int(re.search(refused, str(error.value)).group(1))
    summary = train.main([*argv, "--set", f"train.batch_size={largest}"])
    assert summary["train_samples"] == largest


@pytest.mark.parametrize("source", ["synthetic", "raw"])
def test_a_batch_no_day_of_the_events_can_hold_is_refused_before_the_data_is_made(tmp_path, source):
    """Found from the raw events (a bound on every window's anchors) before the synthesis
    writes the dataset or the preprocessing its output; the same --out then takes a command
    with the data that holds the batch."""
    import yambda_data

    out = tmp_path / "run"
    argv = ["--users", "3", "--workers", "0", "--out", str(out)]
    argv += ["--steps", "1", "--evals", "1", "--target-auc", "0.99"]
    if source == "raw":
        raw = yambda_data.synthesize(tmp_path / "raw", yambda_data.SynthConfig(users=3))
        argv += ["--data", str(raw.root)]
    made = "synthesized" if source == "synthetic" else "preprocessed"
    refused = (
        r"train\.batch_size: a global batch of 256 samples \(1 rank\(s\) x 256\) is more than "
        r"any time window of .*multi_event\.parquet can hold \(no 86,400 s of it holds more "
        rf"than (\d+) train listens, and a sample is one\), found before the data was {made}; "
        r"use a smaller train\.batch_size, fewer ranks or more data"
    )
    with pytest.raises(RunRefused, match=refused):
        train.main(argv)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert not [f for f in files if not Path(f).name.startswith(".")], files  # locks only
    if source == "synthetic":
        summary = train.main(["--users", "40", *argv[2:]])
    else:
        summary = train.main([*argv, "--set", "train.batch_size=8"])
    assert summary["train_samples"] > 0


def test_missing_dataset_is_named_before_anything_is_created(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RunRefused, match=r"--data .*: no file .*multi_event\.parquet"):
        train.main(["--data", str(tmp_path), "--steps", "1", "--evals", "1", "--out", str(out)])
    assert not out.exists()


@pytest.mark.slow
def test_config_file_then_set_items_override_the_preset(tmp_path):
    (tmp_path / "over.toml").write_text("[model]\nnum_layers = 1\nnum_heads = 1\n")
    out = tmp_path / "run"
    argv = ["--users", "80", "--steps", "2", "--evals", "1", "--workers", "0", "--out", str(out)]
    argv += ["--config", str(tmp_path / "over.toml"), "--set", "model.num_heads=4"]
    train.main(argv)
    config = json.loads((out / "config.json").read_text())
    assert (config["model"]["num_layers"], config["model"]["num_heads"]) == (1, 4)
    assert config["run"]["overrides"] == ["model.num_heads=4"]


TINY_RUN = ["--users", "40", "--steps", "2", "--evals", "1", "--workers", "0"]
"""The shortest run: 40 users, 2 steps, one evaluation."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    summary = train.main([*TINY_RUN, "--out", str(out)])
    return out, summary


@pytest.mark.parametrize(
    ("argv", "files", "message"),
    [
        (["--set", "model.nosuch=1"], {}, "command-line override 'model.nosuch=1': model: "),
        (["--set", "garbage"], {}, "command-line override 'garbage': expected section.field"),
        (["--set", "model.num_layers=abc"], {}, "model.num_layers: expected int, got 'abc'"),
        (["--config", "{tmp}/bad.toml"], {"bad.toml": "[model\n"}, "bad.toml"),
        (["--config", "{tmp}/s.toml"], {"s.toml": "[nosuch]\na = 1\n"}, "nosuch"),
        (["--config", "{tmp}/n.toml"], {"n.toml": "[model]\nnum_layers = -1\n"}, "num_layers"),
        (["--config", "{tmp}/missing.toml"], {}, "missing.toml: cannot read config file"),
        (["--target-auc", "2"], {}, "--target-auc: must be in [0, 1], got 2.0"),
        (["--users", "0"], {}, "--users: must be >= 1, got 0"),
    ],
)
def test_a_bad_input_changes_nothing_and_is_one_line(
    argv, files, message, finished_run, tmp_path, capsys
):
    """Over a finished run, and where --out does not exist yet: the same one-line refusal,
    and neither folder changes."""
    out, _ = finished_run
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    for target in (out, tmp_path / "new"):
        with pytest.raises(SystemExit) as exit_info:
            train.main([*argv, "--out", str(target)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "new").exists()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.slow
def test_a_finished_run_is_kept_unless_overwritten(finished_run, tmp_path):
    out, summary = finished_run
    assert json.loads((out / "result.json").read_text()) == summary
    log = (out / "mlperf.log").read_bytes()
    with pytest.raises(RunRefused, match=r"holds a finished run .* --overwrite"):
        train.main([*TINY_RUN, "--out", str(out)])
    assert (out / "mlperf.log").read_bytes() == log
    copy = tmp_path / "copy"
    copy.mkdir()
    # A copy of a finished run, with the record of its own files that --overwrite goes by.
    for name in (".run-files.json", "mlperf.log", "result.json", "config.json"):
        (copy / name).write_bytes((out / name).read_bytes())
    again = train.main([*TINY_RUN, "--seed", "1", "--out", str(copy), "--overwrite"])
    assert again["weights_sha256"] != summary["weights_sha256"]
    assert json.loads((copy / "config.json").read_text())["run"]["seed"] == 1
    assert sum(r["key"] == "run_start" for r in read_log(copy / "mlperf.log")) == 1


def test_an_unfinished_run_is_refused_with_how_to_resume(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    write_run_record(out, "killed")
    (out / "mlperf.log").write_text(":::MLLOG {}\n")
    with pytest.raises(RunRefused, match=r"holds an unfinished run; pass --resume auto"):
        train.main([*TINY_RUN, "--out", str(out)])
    assert (out / "mlperf.log").read_text() == ":::MLLOG {}\n"


@pytest.mark.slow
def test_without_out_every_run_gets_its_own_folder(tmp_path, monkeypatch, capsys):
    """Runs without --out go to fresh runs/train-* folders and share the synthetic data."""
    monkeypatch.chdir(tmp_path)
    first = train.main(TINY_RUN)
    second = train.main(TINY_RUN)
    folders = sorted((tmp_path / "runs").glob("train-*"))
    assert len(folders) == 2
    assert {Path(first["mlperf_log"]).parent, Path(second["mlperf_log"]).parent} == {
        Path("runs") / f.name for f in folders
    }
    assert first["weights_sha256"] == second["weights_sha256"]
    cached = list((tmp_path / "runs" / "cache" / "synthetic").iterdir())
    assert [c.name for c in cached] == ["users40-seed0-50m"]
    assert all(not (f / "data").exists() for f in folders)
    assert "run folder: runs/train-" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_without_out_takes_the_newest_unfinished_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    checkpoints = tmp_path / "ckpt"
    argv = [*TINY_RUN, "--steps", "4", "--checkpoint-dir", str(checkpoints)]
    argv += ["--checkpoint-every", "2"]
    uninterrupted = train.main([*argv[:-4], "--out", str(tmp_path / "whole")])
    real_step = hstu_model.Trainer.train_step

    def crash_at_step_3(self, batch):
        if self.step == 3:
            raise KeyboardInterrupt
        return real_step(self, batch)

    monkeypatch.setattr(hstu_model.Trainer, "train_step", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    monkeypatch.setattr(hstu_model.Trainer, "train_step", real_step)
    (folder,) = (tmp_path / "runs").glob("train-*")
    # A newer unfinished run that checkpointed elsewhere is not the one to continue.
    decoy = tmp_path / "runs" / "train-99999999-999999"
    decoy.mkdir()
    write_run_record(decoy, "decoy")
    (decoy / "mlperf.log").write_text("")
    (decoy / "config.json").write_text(json.dumps({"run": {"checkpoint_dir": "elsewhere"}}))
    capsys.readouterr()
    resumed = train.main([*argv, "--resume", "auto"])
    assert f"resuming the newest unfinished run, runs/{folder.name}" in capsys.readouterr().err
    assert resumed["resumed_from_step"] == 2
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
    assert Path(resumed["mlperf_log"]).parent.name == folder.name


DAMAGED_RUN = [*TINY_RUN, "--steps", "6", "--checkpoint-every", "2", "--keep-checkpoints", "5"]
"""Checkpoints at steps 2 and 4 (and 6); the run below is stopped during step 6."""


@pytest.fixture(scope="module")
def undamaged_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("undamaged")
    argv = [*DAMAGED_RUN, "--out", str(root / "run"), "--checkpoint-dir", str(root / "ckpt")]
    return train.main(argv)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {
    "truncated tensors": lambda step: _truncate(next((step / "tensors").glob("*.distcp"))),
    "truncated meta": lambda step: _truncate(step / "meta.json"),
    "truncated manifest": lambda step: _truncate(step / "manifest.json"),
    "missing file": lambda step: (step / "rng" / "rank-0.json").unlink(),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_newest_checkpoint_is_skipped(
    damage, undamaged_run, tmp_path, monkeypatch, capsys
):
    """The newest checkpoint does not verify: the resume names it, goes back to the one before
    and ends bit-identical to the run that was never stopped."""
    out, checkpoints = tmp_path / "run", tmp_path / "ckpt"
    argv = [*DAMAGED_RUN, "--out", str(out), "--checkpoint-dir", str(checkpoints)]
    real_step = hstu_model.Trainer.train_step

    def stop_in_step_6(self, batch):
        if self.step == 5:
            raise KeyboardInterrupt
        return real_step(self, batch)

    monkeypatch.setattr(hstu_model.Trainer, "train_step", stop_in_step_6)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    monkeypatch.setattr(hstu_model.Trainer, "train_step", real_step)
    assert [c.name for c in ck.list_checkpoint_dirs(checkpoints)] == ["step-2", "step-4"]
    DAMAGES[damage](checkpoints / "step-4")
    assert ck.verify_checkpoint(checkpoints / "step-4")
    assert ck.verify_checkpoint(checkpoints / "step-2") == []
    capsys.readouterr()
    resumed = train.main([*argv, "--resume", "auto"])
    err = capsys.readouterr().err
    assert f"checkpoint {checkpoints / 'step-4'} does not verify, skipped: " in err
    assert f"resuming from {checkpoints / 'step-2'}" in err
    assert resumed["resumed_from_step"] == 2
    assert resumed["skipped_checkpoints"][0].startswith(f"{checkpoints / 'step-4'}: ")
    assert resumed["weights_sha256"] == undamaged_run["weights_sha256"]
    assert resumed["eval_auc"] == undamaged_run["eval_auc"]
    records = read_log(out / "mlperf.log")
    assert [r["key"] for r in records].count("run_start") == 1
    assert check_log(out / "mlperf.log", ruleset="dev").passed


@pytest.fixture
def small_filesystem(tmp_path):
    """A 2 MB tmpfs (mounting needs root; skipped where it cannot be made)."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_is_named_and_the_log_counts_the_samples(
    small_filesystem, tmp_path
):
    out, checkpoints = tmp_path / "run", small_filesystem / "ckpt"
    argv = [*TINY_RUN, "--steps", "4", "--checkpoint-every", "3", "--out", str(out)]
    with pytest.raises(ck.CheckpointError, match=r"no space left on its file system \(") as info:
        train.main([*argv, "--checkpoint-dir", str(checkpoints)])
    assert str(checkpoints / ".tmp-step-3") in str(info.value)
    assert not (checkpoints / ".tmp-step-3").exists()  # the partial save gave its space back
    stop = read_log(out / "mlperf.log")[-1]
    assert stop["key"] == "run_stop" and stop["metadata"]["status"] == "aborted"
    assert stop["metadata"]["samples_count"] == 3 * 256


@pytest.mark.slow
def test_errors_print_one_line_and_status_2_unless_debugging(tmp_path):
    command = [sys.executable, str(ROOT / "tools" / "train.py"), "--set", "garbage"]
    command += ["--out", str(tmp_path / "run")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "train.py: error: command-line override 'garbage': expected section.field=value "
        "(see --help)"
    ]
    data = ["--data", str(tmp_path), "--out", str(tmp_path / "run")]
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "train.py"), *data],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("train.py: error: --data ")
    off = subprocess.run(  # every command line reads "false" as off
        [sys.executable, str(ROOT / "tools" / "train.py"), *data],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DLRMV4_DEBUG": "false"},
    )
    assert (off.returncode, off.stderr) == (2, result.stderr)
    debug = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "train.py"), *data],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DLRMV4_DEBUG": "1"},
    )
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_checkpoint_after_every_window(tmp_path):
    """--checkpoint-every-window saves where each window's last batch ends (the 80-user data
    has windows of one and two batches)."""
    checkpoints = tmp_path / "checkpoints"
    argv = [*SHORT, "--evals", "1", "--workers", "0"]
    argv += ["--out", str(tmp_path / "run"), "--checkpoint-dir", str(checkpoints)]
    argv += ["--checkpoint-every", "0", "--checkpoint-every-window", "--keep-checkpoints", "20"]
    train.main(argv)
    saved = ck.list_checkpoints(checkpoints)
    assert all(c.extra["data"]["consumed"] == 0 for c in saved)
    # Steps 4 and 10 end the first batch of a two-batch window: no checkpoint there.
    assert [c.step for c in saved] == [1, 2, 3, 5, 6, 7, 8, 9, 11, 12]


KILLABLE_TRAIN = """
import os, runpy, sys, time
from pathlib import Path

import hstu_model.checkpoint.format as ck
from hstu_model.training.trainer import Trainer

point, marker, train_py = os.environ["KILL_AT"], Path(os.environ["KILL_MARKER"]), sys.argv[1]


def wait_for_the_kill():
    marker.write_text(point)
    time.sleep(600)


if point == "saving step 10":  # its files written and synced, not yet renamed into place
    fsync_tree = ck._fsync_tree

    def fsync_then_wait(path):
        fsync_tree(path)
        if path.name == ".tmp-step-10":
            wait_for_the_kill()

    ck._fsync_tree = fsync_then_wait
elif point == "step 8":  # between checkpoints, before step 8 trains
    train_step = Trainer.train_step

    def wait_then_train(self, batch):
        if self.step == 7:
            wait_for_the_kill()
        return train_step(self, batch)

    Trainer.train_step = wait_then_train
sys.argv = sys.argv[1:]
runpy.run_path(train_py, run_name="__main__")
"""
"""tools/train.py, stopped for a SIGKILL at KILL_AT (after writing KILL_MARKER)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kill_at", "resume_step", "consumed"),
    [
        ("after step 10's checkpoint", 10, 256),  # mid-window: one of its two batches
        ("saving step 10", 5, 0),
        ("step 8", 5, 0),
    ],
)
def test_run_killed_anywhere_resumes_bit_identical(
    first_run, tmp_path, kill_at, resume_step, consumed
):
    """SIGKILL a real run (with its loader worker) right after its step-10 checkpoint is
    complete, in the middle of saving it, or between checkpoints; resume it with --resume auto
    (and another worker count): the same weights, AUC, metric rows and a compliant log with one
    run_start, as the uninterrupted first_run."""
    _, uninterrupted = first_run
    out, checkpoints = tmp_path / "run", tmp_path / "checkpoints"
    argv = [*SHORT, "--out", str(out), "--checkpoint-dir", str(checkpoints)]
    argv += ["--checkpoint-every", "5", "--resume", "auto"]
    stderr, marker = tmp_path / "killed.stderr", tmp_path / "stopped"
    (tmp_path / "killable_train.py").write_text(KILLABLE_TRAIN)
    command = [sys.executable, str(tmp_path / "killable_train.py"), str(ROOT / "tools/train.py")]
    env = os.environ | {"KILL_AT": kill_at, "KILL_MARKER": str(marker)}

    def reached() -> bool:
        if kill_at.startswith("after"):
            return (found := ck.latest(checkpoints)) is not None and found.step >= 10
        return marker.exists()

    with open(stderr, "wb") as err:
        # Its own session: the kill takes the loader's worker process with it.
        proc = subprocess.Popen(
            [*command, *argv, "--workers", "1"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 300
            while not reached():
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"never reached {kill_at}; stderr:\n{stderr.read_text()[-5000:]}")
                time.sleep(0.01)
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_keys = [r["key"] for r in read_log(out / "mlperf.log")]
    assert "run_stop" not in killed_keys, "the run ended before the kill"
    assert (checkpoints / ".tmp-step-10").exists() == (kill_at == "saving step 10")
    resume_from = ck.latest(checkpoints)
    assert resume_from.step == resume_step
    assert resume_from.extra["data"]["consumed"] == consumed

    resumed = train.main([*argv, "--workers", "0"])
    # The metric rows too: cut back to the checkpoint, then the same rows appended.
    first_out = Path(uninterrupted["mlperf_log"]).parent
    assert (out / "metrics.csv").read_text() == (first_out / "metrics.csv").read_text()
    assert resumed["resumed_from_step"] == resume_step
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
    assert resumed["eval_auc"] == uninterrupted["eval_auc"]
    assert resumed["train_samples"] == uninterrupted["train_samples"] == 12 * 256
    keys = [r["key"] for r in read_log(out / "mlperf.log")]
    for key in ("init_start", "init_stop", "run_start", "run_stop", "global_batch_size"):
        assert keys.count(key) == 1, key
    accuracies = [r for r in read_log(out / "mlperf.log") if r["key"] == "eval_accuracy"]
    assert [r["metadata"]["samples_count"] for r in accuracies] == [6 * 256, 12 * 256]
    result = check_log(out / "mlperf.log", ruleset="dev")
    assert result.passed, result.summary()
    assert [c.step for c in ck.list_checkpoints(checkpoints)] == [5, 10]  # --keep-checkpoints 2
    assert not (checkpoints / ".tmp-step-10").exists()


@pytest.mark.slow
def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    out, checkpoints = tmp_path / "run", tmp_path / "checkpoints"
    argv = [*SHORT, "--workers", "0", "--out", str(out), "--checkpoint-dir", str(checkpoints)]
    argv += ["--checkpoint-every", "2"]
    train_step = hstu_model.Trainer.train_step

    def diverging(self, batch):
        loss = train_step(self, batch)
        return float("nan") if self.step == 3 else loss

    monkeypatch.setattr(hstu_model.Trainer, "train_step", diverging)
    with pytest.raises(FloatingPointError, match=r"non-finite loss nan at step 3 .*step-2"):
        train.main(argv)
    assert [c.step for c in ck.list_checkpoints(checkpoints)] == [2]
    assert not any(p.name.endswith("step-3") for p in checkpoints.iterdir())
    records = read_log(out / "mlperf.log")
    assert records[-1]["key"] == "run_stop"
    assert records[-1]["metadata"]["status"] == "aborted"

    # That directory now belongs to this run: a fresh start over it, or a resume with other
    # settings, is refused before the log is touched.
    size = (out / "mlperf.log").stat().st_size
    with pytest.raises(RunRefused, match="--resume auto"):
        train.main(argv)
    with pytest.raises(RunRefused, match="--seed 0 then, 1 now"):
        train.main([*argv, "--resume", "auto", "--seed", "1"])
    with pytest.raises(RunRefused, match="--kernel native then, pytorch now"):
        train.main([*argv, "--resume", "auto", "--kernel", "pytorch"])
    assert (out / "mlperf.log").stat().st_size == size


def _rank_env(rank: int, world_size: int, port: int) -> dict:
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _main_thread_waits(pid: int, seconds: float) -> bool:
    """Whether the main thread of `pid` stays asleep (state S) for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fields = fault_support.stat_fields(pid, thread=pid)
        if fields is None or fields[0] != "S":
            return False
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    """Running or stopped, not a zombie."""
    fields = fault_support.stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def _rank_pid(launcher: int, rank: int) -> int | None:
    for pid in faults.children(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return pid
    return None


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_reads_as_an_interruption(signum, tmp_path):
    """A launcher's SIGTERM (or Ctrl-C's SIGINT) goes to the whole process group, the loader's
    worker included. The run ends as interrupted by that signal (status 128 + signal, one
    line, run_stop aborted), never as "DataLoader worker is killed by signal"."""
    out = tmp_path / "run"
    argv = [*SHORT, "--steps", "400", "--evals", "100", "--workers", "1", "--out", str(out)]
    stderr = tmp_path / "stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tools" / "train.py"), *argv],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread
        )
        try:
            deadline = time.monotonic() + 300
            log = out / "mlperf.log"
            while not faults.children(proc.pid) or '"block_start"' not in (
                log.read_text() if log.is_file() else ""
            ):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"never trained; stderr:\n{stderr.read_text()[-3000:]}")
                time.sleep(0.01)
            every = faults.descendants(proc.pid)
            os.killpg(proc.pid, signum)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGABRT)
                proc.wait(timeout=60)
                pytest.fail(f"still running 120 s after the signal:\n{stderr.read_text()[-6000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    said = stderr.read_text()
    assert proc.returncode == 128 + signum, said[-3000:]
    name = signal.Signals(signum).name
    assert f"train.py: run interrupted by {name}" in said.splitlines(), said[-3000:]
    assert "Traceback" not in said and "DataLoader" not in said, said[-3000:]
    records = read_log(out / "mlperf.log")
    assert [r["key"] for r in records].count("run_stop") == 1
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"
    deadline = time.monotonic() + 20
    while (left := [p for p in every if Path(f"/proc/{p}").exists()]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert not left, f"processes left: {left}"


def _start_long_torchrun(out: Path, checkpoints: Path, stderr: Path) -> subprocess.Popen:
    """torchrun, 2 gloo ranks with a loader worker each, of a run far longer than a test
    waits, checkpointed every 2 steps; its stderr to `stderr`."""
    argv = [*SHORT, "--steps", "400", "--evals", "200", "--workers", "1", "--out", str(out)]
    argv += ["--checkpoint-dir", str(checkpoints), "--checkpoint-every", "2"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(ROOT / "tools" / "train.py"), *argv]
    with open(stderr, "wb") as err:
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(5))
@pytest.mark.parametrize("when", ["training", "evaluating"])
def test_torchrun_rank_loss_ends_the_log_once_and_leaves_no_process(when, attempt, tmp_path):
    """torchrun, 2 gloo ranks with a loader worker each; SIGKILL rank 1 while training (after
    the first checkpoint) or while rank 0 evaluates. torchrun then sends SIGTERM to rank 0,
    maybe while it writes its abort: every time, rank 0's log ends with exactly one run_stop
    (aborted), every process is gone, and rank 0 says why in one line."""
    out, checkpoints, stderr = tmp_path / "run", tmp_path / "checkpoints", tmp_path / "stderr"
    launcher = _start_long_torchrun(out, checkpoints, stderr)
    every = []
    try:
        deadline = time.monotonic() + 400
        while True:
            log = out / "mlperf.log"
            text = log.read_text() if log.is_file() else ""
            ready = (found := ck.latest(checkpoints)) is not None and found.step >= 2
            if when == "evaluating":
                # block_stop is logged before an evaluation, eval_stop after it.
                ready = text.count('"block_stop"') > text.count('"eval_stop"')
            if ready or launcher.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert launcher.poll() is None, stderr.read_text()[-3000:]
        every = faults.descendants(launcher.pid)
        victim = _rank_pid(launcher.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    # The killed rank's loader worker notices its parent is gone within its 5 s status check.
    deadline = time.monotonic() + 20
    while (left := [pid for pid in every if Path(f"/proc/{pid}").exists()]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert not left, f"processes left: {left}"
    assert launcher.returncode != 0
    keys = [r["key"] for r in read_log(out / "mlperf.log")]
    assert keys.count("run_stop") == 1 and keys[-1] == "run_stop", keys[-5:]
    assert read_log(out / "mlperf.log")[-1]["metadata"]["status"] == "aborted"
    # Rank 0 says why it stopped, in one line: it saw rank 1 go, or the launcher's SIGTERM came
    # first (torchrun sends it as soon as it sees a rank die).
    said = stderr.read_text()
    assert (
        "train.py: rank 0 of 2: another rank stopped answering" in said
        or "train.py: rank 0 of 2: run interrupted by SIGTERM" in said
    ), said[-3000:]


@pytest.mark.slow
def test_a_rank_blocked_on_a_stopped_peer_still_ends_its_log_on_sigterm(tmp_path):
    """Rank 1 stopped (SIGSTOP) while both train: its sockets stay open, so gloo sees no loss,
    and rank 0 waits in a collective where Python cannot run a signal handler. A SIGTERM to
    rank 0 then ends it within the watchdog's grace, its log ending with run_stop aborted and
    its status 143, where it used to stay deaf until the launcher's SIGKILL."""
    from dlrmv4_train.run import STOP_GRACE_SECONDS

    out, checkpoints, stderr = tmp_path / "run", tmp_path / "checkpoints", tmp_path / "stderr"
    launcher = _start_long_torchrun(out, checkpoints, stderr)
    peer = None
    try:
        deadline = time.monotonic() + 400
        while (found := ck.latest(checkpoints)) is None or found.step < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        rank0, peer = _rank_pid(launcher.pid, 0), _rank_pid(launcher.pid, 1)
        os.kill(peer, signal.SIGSTOP)
        # In the next step's collective: its main thread then sleeps on and on.
        while not _main_thread_waits(rank0, seconds=1.0):
            assert time.monotonic() < deadline, stderr.read_text()
        began = time.monotonic()
        os.kill(rank0, signal.SIGTERM)
        while _alive(rank0):
            assert time.monotonic() - began < STOP_GRACE_SECONDS + 15, stderr.read_text()
            time.sleep(0.1)
    finally:
        if peer is not None:
            os.kill(peer, signal.SIGKILL)
        launcher.wait(timeout=120)
    said = stderr.read_text()
    assert (
        "train.py: rank 0 of 2: run interrupted by SIGTERM; it was not answered within "
        f"{STOP_GRACE_SECONDS:g} s" in said
    ), said[-3000:]
    assert re.search(r"rank\s*: 0 \(local_rank: 0\)\s*exitcode\s*: 143", said), said[-3000:]
    records = read_log(out / "mlperf.log")
    assert [r["key"] for r in records].count("run_stop") == 1
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"


@pytest.mark.slow
def test_two_process_torchrun_run(tmp_path):
    """torchrun with 2 gloo ranks: one summary line (rank 0), a compliant log with the global
    batch, metrics from both ranks' samples."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(ROOT / "tools" / "train.py")]
    command += [*SHORT, "--workers", "0", "--out", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["train_samples"] == 12 * 2 * 256  # two ranks of 256 samples per step
    assert 0.0 <= summary["eval_auc"] <= 1.0
    records = read_log(out / "mlperf.log")
    values = {r["key"]: r["value"] for r in records}
    assert values["global_batch_size"] == 512
    assert values["submission_platform"].startswith("2xCPU")
    assert values["lowest_numerical_precision_in_comm"] == "fp32"  # no fp16 all-to-all
    accuracies = [r for r in records if r["key"] == "eval_accuracy"]
    assert [r["metadata"]["samples_count"] for r in accuracies] == [6 * 512, 12 * 512]
    assert "2 rank(s) on cpu" in result.stderr
    check = check_log(out / "mlperf.log", ruleset="dev")
    assert check.passed, check.summary()


@pytest.mark.slow
def test_a_torchrun_run_with_the_fp16_all_to_all_declares_fp16_communication(tmp_path):
    """The same two gloo ranks with the embedding all-to-all in fp16: the log says so."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(ROOT / "tools" / "train.py")]
    command += ["--users", "80", "--steps", "6", "--evals", "1", "--workers", "0"]
    command += ["--set", "sharding.fp16_all_to_all=true", "--out", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    values = {r["key"]: r["value"] for r in read_log(out / "mlperf.log")}
    assert values["lowest_numerical_precision_in_comm"] == "fp16"
    assert values["global_batch_size"] == 512


@pytest.mark.slow
def test_a_dead_rank_stops_the_other_within_bounded_time(tmp_path):
    """Two ranks started by hand (no torchrun agent to clean up): SIGKILL rank 1 once training
    runs; rank 0 fails with a clear error instead of waiting forever."""
    out, checkpoints = tmp_path / "run", tmp_path / "checkpoints"
    argv = [*SHORT, "--steps", "400", "--workers", "0", "--out", str(out)]
    argv += ["--checkpoint-dir", str(checkpoints), "--checkpoint-every", "2"]
    port = _free_port()
    procs = []
    logs = [tmp_path / f"rank{r}.stderr" for r in range(2)]
    try:
        for rank in range(2):
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(ROOT / "tools" / "train.py"), *argv],
                    cwd=ROOT,
                    env=_rank_env(rank, 2, port),
                    stdout=subprocess.DEVNULL,
                    stderr=open(logs[rank], "wb"),  # noqa: SIM115 (closed with the process)
                )
            )
        deadline = time.monotonic() + 400
        while (found := ck.latest(checkpoints)) is None or found.step < 2:
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                pytest.fail(f"no checkpoint; rank 0 stderr:\n{logs[0].read_text()[-5000:]}")
            time.sleep(0.05)
        procs[1].kill()
        killed_at = time.monotonic()
        procs[0].wait(timeout=120)
        waited = time.monotonic() - killed_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert procs[0].returncode not in (0, None)
    assert waited < 60
    stderr = logs[0].read_text()
    assert "train.py: rank 0 of 2: another rank stopped answering" in stderr, stderr[-3000:]
    records = read_log(out / "mlperf.log")
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"


@pytest.mark.slow
def test_a_run_resolves_its_config_once(tmp_path, monkeypatch):
    """The preset, the config file, the HSTU_* variables and the --set items are read once,
    into the ResolvedRun the whole run is given."""
    from dlrmv4_train import run_config

    calls = []
    real = run_config.resolve_config

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_config, "resolve_config", counted)
    train.main([*TINY_RUN, "--out", str(tmp_path / "run")])
    assert len(calls) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["auto", "native"])
def test_a_run_hands_its_kernel_choice_to_the_check_before_it_builds_its_model(
    kernel, tmp_path, monkeypatch
):
    """hstu_ops.verify_decision decides what to check (the Triton kernels where auto means
    them); the run gives it the decision resolve_run made and the device its model trains on,
    before the model exists, and builds the model with the decision that comes back, so that an
    op the check sends to its reference (here the attention, as if refused) runs it."""
    import dlrmv4_train.run as run_module
    import hstu_ops

    events = []
    real_check, real_model = hstu_ops.verify_decision, run_module.HSTURanker

    def check(decision, device, **kwargs):
        events.append(("check", str(decision.requested), decision.family, str(device)))
        checked = real_check(decision, device, **kwargs)
        return checked.refusing({"hstu_mha": "refused by the test"})

    def model(*args, **kwargs):
        events.append(("model", kwargs["kernels"].choice("hstu_mha")))
        return real_model(*args, **kwargs)

    monkeypatch.setattr(hstu_ops, "verify_decision", check)
    monkeypatch.setattr(run_module, "HSTURanker", model)
    train.main([*TINY_RUN, "--kernel", kernel, "--out", str(tmp_path / "run")])
    native, pytorch = hstu_ops.Kernel.NATIVE, hstu_ops.Kernel.PYTORCH
    refused = hstu_ops.KernelChoice("hstu_mha", native, pytorch, "refused by the test")
    assert events[:2] == [("check", kernel, native, "cpu"), ("model", refused)]
    assert events.count(events[0]) == 1
