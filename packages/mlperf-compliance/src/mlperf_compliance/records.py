"""Reading ``:::MLLOG`` records back from a log file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["MLLOG_PREFIX", "read_log"]

#: Every MLPerf record line starts with this token (the checker also finds it mid-line).
MLLOG_PREFIX = ":::MLLOG "


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return the records of an MLPerf log, in file order, as dictionaries.

    Lines without the ``:::MLLOG`` token are skipped, as the official parser skips them; text
    before the token on a line is ignored. A record that is not valid JSON raises
    ``ValueError`` naming its line number.
    """
    records: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            at = line.find(MLLOG_PREFIX)
            if at < 0:
                continue
            try:
                records.append(json.loads(line[at + len(MLLOG_PREFIX) :]))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: malformed MLLOG record: {exc}") from exc
    return records
