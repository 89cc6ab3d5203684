"""Inject faults into short training runs and say, one line per scenario, what happened.

    uv run tools/fault_injection.py [--work DIR] [--only NAME ...]

Each scenario starts `tools/train.py` (or `yambda-data`) as a user would (a subprocess, the
tiny preset on 40 synthetic users), does something hostile to it, and checks what a user must
be able to rely on: nothing already there is lost or silently wrong (the sha256 of the files
that were there, before and after), a failure says what and where in one line with the right
exit status, and a resumed run ends bit-identical to one that was never disturbed. It prints

    <scenario>: did <what was done>; expected <what must hold>; got <what happened> -> ok|FAIL

then how many held, and exits 1 if any scenario failed. Scenarios that need root (a small
tmpfs) say so and are skipped elsewhere. The work folder (default: a temporary one) is removed
at the end unless given.
"""

from __future__ import annotations

import argparse
import contextlib
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

# The support module sits beside this script (found however the script is loaded).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_support import (
    CHECKPOINTED,
    ROOT,
    RUN,
    TRAIN,
    bump_middle_byte,
    children,
    descendants,
    digest,
    kept,
    last_record,
    one_line,
    refusals,
    snapshot,
    summary,
    synthesize,
    train,
    wait_for,
    yambda_data,
)


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
        out, _ = self._finished()
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

    def _stopped_run(self, name: str, *extra: str, when: str = "step-4") -> tuple[Path, Path]:
        """A checkpointed run killed with SIGKILL once `when` exists: after its step-4
        checkpoint by default; "config.json" kills it as soon as it has claimed its folder."""
        out, checkpoints = self.work / name, self.work / name / "c"
        process = subprocess.Popen(
            [
                *TRAIN,
                *CHECKPOINTED,
                "--out",
                str(out),
                "--checkpoint-dir",
                str(checkpoints),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sign = out / "config.json" if when == "config.json" else checkpoints / when / "COMPLETE"
        wait_for(sign.is_file, process, f"{name}: the run ended before {when}")
        process.send_signal(signal.SIGKILL)
        process.wait()
        return out, checkpoints

    def _finished(self) -> tuple[Path, dict]:
        """A finished run without checkpoints (made once)."""
        out = self.work / "finished"
        if not (out / "result.json").is_file():
            summary(train(*RUN, "--out", str(out)))
        return out, json.loads((out / "result.json").read_text())

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

    # Silent wrong results: every artefact a run reuses is checked first.

    def damaged_store_is_rebuilt(self) -> tuple[str, str, str, bool]:
        out, checkpoints = self._stopped_run("damaged_store")
        array = out / "prepared" / "store" / "event_item_id"
        before = digest(array)
        bump_middle_byte(array)
        result = train(
            *CHECKPOINTED,
            *("--out", str(out), "--checkpoint-dir", str(checkpoints), "--resume", "auto"),
        )
        resumed = summary(result)
        named = array.name in result.stderr
        restored = digest(array) == before
        same = resumed["weights_sha256"] == self.reference()["weights_sha256"]
        # The same over a finished run replaced with --overwrite.
        finished = self.work / "damaged_store_finished"
        first = summary(train(*RUN, "--out", str(finished)))
        array = finished / "prepared" / "store" / "event_item_id"
        before_overwrite = digest(array)
        bump_middle_byte(array)
        again = train(*RUN, "--out", str(finished), "--overwrite")
        named_again = array.name in again.stderr
        same_again = summary(again)["weights_sha256"] == first["weights_sha256"]
        restored_again = digest(array) == before_overwrite
        ok = named and restored and same and named_again and same_again and restored_again
        return (
            "+1 to a byte in the middle of prepared/store/event_item_id, then --resume auto; "
            "again over a finished run with --overwrite",
            "the damaged array named, the store rebuilt to its former sha256, the undisturbed "
            "run's weights, both times",
            f"{'named' if named and named_again else 'NOT NAMED'}, "
            f"{'rebuilt' if restored and restored_again else 'NOT REBUILT'}, "
            + ("same weights" if same and same_again else "OTHER WEIGHTS"),
            ok,
        )

    def damaged_synthetic_cache_is_rebuilt(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "cache_user"
        cwd.mkdir()
        first = summary(train(*RUN, cwd=cwd))
        cache = cwd / "runs" / "cache" / "synthetic" / "users40-seed0-50m"
        events, artists = (
            cache / "flat" / "50m" / "multi_event.parquet",
            cache / "artist_item_mapping.parquet",
        )
        before = digest(events, artists)
        bump_middle_byte(events)
        flipped = train(*RUN, cwd=cwd)
        artists.unlink()
        deleted = train(*RUN, cwd=cwd)
        named = events.name in flipped.stderr and artists.name in deleted.stderr
        statuses = [flipped.returncode, deleted.returncode]
        same = all(
            summary(r)["weights_sha256"] == first["weights_sha256"] for r in (flipped, deleted)
        )
        restored = digest(events, artists) == before
        return (
            "+1 to a byte in the middle of the cached multi_event.parquet, then a run; the "
            "cached artist mapping deleted, then a run",
            "exit 0, the file named, the cache rebuilt to its former sha256, the same weights",
            f"statuses {statuses}, {'named' if named else 'NOT NAMED'}, "
            f"{'rebuilt' if restored else 'NOT REBUILT'}, "
            + ("same weights" if same else "OTHER WEIGHTS"),
            statuses == [0, 0] and named and same and restored,
        )

    def killed_synthesis_leaves_no_temporaries(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "synth_kill"
        cwd.mkdir()
        argv = ["--users", "3000", "--steps", "2", "--evals", "1", "--workers", "0"]
        cache = cwd / "runs" / "cache" / "synthetic" / "users3000-seed0-50m"

        def temporaries() -> list[Path]:
            found = cache.rglob("*") if cache.is_dir() else []
            return [p for p in found if ".tmp" in p.name or ".parts-" in p.name]

        process = subprocess.Popen(
            [*TRAIN, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(lambda: bool(temporaries()), process, "the synthesis wrote no temporary file")
        process.send_signal(signal.SIGKILL)
        process.wait()
        left = len(temporaries())
        result = train(*argv, cwd=cwd)
        ok = left > 0 and result.returncode == 0 and not temporaries()
        return (
            "SIGKILL while a run writes its synthetic dataset into runs/cache, then the run again",
            "the second run removes the temporaries and ends with exit 0",
            f"{left} temporaries after the kill, {len(temporaries())} after the second run "
            f"(status {result.returncode})",
            ok,
        )

    def damaged_raw_file_is_named(self) -> tuple[str, str, str, bool]:
        root = self.work / "raw_damage"
        events = synthesize(root)
        events.write_bytes(events.read_bytes()[: events.stat().st_size // 2])
        before = digest(root)
        out = self.work / "raw_damage_run"
        result = train(*RUN, "--data", str(root), "--out", str(out))
        line = one_line(result)
        ok = result.returncode == 2 and line is not None and str(events) in line
        state = kept(before, root)
        return (
            "a --data multi_event.parquet cut to half its size (the user's file, as a broken "
            "download leaves it)",
            "exit 2, one line naming the file, the file left as it is, no run folder",
            f"status {result.returncode}, {line!r:.140}, {state}, "
            + ("no run folder" if not out.exists() else "A RUN FOLDER"),
            ok and "kept" in state and not out.exists(),
        )

    # Data loss: no command removes what it did not create.

    def input_inside_out_is_refused(self) -> tuple[str, str, str, bool]:
        nest, st2 = self.work / "nest", self.work / "st2"
        for root in (nest / "raw", st2 / "raw"):
            synthesize(root)
        made = yambda_data(
            "preprocess", "--raw", str(st2 / "raw"), "--size", "50m", "--out", str(st2 / "pre")
        )
        if made.returncode != 0:
            raise RuntimeError(made.stderr)
        before = digest(nest, st2)
        preprocess = yambda_data(
            "preprocess", "--raw", str(nest / "raw"), "--size", "50m", "--out", str(nest)
        )
        store = yambda_data(
            *("build-store", "--preprocessed", str(st2 / "pre"), "--raw", str(st2 / "raw")),
            *("--out", str(st2), "--min-history", "16"),
        )
        statuses = [preprocess.returncode, store.returncode]
        lines = [one_line(preprocess), one_line(store)]
        state = kept(before, nest, st2)
        return (
            "yambda-data preprocess --raw nest/raw --out nest; build-store --preprocessed "
            "st2/pre --raw st2/raw --out st2",
            "exit 2, one line each, every input file kept",
            f"statuses {statuses}, {sum(line is not None for line in lines)} one-line "
            f"refusal(s), {state}",
            statuses == [2, 2] and None not in lines and "kept" in state,
        )

    # Two processes, one folder.

    def two_resumes_at_once(self) -> tuple[str, str, str, bool]:
        out, checkpoints = self._stopped_run("twice")
        argv = [*TRAIN, *CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)]
        processes = [
            subprocess.Popen(
                [*argv, "--resume", "auto"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [p.communicate() for p in processes]  # (pid, status, stdout, stderr) each
        results = [(p.pid, p.returncode, *o) for p, o in zip(processes, outputs, strict=True)]
        statuses = sorted(code for _, code, _, _ in results)
        winner = next((r for r in results if r[1] == 0), None)
        loser = next((r for r in results if r[1] == 2), None)
        said = (
            winner is not None
            and loser is not None
            and len(loser[3].strip().splitlines()) == 1
            and f"in use by process {winner[0]}" in loser[3]
        )
        text = (out / "mlperf.log").read_text()
        stops = text.count('"run_stop"')
        rows = (out / "metrics.csv").read_text().splitlines()
        duplicates = len(rows) - len(set(rows))
        same = winner is not None and (
            json.loads(winner[2].splitlines()[-1])["weights_sha256"]
            == self.reference()["weights_sha256"]
        )
        return (
            "two `--resume auto --out R` started at once over a killed run",
            "one resumes (the undisturbed weights), the other exits 2 in one line naming the "
            "first's pid; one run_stop, no duplicate metrics rows",
            f"statuses {statuses}, {'named' if said else 'NOT NAMED'}, {stops} run_stop, "
            f"{duplicates} duplicate rows, " + ("same weights" if same else "OTHER WEIGHTS"),
            statuses == [0, 2] and said and stops == 1 and duplicates == 0 and same,
        )

    def running_runs_are_left_alone(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "running"
        cwd.mkdir()
        checkpoints = cwd / "c"
        long = [*RUN, "--steps", "400", "--checkpoint-every", "2"]
        runner = subprocess.Popen(
            [*TRAIN, *long, "--checkpoint-dir", str(checkpoints)],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for((checkpoints / "step-2" / "COMPLETE").is_file, runner, "no checkpoint")
            folders = sorted((cwd / "runs").glob("train-*"))
            # Without --out, --resume auto looks for the newest unfinished run.
            resume = train(*long, "--checkpoint-dir", str(checkpoints), "--resume", "auto", cwd=cwd)
            # Another run sharing the checkpoint directory.
            other = self.work / "running_other"
            shared = train(*long, "--out", str(other), "--checkpoint-dir", str(checkpoints))
            running = runner.poll() is None
        finally:
            runner.kill()
            runner.wait()
        lines = [one_line(resume), one_line(shared)]
        named = all(line and f"in use by process {runner.pid}" in line for line in lines)
        nothing = sorted((cwd / "runs").glob("train-*")) == folders and not other.exists()
        statuses = [resume.returncode, shared.returncode]
        return (
            "while a run checkpoints into C: --resume auto --checkpoint-dir C without --out, "
            "and a run with another --out and the same --checkpoint-dir",
            "exit 2, one line naming the running run's pid, nothing created, the run goes on",
            f"statuses {statuses}, {'named' if named else 'NOT NAMED'}, "
            f"{'nothing created' if nothing else 'A FOLDER WAS CREATED'}, "
            f"{'still running' if running else 'THE RUN STOPPED'}",
            statuses == [2, 2] and named and nothing and running,
        )

    # Every refusal before the first write.

    def changed_config_on_resume(self) -> tuple[str, str, str, bool]:
        config_file = self.work / "resume.toml"
        config_file.write_text("[optimizer]\nwarmup_steps = 10\n")
        out, checkpoints = self._stopped_run("changed", "--config", str(config_file))
        before = digest(out, checkpoints)
        argv = [*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)]
        argv += ["--resume", "auto", "--config", str(config_file)]
        variable = train(*argv, env={"HSTU_OPTIMIZER__DENSE_LR": "0.5"})
        set_item = train(*argv, "--set", "model.num_layers=3")
        config_file.write_text("[optimizer]\nwarmup_steps = 11\n")
        contents = train(*argv)
        results = [variable, set_item, contents]
        lines = [one_line(r) for r in results]
        expected = ["optimizer.dense_lr: ", "--set () then, ", "optimizer.warmup_steps: 10 then"]
        named = all(line and e in line for line, e in zip(lines, expected, strict=True))
        state = kept(before, out, checkpoints)
        statuses = [r.returncode for r in results]
        return (
            "--resume auto of a killed run with HSTU_OPTIMIZER__DENSE_LR=0.5, with --set "
            "model.num_layers=3, with the --config file's contents changed",
            "exit 2, one line naming the difference, every file of the run and its checkpoints "
            "kept",
            f"statuses {statuses}, {'named' if named else 'NOT NAMED'}, {state}",
            statuses == [2, 2, 2] and named and "kept" in state,
        )

    def refusals_before_anything_is_created(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "refusals"
        cwd.mkdir()
        (cwd / "list.yaml").write_text("model: [1, 2]\n")
        (cwd / "string.toml").write_text('[model]\nnum_layers = "3"\n')
        cases = [
            ([], {"HSTU_MODEL__NUM_LAYERS": "abc"}, "HSTU_MODEL__NUM_LAYERS"),
            (["--users", "1000000000"], {}, "--users: must be in 1..10,000,000"),
            (["--seed", str(2**64)], {}, "--seed: must be in 0..2**63-1"),
            (["--size", "../x"], {}, "--size: must be a plain directory name"),
            (["--config", "list.yaml"], {}, "list.yaml: model: expected a mapping"),
            (["--config", "string.toml"], {}, "expected int, got the string '3'"),
        ]
        statuses, named = refusals(cases, cwd)
        shown = subprocess.run(
            [*TRAIN, "--help"],
            capture_output=True,
            text=True,
            env={**os.environ, "HSTU_MODEL__NUM_LAYERS": "abc"},
        )
        created = sorted(p.name for p in cwd.iterdir() if p.suffix not in (".yaml", ".toml"))
        ok = statuses == [2] * len(cases) and named == len(cases) and shown.returncode == 0
        return (
            "HSTU_MODEL__NUM_LAYERS=abc (a run, and --help), --users 1000000000, --seed 2**64, "
            "--size ../x, YAML model: [1, 2], TOML num_layers = '3'",
            "exit 2 and one line naming the value each, --help exit 0, nothing created",
            f"statuses {statuses}, {named} named, --help status {shown.returncode}, "
            f"created {created}",
            ok and not created,
        )

    def tables_that_cannot_fit(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "too_large"
        cwd.mkdir()
        rows = "user_x_artist=1000000000000,user_x_album=4000,user_x_hour=2400,item_x_hour=4000"
        rows += ",artist_x_hour=3200,user_x_is_organic=2000,user_x_artist_x_hour=4000"
        result = train(*RUN, "--set", f"model.contextual_features={rows}", cwd=cwd)
        line = one_line(result) or ""
        said = "needs at least" in line and "available" in line
        created = sorted(p.name for p in cwd.iterdir())
        return (
            "a contextual table of 10**12 rows",
            "exit 2, one line with the estimate and what is available, nothing created",
            f"status {result.returncode}, {line[17:120]!r}..., created {created}",
            result.returncode == 2 and said and not created,
        )

    # Runs as a cluster needs them.

    def requeue_before_the_first_checkpoint(self) -> tuple[str, str, str, bool]:
        out, checkpoints = self._stopped_run("requeued", when="config.json")
        saved = sorted(p.name for p in checkpoints.glob("step-*")) if checkpoints.is_dir() else []
        argv = [*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)]
        result = train(*argv, "--resume", "auto")
        again = summary(result)
        said = "starting it again" in result.stderr
        starts = (out / "mlperf.log").read_text().count('"run_start"')
        same = again["weights_sha256"] == self.reference()["weights_sha256"]
        return (
            "SIGKILL of a checkpointed run before its first checkpoint, then the same command "
            "with --resume auto (as a requeued job repeats it)",
            "the run starts again, says so, one run_start, the undisturbed run's weights",
            f"checkpoints at the kill {saved}, {'said' if said else 'NOT SAID'}, {starts} "
            f"run_start, " + ("same weights" if same else "OTHER WEIGHTS"),
            not saved and said and starts == 1 and same,
        )

    def repeated_rows_are_counted(self) -> tuple[str, str, str, bool]:
        import polars as pl

        root = self.work / "repeated"
        events = synthesize(root)
        frame = pl.read_parquet(events)
        doubled = pl.concat([frame, frame]).sort(["uid", "timestamp"], maintain_order=True)
        doubled.write_parquet(events)
        count = f"{doubled.height - doubled.unique().height:,}"
        validate = yambda_data("validate", "--root", str(root), "--size", "50m")
        preprocess = yambda_data(
            "preprocess", "--raw", str(root), "--size", "50m", "--out", str(self.work / "rep_pre")
        )
        warned = [count in r.stderr and "warning" in r.stderr for r in (validate, preprocess)]
        statuses = [validate.returncode, preprocess.returncode]
        return (
            "a multi_event file with every row twice, through yambda-data validate and preprocess",
            f"exit 0 with a warning counting the {count} repeated rows, each",
            f"statuses {statuses}, warned {warned}",
            statuses == [0, 0] and all(warned),
        )

    # Round three: only our own entries removed, every value checked first, saves cut short.

    def users_entries_beside_checkpoints_are_kept(self) -> tuple[str, str, str, bool]:
        checkpoints = self.work / "beside" / "C"
        (checkpoints / "step-100").mkdir(parents=True)
        (checkpoints / "step-100" / "notes.txt").write_text("mine")
        (checkpoints / ".tmp-mywork").mkdir()
        (checkpoints / ".tmp-mywork" / "draft.txt").write_text("mine")
        (checkpoints / ".trash-can.txt").write_text("mine")
        before = digest(checkpoints)
        out = self.work / "beside" / "n"
        result = train(*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints))
        after = digest(checkpoints)
        mine = all(after.get(path) == sha for path, sha in before.items())
        steps = sorted(p.name for p in checkpoints.glob("step-[0-9]") if p.is_dir())
        return (
            "a --checkpoint-dir holding a user's step-100/notes.txt, .tmp-mywork/draft.txt and "
            "a file .trash-can.txt, then a run that checkpoints and prunes there",
            "exit 0, the user's three files kept byte for byte, the run's checkpoints beside them",
            f"status {result.returncode}, {'kept' if mine else 'A FILE OF THE USER WAS LOST'}, "
            f"checkpoints {steps}",
            result.returncode == 0 and mine and steps == ["step-2", "step-4", "step-6"],
        )

    def values_that_cannot_run_are_refused_first(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "values"
        cwd.mkdir()
        (cwd / "inf.toml").write_text("[optimizer]\ndense_lr = inf\n")
        (cwd / "twice.yaml").write_text("model:\n  num_layers: 2\n  num_layers: 5\n")
        (cwd / "twice.json").write_text('{"optimizer": {"eps": 1e-8}, "optimizer": {}}')
        cases = [
            (["--config", "inf.toml"], {}, "dense_lr: must be finite, got inf"),
            (["--set", "optimizer.sparse_lr=1e400"], {}, "sparse_lr: must be finite, got inf"),
            ([], {"HSTU_OPTIMIZER__DENSE_LR": "inf"}, "dense_lr: must be finite, got inf"),
            (["--config", "twice.yaml"], {}, "model.num_layers is given twice"),
            (["--config", "twice.json"], {}, "optimizer is given twice"),
            (["--set", "model.head_hidden_dim=200000000"], {}, "the model needs at least"),
            (["--set", "train.batch_size=100000000"], {}, "more than the dataset can hold"),
        ]
        statuses, named = refusals(cases, cwd)
        created = sorted(
            p.name for p in cwd.iterdir() if p.suffix not in (".toml", ".yaml", ".json")
        )
        return (
            "dense_lr = inf in a TOML config, --set sparse_lr=1e400, HSTU_OPTIMIZER__DENSE_LR=inf, "
            "a key given twice in YAML and in JSON, a head 200,000,000 wide, a batch of "
            "100,000,000",
            "exit 2 and one line naming the value each, before anything is created (the head "
            "counted on the meta device, not allocated)",
            f"statuses {statuses}, {named} named, created {created}",
            statuses == [2] * len(cases) and named == len(cases) and not created,
        )

    def folders_that_cannot_be_written_are_refused(self) -> tuple[str, str, str, bool]:
        cwd = self.work / "unwritable"
        cwd.mkdir()
        (cwd / "file").write_text("mine")
        out = train(*RUN, "--out", "file/run", cwd=cwd)
        checkpoints = train(*RUN, "--out", "run", "--checkpoint-dir", "file/c", cwd=cwd)
        statuses = [out.returncode, checkpoints.returncode]
        named = all(
            (one_line(r) or "").endswith("file is not a directory") for r in (out, checkpoints)
        )
        created = sorted(p.name for p in cwd.iterdir())
        return (
            "--out under a file, --checkpoint-dir under a file",
            "exit 2, one line naming the file in the way, nothing created",
            f"statuses {statuses}, {'named' if named else 'NOT NAMED'}, created {created}",
            statuses == [2, 2] and named and created == ["file"],
        )

    def resume_on_other_data_is_refused(self) -> tuple[str, str, str, bool]:
        root = self.work / "other_data"
        synthesize(root)
        out, checkpoints = self._stopped_run("other_data_run", "--data", str(root))
        again = yambda_data(
            "synth", "--users", "40", "--seed", "1", "--out", str(root), "--overwrite"
        )
        if again.returncode != 0:
            raise RuntimeError(again.stderr)
        before = digest(out, checkpoints)
        argv = [*CHECKPOINTED, "--data", str(root), "--out", str(out)]
        result = train(*argv, "--checkpoint-dir", str(checkpoints), "--resume", "auto")
        line = one_line(result) or ""
        named = "on other data" in line and "flat/50m/multi_event.parquet" in line
        state = kept(before, out, checkpoints)
        return (
            "SIGKILL after the step-4 checkpoint of a run on --data, that data synthesized again "
            "with another seed, then --resume auto",
            "exit 2, one line naming the files that differ, nothing of the run rebuilt or changed",
            f"status {result.returncode}, {'named' if named else 'NOT NAMED'}, {state}",
            result.returncode == 2 and named and "kept" in state,
        )

    def file_size_limit_during_a_checkpoint(self) -> tuple[str, str, str, bool]:
        root = self.work / "fsize"
        synthesize(root)
        checkpoints = root / "c"
        command = [*TRAIN, *RUN, "--data", str(root), "--checkpoint-every", "3"]
        command += ["--out", str(root / "run"), "--checkpoint-dir", str(checkpoints)]
        result = subprocess.run(
            ["bash", "-c", 'ulimit -f 20000 && exec "$@"', "limited", *command],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = result.stderr.strip().splitlines()
        said = bool(lines) and "file-size limit" in lines[-1]
        traceback = "Traceback" in result.stderr
        left = sorted(p.name for p in checkpoints.iterdir() if p.name.startswith(".tmp-"))
        stop = last_record(root / "run" / "mlperf.log")["metadata"].get("status")
        return (
            "ulimit -f 20000 (20 MB), a run whose step-3 checkpoint is larger",
            "exit 1, one line naming the limit, no traceback, no temporary left, run_stop aborted",
            f"status {result.returncode}, {'said' if said else 'NOT SAID'}, "
            f"{'A TRACEBACK' if traceback else 'no traceback'}, temporaries {left}, run_stop {stop}",
            result.returncode == 1 and said and not traceback and not left and stop == "aborted",
        )

    def sigterm_during_a_checkpoint(self) -> tuple[str, str, str, bool]:
        # The signal is sent from inside the save, where DCP writes the tensors: a moment a
        # signal from outside hits only by chance.
        wrapper = self.work / "signalled_train.py"
        wrapper.write_text(
            "import os, runpy, signal, sys\n"
            "from torch.distributed.checkpoint.filesystem import FileSystemWriter\n"
            "write_data = FileSystemWriter.write_data\n"
            "def signalled(self, plan, planner):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return write_data(self, plan, planner)\n"
            "FileSystemWriter.write_data = signalled\n"
            "sys.argv = sys.argv[1:]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n"
        )
        out, checkpoints = self.work / "sigterm", self.work / "sigterm" / "c"
        argv = [*CHECKPOINTED, "--out", str(out), "--checkpoint-dir", str(checkpoints)]
        result = subprocess.run(
            [sys.executable, str(wrapper), str(ROOT / "tools" / "train.py"), *argv],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = result.stderr.strip().splitlines()
        said = bool(lines) and "SIGTERM" in lines[-1] and "Traceback" not in result.stderr
        left = sorted(p.name for p in checkpoints.iterdir() if p.name != ".lock")
        resumed = summary(train(*argv, "--resume", "auto"))
        same = resumed["weights_sha256"] == self.reference()["weights_sha256"]
        return (
            "SIGTERM while a checkpoint's tensors are written, then --resume auto",
            "exit 143, one line, no partial save left; the resume ends with the undisturbed "
            "run's weights",
            f"status {result.returncode}, {'one line' if said else 'NOT ONE LINE'}, left {left}, "
            + ("same weights" if same else "OTHER WEIGHTS"),
            result.returncode == 143 and said and not left and same,
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
    failed, chosen = 0, args.only or names
    try:
        for name in chosen:
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
        print(f"{len(chosen)} scenarios: {len(chosen) - failed} ok, {failed} failed", flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
