from __future__ import annotations

import dataclasses
import gc
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from yambda_data import cli
from yambda_data.cli import main, run
from yambda_data.preprocess import preprocess
from yambda_data.schema import multi_event_path
from yambda_data.store import SampleStore
from yambda_data.synth import synthesize


def test_synth_then_validate(tmp_path: Path, capsys):
    out = tmp_path / "data"
    argv = ["synth", "--users", "5", "--out", str(out), "--seed", "3", "--size", "5b"]
    assert main([*argv, "--median-events", "100", "--items", "3000"]) == 0
    path = multi_event_path(out, "5b")
    assert path.is_file()
    assert pl.read_parquet(path)["uid"].n_unique() == 5
    assert main(["validate", "--root", str(out), "--size", "5b"]) == 0
    text = capsys.readouterr().out
    assert "ok" in text and "artist_item_mapping.parquet" in text


def test_validate_errors(tmp_path: Path, capsys, tiny_config):
    """A root or file that is not there: status 2; a file that is there and wrong: the
    verdict, status 1."""
    assert main(["validate", "--root", str(tmp_path / "none"), "--size", "50m"]) == 2
    assert "--root" in capsys.readouterr().err
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 2
    assert "multi_event.parquet: no such file" in capsys.readouterr().err

    synthesize(tmp_path, dataclasses.replace(tiny_config, users=3))
    path = multi_event_path(tmp_path, "50m")
    pl.DataFrame({"uid": [1]}).write_parquet(path)
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("yambda-data validate: FAILED: ") and err.count("\n") == 1
    assert "multi_event.parquet" in err and "'timestamp'" in err


def test_synth_bad_config(tmp_path: Path, capsys):
    assert main(["synth", "--users", "0", "--out", str(tmp_path), "--seed", "1"]) == 2
    assert "SynthConfig.users" in capsys.readouterr().err


def test_validate_reports_an_unreadable_file(tmp_path, capsys, tiny_config):
    """A file that is not parquet (or is cut short) is a FAIL verdict naming it; a file that
    cannot be opened at all is an I/O error (status 2)."""
    synthesize(tmp_path, dataclasses.replace(tiny_config, users=3))
    path = multi_event_path(tmp_path, "50m")
    path.write_bytes(b"not a parquet file")
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"yambda-data validate: FAILED: {path}: cannot read it: ")
    assert err.count("\n") == 1
    path.unlink()
    path.mkdir()  # there, but not a file
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 2
    assert f"{path}: no such file" in capsys.readouterr().err


# build-store -------------------------------------------------------------------------------


def _manifest(store_dir: Path) -> dict:
    return json.loads((store_dir / "manifest.json").read_text())


def _build_argv(pre: Path, raw: Path, out: Path, *extra: str) -> list[str]:
    return [
        "build-store",
        "--preprocessed",
        str(pre),
        "--raw",
        str(raw),
        "--out",
        str(out),
        *extra,
    ]


def test_build_store_prints_counts_then_is_up_to_date(built_store, tmp_path, capsys):
    raw, pre, _ = built_store
    out = tmp_path / "store"
    assert main(_build_argv(pre, raw, out, "--min-history", "16")) == 0
    captured = capsys.readouterr()
    m = _manifest(out)
    assert f"store {out}" in captured.out
    assert f"{m['num_users']:,} users, {m['num_events']:,} events" in captured.out
    assert f"train {m['num_train_anchors']:,}, test {m['num_test_anchors']:,}" in captured.out
    assert f"{m['num_windows']:,} windows of 86,400 s" in captured.out
    assert "bytes on disk" in captured.out and "bytes/event" in captured.out
    assert captured.out.rstrip().splitlines()[-1].startswith("in ")
    # progress goes to stderr, results to stdout
    assert "partition 1/3" in captured.err and "partition" not in captured.out
    # the fixture's store was built with the same inputs and settings
    assert m["fingerprint"] == _manifest(built_store[2])["fingerprint"]

    assert main(_build_argv(pre, raw, out, "--min-history", "16")) == 0
    captured = capsys.readouterr()
    assert f"{out}: up to date" in captured.err
    assert "partition" not in captured.err
    assert f"{m['num_events']:,} events" in captured.out


