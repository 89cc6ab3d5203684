"""sha256 checksums of files, computed in a few threads (hashlib releases the GIL while it
hashes), recorded as ``{relative path: {"bytes": size, "sha256": hex digest}}`` and checked
against such a record."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from yambda_data._io import InputFileError

__all__ = ["HASH_THREADS", "checksum_problem", "file_checksums", "sha256_file", "sha256_files"]

HASH_THREADS = min(4, os.cpu_count() or 1)
"""Files hashed at once: sha256 runs at about 1.7 GB/s per core, so a few threads keep up
with a fast disk or the page cache."""

_CHUNK = 1 << 20
"""Read into one buffer of this size, reused: a fresh buffer per read would cost its page
faults again each time (a third of the time of hashing a file in the page cache)."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(_CHUNK))
    with open(path, "rb", buffering=0) as f:
        while size := f.readinto(buffer):
            digest.update(buffer[:size])
    return digest.hexdigest()


def sha256_files(paths: Sequence[Path], threads: int = HASH_THREADS) -> list[str]:
    """The sha256 of each file, in the order given; the largest files start first, so the
    threads finish together."""
    order = sorted(range(len(paths)), key=lambda i: -paths[i].stat().st_size)
    digests: list[str] = [""] * len(paths)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(paths)))) as pool:
        for i, digest in zip(order, pool.map(sha256_file, [paths[i] for i in order]), strict=True):
            digests[i] = digest
    return digests


def file_checksums(root: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"bytes": size, "sha256": digest}}`` of the files ``root / name``, by name."""
    names = sorted(names)
    paths = [root / name for name in names]
    digests = sha256_files(paths)
    return {
        name: {"bytes": path.stat().st_size, "sha256": digest}
        for name, path, digest in zip(names, paths, digests, strict=True)
    }


def checksum_problem(
    root: Path, expected: Mapping[str, Any], record: Path
) -> InputFileError | None:
    """The first file (by name) under ``root`` that differs from ``expected`` (the
    :func:`file_checksums` record read from the file ``record``), as an error naming it
    (missing, another size, another sha256); None when every file matches. Sizes are
    compared first, so only files of the right size are hashed."""
    try:
        entries = {str(name): (int(e["bytes"]), str(e["sha256"])) for name, e in expected.items()}
    except (AttributeError, KeyError, TypeError, ValueError):
        return InputFileError(record, "malformed (each file needs its bytes and sha256)")
    present = []
    for name in sorted(entries):
        path = root / name
        if not path.is_file():
            return InputFileError(path, f"missing (listed in {record.name})")
        size = path.stat().st_size
        if size != entries[name][0]:
            return InputFileError(path, f"{size:,} bytes, {record.name} says {entries[name][0]:,}")
        present.append(name)
    digests = sha256_files([root / name for name in present])
    for name, digest in zip(present, digests, strict=True):
        if digest != entries[name][1]:
            return InputFileError(root / name, f"sha256 differs from {record.name}")
    return None
