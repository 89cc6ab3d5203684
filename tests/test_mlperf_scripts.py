"""tools/mlperf: the MLPerf scripts, run as a user runs them, on a small synthetic Yambda.

The synthetic dataset stands in for a download: download_dataset.sh copies it from a local
mirror (--source), prepare_dataset.sh preprocesses it and builds the store, verify_dataset.sh
checks it, and run_and_time.sh trains a few steps on it or on train.py's own synthetic data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mlperf_compliance import check_log
from yambda_data.synth import SynthConfig, synthesize

ROOT = Path(__file__).resolve().parents[1]
MLPERF = ROOT / "tools" / "mlperf"
SIZE = "50m"
SHORT_RUN = ["--steps", "2", "--evals", "1", "--workers", "0"]
"""train.py arguments of a run of two steps of 256 samples, evaluated once."""
RESULT_LINE = re.compile(
    r"^RESULT,DLRMV4,,(\d+),([^,]+),(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [AP]M)$"
)

needs_uv = pytest.mark.skipif(shutil.which("uv") is None, reason="the scripts run tools with uv")


def script(name: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run tools/mlperf/NAME; uv uses the environment as it is (UV_NO_SYNC)."""
    env = os.environ | {"UV_NO_SYNC": "1", "MLPERF_NO_UV": "0", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        ["bash", str(MLPERF / name), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def explain(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A Yambda-layout dataset downloaded from a local mirror and prepared; returns DATA_DIR
    (its outputs are in DATA_DIR/prepared/50m). Tests copy what they modify."""
    if shutil.which("uv") is None:
        pytest.skip("the scripts run tools with uv")
    base = tmp_path_factory.mktemp("mlperf")
    # 64 users: enough train anchors per daily window for a batch of the tiny preset.
    synthesize(base / "mirror", SynthConfig(users=64, seed=3, size=SIZE))
    data = base / "data"
    done = script("download_dataset.sh", "--source", base / "mirror", data, SIZE)
    assert done.returncode == 0, explain(done)
    done = script("prepare_dataset.sh", data, SIZE)
    assert done.returncode == 0, explain(done)
    assert "train and" in done.stdout and (data / "prepared" / SIZE / "store" / "READY").is_file()
    return data


# usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("download_dataset.sh", ["--bogus"], "unknown option --bogus"),
        ("download_dataset.sh", ["d", "7b"], "unknown size '7b'"),
        ("download_dataset.sh", ["a", "5b", "c"], "too many arguments"),
        ("download_dataset.sh", ["--source"], "--source needs a value"),
        ("prepare_dataset.sh", ["d", "7b"], "unknown size '7b'"),
        ("prepare_dataset.sh", ["--min-history"], "--min-history needs a value"),
        ("prepare_dataset.sh", ["--min-history", "0"], "--min-history must be a positive integer"),
        ("verify_dataset.sh", ["--bogus"], "unknown option --bogus"),
        ("verify_dataset.sh", ["d", "50m", "x"], "too many arguments"),
        ("verify_dataset.sh", ["d", "1b"], "unknown size '1b'"),
        ("run_and_time.sh", ["--bogus"], "unknown argument --bogus"),
        ("run_and_time.sh", ["--seed", "x"], "--seed must be a non-negative integer"),
        ("run_and_time.sh", ["--data", "d", "--size", "7b"], "unknown size '7b'"),
        ("run_and_time.sh", ["--prepared", "p"], "--prepared goes with --data"),
        ("run_and_time.sh", ["--", "--out", "x"], "give --out to run_and_time.sh itself"),
        ("run_and_time.sh", ["--", "--seed=3"], "give --seed to run_and_time.sh itself"),
        ("run_and_time.sh", ["--ruleset", "6.1"], "--ruleset must be dev or a version"),
        ("run_and_time.sh", ["--out", ""], "--out must not be empty"),
        ("download_dataset.sh", ["--revision", ""], "--revision must not be empty"),
        ("download_dataset.sh", ["", "50m"], "DATA_DIR must not be empty"),
        ("prepare_dataset.sh", ["--prepared", ""], "--prepared must not be empty"),
    ],
)
def test_bad_arguments_are_one_line_with_status_2(name, args, message, tmp_path):
    done = script(name, *args, cwd=tmp_path)
    assert done.returncode == 2, explain(done)
    assert done.stderr.startswith(f"{name}: "), explain(done)
    assert message in done.stderr and done.stderr.count("\n") == 1, explain(done)
    assert done.stderr.endswith(f"(see {name} --help)\n") and done.stdout == "", explain(done)
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("download_dataset.sh", ["--source", "{tmp}/nowhere", "d", "50m"], "--source {tmp}/nowhere: no such directory"),
        ("download_dataset.sh", ["{tmp}/a-file/data", "50m"], "DATA_DIR {tmp}/a-file/data: not a directory"),
        ("prepare_dataset.sh", ["{tmp}/nowhere", "50m"], "DATA_DIR {tmp}/nowhere: no such directory"),
        ("prepare_dataset.sh", ["{tmp}/empty", "50m"], "{tmp}/empty/flat/50m/multi_event.parquet: no such file; run download_dataset.sh"),
        ("prepare_dataset.sh", ["--prepared", "{tmp}/a-file", "{tmp}/empty", "50m"], "--prepared {tmp}/a-file: not a directory"),
        ("verify_dataset.sh", ["{tmp}/nowhere", "50m"], "DATA_DIR {tmp}/nowhere: no such directory"),
        ("verify_dataset.sh", ["--prepared", "{tmp}/nowhere", "{tmp}/empty", "50m"], "--prepared {tmp}/nowhere: no such directory"),
        ("run_and_time.sh", ["--data", "{tmp}/nowhere"], "--data {tmp}/nowhere: no such directory"),
        ("run_and_time.sh", ["--data", "{tmp}/empty", "--size", "50m"], "{tmp}/empty/flat/50m/multi_event.parquet: no such file"),
        ("run_and_time.sh", ["--out", "{tmp}/a-file"], "--out {tmp}/a-file: not a directory"),
    ],
)  # fmt: skip
def test_missing_or_unusable_inputs_are_one_line_with_status_2(name, args, message, tmp_path):
    """Checked before anything is created or run (uv is never reached: no tools start)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    done = script(name, *(a.format(tmp=tmp_path) for a in args), cwd=tmp_path)
    assert done.returncode == 2, explain(done)
    assert done.stderr.startswith(f"{name}: {message.format(tmp=tmp_path)}"), explain(done)
    assert done.stderr.count("\n") == 1, explain(done)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_run_and_time_refuses_an_out_prepared_in_the_way(tmp_path):
    data = tmp_path / "data"
    (data / "flat" / "50m").mkdir(parents=True)
    (data / "flat" / "50m" / "multi_event.parquet").write_bytes(b"PAR1")
    (tmp_path / "run" / "prepared").mkdir(parents=True)  # a directory, not the link
    before = sorted(p.name for p in tmp_path.rglob("*"))
    done = script("run_and_time.sh", "--data", data, "--size", "50m", "--out", tmp_path / "run")
    assert done.returncode == 2, explain(done)
    assert f"{tmp_path}/run/prepared exists and is not a link to {data}/prepared/50m" in (
        done.stderr
    )
    assert done.stderr.count("\n") == 1 and "STARTING" not in done.stdout
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # not even data/prepared


@pytest.mark.parametrize(
    "name", ["download_dataset.sh", "prepare_dataset.sh", "verify_dataset.sh", "run_and_time.sh"]
)
def test_help(name):
    done = script(name, "--help")
    assert done.returncode == 0 and done.stdout.startswith(f"Usage: {name}"), explain(done)


# data --------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_uv
def test_download_is_idempotent(prepared, tmp_path):
    raw = prepared / "flat" / SIZE / "multi_event.parquet"
    before = raw.stat().st_mtime_ns
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    done = script("download_dataset.sh", "--source", empty, prepared, SIZE)
    assert done.returncode == 0, explain(done)
    assert f"Yambda {SIZE} is already in {prepared}" in done.stdout
    assert raw.stat().st_mtime_ns == before

    # --force goes to yambda-data download, which names the file the mirror lacks (status 2,
    # one line) and changes nothing
    done = script("download_dataset.sh", "--force", "--source", empty, prepared, SIZE)
    assert done.returncode == 2, explain(done)
    assert done.stderr == (
        f"yambda-data download: error: {empty}/flat/{SIZE}/multi_event.parquet: no such file "
        f"in the local source {empty}\n"
    ), explain(done)
    assert raw.stat().st_mtime_ns == before


@pytest.mark.slow
@needs_uv
def test_verify_dataset_checks_records_and_compares(prepared, tmp_path):
    expected = tmp_path / "expected" / f"{SIZE}.json"
    done = script("verify_dataset.sh", "--expected", expected, prepared, SIZE)
    assert done.returncode == 0, explain(done)
    assert "the sha256 of all" not in done.stdout  # the JSON reports stay internal
    assert "no expected values" in done.stdout and done.stdout.rstrip().endswith(
        f"processed outputs in {prepared}/prepared/{SIZE}"
    )

    done = script("verify_dataset.sh", "--record", "--expected", expected, prepared, SIZE)
    assert done.returncode == 0, explain(done)
    values = json.loads(expected.read_text())
    manifest = json.loads((prepared / "prepared" / SIZE / "store" / "manifest.json").read_text())
    for key in ("num_users", "num_events", "num_train_anchors", "num_test_anchors"):
        assert values["store"][key] == manifest[key], key
    assert values["store"]["arrays"] == {k: v["sha256"] for k, v in manifest["files"].items()}
    assert values["raw_bytes"]["flat/50m/multi_event.parquet"] == (
        (prepared / "flat" / SIZE / "multi_event.parquet").stat().st_size
    )

    done = script("verify_dataset.sh", "--expected", expected, prepared, SIZE)
    assert done.returncode == 0 and f"matches {expected}" in done.stdout, explain(done)

    values["store"]["num_test_anchors"] += 1
    expected.write_text(json.dumps(values))
    done = script("verify_dataset.sh", "--expected", expected, prepared, SIZE)
    assert done.returncode == 1, explain(done)
    assert "store.num_test_anchors: expected" in done.stderr
    assert "FAILED: the data differs from the expected values" in done.stderr


@pytest.mark.slow
@needs_uv
def test_verify_dataset_names_a_corrupt_store_array(prepared, tmp_path):
    copy = tmp_path / "prepared"
    shutil.copytree(prepared / "prepared" / SIZE, copy)
    expected = tmp_path / "none.json"  # (a pristine copy passes: see the test above)
    array = copy / "store" / "event_item_id"
    data = bytearray(array.read_bytes())
    data[len(data) // 3] ^= 0x40  # one byte, same size
    array.write_bytes(bytes(data))
    done = script("verify_dataset.sh", "--prepared", copy, "--expected", expected, prepared, SIZE)
    assert done.returncode == 1, explain(done)
    assert f"{array}: sha256" in done.stderr
    assert f"FAILED: sample store {copy}/store" in done.stderr


@pytest.mark.slow
@needs_uv
def test_verify_dataset_needs_the_processed_outputs(prepared, tmp_path):
    # a PREPARED that exists but lacks the store: a verdict (1)
    (tmp_path / "half").mkdir()
    shutil.copytree(prepared / "prepared" / SIZE / "preprocessed", tmp_path / "half" / "pre")
    (tmp_path / "half" / "pre").rename(tmp_path / "half" / "preprocessed")
    done = script("verify_dataset.sh", "--prepared", tmp_path / "half", prepared, SIZE)
    assert done.returncode == 1, explain(done)
    assert f"{tmp_path}/half/store: no such directory; run prepare_dataset.sh" in done.stderr

    # a DATA_DIR without the download: a verdict too (the files are missing)
    (tmp_path / "no-data").mkdir()
    done = script("verify_dataset.sh", tmp_path / "no-data", SIZE)
    assert done.returncode == 1 and "missing or empty" in done.stderr, explain(done)


# run_and_time ------------------------------------------------------------------------------


@pytest.mark.slow
@needs_uv
def test_run_and_time_on_synthetic_data(tmp_path):
    out = tmp_path / "run"
    # target AUC 0: the run converges at its first eval, as a full run does at its target
    extra = ["--users", "80", *SHORT_RUN, "--target-auc", "0"]
    done = script("run_and_time.sh", "--out", out, "--seed", "1", "--", *extra)
    assert done.returncode == 0, explain(done)
    lines = done.stdout.rstrip().splitlines()
    match = RESULT_LINE.match(lines[-1])
    assert match, explain(done)
    assert lines[0] == f"STARTING TIMING RUN AT {match.group(3)}"
    assert "compliance check, dev ruleset:" in done.stdout
    assert any(line.startswith(f"PASSED: {out}/mlperf.log") for line in lines), explain(done)

    summary = json.loads((out / "summary.json").read_text().splitlines()[-1])
    assert summary["status"] == "success" and summary["train_samples"] == 512
    assert check_log(out / "mlperf.log", ruleset="dev").passed
    assert json.loads((out / "config.json").read_text())["run"]["seed"] == 1


@pytest.mark.slow
@needs_uv
def test_run_and_time_on_a_download_uses_the_prepared_data(prepared, tmp_path):
    store = prepared / "prepared" / SIZE / "store"
    built = (store / "READY").stat().st_mtime_ns
    out = tmp_path / "run"
    done = script(
        "run_and_time.sh", "--data", prepared, "--size", SIZE, "--out", out, "--", *SHORT_RUN
    )
    # The official rules pin the reference's sample counts and AUC 0.75, which a run of the
    # tiny preset cannot meet: the check fails, and there is no result.
    assert done.returncode == 1, explain(done)
    assert "compliance check, 6.1.0 ruleset:" in done.stdout
    assert f"ERROR: {out}/mlperf.log fails the 6.1.0 ruleset" in done.stderr
    assert not any(line.startswith("RESULT,") for line in done.stdout.splitlines())
    assert (out / "prepared").is_symlink()
    assert (out / "prepared").resolve() == (prepared / "prepared" / SIZE).resolve()
    # train.py reused the store prepare_dataset.sh built (same min_history and windows)
    assert (store / "READY").stat().st_mtime_ns == built
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["data"] == str(prepared) and config["run"]["size"] == SIZE


def run_and_time_with_fake_uv(
    tmp_path: Path, uv_script: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """run_and_time.sh --out TMP/run with `uv` on PATH replaced by a shell script."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uv").write_text(f"#!/bin/sh\n{uv_script}\n")
    (fake / "uv").chmod(0o755)
    path = f"{fake}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        ["bash", str(MLPERF / "run_and_time.sh"), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": path, "MLPERF_NO_UV": "0"} | (env or {}),
        timeout=60,
    )


def test_run_and_time_launches_train_py_with_mlperf_launcher(tmp_path):
    """MLPERF_LAUNCHER's words come before train.py (uv stands in for the run and fails)."""
    launcher = {"MLPERF_LAUNCHER": "torchrun --standalone --nproc-per-node 8"}
    done = run_and_time_with_fake_uv(tmp_path, 'echo "uv $*" >&2\nexit 3', launcher)
    assert done.returncode == 3, explain(done)
    launched = f"torchrun --standalone --nproc-per-node 8 {ROOT}/tools/train.py --out"
    assert launched in done.stderr, explain(done)


@pytest.mark.slow
@needs_uv
def test_prepare_dataset_builds_the_store_for_min_history(prepared, tmp_path):
    elsewhere = tmp_path / "prepared"
    done = script(
        "prepare_dataset.sh", "--prepared", elsewhere, "--min-history", "64", prepared, SIZE
    )
    assert done.returncode == 0, explain(done)
    manifest = json.loads((elsewhere / "store" / "manifest.json").read_text())
    default = json.loads((prepared / "prepared" / SIZE / "store" / "manifest.json").read_text())
    assert (manifest["min_history"], default["min_history"]) == (64, 16)
    assert 0 < manifest["num_train_anchors"] < default["num_train_anchors"]


def test_run_and_time_fails_when_training_fails(tmp_path):
    """train.py's exit status comes back, with no result (uv stands in for a failing run)."""
    done = run_and_time_with_fake_uv(tmp_path, "echo 'train.py: simulated failure' >&2\nexit 3")
    assert done.returncode == 3, explain(done)
    assert "simulated failure" in done.stderr
    assert "ERROR: tools/train.py failed with exit status 3" in done.stderr
    assert "STARTING TIMING RUN AT" in done.stdout and "RESULT," not in done.stdout


def test_run_and_time_tells_a_log_it_cannot_check_from_a_failing_one(tmp_path):
    """mlperf-compliance exits 2 when it gives no verdict (here: no log): the script exits 2
    saying the log could not be checked, not that it fails the rules (uv stands in for the
    tools: train.py "succeeds" without writing a log)."""
    fake = (
        'case "$*" in\n'
        '  *mlperf-compliance*) echo "mlperf-compliance check: error: no MLPerf log" >&2; exit 2 ;;\n'
        '  *) echo \'{"status": "success"}\' ;;\n'
        "esac"
    )
    done = run_and_time_with_fake_uv(tmp_path, fake)
    assert done.returncode == 2, explain(done)
    assert "mlperf-compliance check: error: no MLPerf log" in done.stderr
    assert f"ERROR: {tmp_path}/run/mlperf.log could not be checked" in done.stderr
    assert "fails the" not in done.stderr and "RESULT," not in done.stdout

    fails = fake.replace("exit 2", "exit 1")
    shutil.rmtree(tmp_path / "bin")
    done = run_and_time_with_fake_uv(tmp_path, fails)
    assert done.returncode == 1, explain(done)
    assert f"ERROR: {tmp_path}/run/mlperf.log fails the dev ruleset" in done.stderr


def test_run_and_time_keeps_the_earlier_summary_when_train_py_refuses(tmp_path):
    """A second run into a finished run's --out: train.py refuses (status 2) and the earlier
    summary.json is what it was (uv stands in for train.py's refusal)."""
    out = tmp_path / "run"
    out.mkdir()
    earlier = '{"status": "success", "eval_auc": 0.81}\n'
    (out / "summary.json").write_text(earlier)
    refusal = "echo 'train.py: error: --out holds a finished run' >&2\nexit 2"
    done = run_and_time_with_fake_uv(tmp_path, refusal)
    assert done.returncode == 2, explain(done)
    assert "refused the run" in done.stderr and "failed with exit status" not in done.stderr
    assert (out / "summary.json").read_text() == earlier
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_run_and_time_without_uv_creates_nothing(tmp_path):
    """No uv on PATH: one line, status 2, and no --out created."""
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "uv").exists()
    )
    done = subprocess.run(
        ["bash", str(MLPERF / "run_and_time.sh"), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": path, "MLPERF_NO_UV": "0"},
        timeout=60,
    )
    assert done.returncode == 2, explain(done)
    assert "needs uv" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
