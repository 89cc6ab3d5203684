"""Inject faults into short training runs and say, one line per scenario, what happened.

    uv run tools/fault_injection.py [--work DIR] [--only NAME ...]

Each scenario starts `tools/train.py` as a user would (a subprocess, the tiny preset on 40
synthetic users), does something hostile to it, and checks what a user must be able to rely
on: nothing already there is lost, a failure says what and where in one line with the right
exit status, and a resumed run ends bit-identical to one that was never disturbed. It prints

    <scenario>: did <what was done>; expected <what must hold>; got <what happened> -> ok|FAIL

and exits 1 if any scenario failed. Scenarios that need root (a small tmpfs) say so and are
skipped elsewhere. The work folder (default: a temporary one) is removed at the end unless
given.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "tools" / "train.py")]
YAMBDA_DATA = [sys.executable, "-m", "yambda_data"]
RUN = ["--users", "40", "--steps", "6", "--evals", "1", "--workers", "0"]
CHECKPOINTED = [*RUN, "--checkpoint-every", "2", "--keep-checkpoints", "5"]
LOCK_FILE = ".lock"
"""A run's lock file (hstu_model.training.folder_lock): its content names the last holder."""


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


def children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(status.parent.name))
    return found


def descendants(pid: int) -> list[int]:
    todo, found = [pid], []
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


