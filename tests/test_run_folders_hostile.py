"""A run folder against hostile contents: a user's files are no run and are never removed,
what a run will read is checked before its first write, and a refusal leaves nothing that
blocks the corrected command (in-process: tools/train.py's main)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlrmv4_train.run import RunRefused

ROOT = Path(__file__).resolve().parents[1]
RUN = ["--users", "40", "--steps", "2", "--evals", "1", "--workers", "0", "--target-auc", "0.99"]
SYNTH = [sys.executable, "-m", "yambda_data", "synth", "--users", "40"]


def _load_train():
    spec = importlib.util.spec_from_file_location("train_tool", ROOT / "tools" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = _load_train()


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def synthesize(root: Path, seed: int = 0) -> None:
    done = subprocess.run([*SYNTH, "--seed", str(seed), "--out", str(root)], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_a_users_files_in_out_are_no_run_and_never_removed(tmp_path):
    """A folder holding the user's own config.json and metrics.csv is refused, --overwrite
    too, and both files stay."""
    out = tmp_path / "P"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}\n')
    (out / "metrics.csv").write_text("step,loss\n")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(RunRefused, match=r"holds config\.json, which no run wrote there"):
            train.main([*RUN, "--out", str(out), *extra])
    assert tree(out) == ["config.json", "metrics.csv"]
    assert (out / "config.json").read_text() == '{"mine": true}\n'


@pytest.mark.slow
def test_overwrite_removes_only_what_the_run_wrote(tmp_path):
    out = tmp_path / "P"
    train.main([*RUN, "--out", str(out)])
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RunRefused, match=r"holds notes\.txt"):
        train.main([*RUN, "--out", str(out), "--overwrite"])
    (out / "notes.txt").unlink()
    (out / "summary.json").write_text("{}")  # run_and_time.sh's, beside the run
    train.main([*RUN, "--out", str(out), "--overwrite"])
    assert not (out / "summary.json").exists() and (out / "result.json").is_file()

    # The run's process holds its store: another process's build into it is refused.
    prepared = out / "prepared"
    build = [sys.executable, "-m", "yambda_data", "build-store", "--min-history", "3"]
    build += ["--preprocessed", str(prepared / "preprocessed"), "--raw", str(out / "data")]
    done = subprocess.run(
        [*build, "--out", str(prepared / "store")], capture_output=True, text=True
    )
    assert done.returncode != 0 and f"in use by process {os.getpid()}" in done.stderr


def test_a_users_dataset_in_out_data_is_refused_before_anything(tmp_path):
    """A dataset in --out/data that no synthesis of a run made: refused before config.json,
    the log or the prepared store, and the folder is as it was."""
    data = tmp_path / "P" / "data"
    synthesize(data, seed=3)
    (data / "synth.json").unlink(missing_ok=True)
    before = tree(tmp_path / "P")
    with pytest.raises(RunRefused, match="a dataset that synthesize_cached did not make"):
        train.main([*RUN, "--out", str(tmp_path / "P")])
    assert tree(tmp_path / "P") == before


def test_a_foreign_file_in_the_prepared_store_is_refused_before_anything(tmp_path):
    store = tmp_path / "P" / "prepared" / "store"
    store.mkdir(parents=True)
    (store / "notes.txt").write_text("mine")
    with pytest.raises(RunRefused, match="prepared/store: not empty and not a sample store"):
        train.main([*RUN, "--out", str(tmp_path / "P")])
    assert tree(tmp_path / "P") == ["prepared", "prepared/store", "prepared/store/notes.txt"]


@pytest.mark.slow
def test_an_invalid_row_is_refused_before_the_run_writes_and_blocks_nothing(tmp_path):
    """One event_type 'skip' in --data: refused naming the value, with no config.json or log;
    the corrected data then runs in the same --out."""
    import polars as pl

    data, out = tmp_path / "data", tmp_path / "P"
    synthesize(data)
    events = data / "flat" / "50m" / "multi_event.parquet"
    good = pl.read_parquet(events)
    bad = good.with_columns(event_type=good["event_type"].cast(pl.Utf8).scatter(5, "skip"))
    bad.write_parquet(events)
    argv = [*RUN, "--data", str(data), "--size", "50m", "--out", str(out)]
    with pytest.raises(RunRefused, match=r"event_type.*skip"):
        train.main(argv)
    assert not any((out / name).exists() for name in ("config.json", "mlperf.log"))
    good.write_parquet(events)
    assert train.main(argv)["train_samples"] == 512

    # The run's process holds its --data: another process's synthesis into it is refused.
    done = subprocess.run(
        [*SYNTH, "--seed", "1", "--out", str(data), "--overwrite"], capture_output=True, text=True
    )
    assert done.returncode == 2 and f"in use by process {os.getpid()}" in done.stderr
    assert pl.read_parquet(events).equals(good)


def test_a_feature_key_the_batches_lack_is_refused_with_the_arguments(capsys):
    with pytest.raises(SystemExit):
        train.parse_args([*RUN, "--set", "model.features.item_id=uid"])
    assert "model.features.item_id: 'uid' is not the key of yambda-data's batches" in (
        capsys.readouterr().err
    )


def test_a_runs_own_config_json_as_config_is_refused_saying_why(tmp_path, capsys):
    record = tmp_path / "config.json"
    record.write_text('{"model": {}, "run": {}, "identity": {}, "run_id": "x"}')
    with pytest.raises(SystemExit):
        train.parse_args([*RUN, "--config", str(record)])
    assert f"--config: {record} is a run's record" in capsys.readouterr().err
