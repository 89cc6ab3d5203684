"""bench_write.py: preprocess's own files written again, whole and column by column."""

import re
import shutil
from pathlib import Path


def test_each_file_kind_is_rewritten_byte_identical_with_a_row_per_column(
    built_store, run_benchmark
):
    _, pre, _ = built_store
    for name, columns in [
        ("train_sessions/part-00001.parquet", 8),
        ("test_events/part-00002.parquet", 7),
        ("session_index/part-00000.parquet", 6),
    ]:
        result = run_benchmark("bench_write.py", pre, "--file", name, "--repeat", "1")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "rewritten with preprocess's settings: byte-identical" in result.stdout
        rows = re.findall(r"^\| ([\w ]+) \| [\d.]+ \| [\d.]+ \| \d+% \|$", result.stdout, re.M)
        assert rows[0] == "all columns" and len(rows) == 1 + columns, result.stdout


def test_a_rewrite_with_other_bytes_is_reported_and_fails(built_store, monkeypatch, capsys):
    """The byte comparison is real: written with another compression level, the file differs."""
    _, pre, _ = built_store
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_write

    def other_level(frame, path):
        frame.write_parquet(path, compression="zstd", compression_level=9)

    monkeypatch.setattr(bench_write, "_write_parquet", other_level)
    assert bench_write.main([str(pre), "--repeat", "1"]) == 1
    assert "rewritten with preprocess's settings: DIFFERENT" in capsys.readouterr().out


def test_the_largest_train_part_is_the_default(built_store, run_benchmark):
    _, pre, _ = built_store
    parts = sorted((pre / "train_sessions").glob("part-*.parquet"))
    largest = max(parts, key=lambda p: p.stat().st_size)
    result = run_benchmark("bench_write.py", pre, "--repeat", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{largest}: ")


def test_an_output_that_fails_its_checksums_is_refused_naming_the_file(
    built_store, tmp_path, run_benchmark
):
    _, pre, _ = built_store
    copy = tmp_path / "pre"
    shutil.copytree(pre, copy)
    damaged = copy / "train_sessions" / "part-00000.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-1])
    result = run_benchmark("bench_write.py", copy, "--repeat", "1")
    assert result.returncode == 2
    assert str(damaged) in result.stderr and "Traceback" not in result.stderr


def test_a_missing_file_and_a_bad_repeat_are_refused(built_store, run_benchmark):
    _, pre, _ = built_store
    missing = run_benchmark("bench_write.py", pre, "--file", "train_sessions/part-00099.parquet")
    assert missing.returncode == 2 and "part-00099.parquet: no such file" in missing.stderr
    assert run_benchmark("bench_write.py", pre, "--repeat", "0").returncode == 2
    not_parquet = run_benchmark("bench_write.py", pre, "--file", "split_meta.json", "--repeat", "1")
    assert not_parquet.returncode == 2 and "split_meta.json: not a readable parquet file" in (
        not_parquet.stderr
    )
    assert "Traceback" not in not_parquet.stderr
