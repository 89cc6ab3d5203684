"""yambda-data download: the local-mirror path, resuming, and failing fast without the Hub.

No test reaches the network: the Hub path is pointed at a closed port on loopback.
"""

from __future__ import annotations

import errno
import re
import socket

import pytest

from yambda_data import InputFileError, WriteError
from yambda_data.cli import main
from yambda_data.download import DownloadError, dataset_files, download
from yambda_data.schema import SchemaError
from yambda_data.synth import synthesize


@pytest.fixture(scope="module")
def mirror(tmp_path_factory, tiny_config):
    root = tmp_path_factory.mktemp("mirror")
    synthesize(root, tiny_config)
    return root


def test_files_of_a_size():
    assert dataset_files("5b") == [
        "flat/5b/multi_event.parquet",
        "artist_item_mapping.parquet",
        "album_item_mapping.parquet",
    ]
    assert dataset_files("50m", embeddings=True)[-1] == "embeddings.parquet"
    with pytest.raises(ValueError, match="unknown Yambda size '1b'"):
        dataset_files("1b")


def test_copies_a_local_mirror_and_resumes(mirror, tiny_config, tmp_path):
    dest = tmp_path / "yambda"
    paths = download(tiny_config.size, dest, source=mirror)
    for path in paths:
        assert path.read_bytes() == (mirror / path.relative_to(dest)).read_bytes()
    # A complete file is kept as it is; a truncated one (an interrupted copy) is fetched again.
    kept = paths[1].stat().st_mtime_ns
    paths[0].write_bytes(paths[0].read_bytes()[:100])
    download(tiny_config.size, dest, source=mirror)
    assert paths[1].stat().st_mtime_ns == kept
    assert paths[0].read_bytes() == (mirror / paths[0].relative_to(dest)).read_bytes()
    assert not [p for p in dest.rglob("*") if p.name.endswith(".tmp")]


def test_a_file_of_the_wrong_schema_is_reported(mirror, tiny_config, tmp_path):
    bad = tmp_path / "bad"
    for name in dataset_files(tiny_config.size):
        (bad / name).parent.mkdir(parents=True, exist_ok=True)
        (bad / name).write_bytes((mirror / name).read_bytes())
    (bad / "album_item_mapping.parquet").write_bytes(
        (mirror / "artist_item_mapping.parquet").read_bytes()
    )
    with pytest.raises(SchemaError, match="album_item_mapping"):
        download(tiny_config.size, tmp_path / "dest", source=bad)
    # the mirror is checked before anything is copied: nothing was created
    assert not (tmp_path / "dest").exists()

    # a download already in dest is left as it was by a bad (or truncated) mirror
    dest = tmp_path / "mine"
    download(tiny_config.size, dest, source=mirror)
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    multi = bad / dataset_files(tiny_config.size)[0]
    multi.write_bytes(multi.read_bytes()[:-10])
    with pytest.raises(InputFileError, match=f"{re.escape(str(multi))}: cannot read it"):
        download(tiny_config.size, dest, source=bad)
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before


def test_no_space_while_copying_names_the_file(mirror, tiny_config, tmp_path, monkeypatch):
    import yambda_data.download as download_module

    def full(origin, target):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(download_module.shutil, "copyfile", full)
    dest = tmp_path / "dest"
    with pytest.raises(WriteError) as info:
        download(tiny_config.size, dest, source=mirror)
    target = dest / dataset_files(tiny_config.size)[0]
    assert info.value.filename == str(target) and info.value.errno == errno.ENOSPC
    assert str(info.value).startswith(f"writing {target}: No space left on device [errno 28]; ")
    assert not [p for p in dest.rglob("*") if p.is_file()]


def test_missing_source_file_is_named(tmp_path):
    with pytest.raises(DownloadError, match=r"flat/50m/multi_event\.parquet: no such file"):
        download("50m", tmp_path / "dest", source=tmp_path)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_hub_fails_fast_with_a_hint_and_creates_nothing(tmp_path, capsys):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(DownloadError, match=r"http://127\.0\.0\.1:\d+ did not answer .*--source"):
        download("50m", tmp_path / "dest", endpoint=endpoint)
    assert list(tmp_path.iterdir()) == []
    # The command line: one line on stderr (no retry chatter), no double period.
    assert main(["download", "--size", "50m", "--dest", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ".." not in err[0] and "did not answer" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_failed_fetch_leaves_only_a_partial_download(tmp_path, monkeypatch):
    """The Hub answers, then a file fails: the folders the fetch made are removed, unless they
    hold a partial download the same command resumes."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda *args, **kwargs: None)
    partial = {"bytes": False}

    def failing(repo, name, *, local_dir, **kwargs):
        locks = local_dir / ".cache" / "huggingface" / "download" / name
        locks.parent.mkdir(parents=True, exist_ok=True)
        (locks.parent / f"{locks.name}.lock").write_text("")
        if partial["bytes"]:
            (locks.parent / f"{locks.name}.incomplete").write_bytes(b"123")
        (local_dir / name).parent.mkdir(parents=True, exist_ok=True)
        raise OSError("connection reset.")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", failing)
    dest = tmp_path / "dest"
    with pytest.raises(DownloadError, match=r"\(OSError: connection reset\); the same command"):
        download("50m", dest)
    assert not dest.exists()
    (dest / "mine").mkdir(parents=True)  # a folder the user had is kept
    partial["bytes"] = True
    with pytest.raises(DownloadError):
        download("50m", dest)
    assert (dest / "mine").is_dir()
    assert [p.name for p in (dest / ".cache").rglob("*.incomplete")] == [
        "multi_event.parquet.incomplete"
    ]


def test_cli_copies_from_a_mirror(mirror, tiny_config, tmp_path, capsys):
    code = main(
        [
            "download",
            "--size",
            tiny_config.size,
            "--dest",
            str(tmp_path / "d"),
            "--source",
            str(mirror),
        ]
    )
    assert code == 0
    assert "multi_event.parquet" in capsys.readouterr().out
    assert (
        main(
            [
                "download",
                "--size",
                "50m",
                "--dest",
                str(tmp_path / "e"),
                "--source",
                str(tmp_path / "none"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err == f"yambda-data download: error: --source {tmp_path / 'none'}: no such directory\n"
    assert not (tmp_path / "e").exists()