def test_build_store_verify_and_window_seconds(built_store, tmp_path, capsys):
    raw, pre, _ = built_store
    out = tmp_path / "store"
    argv = _build_argv(pre, raw, out, "--min-history", "16", "--window-seconds", "3600")
    assert main([*argv, "--verify"]) == 0
    captured = capsys.readouterr()
    m = _manifest(out)
    assert m["window_seconds"] == 3600
    assert f"{m['num_windows']:,} windows of 3,600 s" in captured.out
    assert f"verified {len(m['files'])} files" in captured.out

    # a corrupt array: the store is not reused; the rebuild says which array differed
    (out / "event_item_id").write_bytes(bytes((out / "event_item_id").stat().st_size))
    assert main([*argv, "--verify"]) == 0
    err = capsys.readouterr().err
    assert f"{out / 'event_item_id'}: sha256 differs from manifest.json; rebuilding {out}" in err
    SampleStore.open(out).verify()


def test_build_store_errors(built_store, tmp_path, capsys):
    raw, pre, _ = built_store
    missing = tmp_path / "no-such-preprocess"
    assert main(_build_argv(missing, raw, tmp_path / "s1", "--min-history", "16")) == 2
    err = capsys.readouterr().err
    assert err.startswith("yambda-data build-store: error:") and str(missing) in err

    # no listen has that many earlier events: StoreError, status 2
    assert main(_build_argv(pre, raw, tmp_path / "s2", "--min-history", "1000000")) == 2
    last = capsys.readouterr().err.rstrip().splitlines()[-1]  # after the progress lines
    assert last.startswith("yambda-data build-store: error:") and "min_history" in last
    assert not (tmp_path / "s2").exists()

    assert main(_build_argv(pre, raw, tmp_path / "s3", "--min-history", "-1")) == 2
    assert "--min-history: must be >= 0" in capsys.readouterr().err
    assert not (tmp_path / "s3").exists()

    assert main(_build_argv(pre, tmp_path, tmp_path / "s4", "--min-history", "16")) == 2
    assert "artist_item_mapping.parquet" in capsys.readouterr().err

    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("x")
    assert main(_build_argv(pre, raw, occupied, "--min-history", "16")) == 2
    assert "not a sample store" in capsys.readouterr().err
    assert (occupied / "keep.txt").read_text() == "x"


# inspect -----------------------------------------------------------------------------------

_SPLIT_KEYS = ("t_min", "t_max", "train_start", "train_end", "test_start", "test_end")
_TOP_KEYS = [
    "kind",
    "path",
    "size",
    "num_events",
    "num_train_events",
    "num_test_events",
    "num_sessions",
    "num_users",
    "num_items",
    "split",
    "pools",
    "store",
]


