"""Data steps of the MLPerf scripts: prepare the processed outputs, record and compare their
expected values. Called by prepare_dataset.sh and verify_dataset.sh; see tools/mlperf/README.md.

    data_steps.py prepare DATA_DIR SIZE PREPARED [MIN_HISTORY]
    data_steps.py check   EXPECTED DATA_DIR SIZE PREPROCESS_REPORT STORE_REPORT
    data_steps.py record  EXPECTED DATA_DIR SIZE PREPROCESS_REPORT STORE_REPORT

The reports are the JSON output of `yambda-data verify --format json` for the preprocess output
and for the sample store. `check` exits 1 listing every value that differs from EXPECTED, and 0
with a note when EXPECTED does not exist (no values recorded for that size yet).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dlrmv4_cli

WINDOW_SECONDS = 86_400
"""Width of the streaming windows (yambda-data's default, which train.py uses)."""

RAW_FILES = (
    "flat/{size}/multi_event.parquet",
    "artist_item_mapping.parquet",
    "album_item_mapping.parquet",
)
"""The raw files, whose sizes an expected-values file records (hashing 5b's would be slow)."""

PREPROCESS_KEYS = (
    "size",
    "num_users",
    "num_train_events",
    "num_test_events",
    "num_sessions",
    "t_min",
    "t_max",
)
STORE_KEYS = (
    "min_history",
    "window_seconds",
    "num_users",
    "num_events",
    "num_train_anchors",
    "num_test_anchors",
    "num_windows",
    "arrays",
)


def prepare(data_dir: str, size: str, prepared: str, min_history: str | None = None) -> None:
    """Preprocess and build the store exactly as train.py does with the same min_history (its
    default unless given), so that it reuses them."""
    import yambda_data
    from dlrmv4_train.run_config import MIN_HISTORY

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    store = yambda_data.prepare_store(
        data_dir,
        size,
        prepared,
        min_history=MIN_HISTORY if min_history is None else int(min_history),
        window_seconds=WINDOW_SECONDS,
        progress=progress,
    )
    m = store.manifest
    print(
        f"prepared {store.path}: {store.num_users:,} users, {store.num_events:,} events, "
        f"{m['num_train_anchors']:,} train and {m['num_test_anchors']:,} test anchors"
    )


def observed(data_dir: str, size: str, preprocess_report: str, store_report: str) -> dict:
    """The values an expected-values file holds, as found now."""
    pre = json.loads(Path(preprocess_report).read_text())
    store = json.loads(Path(store_report).read_text())
    if pre["size"] != size:
        raise SystemExit(
            f"{pre['path']}: the preprocess output of Yambda {pre['size']}, not {size}"
        )
    raw = [name.format(size=size) for name in RAW_FILES]
    return {
        "size": size,
        "raw_bytes": {name: (Path(data_dir) / name).stat().st_size for name in raw},
        "preprocess": {key: pre[key] for key in PREPROCESS_KEYS},
        "store": {key: store[key] for key in STORE_KEYS},
    }


def differences(expected: Any, found: Any, where: str = "") -> list[str]:
    """Every leaf of `expected` that `found` lacks or holds with another value."""
    if isinstance(expected, dict):
        if not isinstance(found, dict):
            return [f"{where}: expected a mapping, found {found!r}"]
        problems = []
        for key, value in expected.items():
            if key.startswith("_"):  # comments
                continue
            name = f"{where}.{key}" if where else key
            if key not in found:
                problems.append(f"{name}: expected {value!r}, found nothing")
            else:
                problems += differences(value, found[key], name)
        return problems
    if expected != found:
        return [f"{where}: expected {expected!r}, found {found!r}"]
    return []


def check(expected_file: str, *observed_args: str) -> int:
    path = Path(expected_file)
    found = observed(*observed_args)
    if not path.is_file():
        print(
            f"no expected values for Yambda {found['size']} ({path} does not exist): counts and "
            "checksums not compared with the reference's; a maintainer records them with "
            "verify_dataset.sh --record"
        )
        return 0
    problems = differences(json.loads(path.read_text()), found)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} value(s) differ from {path}", file=sys.stderr)
        return 1
    store = found["store"]
    print(
        f"matches {path}: {store['num_users']:,} users, {store['num_events']:,} events, "
        f"{store['num_train_anchors']:,} train and {store['num_test_anchors']:,} test anchors, "
        f"sha256 of {len(store['arrays'])} store arrays"
    )
    return 0


def record(expected_file: str, *observed_args: str) -> int:
    path = Path(expected_file)
    values = {
        "_comment": "Written by tools/mlperf/verify_dataset.sh --record after every check passed; "
        "verify_dataset.sh compares each value below with what it finds.",
        **observed(*observed_args),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(values, indent=2) + "\n")
    tmp.replace(path)
    print(f"recorded the expected values of Yambda {values['size']} in {path}")
    return 0


def main(argv: list[str]) -> int:
    commands = {"prepare": (prepare, (3, 4)), "check": (check, (5,)), "record": (record, (5,))}
    if not argv or argv[0] not in commands or len(argv) - 1 not in commands[argv[0]][1]:
        print(__doc__, file=sys.stderr)
        return dlrmv4_cli.EXIT_REFUSED
    function, _ = commands[argv[0]]
    try:
        return function(*argv[1:]) or 0
    except (OSError, ValueError) as error:  # bad input or a failed write: one line, status 2
        if dlrmv4_cli.debug_requested():
            raise
        print(
            dlrmv4_cli.error_line(f"{Path(sys.argv[0]).name} {argv[0]}", str(error)),
            file=sys.stderr,
        )
        return dlrmv4_cli.EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