class Scenarios:
    def __init__(self, work: Path) -> None:
        self.work = work
        self._reference: dict | None = None

    def reference(self) -> dict:
        """The undisturbed checkpointed run every resume is compared with."""
        if self._reference is None:
            out = self.work / "reference"
            result = train(*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(out / "c"))
            self._reference = summary(result)
        return self._reference

    def bad_inputs_over_a_finished_run(self) -> tuple[str, str, str, bool]:
        out = self.work / "finished"
        summary(train(*RUN, "--out", str(out)))
        before = snapshot(out)
        (self.work / "bad.toml").write_text("[model\n")
        bad = [
            ["--set", "model.nosuch=1"],
            ["--set", "garbage"],
            ["--set", "model.num_layers=abc"],
            ["--config", str(self.work / "bad.toml")],
            ["--config", str(self.work / "missing.toml")],
            ["--target-auc", "2"],
            [],  # the same command again: the finished run is refused
        ]
        outcomes = []
        for argv in bad:
            result = train(*RUN, *argv, "--out", str(out))
            lines = result.stderr.strip().splitlines()
            outcomes.append((result.returncode, len(lines)))
        kept = snapshot(out) == before
        ok = kept and all(code == 2 and n == 1 for code, n in outcomes)
        got = f"statuses {[c for c, _ in outcomes]}, stderr lines {[n for _, n in outcomes]}, "
        got += "run kept byte for byte" if kept else "RUN CHANGED"
        return (
            "7 bad invocations (bad --set, --config, --target-auc, a rerun) over a finished run",
            "exit 2, one line each, the finished run unchanged",
            got,
            ok,
        )

    def _stopped_run(self, name: str) -> tuple[Path, Path]:
        """A checkpointed run killed with SIGKILL after its step-4 checkpoint."""
        out, checkpoints = self.work / name, self.work / name / "c"
        process = subprocess.Popen(
            [*TRAIN, *CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 600
        while not (checkpoints / "step-4" / "COMPLETE").is_file():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the run ended before its step-4 checkpoint")
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        return out, checkpoints

    def _resume(self, out: Path, checkpoints: Path) -> tuple[dict, str]:
        result = train(
            *CHECKPOINTED,
            "--out",
            str(out),
            "--checkpoint-dir",
            str(checkpoints),
            "--resume",
            "auto",
        )
        return summary(result), result.stderr

    def kill_and_resume(self) -> tuple[str, str, str, bool]:
        out, checkpoints = self._stopped_run("killed")
        resumed, _ = self._resume(out, checkpoints)
        same = resumed["weights_sha256"] == self.reference()["weights_sha256"]
        return (
            "SIGKILL after the step-4 checkpoint, then --resume auto",
            "the same weights_sha256 as the undisturbed run",
            f"resumed from step {resumed['resumed_from_step']}, "
            + ("same weights" if same else "OTHER WEIGHTS"),
            same and resumed["resumed_from_step"] == 4,
        )

    def _damaged(self, name: str, damage: Callable[[Path], None]) -> tuple[str, str, str, bool]:
        out, checkpoints = self._stopped_run(name)
        damage(checkpoints / "step-4")
        resumed, err = self._resume(out, checkpoints)
        named = "step-4 does not verify, skipped" in err
        same = resumed["weights_sha256"] == self.reference()["weights_sha256"]
        return (
            f"killed after step 4, then {name.replace('_', ' ')} of step-4, --resume auto",
            "step-4 named and skipped, resume from step 2, the same weights",
            f"{'named' if named else 'NOT NAMED'}, resumed from step "
            f"{resumed['resumed_from_step']}, {'same weights' if same else 'OTHER WEIGHTS'}",
            named and same and resumed["resumed_from_step"] == 2,
        )

    def truncated_tensors(self) -> tuple[str, str, str, bool]:
        def damage(step: Path) -> None:
            path = next((step / "tensors").glob("*.distcp"))
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

        return self._damaged("truncated_tensors", damage)

    def truncated_meta(self) -> tuple[str, str, str, bool]:
        def damage(step: Path) -> None:
            path = step / "meta.json"
            path.write_bytes(path.read_bytes()[:10])

        return self._damaged("truncated_meta", damage)

    def missing_file(self) -> tuple[str, str, str, bool]:
        return self._damaged("missing_file", lambda step: (step / "rng" / "rank-0.json").unlink())

    def disk_full_during_a_checkpoint(self) -> tuple[str, str, str, bool]:
        mount = self.work / "small"
        mount.mkdir()
        made = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
        )
        if made.returncode != 0:
            return ("checkpoints on a 2 MB tmpfs", "(needs root to mount)", "skipped", True)
        try:
            out = self.work / "full"
            result = train(
                *RUN,
                "--checkpoint-every",
                "3",
                "--out",
                str(out),
                "--checkpoint-dir",
                str(mount / "c"),
            )
            stop = last_record(out / "mlperf.log")
        finally:
            subprocess.run(["umount", str(mount)], check=False)
        lines = result.stderr.strip().splitlines()
        said = bool(lines) and "no space left" in lines[-1]
        samples = stop["metadata"].get("samples_count")
        ok = result.returncode == 1 and said and samples == 3 * 256
        return (
            "--checkpoint-dir on a 2 MB tmpfs, a save at step 3",
            "exit 1, 'no space left' with the path and free space, run_stop aborted at 768 samples",
            f"status {result.returncode}, {'said no space' if said else 'NOT SAID'}, run_stop "
            f"{stop['metadata'].get('status')} at {samples} samples",
            ok,
        )

    def refusal_without_traceback(self) -> tuple[str, str, str, bool]:
        out = self.work / "refusal"
        checkpoints = out / "c"
        summary(train(*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)))
        result = train(
            *CHECKPOINTED,
            "--out",
            str(self.work / "other"),
            "--checkpoint-dir",
            str(checkpoints),
            "--resume",
            "auto",
            "--seed",
            "1",
        )
        lines = result.stderr.strip().splitlines()
        ok = result.returncode == 2 and len(lines) == 1 and "another run" in lines[0]
        return (
            "--resume auto over another run's checkpoints with another --seed",
            "exit 2, one line naming the difference, no traceback",
            f"status {result.returncode}, {len(lines)} line(s): {lines[-1][:80] if lines else ''}",
            ok,
        )

    def rank_loss_under_torchrun(self) -> tuple[str, str, str, bool]:
        out, checkpoints = self.work / "ranks", self.work / "ranks" / "c"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(ROOT / "tools" / "train.py"),
            *RUN,
            "--steps",
            "400",
            "--workers",
            "1",
            "--checkpoint-every",
            "2",
            "--out",
            str(out),
            "--checkpoint-dir",
            str(checkpoints),
        ]
        err = self.work / "ranks.stderr"
        with open(err, "wb") as stream:
            launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stream)
        deadline = time.monotonic() + 600
        while not (checkpoints / "step-2" / "COMPLETE").is_file():
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no checkpoint: {err.read_text()[-300:]}")
            time.sleep(0.05)
        every = descendants(launcher.pid)
        ranks = {}
        for pid in children(launcher.pid):
            with contextlib.suppress(OSError):
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                ranks.update({r: pid for r in (0, 1) if f"RANK={r}".encode() in environ})
        os.kill(ranks[1], signal.SIGKILL)
        launcher.wait(timeout=300)
        deadline = time.monotonic() + 20
        while (left := [p for p in every if Path(f"/proc/{p}").exists()]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        text = (out / "mlperf.log").read_text()
        stops = text.count('"run_stop"')
        aborted = last_record(out / "mlperf.log")["metadata"].get("status") == "aborted"
        said_text = err.read_text()
        said = "rank 0 of 2: another rank stopped answering" in said_text
        said = said or "rank 0 of 2: run interrupted by SIGTERM" in said_text
        ok = stops == 1 and aborted and said and not left
        return (
            "torchrun, 2 gloo ranks with a loader worker each, SIGKILL of rank 1 while training",
            "rank 0 logs one run_stop aborted and says in one line why it stopped (another rank "
            "stopped answering, or the launcher's SIGTERM); no process left",
            f"{stops} run_stop ({'aborted' if aborted else 'NOT ABORTED'}), "
            f"{'said' if said else 'NOT SAID'}, {len(left)} process(es) left",
            ok,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed)")
    names = [n for n in vars(Scenarios) if not n.startswith("_") and n != "reference"]
    p.add_argument("--only", nargs="+", choices=names, help="run only these scenarios")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="fault-injection-"))
    work.mkdir(parents=True, exist_ok=True)
    scenarios = Scenarios(work)
    failed = 0
    try:
        for name in args.only or names:
            started = time.monotonic()
            try:
                did, expected, got, ok = getattr(scenarios, name)()
            except Exception as error:  # a scenario that could not run is a failure
                did, expected, got, ok = "(setup)", "(the scenario runs)", repr(error), False
            failed += not ok
            seconds = time.monotonic() - started
            line = (
                f"{name}: did {did}; expected {expected}; got {got} -> "
                f"{'ok' if ok else 'FAIL'} ({seconds:.0f} s)"
            )
            print(line.replace(str(work), "<work>"), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