def _inspect_json(capsys, *argv: str) -> dict:
    assert main(["inspect", *argv, "--format", "json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # one JSON object and nothing else
    assert list(report) == _TOP_KEYS
    assert list(report["split"]) == list(_SPLIT_KEYS)
    pools = report["pools"]
    assert list(pools["counts"]) == ["listen_plus", "skip", "like", "other"]
    assert list(pools["shares"]) == ["listen_plus", "skip", "like", "other"]
    assert sum(pools["counts"].values()) == pools["events"]
    assert abs(sum(pools["shares"].values()) - 1.0) < 1e-9
    for name, count in pools["counts"].items():
        assert count >= 0
        assert pools["shares"][name] == pytest.approx(count / pools["events"], abs=1e-12)
    return report


def _pool_counts(frame: pl.DataFrame) -> dict[str, int]:
    """The pools of ``frame``, counted row by row (independent of the CLI's expressions)."""
    counts = {"listen_plus": 0, "skip": 0, "like": 0, "other": 0}
    for etype, ratio in zip(
        frame["event_type"].cast(pl.String).to_list(),
        frame["played_ratio_pct"].to_list(),
        strict=True,
    ):
        if etype == "listen":
            counts["listen_plus" if ratio >= 50 else "skip"] += 1
        elif etype == "like":
            counts["like"] += 1
        else:
            counts["other"] += 1
    return counts


def _parts(directory: Path) -> pl.DataFrame:
    return pl.read_parquet(sorted(directory.glob("part-*.parquet")))


def test_inspect_preprocess_output(built_store, capsys):
    _raw, pre, _store = built_store
    meta = json.loads((pre / "split_meta.json").read_text())
    report = _inspect_json(capsys, str(pre))
    train = _parts(pre / "train_sessions")
    assert report["kind"] == "preprocess" and report["path"] == str(pre)
    assert report["size"] == meta["size"]
    assert report["num_train_events"] == meta["num_train_events"] == train.height
    assert report["num_test_events"] == meta["num_test_events"]
    assert report["num_events"] == meta["num_train_events"] + meta["num_test_events"]
    assert report["num_sessions"] == meta["num_sessions"]
    assert report["num_users"] == meta["num_users"]
    assert report["num_items"] == train["item_id"].n_unique()
    assert report["split"] == {k: meta[k] for k in _SPLIT_KEYS}
    assert report["pools"]["scope"] == "train"
    assert report["pools"]["events"] == meta["num_train_events"]
    assert report["pools"]["counts"] == _pool_counts(train)
    assert report["store"] is None

    assert main(["inspect", str(pre)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{pre}: preprocess output")
    assert f"{meta['num_train_events']:,}" in text and f"{report['num_items']:,}" in text
    assert f"[{meta['train_start']}, {meta['train_end']})" in text
    assert f"[{meta['test_start']}, {meta['test_end']})" in text
    assert f"pools of {meta['num_train_events']:,} train events" in text
    for name, count in report["pools"]["counts"].items():
        share = 100 * report["pools"]["shares"][name]
        assert any(
            line.split() == [name, f"{count:,}", f"{share:.2f}%"] for line in text.splitlines()
        ), name


def test_inspect_store(built_store, capsys):
    _raw, pre, store = built_store
    m = _manifest(store)
    report = _inspect_json(capsys, str(store))
    assert report["kind"] == "store" and report["path"] == str(store)
    assert report["num_events"] == m["num_events"]
    assert report["num_users"] == m["num_users"]
    assert report["num_items"] is None
    assert report["num_train_events"] == m["split"]["num_train_events"]
    assert report["num_test_events"] == m["split"]["num_test_events"]
    assert report["split"] == {k: m["split"][k] for k in _SPLIT_KEYS}
    # the store's pools hold train and test events: shares are over all of them
    pools = report["pools"]
    assert pools["scope"] == "all" and pools["events"] == m["num_events"]
    for name in ("listen_plus", "skip", "like"):
        assert pools["counts"][name] == m["pool_events"][name]
    assert pools["counts"]["other"] == m["num_events"] - sum(m["pool_events"].values())
    both = pl.concat(
        [_parts(pre / "train_sessions").drop("session_id"), _parts(pre / "test_events")]
    )
    assert pools["counts"] == _pool_counts(both)

    details = report["store"]
    sizes = np.diff(np.fromfile(store / "train_window_offset", dtype="<i8")).tolist()
    assert details["min_history"] == m["min_history"] == 16
    assert details["window_seconds"] == m["window_seconds"]
    assert details["num_train_anchors"] == m["num_train_anchors"] == sum(sizes)
    assert details["num_test_anchors"] == m["num_test_anchors"]
    assert details["num_windows"] == m["num_windows"] == len(sizes)
    assert details["first_window_start"] == m["first_window_start"]
    per = details["anchors_per_window"]
    assert (per["min"], per["max"]) == (min(sizes), max(sizes))
    assert per["median"] == pytest.approx(float(np.median(sizes)))
    assert details["vocab"] == m["vocab"]
    disk = sum(p.stat().st_size for p in store.iterdir() if p.is_file())
    assert details["disk_bytes"] == disk
    assert details["bytes_per_event"] == pytest.approx(disk / m["num_events"])

    assert main(["inspect", str(store)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{store}: sample store")
    assert f"train {m['num_train_anchors']:,}, test {m['num_test_anchors']:,}" in text
    assert f"min {per['min']:,}" in text and f"max {per['max']:,}" in text
    assert f"pools of all {m['num_events']:,} events (train + test)" in text
    assert f"item_id {m['vocab']['item_id']:,}" in text


def test_inspect_raw_root_matches_the_preprocess_output(built_store, tiny_config, tmp_path, capsys):
    raw, pre, _store = built_store
    meta = json.loads((pre / "split_meta.json").read_text())
    report = _inspect_json(capsys, str(raw), "--size", tiny_config.size)
    prep = _inspect_json(capsys, str(pre))
    events = pl.read_parquet(multi_event_path(raw, tiny_config.size))
    assert report["kind"] == "raw" and report["size"] == tiny_config.size
    assert report["num_events"] == events.height
    assert report["num_sessions"] is None and report["store"] is None
    assert report["split"] == {k: meta[k] for k in _SPLIT_KEYS}
    for key in ("num_train_events", "num_test_events", "num_users", "num_items", "pools"):
        assert report[key] == prep[key], key

    # event_type stored as Utf8 or Categorical (as readers accept): the same report
    for dtype in (pl.String, pl.Categorical):
        copy = tmp_path / f"raw-{dtype}"
        path = multi_event_path(copy, tiny_config.size)
        path.parent.mkdir(parents=True)
        events.with_columns(pl.col("event_type").cast(pl.String).cast(dtype)).write_parquet(path)
        other = _inspect_json(capsys, str(copy), "--size", tiny_config.size)
        assert {**other, "path": None} == {**report, "path": None}, dtype

    assert main(["inspect", str(raw), "--size", tiny_config.size]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{raw}: raw dataset (size {tiny_config.size})")
    assert f"{events.height:,} (train {meta['num_train_events']:,}" in text
    assert f"t_min {meta['t_min']}, t_max {meta['t_max']}" in text


def test_inspect_errors(built_store, tmp_path, capsys):
    raw, _pre, store = built_store
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("yambda-data inspect: error:") and str(tmp_path) in err
    assert "not a preprocess output" in err and "sample store" in err and "raw dataset" in err

    missing = tmp_path / "missing"
    assert main(["inspect", str(missing), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and str(missing) in captured.err

    # a raw root needs --size; the message lists the sizes it holds
    assert main(["inspect", str(raw)]) == 2
    err = capsys.readouterr().err
    assert "--size" in err and "50m" in err
    assert main(["inspect", str(raw), "--size", "5b"]) == 2
    assert "multi_event.parquet: no such file" in capsys.readouterr().err

    # a store directory without its READY marker is incomplete
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "manifest.json").write_text((store / "manifest.json").read_text())
    assert main(["inspect", str(partial)]) == 2
    assert "READY" in capsys.readouterr().err

    # an unreadable parquet part
    broken = tmp_path / "broken"
    (broken / "flat" / "50m").mkdir(parents=True)
    (broken / "flat" / "50m" / "multi_event.parquet").write_bytes(b"not parquet")
    assert main(["inspect", str(broken), "--size", "50m"]) == 2
    assert "yambda-data inspect: error:" in capsys.readouterr().err


# verify ------------------------------------------------------------------------------------


def test_verify_store_and_preprocess_output(built_store, tmp_path, capsys):
    raw, pre, store = built_store
    m = _manifest(store)
    assert main(["verify", str(store)]) == 0
    text = capsys.readouterr().out
    assert f"the sha256 of all {len(m['files'])} arrays match" in text
    assert f"anchors train {m['num_train_anchors']:,}, test {m['num_test_anchors']:,}" in text

    argv = ["verify", str(store), "--preprocessed", str(pre), "--raw", str(raw)]
    assert main([*argv, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "store" and report["inputs_checked"] is True
    for key in ("num_users", "num_events", "num_train_anchors", "num_test_anchors"):
        assert report[key] == m[key], key
    assert report["arrays"] == {name: e["sha256"] for name, e in m["files"].items()}

    meta = json.loads((pre / "split_meta.json").read_text())
    assert main(["verify", str(pre), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "preprocess" and report["num_parts"] == 3
    for key in ("num_users", "num_train_events", "num_test_events", "num_sessions"):
        assert report[key] == meta[key], key


def test_verify_names_a_corrupt_array(built_store, tmp_path, capsys):
    _raw, _pre, store = built_store
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    data = bytearray((copy / "event_timestamp").read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, same size: only the sha256 can tell
    (copy / "event_timestamp").write_bytes(bytes(data))
    assert main(["verify", str(copy)]) == 1  # the verdict: FAIL
    err = capsys.readouterr().err
    assert err.startswith("yambda-data verify: FAILED:") and "event_timestamp" in err

    (copy / "event_timestamp").write_bytes(bytes(data[:-1]))  # a wrong size
    assert main(["verify", str(copy)]) == 1
    assert "event_timestamp" in capsys.readouterr().err


def test_verify_refuses_a_store_of_other_inputs(built_store, tmp_path, capsys):
    raw, pre, store = built_store
    other = tmp_path / "pre"
    preprocess(raw, "50m", other, partitions=2)  # the same events in other part files
    argv = ["verify", str(store), "--preprocessed", str(other), "--raw", str(raw)]
    assert main(argv) == 1
    assert f"not built from {other}" in capsys.readouterr().err
    # the store's own inputs, one of them changed since: named
    copy = tmp_path / "copy"
    shutil.copytree(pre, copy)
    meta = json.loads((copy / "split_meta.json").read_text())
    meta["num_sessions"] += 1
    (copy / "split_meta.json").write_text(json.dumps(meta))
    assert main(["verify", str(store), "--preprocessed", str(copy), "--raw", str(raw)]) == 1
    err = capsys.readouterr().err
    assert f"FAILED: {copy / 'split_meta.json'}: " in err and "checksums.json says" in err
    assert main(["verify", str(store), "--raw", str(raw)]) == 2  # a usage error
    assert "--preprocessed and --raw go together" in capsys.readouterr().err
    # inputs that are not there: status 2, naming them
    argv = ["verify", str(store), "--preprocessed", str(tmp_path / "nope"), "--raw", str(raw)]
    assert main(argv) == 2
    assert f"--preprocessed {tmp_path / 'nope'}: no such directory" in capsys.readouterr().err


def test_verify_checks_a_preprocess_output_against_its_metadata(built_store, tmp_path, capsys):
    _raw, pre, _store = built_store
    copy = tmp_path / "pre"
    shutil.copytree(pre, copy)
    meta = json.loads((copy / "split_meta.json").read_text())
    meta["num_test_events"] += 1
    (copy / "split_meta.json").write_text(json.dumps(meta))
    assert main(["verify", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "test_events rows" in err and f"expected {meta['num_test_events']:,}" in err

    shutil.rmtree(copy)
    shutil.copytree(pre, copy)
    (copy / "test_events" / "part-00001.parquet").unlink()
    assert main(["verify", str(copy)]) == 1
    assert "part files differ" in capsys.readouterr().err

    # a truncated part: FAILED, naming the part (not the directory)
    shutil.rmtree(copy)
    shutil.copytree(pre, copy)
    part = copy / "train_sessions" / "part-00002.parquet"
    part.write_bytes(part.read_bytes()[:100])
    assert main(["verify", str(copy)]) == 1
    err = capsys.readouterr().err
    assert f"FAILED: {part}: cannot read it" in err and err.count("\n") == 1

    assert main(["verify", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["verify", str(tmp_path / "empty")]) == 2
    assert "not a sample store" in capsys.readouterr().err


# exit status, one-line errors, tracebacks on request ----------------------------------------


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["synth", "--users", "x", "--out", "d", "--seed", "1"], "--users"),
        (["preprocess", "--raw", "r", "--size", "50m", "--out", "o", "--partitions", "1.5"], "--partitions"),
        (["inspect", "p", "--format", "xml"], "--format"),
        (["bogus"], "bogus"),
    ],
)  # fmt: skip
def test_argument_errors_are_one_line_with_status_2(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and "error:" in err, err
    assert not any(tmp_path.iterdir())


def test_debug_prints_the_traceback_only_on_request(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DLRMV4_DEBUG", raising=False)
    argv = ["validate", "--root", str(tmp_path), "--size", "50m"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    for extra, env in ((["--debug"], None), ([], "1")):
        if env is not None:
            monkeypatch.setenv("DLRMV4_DEBUG", env)
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("Traceback") and "FileNotFoundError" in err, err
        assert err.splitlines()[-1].startswith("yambda-data validate: error:")
    for off in ("0", "false", "no", "off", ""):
        monkeypatch.setenv("DLRMV4_DEBUG", off)
        assert main(argv) == 2
        assert "Traceback" not in capsys.readouterr().err, off
    assert main(["--debug", *argv]) == 2  # before the command too
    assert "Traceback" in capsys.readouterr().err


def test_an_unexpected_error_is_one_line_with_its_type(tmp_path, capsys, monkeypatch):
    import yambda_data.cli as cli

    def broken(args):
        raise RuntimeError("something\nwent wrong")

    monkeypatch.setitem(cli._COMMANDS, "inspect", broken)
    monkeypatch.delenv("DLRMV4_DEBUG", raising=False)
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "yambda-data inspect: error: unexpected RuntimeError: something went wrong "
        "(traceback: --debug or DLRMV4_DEBUG=1)\n"
    )


def test_python_m_yambda_data(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "yambda_data", "verify", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=os.environ | {"DLRMV4_DEBUG": ""},
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr == f"yambda-data verify: error: PATH {tmp_path / 'none'}: no such directory\n"
    )


def test_the_installed_command_is_run(monkeypatch, tmp_path, capsys):
    """The script loads ``run`` through dlrmv4_cli.launch, which runs it: the imports'
    objects frozen before main, main's status the process's."""
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="yambda-data")
    assert script.value == "dlrmv4_cli.commands:yambda_data"
    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or main())
    monkeypatch.setattr(sys, "argv", ["yambda-data", "verify", str(tmp_path / "none")])
    with pytest.raises(SystemExit) as exited:
        run()
    assert exited.value.code == 2 and calls == ["freeze", "main"]
    assert "no such directory" in capsys.readouterr().err


def test_synth_never_replaces_a_dataset_unasked(tmp_path, capsys):
    out = tmp_path / "data"
    argv = ["synth", "--users", "4", "--out", str(out), "--seed", "1", "--median-events", "100"]
    assert main([*argv, "--items", "3000"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*.parquet")}
    capsys.readouterr()
    assert main([*argv, "--items", "3000", "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert "refusing to replace a dataset" in err and "--overwrite" in err
    assert {p: p.read_bytes() for p in out.rglob("*.parquet")} == before
    assert main([*argv, "--items", "3000", "--seed", "2", "--overwrite"]) == 0
    assert {p: p.read_bytes() for p in out.rglob("*.parquet")} != before

    (tmp_path / "file").write_text("x")
    assert main(["synth", "--users", "4", "--out", str(tmp_path / "file"), "--seed", "1"]) == 2
    assert "--out" in capsys.readouterr().err and (tmp_path / "file").read_text() == "x"
    assert main(["synth", "--users", "4", "--out", str(tmp_path / "n"), "--seed", "-1"]) == 2
    assert "--seed: SynthConfig.seed" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()


def test_inspect_names_a_truncated_file(built_store, tmp_path, capsys):
    _raw, pre, _store = built_store
    copy = tmp_path / "pre"
    shutil.copytree(pre, copy)
    part = copy / "train_sessions" / "part-00001.parquet"
    part.write_bytes(part.read_bytes()[:-30])
    assert main(["inspect", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"yambda-data inspect: error: {part}: cannot read it")
    assert err.count("\n") == 1


def test_synth_with_a_published_shape_streams_its_files(tmp_path, capsys):
    out = tmp_path / "raw"
    argv = ["synth", "--shape", "500m", "--users", "20", "--out", str(out), "--seed", "2"]
    assert main([*argv, "--stream"]) == 0
    events = pl.read_parquet(out / "flat" / "500m" / "multi_event.parquet")
    assert events["uid"].n_unique() == 20
    assert main(["validate", "--root", str(out), "--size", "500m"]) == 0
    capsys.readouterr()
    assert main(["synth", "--out", str(tmp_path / "x"), "--seed", "1", "--stream"]) == 2
    assert "--users: required without --shape" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_synth_replaces_its_files_and_nothing_else(tmp_path, capsys):
    """A dataset path that is a directory (a user's data, say) is refused before anything is
    written, with --overwrite too; nothing beside the three files is touched."""
    out = tmp_path / "data"
    (out / "flat" / "50m" / "multi_event.parquet").mkdir(parents=True)
    (out / "flat" / "50m" / "multi_event.parquet" / "part-0.parquet").write_bytes(b"mine")
    argv = ["synth", "--users", "4", "--out", str(out), "--seed", "1", "--median-events", "100"]
    for extra in ([], ["--overwrite"]):
        assert main([*argv, *extra]) == 2
        assert capsys.readouterr().err == (
            f"yambda-data synth: error: --out {out}: {out / 'flat' / '50m' / 'multi_event.parquet'}"
            ": exists and is not a file; refusing to replace it\n"
        )
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "flat",
        "flat/50m",
        "flat/50m/multi_event.parquet",
        "flat/50m/multi_event.parquet/part-0.parquet",
    ]


def test_ctrl_c_while_the_command_loads_polars_is_one_line_and_130(tmp_path):
    """The installed `yambda-data`, interrupted once polars' library is loaded and its
    modules are still being imported: one line, status 130, nothing written."""
    import signal
    import time

    script = Path(sys.executable).with_name("yambda-data")
    proc = subprocess.Popen(
        [str(script), "synth", "--users", "40", "--seed", "0", "--out", str(tmp_path / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        maps = Path(f"/proc/{proc.pid}/maps")
        deadline = time.monotonic() + 60
        while "polars" not in maps.read_text() and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert err.decode().splitlines() in (
        ["yambda-data: interrupted"],
        ["yambda-data synth: interrupted"],
    )
    assert not (tmp_path / "d").exists()
