"""Writing the synthetic dataset: :func:`synthesize`, in memory or one block of users at a
time."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import polars as pl

from yambda_data._atomic import atomic_path, atomic_paths, exclusive_lock
from yambda_data._io import writing
from yambda_data._readers import writing_data
from yambda_data._synth_config import SynthConfig, SynthPaths
from yambda_data._synth_generate import (
    _USERS_PER_BLOCK,
    SynthData,
    _build_catalogue,
    _Catalogue,
    _events_frame,
    _user_block,
    generate,
)

SYNTHESIS_LOCK = "synthesis"
"""Every synthesis into a root holds the lock of ``<root>/.synthesis.lock`` while it writes
(:func:`~yambda_data._atomic.exclusive_lock`): syntheses into one root take turns, and the
temporary files one finds there under the lock are from a synthesis that was killed."""


def killed_synthesis_leftovers(targets: list[Path]) -> list[Path]:
    """The temporary files that writing ``targets`` atomically makes (``.<name>.*.tmp``,
    and the part folders ``.<name>.*.tmp.parts-*`` of the streaming path), by their names:
    left behind only by a synthesis that was killed, when found under the lock."""
    found: list[Path] = []
    for target in targets:
        if target.parent.is_dir():
            found += sorted(target.parent.glob(f".{target.name}.*.tmp"))
            found += sorted(target.parent.glob(f".{target.name}.*.tmp.parts-*"))
    return found


def remove_leftovers(leftovers: list[Path]) -> None:
    for leftover in leftovers:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        else:
            leftover.unlink(missing_ok=True)


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` as zstd parquet to ``path``, atomically (a write error names ``path``
    and the free space there: :class:`~yambda_data.WriteError`)."""
    with writing(path), atomic_path(path) as tmp:
        frame.write_parquet(tmp, compression="zstd", statistics=True)


def synthesize(
    out_dir: str | Path, config: SynthConfig | None = None, *, stream: bool = False
) -> SynthPaths:
    """Generate and write the dataset under ``out_dir``. The three files are written to
    temporary siblings and renamed into place only once all of them are complete, so a
    failure (a :class:`~yambda_data.WriteError` naming the path and the free space) leaves
    the files that were there before unchanged.

    ``stream=True`` never holds more than one block of users' events in memory (for sizes
    such as Yambda-500m's, see :func:`yambda_shape`): each block is written to a part file in
    a temporary directory beside the output, and the parts are then concatenated into
    ``multi_event.parquet`` by polars' streaming engine (row groups of
    :data:`STREAM_ROW_GROUP_ROWS` rows, zstd). The rows are those of the in-memory path, in
    the same order; the file's bytes differ (its row groups do), and the same config gives
    the same bytes again. The parts take about as much disk as the output while it is
    written.

    Existing files are replaced, nothing else: a target that exists and is not a file, or
    whose folder cannot be created, is refused (ValueError naming it) before anything is
    generated. Syntheses into one root take turns (:data:`SYNTHESIS_LOCK`), and each first
    removes the temporary files that a killed one left there. A root that another process's
    run reads (:func:`~yambda_data.hold_data`) is refused (DataInUse naming that process)
    before anything is written or removed."""
    return write_synthesis(Path(out_dir), config or SynthConfig(), stream=stream)


def write_synthesis(
    root: Path, cfg: SynthConfig, *, stream: bool = False, data: SynthData | None = None
) -> SynthPaths:
    """:func:`synthesize`, writing ``data`` (``generate(cfg)``, made already) when given."""
    paths = SynthPaths.of(root, cfg)
    paths.check_writable()
    with writing(root):
        root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / SYNTHESIS_LOCK), writing_data(root, "a synthesis"):
        remove_leftovers(killed_synthesis_leftovers(paths.files))
        _write(paths, cfg, stream, data)
    return paths


def _write(paths: SynthPaths, cfg: SynthConfig, stream: bool, data: SynthData | None) -> None:
    root = paths.root
    if stream:
        cat = _build_catalogue(cfg)
        mappings = [cat.artist_mapping, cat.album_mapping]
    else:
        data = data if data is not None else generate(cfg)
        mappings = [data.artist_item_mapping, data.album_item_mapping]
    targets = paths.files
    with writing(root), atomic_paths(targets) as temps:
        for frame, path, tmp in zip(mappings, targets, temps, strict=False):
            with writing(path):
                frame.write_parquet(tmp, compression="zstd", statistics=True)
        with writing(paths.multi_event):
            if stream:
                _stream_events(cat, cfg, temps[-1])
            else:
                data.events.write_parquet(temps[-1], compression="zstd", statistics=True)


STREAM_ROW_GROUP_ROWS = 1_048_576
"""Rows per row group of a streamed ``multi_event.parquet`` (row groups hold whole uid ranges
in order, so a uid-filtered scan reads only its own)."""


def _stream_events(cat: _Catalogue, cfg: SynthConfig, target: Path) -> None:
    parts = Path(tempfile.mkdtemp(prefix=f"{target.name}.parts-", dir=target.parent))
    try:
        files = []
        for block, uid0 in enumerate(range(0, cfg.users, _USERS_PER_BLOCK)):
            n = min(_USERS_PER_BLOCK, cfg.users - uid0)
            data = _user_block(cat, cfg, block, uid0, n)
            del data["prob"]
            files.append(parts / f"part-{block:07d}.parquet")
            _events_frame(data).write_parquet(files[-1], compression="lz4", statistics=False)
        pl.scan_parquet(files).sink_parquet(
            target,
            compression="zstd",
            statistics=True,
            row_group_size=STREAM_ROW_GROUP_ROWS,
            maintain_order=True,
        )
    finally:
        shutil.rmtree(parts, ignore_errors=True)
