"""Download the public Yambda dataset (or copy a local mirror of it) into the reference layout.

Files come from the Hugging Face dataset repository ``yandex/yambda`` at a pinned revision (the
one the MLPerf reference uses), through ``huggingface_hub`` (resumable, with progress bars), into
``dest`` with the repository's own paths::

    dest/flat/<size>/multi_event.parquet
    dest/artist_item_mapping.parquet
    dest/album_item_mapping.parquet
    dest/embeddings.parquet            (only with embeddings=True; ~13.8 GB)

``source=DIR`` copies the same files from a local directory in that layout instead (an offline
mirror, and what the tests use). A file already present with the source's size is kept, so an
interrupted copy resumes where it stopped; every copy is atomic. The mirror is checked before
anything is copied: every file must be there and the column names and dtypes of the parquet
files must match the schema (their metadata), so a bad mirror changes nothing in ``dest``.
Downloads fail fast with a :class:`DownloadError` when the Hub cannot be reached; a write that
fails (no space left, say) is a :class:`~yambda_data.WriteError` naming the file and the free
space there.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

from yambda_data._atomic import atomic_path
from yambda_data._io import first_line, reading, writing
from yambda_data._readers import DATA_READERS_FILE, writing_data
from yambda_data.schema import mapping_path, multi_event_path, read_mapping, read_multi_event

__all__ = [
    "DATASET_REPO",
    "PINNED_REVISION",
    "SIZES",
    "DownloadError",
    "dataset_files",
    "download",
]

DATASET_REPO = "yandex/yambda"
PINNED_REVISION = "dd6f3a19eef5866e346c3270e098baa641a44948"
"""The dataset revision the MLPerf DLRMv4 reference pins."""
SIZES = ("50m", "500m", "5b")


class DownloadError(RuntimeError):
    """The dataset could not be fetched; the message says from where and why."""


def dataset_files(size: str, *, embeddings: bool = False) -> list[str]:
    """Repository paths of the files the DLRMv4 pipeline reads for ``size``."""
    if size not in SIZES:
        raise ValueError(f"size: unknown Yambda size {size!r}; known: {', '.join(SIZES)}")
    files = [
        multi_event_path(".", size).as_posix(),
        mapping_path(".", "artist").as_posix(),
        mapping_path(".", "album").as_posix(),
    ]
    if embeddings:
        files.append("embeddings.parquet")
    return [f.removeprefix("./") for f in files]


def _check_source(source: Path, size: str, names: list[str]) -> None:
    """Every file of ``names`` in ``source``, the parquet schemas right (metadata only)."""
    if not source.is_dir():
        raise DownloadError(f"{source}: no such directory (the local source)")
    for name in names:
        if not (source / name).is_file():
            raise DownloadError(f"{source / name}: no such file in the local source {source}")
    with reading(multi_event_path(source, size)):
        read_multi_event(source, size)
    for kind in ("artist", "album"):
        with reading(mapping_path(source, kind)):
            read_mapping(source, kind)  # type: ignore[arg-type]


def _copy_from(source: Path) -> Callable[[str, Path], None]:
    def fetch(name: str, dest: Path) -> None:
        origin, target = source / name, dest / name
        if not origin.is_file():
            raise DownloadError(f"{origin}: no such file in the local source {source}")
        if target.is_file() and target.stat().st_size == origin.stat().st_size:
            return
        with writing(target), atomic_path(target) as tmp:
            shutil.copyfile(origin, tmp)

    return fetch


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc)).rstrip('.')}"


def _from_hub(revision: str, endpoint: str | None) -> Callable[[str, Path], None]:
    """The Hub's fetch of one file, once the Hub has answered for the revision (asked once,
    without retries: offline, that fails at once, before anything is created)."""
    try:
        import huggingface_hub
    except ImportError:
        raise DownloadError(
            "downloading needs huggingface_hub: install yambda-data[download]"
        ) from None
    where = endpoint or "the Hugging Face Hub"
    try:
        huggingface_hub.HfApi(endpoint=endpoint).dataset_info(
            DATASET_REPO, revision=revision, timeout=10
        )
    except Exception as exc:  # no network, no such revision, an HTTP error
        raise DownloadError(
            f"{DATASET_REPO}@{revision}: {where} did not answer ({_reason(exc)}); without "
            "network access, copy a mirror of the dataset and pass it as --source DIR"
        ) from None

    def fetch(name: str, dest: Path) -> None:
        try:
            huggingface_hub.hf_hub_download(
                DATASET_REPO,
                name,
                repo_type="dataset",
                revision=revision,
                local_dir=dest,
                endpoint=endpoint,
                etag_timeout=10,
            )
        except Exception as exc:  # network, HTTP, revision or disk errors alike
            raise DownloadError(
                f"{DATASET_REPO}@{revision}: {name} could not be downloaded from {where} "
                f"({_reason(exc)}); the same command resumes it"
            ) from exc

    return fetch


_HUB_CACHE = Path(".cache") / "huggingface"
"""Where huggingface_hub keeps its locks and partial downloads inside the destination."""


def _missing_folders(dest: Path, names: list[str]) -> list[Path]:
    """The folders a fetch of `names` into `dest` would create (the Hub's cache included),
    deepest first."""
    wanted = {dest / _HUB_CACHE, *((dest / name).parent for name in names)}
    inside = {p for w in wanted for p in (w, *w.parents) if p == dest or dest in p.parents}
    return sorted((p for p in inside if not p.exists()), key=lambda p: -len(p.parts))


def _remove_what_is_empty(made: list[Path], hub_cache: Path) -> None:
    """After a failed fetch: the Hub's cache folder if this call made it and it holds no
    partial download to resume (only locks and markers), then each folder this call made
    that is empty."""
    if hub_cache in made and not any(hub_cache.rglob("*.incomplete")):
        shutil.rmtree(hub_cache, ignore_errors=True)
    for folder in made:
        with contextlib.suppress(OSError):  # not empty, or gone
            folder.rmdir()


def download(
    size: str,
    dest: str | Path,
    *,
    revision: str = PINNED_REVISION,
    embeddings: bool = False,
    source: str | Path | None = None,
    endpoint: str | None = None,
) -> list[Path]:
    """Fetch the files of ``size`` into ``dest`` and check their schema; returns their paths.

    ``source`` copies from a local directory in the dataset's layout instead of the Hub;
    ``endpoint`` overrides the Hub address (a mirror). A ``dest`` that another process's run
    reads (:func:`~yambda_data.hold_data`) is refused (DataInUse naming that process) before
    anything is fetched.
    """
    names = dataset_files(size, embeddings=embeddings)
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(f"{dest}: exists and is not a directory")
    if source is not None:
        _check_source(Path(source), size, names)
    fetch = _copy_from(Path(source)) if source is not None else _from_hub(revision, endpoint)
    made = _missing_folders(dest, names)
    with writing(dest):
        dest.mkdir(parents=True, exist_ok=True)
    try:
        with writing_data(dest, "a download"):  # refused while a run reads dest
            for name in names:
                fetch(name, dest)
    except BaseException:
        if dest in made:
            (dest / DATA_READERS_FILE).unlink(missing_ok=True)
        _remove_what_is_empty(made, dest / _HUB_CACHE)
        raise
    # Column names and dtypes come from the files' metadata: cheap even for 5b.
    with reading(multi_event_path(dest, size)):
        read_multi_event(dest, size)
    for kind in ("artist", "album"):
        with reading(mapping_path(dest, kind)):
            read_mapping(dest, kind)  # type: ignore[arg-type]
    return [dest / name for name in names]
