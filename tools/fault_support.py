"""What tools/fault_injection.py's scenarios share: starting train.py and yambda-data as a user
would, reading what they wrote, the sha256 of the files around them, and process trees."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "tools" / "train.py")]
YAMBDA_DATA = [sys.executable, "-m", "yambda_data"]
RUN = ["--users", "40", "--steps", "6", "--evals", "1", "--workers", "0"]
CHECKPOINTED = [*RUN, "--checkpoint-every", "2", "--keep-checkpoints", "5"]
LOCK_FILE = ".lock"
"""A run's lock file (dlrmv4_train.folder_lock): its content names the last holder."""


def train(
    *args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TRAIN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def yambda_data(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*YAMBDA_DATA, *args], capture_output=True, text=True, timeout=600)


def synthesize(root: Path) -> Path:
    """A 40-user synthetic Yambda dataset under `root` (yambda-data synth); its events file."""
    done = yambda_data("synth", "--users", "40", "--seed", "0", "--out", str(root))
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return root / "flat" / "50m" / "multi_event.parquet"


def digest(*paths: Path) -> dict[str, str]:
    """sha256 of every file under `paths` (a file or a folder), lock files aside."""
    found = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if path.name != LOCK_FILE:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def kept(before: dict[str, str], *paths: Path) -> str:
    """ "every file kept" or what changed, comparing `before` with the files under `paths`."""
    after = digest(*paths)
    changed = sorted(p for p in before if after.get(p) != before[p])
    added = sorted(set(after) - set(before))
    if not changed and not added:
        return f"all {len(before)} files kept byte for byte"
    return f"CHANGED {len(changed)} ({', '.join(changed[:3])}), ADDED {len(added)}"


def one_line(result: subprocess.CompletedProcess) -> str | None:
    """The only line of stderr (None when there are more or none)."""
    lines = result.stderr.strip().splitlines()
    return lines[0] if len(lines) == 1 else None


def refusals(cases: list[tuple[list[str], dict, str]], cwd: Path) -> tuple[list[int], int]:
    """A short run in `cwd` with each case's (options, environment, expected message): the
    exit statuses, and how many said their message in one line."""
    statuses, named = [], 0
    for argv, env, message in cases:
        result = train(*RUN, *argv, env=env, cwd=cwd)
        statuses.append(result.returncode)
        named += bool(one_line(result) and message in result.stderr)
    return statuses, named


def summary(result: subprocess.CompletedProcess) -> dict:
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no summary; status {result.returncode}: {result.stderr[-500:]}")
    return json.loads(lines[-1])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def last_record(log: Path) -> dict:
    lines = [line for line in log.read_text().splitlines() if line.startswith(":::MLLOG")]
    return json.loads(lines[-1].removeprefix(":::MLLOG "))


def wait_for(ready: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    """Poll until `ready()`; RuntimeError(`what`) if `process` ends first or after 600 s."""
    deadline = time.monotonic() + 600
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.02)


def bump_middle_byte(path: Path) -> None:
    """Add 1 to the byte in the middle of `path`: same size, other content."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] = (data[len(data) // 2] + 1) % 256
    path.write_bytes(bytes(data))


def stat_fields(pid: int, thread: int | None = None) -> list[str] | None:
    """The fields of `/proc/PID/stat` (of one thread's with `thread`) after the command name,
    which may hold spaces and parentheses: state, parent pid, ...; None once it is gone."""
    path = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    try:
        return path.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        fields = stat_fields(int(status.parent.name))
        if fields is not None and int(fields[1]) == pid:
            found.append(int(status.parent.name))
    return found


def descendants(pid: int) -> list[int]:
    todo, found = [pid], []
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found
