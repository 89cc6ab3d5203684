"""The synthetic data as a cache that runs and ranks share: :func:`synthesize_cached` makes
the dataset of a config once, under a lock, and checks its files' sha256 at every reuse."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from yambda_data._atomic import atomic_path, exclusive_lock
from yambda_data._checksums import checksum_problem, file_checksums
from yambda_data._io import writing
from yambda_data._readers import hold_data
from yambda_data._synth_config import SynthConfig, SynthPaths
from yambda_data._synth_generate import generate
from yambda_data._synth_write import (
    SYNTHESIS_LOCK,
    killed_synthesis_leftovers,
    remove_leftovers,
    write_synthesis,
)
from yambda_data.split import check_window_request, check_window_room

SYNTH_RECORD_FILE = "synth.json"
"""The record of :func:`synthesize_cached` in its root: the config and, once the files are
complete, their size and sha256 (``{"config": {...}, "files": {name: {"bytes", "sha256"}}}``)."""


def synthesize_cached(
    root: str | Path,
    config: SynthConfig,
    progress: Callable[[str], None] | None = None,
    *,
    hold: bool = False,
    min_window_anchors: int | None = None,
    window_seconds: int = 86_400,
) -> SynthPaths:
    """The dataset of ``config`` under ``root``, made once and checked at every reuse: a cache
    that many runs (and ranks) share.

    Under an exclusive lock (``.synth.json.lock``, so concurrent callers take turns) it removes
    the temporary files of syntheses that were killed in ``root``, then reuses the dataset
    when :data:`SYNTH_RECORD_FILE` holds ``config`` and the size and sha256 of each of the
    three files; otherwise it synthesizes it again, telling ``progress`` why (naming the file
    that differs), and writes the record last, atomically. Files in ``root`` without a record
    were not made here and are never replaced (ValueError naming one); a synthesis claims
    ``root`` by writing a record without checksums first, so that files a killed synthesis
    left are replaced next time. With ``hold``, this process holds the dataset for reading
    from then on (:func:`~yambda_data.hold_data`, taken under the lock, before the cache is
    checked, so that what it checked is what it holds); a synthesis into a root that another
    process holds is refused (DataInUse naming that process). With ``min_window_anchors``, a
    dataset in which no time window of ``window_seconds`` can hold that many train anchors
    (:func:`~yambda_data.split.busiest_window_listens`, on the events generated in memory) is
    refused before any of its files or its record is written (WindowTooSmall naming the
    events file); a dataset reused from the cache is not checked."""
    root = Path(root)
    check_synthesis_root(root, config)
    check_window_request(min_window_anchors, window_seconds)
    paths = SynthPaths.of(root, config)
    record = root / SYNTH_RECORD_FILE
    say = progress or (lambda _message: None)
    with writing(root):
        root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(record):
        # The record's temporaries are written under this lock, the dataset's under the
        # synthesis lock that `synthesize` takes: what is found now was left by a killed one.
        leftovers = killed_synthesis_leftovers([record])
        with exclusive_lock(root / SYNTHESIS_LOCK):
            leftovers += killed_synthesis_leftovers(paths.files)
            for leftover in leftovers:
                say(f"removing {leftover} (left by a synthesis that was killed)")
            remove_leftovers(leftovers)
        if hold:
            hold_data(root, say)
        why = _cache_problem(record, config, paths)
        if why is None:
            say(f"{root}: synthetic data up to date")
            return paths
        data = generate(config)
        check_window_room(data.events, str(paths.multi_event), min_window_anchors, window_seconds)
        say(f"synthesizing {root}" + (f" ({why})" if why else ""))
        _write_record(record, {"config": config.to_dict(), "files": None})
        write_synthesis(root, config, data=data)
        names = [path.relative_to(root).as_posix() for path in paths.files]
        _write_record(record, {"config": config.to_dict(), "files": file_checksums(root, names)})
    return paths


def check_synthesis_root(root: str | Path, config: SynthConfig) -> None:
    """What :func:`synthesize_cached` refuses before it creates anything, for a caller that
    checks every input before its first write: a file of the dataset (or its record) that
    cannot be replaced, or dataset files in ``root`` without a record (a dataset it did not
    make); ValueError naming the path."""
    if not isinstance(config, SynthConfig):
        raise TypeError(f"config must be a SynthConfig, got {type(config).__name__}")
    root = Path(root)
    paths = SynthPaths.of(root, config)
    paths.check_writable()
    record = root / SYNTH_RECORD_FILE
    if record.exists() and not record.is_file():
        raise ValueError(f"{record}: exists and is not a file; refusing to replace it")
    if not record.exists():  # (only a synthesis here writes one, before its files)
        present = [path for path in paths.files if path.exists()]
        if present:
            raise ValueError(
                f"{present[0]}: exists and {record} does not; refusing to replace a dataset "
                "that synthesize_cached did not make"
            )


def _cache_problem(record: Path, config: SynthConfig, paths: SynthPaths) -> str | None:
    """Why the dataset under ``paths.root`` is not that of ``config`` with the files its
    record describes, as one line naming the file ("" for a root never synthesized); None
    when it is."""
    if not record.is_file():
        return ""  # (files without a record were refused before)
    try:
        recorded = json.loads(record.read_text())
        recorded_config, files = recorded["config"], recorded["files"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return f"{record}: not a record of synthesize_cached"
    if recorded_config != config.to_dict():
        return f"{record}: made for another config"
    if not isinstance(files, dict):
        return f"{record}: no checksums (an earlier synthesis did not finish)"
    names = {path.relative_to(paths.root).as_posix() for path in paths.files}
    if set(files) != names:
        return f"{record}: lists {sorted(files)}, not {sorted(names)}"
    problem = checksum_problem(paths.root, files, record)
    return None if problem is None else str(problem)


def _write_record(record: Path, content: dict) -> None:
    with writing(record), atomic_path(record) as tmp:
        tmp.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
