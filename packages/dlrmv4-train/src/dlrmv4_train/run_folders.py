"""Where a run goes and what it continues, decided before it writes anything.

A run folder holds one run: "empty", "unfinished" (a log, metrics or config.json without
result.json) or "finished". `plan_run` decides, from the run's --out, --checkpoint-dir,
--resume and --overwrite, the folder, the checkpoint to resume from and whether the run files
there are replaced, and refuses (`RunRefused`) a folder that holds another run or a checkpoint
of another run (other settings or effective config, another run id). `claim_run` then takes
the locks of the checkpoint directory and the run folder for the life of the process
(`folder_lock`) and decides again under them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yambda_data
from dlrmv4_train import folder_lock
from dlrmv4_train.run_config import ResolvedRun, RunConfig, flag
from hstu_model import checkpoint as ckpt
from hstu_model.atomic_files import atomic_write_text
from yambda_data.schema import mapping_path, multi_event_path

__all__ = [
    "CONFIG",
    "DATA_FILES",
    "RUNS_DIR",
    "RUN_FILES",
    "SUMMARY",
    "SYNTHETIC_CACHE",
    "RunPlan",
    "RunRefused",
    "claim_run",
    "data_fingerprint",
    "data_root",
    "find_resume_point",
    "fresh_run_dir",
    "newest_unfinished_run",
    "plan_run",
    "read_run_record",
    "run_differences",
    "run_state",
]


def run_differences(saved_identity: dict, saved_config: dict | None, run: ResolvedRun) -> list[str]:
    """What differs between a saved run (its identity and effective config, as a checkpoint
    or a run folder's config.json holds them) and `run`."""
    now = run.identity()
    differ = [
        f"{flag(k)} {saved_identity.get(k)} then, {now[k]} now"
        for k in now
        if saved_identity.get(k) != now[k]
    ]
    if saved_config is not None:
        differ += ckpt.config_differences(saved_config, run.hstu.to_dict())
    return differ


def find_resume_point(
    run: ResolvedRun,
) -> tuple[ckpt.CheckpointInfo | None, list[tuple[Path, str]]]:
    """The checkpoint to resume from (None: start afresh) and the newer ones skipped because
    they do not verify (path, what is wrong); refuses (RunRefused) a checkpoint of another run
    (other settings, another effective config), and to start afresh over an earlier run's
    checkpoints."""
    config = run.config
    if config.checkpoint_dir is None:
        return None, []
    foreign = ckpt.in_the_way(config.checkpoint_dir, config.steps)
    if foreign:
        raise RunRefused(
            f"--checkpoint-dir {config.checkpoint_dir}: {', '.join(map(str, foreign))} "
            f"{'is' if len(foreign) == 1 else 'are'} where this run saves its checkpoints and "
            "not a checkpoint it wrote; move it away or use another --checkpoint-dir"
        )
    if config.resume == "never":
        existing = sorted(p.name for p in ckpt.list_checkpoint_dirs(config.checkpoint_dir))
        if existing:
            raise RunRefused(
                f"--checkpoint-dir {config.checkpoint_dir} holds checkpoints of an earlier run "
                f"({', '.join(existing)}); pass --resume auto to continue it, or use an empty "
                "--checkpoint-dir"
            )
        return None, []
    found, skipped = ckpt.latest_verified(config.checkpoint_dir)
    if found is None:
        return None, skipped
    differ = run_differences(found.extra.get("run", {}), found.config, run)
    if differ:
        raise RunRefused(f"{found.path} is a checkpoint of another run: {'; '.join(differ)}")
    saved_data = (found.config or {}).get(DATA_FILES)
    if saved_data is not None:
        changed = data_differences(saved_data, data_fingerprint(config))
        if changed:
            raise RunRefused(
                f"{found.path} was saved by a run on other data: {'; '.join(changed)}; resume "
                "on the data the run started with, or start again with --overwrite"
            )
    return found, skipped


DATA_FILES = "data_files"
"""The key of config.json (and of every checkpoint's copy) that holds `data_fingerprint`."""


def data_fingerprint(config: RunConfig) -> dict[str, dict[str, int]] | None:
    """Size and modification time of each file of `--data` (None for the synthetic data,
    which its settings and the checksums of its cache identify): a resume on data other
    than the run's is refused before anything is rebuilt from it. Read from the files'
    metadata only, as yambda-data decides whether its preprocessed output is still current."""
    if config.data is None:
        return None
    files = [multi_event_path(config.data, config.size)]
    files += [mapping_path(config.data, kind) for kind in ("artist", "album")]
    found = {}
    for path in files:
        stat = path.stat()
        found[path.relative_to(config.data).as_posix()] = {
            "bytes": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
        }
    return found


def data_differences(saved: dict, now: dict | None) -> list[str]:
    """`<file>: <size, time> then, <size, time> now` for each file of `--data` that differs."""

    def described(entry: dict | None) -> str:
        if not isinstance(entry, dict):
            return "missing"
        when = datetime.datetime.fromtimestamp(entry["mtime_ns"] / 1e9, datetime.UTC)
        return f"{entry['bytes']:,} bytes modified {when.isoformat(timespec='microseconds')}"

    now = now or {}
    return [
        f"{name}: {described(saved.get(name))} then, {described(now.get(name))} now"
        for name in sorted(set(saved) | set(now))
        if saved.get(name) != now.get(name)
    ]


RUNS_DIR = Path("runs")
"""Where runs without an explicit `out` go (relative to the working directory)."""
SYNTHETIC_CACHE = RUNS_DIR / "cache" / "synthetic"
"""The synthetic datasets of runs without an explicit `out`, one folder per SynthConfig."""
SUMMARY = "result.json"
"""Written into the run folder when a run ends (success or not): a finished run."""
CONFIG = "config.json"
"""The run's effective config, identity and id: the first file a run writes into its folder."""
RUN_FILES = ("mlperf.log", "metrics.csv", "metrics.png", CONFIG, SUMMARY)
"""What a run writes into its folder besides the data and the prepared store."""
RUN_RECORD = ".run-files.json"
"""The record a run writes into its folder before any other file: the entries it owns there
(`OWNED`). A run folder's files that no record names are not a run's: a run counts them as no
run, never replaces or removes them (--overwrite included), and refuses an --out that holds
one."""
OWNED = (*RUN_FILES, "mlperf.log.discarded", "tensorboard", "summary.json")
"""The entries a run owns in its folder: its files, the records a resume moved aside, its
TensorBoard events, and the summary that tools/mlperf/run_and_time.sh writes beside them. The
data and the prepared store are yambda-data's, which checks them itself."""


class RunRefused(ValueError):
    """The run was refused before it created or changed anything: a bad input, or a run folder
    that holds another run. The message says why and what to do instead."""


def run_state(out: Path) -> str:
    """ "finished" (it has a summary), "unfinished" (a log, metrics or config without one) or
    "empty", counting only the files that the folder's `RUN_RECORD` says a run wrote."""
    owned = owned_entries(out)
    if SUMMARY in owned and (out / SUMMARY).is_file():
        return "finished"
    if any((out / name).exists() for name in RUN_FILES if name in owned):
        return "unfinished"
    return "empty"


def owned_entries(out: Path) -> frozenset[str]:
    """The entries of `out` that its `RUN_RECORD` says a run owns (none without a record; a
    record's names other than `OWNED` are not believed)."""
    try:
        record = json.loads((out / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return frozenset()
    entries = record.get("entries") if isinstance(record, dict) else None
    return frozenset(OWNED).intersection(entries) if isinstance(entries, list) else frozenset()


def write_run_record(out: Path, run_id: str) -> None:
    """Claim `out` for the run `run_id`: its `RUN_RECORD`, written before any other file."""
    record = {"written_by": "dlrmv4-train", "run_id": run_id, "entries": list(OWNED)}
    atomic_write_text(out / RUN_RECORD, json.dumps(record, indent=2) + "\n")


def remove_run_files(out: Path) -> None:
    """Remove what the run in `out` wrote there (its `RUN_RECORD` names it), nothing else."""
    for name in sorted(owned_entries(out)):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def foreign_entry(run: ResolvedRun, out: Path) -> str | None:
    """The first entry of `out` that is neither a run's (its `RUN_RECORD`, the folder lock,
    their temporary files) nor the data and prepared store that yambda-data checks, nor the
    run's own --checkpoint-dir; None when there is none."""
    if not out.is_dir():
        return None
    config = run.config
    allowed = {folder_lock.LOCK_FILE, RUN_RECORD, "prepared", *owned_entries(out)}
    if data_root(config, out) == out / "data":
        allowed.add("data")
    if config.checkpoint_dir is not None:
        inside = Path(os.path.relpath(os.path.abspath(config.checkpoint_dir), os.path.abspath(out)))
        if inside.parts and inside.parts[0] != "..":
            allowed.add(inside.parts[0])
    temporaries = tuple(f".{name}." for name in (*OWNED, RUN_RECORD))
    for entry in sorted(os.listdir(out)):
        if entry not in allowed and not entry.startswith(temporaries):
            return entry
    return None


def check_run_folder(run: ResolvedRun, out: Path | None) -> None:
    """RunRefused, before anything is created, when `out` holds an entry that no run wrote,
    or when the data or the prepared store the run will write there (or the shared synthetic
    data, without `out`) is in a state yambda-data refuses."""
    config = run.config
    if out is not None:
        entry = foreign_entry(run, out)
        if entry is not None:
            raise RunRefused(
                f"--out {out} holds {entry}, which no run wrote there (no {RUN_RECORD} names "
                "it), and a run writes only into an empty folder or one of its own: move it "
                "away or use another --out"
            )
    root = data_root(config, out or RUNS_DIR / "train-new")
    try:
        if config.data is None:
            yambda_data.check_synthesis_root(root, config.synth_config())
        if out is not None:
            yambda_data.check_prepare_outputs(root, config.size, out / "prepared")
    except (OSError, ValueError) as error:
        raise RunRefused(f"--out {out}: {error}" if out is not None else str(error)) from None


def read_run_record(out: Path) -> dict | None:
    """The config.json of the run in `out` (None when missing or unreadable)."""
    try:
        record = json.loads((out / CONFIG).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def newest_unfinished_run(checkpoint_dir: Path | None, base: Path = RUNS_DIR) -> Path | None:
    """The most recently changed `train-*` folder under `base` that holds an unfinished run
    which saved its checkpoints into `checkpoint_dir` (its config.json says so) and that no
    other process is running."""

    def saved_into(folder: Path) -> str | None:
        try:
            return read_run_record(folder)["run"]["checkpoint_dir"]
        except (KeyError, TypeError):
            return None

    runs = [
        p
        for p in base.glob("train-*")
        if p.is_dir()
        and run_state(p) == "unfinished"
        and saved_into(p) == (None if checkpoint_dir is None else str(checkpoint_dir))
        and folder_lock.holder(p) is None
    ]
    return max(runs, key=lambda p: p.stat().st_mtime_ns, default=None)


def fresh_run_dir(base: Path = RUNS_DIR) -> Path:
    """Create and return `base/train-<UTC date-time>` (with a -2, -3, ... suffix when taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        folder = base / (f"train-{stamp}" if n == 1 else f"train-{stamp}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class RunPlan:
    """What a run does with its folders, decided before it writes anything."""

    out: Path | None
    """The run folder; None: a fresh `runs/train-<UTC date-time>`."""
    resume: ckpt.CheckpointInfo | None
    """The checkpoint the run continues from."""
    skipped: tuple[tuple[Path, str], ...]
    """Newer checkpoints that do not verify, with what is wrong with each."""
    replace: bool
    """The run files `out` holds are replaced: --overwrite, or an unfinished run that saved
    no checkpoint starts again."""
    run_id: str
    """The run's id (config.json, every checkpoint): a resumed run keeps its own."""
    notes: tuple[str, ...] = ()
    """What to tell the user about the choice."""
    finished: bool = False
    """`out` holds this run, finished: nothing to do (a requeued job that had ended)."""


def plan_run(run: ResolvedRun, out: Path | None = None) -> RunPlan:
    """Where and how `run` runs, in `out` (default: its --out); RunRefused (having created
    nothing) when that folder holds another run, or a run it cannot continue."""
    config = run.config
    resume, skipped = find_resume_point(run)
    out, notes = out or config.out, []
    if out is None and config.resume == "auto":
        out = newest_unfinished_run(config.checkpoint_dir)
        if out is not None:
            notes.append(f"resuming the newest unfinished run, {out}")
    check_run_folder(run, out)
    fresh_id = uuid.uuid4().hex
    state = "empty" if out is None else run_state(out)
    if state == "empty" or (config.overwrite and resume is None):
        if resume is not None:
            raise RunRefused(
                f"{resume.path} is a checkpoint of a run whose log is not in "
                f"{out or 'a new run folder'}; pass that run's folder as --out"
            )
        if state != "empty":
            notes.append(f"replacing the run in {out} (--overwrite)")
        return RunPlan(out, None, tuple(skipped), state != "empty", fresh_id, tuple(notes))
    if config.overwrite:
        raise RunRefused(
            f"--overwrite replaces the run in {out} and --resume auto continues it from "
            f"{resume.path}: pass one of them"
        )
    if state == "finished" and config.resume == "auto":
        # The same command again after the run ended (a batch job requeued after its end):
        # the run is done when it is this run, refused otherwise.
        record = read_run_record(out)
        differ = (
            ["its config.json is missing or unreadable"]
            if record is None or "identity" not in record
            else run_differences(record["identity"], record, run)
        )
        if not differ:
            note = f"{out} holds this run, finished ({out / SUMMARY}): nothing to do"
            return RunPlan(out, None, (), False, record.get("run_id", fresh_id), (note,), True)
        raise RunRefused(
            f"--out {out} holds a finished run of other settings: {'; '.join(differ)}; write "
            "elsewhere with another --out, or pass --overwrite to replace it"
        )
    if state == "finished":
        raise RunRefused(
            f"--out {out} holds a finished run ({out / SUMMARY}); write elsewhere with another "
            "--out (or none: a fresh folder under runs/), or pass --overwrite to replace it"
        )
    record = read_run_record(out)
    if resume is not None:
        saved_id = resume.extra.get("run_id")
        if not (out / "mlperf.log").is_file() or (
            record is not None and saved_id is not None and record.get("run_id") != saved_id
        ):
            raise RunRefused(
                f"{resume.path} is a checkpoint of another run than the one in {out} (its log "
                f"or id differs); pass that run's folder as --out"
            )
        return RunPlan(out, resume, tuple(skipped), False, saved_id or fresh_id, tuple(notes))
    if config.resume != "auto":
        raise RunRefused(
            f"--out {out} holds an unfinished run; pass --resume auto with its --checkpoint-dir "
            "to continue it; write elsewhere with another --out, or pass --overwrite to "
            "replace it"
        )
    if skipped:
        raise RunRefused(
            f"--out {out} holds an unfinished run and --checkpoint-dir {config.checkpoint_dir} "
            f"has no checkpoint that verifies ({'; '.join(f'{p}: {why}' for p, why in skipped)}"
            "); move those away to start the run again, write elsewhere with another --out, "
            "or pass --overwrite to replace it"
        )
    # Killed before its first checkpoint: the same command (a requeued job) starts it again.
    if record is None or "identity" not in record:
        raise RunRefused(
            f"--out {out} holds an unfinished run whose {CONFIG} is missing or unreadable, so "
            "it cannot be told to be this run; write elsewhere with another --out, or pass "
            "--overwrite to replace it"
        )
    differ = run_differences(record["identity"], record, run)
    if differ:
        raise RunRefused(
            f"--out {out} holds an unfinished run of other settings: {'; '.join(differ)}"
        )
    notes.append(
        f"{out} holds an unfinished run that saved no checkpoint in --checkpoint-dir "
        f"{config.checkpoint_dir}: starting it again"
    )
    return RunPlan(out, None, tuple(skipped), True, fresh_id, tuple(notes))


def claim_run(run: ResolvedRun, held: contextlib.ExitStack) -> RunPlan:
    """`plan_run`, then the locks of the checkpoint directory and the run folder (creating
    them), held in `held` for the life of the run, then `plan_run` again under the locks (what
    another process did in between counts). Call on rank 0 only."""
    config = run.config
    folders = [(config.checkpoint_dir, "--checkpoint-dir"), (config.out, "--out")]
    for folder, what in [*folders, (None if config.out else RUNS_DIR, "the runs folder")]:
        problem = None if folder is None else unwritable(folder)
        if problem:
            raise RunRefused(f"{what} {folder}: {problem}")
    try:
        for folder, what in folders:
            if folder is not None:
                folder_lock.ensure_free(folder, what)
        first = plan_run(run)  # every refusal before anything is created
        if config.checkpoint_dir is not None:
            held.enter_context(folder_lock.lock_folder(config.checkpoint_dir, "--checkpoint-dir"))
        out = first.out or fresh_run_dir()
        what = "--out" if config.out is not None else "the run folder"
        held.enter_context(folder_lock.lock_folder(out, what))
    except folder_lock.FolderInUse as error:
        raise RunRefused(str(error)) from None
    except OSError as error:  # what `unwritable` cannot foresee: a read-only file system, ...
        raise RunRefused(
            f"cannot lock the run's folders: {error.strerror or error}: {error.filename}"
        ) from None
    plan = plan_run(run, out)
    return dataclasses.replace(plan, notes=tuple(dict.fromkeys(first.notes + plan.notes)))


def unwritable(folder: Path) -> str | None:
    """Why a run could not create `folder` or write into it (None: it could): a file in the
    way, or no write permission where it would be created."""
    existing = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), Path("."))
    if not existing.is_dir():
        return f"cannot be created or written, {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be created or written, {existing} is not writable"
    return None


def data_root(config: RunConfig, out: Path) -> Path:
    """Where the run's dataset is: `data`, or the synthetic one, made in the run folder `out`
    when it was given and otherwise shared by the runs under runs/ that ask for the same one."""
    if config.data is not None:
        return config.data
    explicit_out = out.parent != RUNS_DIR or not out.name.startswith("train-")
    if explicit_out:
        return out / "data"
    synth = config.synth_config()
    return SYNTHETIC_CACHE / f"users{synth.users}-seed{synth.seed}-{synth.size}"
