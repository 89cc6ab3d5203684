from __future__ import annotations

from pathlib import Path

import polars as pl

from yambda_data.cli import main
from yambda_data.schema import multi_event_path


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


def test_validate_errors(tmp_path: Path, capsys):
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 2
    assert "no such file" in capsys.readouterr().err

    path = multi_event_path(tmp_path, "50m")
    path.parent.mkdir(parents=True)
    pl.DataFrame({"uid": [1]}).write_parquet(path)
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "multi_event.parquet" in err and "'timestamp'" in err


def test_synth_bad_config(tmp_path: Path, capsys):
    assert main(["synth", "--users", "0", "--out", str(tmp_path), "--seed", "1"]) == 2
    assert "SynthConfig.users" in capsys.readouterr().err


def test_validate_reports_an_unreadable_file(tmp_path, capsys):
    path = multi_event_path(tmp_path, "50m")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a parquet file")
    assert main(["validate", "--root", str(tmp_path), "--size", "50m"]) == 2
    assert "yambda-data validate: error:" in capsys.readouterr().err
