"""The end-to-end DLRMv4 run: streaming train-eval over time windows, MLPerf log, resume.

`train(RunConfig(...))` prepares the sample store (yambda-data), trains a preset over the train
windows in time order (shuffled within each window), evaluates on the test split at the MLPerf
schedule, and writes an MLPerf log, the effective config and, optionally, crash-exact
checkpoints. It returns the run's summary (a JSON-able dict).

With `checkpoint_dir` set, `resume="auto"` continues from the newest complete checkpoint: same
weights, optimizer states, RNG, data position (mid-window), eval schedule and MLPerf log (no
second run_start; records written after the checkpoint by the crashed process move to
mlperf.log.discarded), so the run ends bit-identical to one that was never interrupted (compare
`weights_sha256`). A non-finite loss stops the run before it can be checkpointed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

import yambda_data
from hstu_model import checkpoint as ckpt
from hstu_model.config import (
    ID_TABLES,
    PRESETS,
    ConfigError,
    HSTUConfig,
    ModelConfig,
    reference_departures,
)
from hstu_model.memory import available_memory, format_bytes, training_memory
from hstu_model.model import HSTURanker
from hstu_model.overrides import resolve_config
from hstu_model.sharding import shard_model
from hstu_model.training import folder_lock
from hstu_model.training.distributed import Distributed, device_type, init_distributed
from hstu_model.training.kernels import KERNELS, resolve_kernel
from hstu_model.training.recorder import MetricsRecorder
from hstu_model.training.trainer import Trainer, seed_everything
from mlperf_compliance import (
    DLRMv4RunConfig,
    MLPerfLogger,
    RunInterrupted,
    RunTracker,
    dlrmv4_run_start_keys,
    eval_schedule,
)
from yambda_data.loader import make_loader
from yambda_data.schema import check_multi_event_header, mapping_path, multi_event_path

__all__ = [
    "MIN_HISTORY",
    "REFERENCE_MIN_HISTORY",
    "RUN_IDENTITY",
    "RunConfig",
    "model_crosses",
    "train",
]

RUN_IDENTITY = (
    "preset",
    "config_file",
    "overrides",
    "data",
    "size",
    "users",
    "seed",
    "steps",
    "evals",
    "kernel",
    "target_auc",
    "min_history",
    "history_strategy",
    "division",
)
"""Fields a resumed run must share with the checkpointed one (the others, such as `workers`
and `out`, do not change the result)."""

SYNTHETIC_TARGET_AUC = 0.65
"""Success threshold on the synthetic data (its planted signal is weaker than Yambda's)."""

MLPERF_TARGET_AUC = 0.75
"""The MLPerf DLRMv4 quality target (closed division, real data)."""

MIN_HISTORY = 16
"""Earlier events a listen needs to become an anchor in the run's sample store, by default
(`RunConfig.min_history`); the MLPerf data scripts prepare the same store."""

REFERENCE_MIN_HISTORY = 4086
"""The reference's anchor rule (min_history = history_length = 4086), which the train and eval
sample counts pinned by the closed rules come from."""

CLOSED_EVALS = 1000
"""Evaluations of a closed run: one every 0.1% of the train samples (eval_every_data_pct)."""

CLOSED_SIZE = "5b"
"""The dataset whose sample counts the closed rules pin."""


@dataclass(frozen=True)
class RunConfig:
    """One training run. Invalid values raise ConfigError naming the field."""

    preset: str = "tiny"
    """Model and optimizer preset (hstu_model.preset)."""
    config_file: Path | None = None
    """TOML, JSON or YAML overrides of the preset (hstu_model.overrides); then HSTU_* variables
    of the environment, then `overrides`, each winning over the previous."""
    overrides: tuple[str, ...] = ()
    """`section.field=value` items (hstu_model.overrides). `kernel` and `seed` below are set
    last."""
    data: Path | None = None
    """Yambda root; None synthesizes a small dataset in the Yambda schema under `out`."""
    size: str = "50m"
    """Dataset size folder under flat/."""
    users: int = 400
    """Users of the synthetic dataset (ignored with `data`)."""
    seed: int = 0
    """Seed of the synthetic data, the initialization and the data order."""
    steps: int | None = 600
    """Training steps; None: as many as the train windows hold samples (their anchor count,
    the logged train_samples, as the closed rules count it), which is one pass less each
    window's last incomplete global batch, plus that many samples of the next pass."""
    evals: int = 3
    """Evaluations, evenly spaced over the run (eval_every_data_pct = 1 / evals; the last one
    at the end)."""
    kernel: str = "auto"
    """hstu-ops kernel family of the model (`hstu_model.training.kernels`): pytorch, native,
    triton, or auto: triton on a CUDA or ROCm device, native on the CPU. One that cannot run on
    the run's device is refused (ConfigError) when the config is built; the run replaces
    `auto` with what it chose, so its config.json and checkpoints name that kernel."""
    workers: int = 1
    """Data loader worker processes (0: load in the training process)."""
    target_auc: float | None = None
    """AUC that counts as success; None: MLPERF_TARGET_AUC on `data`, else
    SYNTHETIC_TARGET_AUC."""
    out: Path | None = None
    """Run folder: mlperf.log, metrics, config.json, result.json (written when the run ends),
    the prepared store (and the synthetic data). None: a fresh folder `runs/train-<UTC date and
    time>` (the synthetic data then cached in `runs/cache/` for the runs that share it), or with
    `resume` auto the newest unfinished run under `runs/` that checkpointed into
    `checkpoint_dir`. A folder that holds another run is
    refused unless `resume` auto continues it or `overwrite` replaces it."""
    overwrite: bool = False
    """Replace the run that `out` holds (its log, metrics, config and summary; the prepared
    store is checked and reused)."""
    checkpoint_dir: Path | None = None
    """Where checkpoints go (None: no checkpoints)."""
    checkpoint_every: int = 100
    """Steps between checkpoints (0: off)."""
    checkpoint_seconds: float = 0.0
    """Also save once this many seconds passed since the last save (0: off)."""
    checkpoint_every_window: bool = False
    """Also save after the last batch of each time window."""
    keep_checkpoints: int = 2
    """Complete checkpoints kept (the newest)."""
    resume: Literal["never", "auto"] = "never"
    """auto: continue from the newest complete checkpoint in `checkpoint_dir`, if any."""
    dist_timeout_seconds: float = 300.0
    """Under torchrun: the longest a collective waits for the other ranks before the run fails
    (a rank that died or hangs)."""
    min_history: int = MIN_HISTORY
    """Earlier events of the user a listen needs to become a sample (the store is built for
    it); the reference's is REFERENCE_MIN_HISTORY."""
    history_strategy: str = "interleaved"
    """How a sample's history is drawn from the user's earlier events (yambda_data
    HISTORY_STRATEGIES): "interleaved", the reference's (the last history_length // 3 events of
    each of the listen_plus, like and skip pools, in time order), or "last_n" (the last
    history_length events of any of them; not the reference's function)."""
    division: Literal["open", "closed"] = "open"
    """MLPerf division the log declares. closed checks, before anything runs, the settings the
    closed rules pin that the run itself decides (the real 5b data, one pass, 1000 evaluations,
    the reference's anchor rule and history strategy, target 0.75) and that the resolved model
    and recipe are the reference's (`hstu_model.config.reference_departures`: the yambda-5b
    preset, overrides only of the fields a submitter may choose); the compliance check of the
    log judges the rest (the learning-rate band, the sample counts)."""

    def __post_init__(self) -> None:
        def require(ok: bool, field: str, message: str) -> None:
            if not ok:
                raise ConfigError(f"RunConfig.{field}: {message}")

        if isinstance(self.overrides, list):
            object.__setattr__(self, "overrides", tuple(self.overrides))
        require(self.preset in PRESETS, "preset", f"unknown preset {self.preset!r}")
        require(
            self.kernel in KERNELS,
            "kernel",
            f"must be one of {', '.join(KERNELS)}, got {self.kernel!r}",
        )
        require(self.steps is None or self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")
        require(
            1 <= self.evals <= (self.steps or self.evals),
            "evals",
            f"need 1 <= evals <= steps ({self.steps}), got {self.evals}",
        )
        require(self.min_history >= 1, "min_history", f"must be >= 1, got {self.min_history}")
        require(
            self.history_strategy in yambda_data.HISTORY_STRATEGIES,
            "history_strategy",
            f"must be one of {', '.join(yambda_data.HISTORY_STRATEGIES)}, "
            f"got {self.history_strategy!r}",
        )
        require(
            self.division in ("open", "closed"),
            "division",
            f"must be 'open' or 'closed', got {self.division!r}",
        )
        if self.division == "closed":
            wanted = {  # field: (what the closed rules need, whether it is set so)
                "data": ("<the Yambda download>", self.data is not None),
                "size": (CLOSED_SIZE, self.size == CLOSED_SIZE),
                "steps": ("None (one pass over the data; --steps epoch)", self.steps is None),
                "evals": (
                    f"{CLOSED_EVALS}, one every 0.1% of the data",
                    self.evals == CLOSED_EVALS,
                ),
                "min_history": (
                    f"{REFERENCE_MIN_HISTORY}, the reference's samples",
                    self.min_history == REFERENCE_MIN_HISTORY,
                ),
                "target_auc": (
                    f"{MLPERF_TARGET_AUC}",
                    self.target_auc in (None, MLPERF_TARGET_AUC),
                ),
                "history_strategy": (
                    "interleaved, the reference's samples",
                    self.history_strategy == "interleaved",
                ),
                "preset": ("yambda-5b, the reference's model", self.preset == "yambda-5b"),
            }
            wrong = [
                f"{name}={need} (got {getattr(self, name)})"
                for name, (need, ok) in wanted.items()
                if not ok
            ]
            if self.preset in PRESETS:
                departures = reference_departures(self.resolved())
                wrong += [f"{d}, not the reference's" for d in departures]
            require(not wrong, "division", "closed needs " + "; ".join(wrong))
        require(
            self.target_auc is None or 0.0 <= self.target_auc <= 1.0,
            "target_auc",
            f"must be in [0, 1], got {self.target_auc}",
        )
        require(self.users >= 1, "users", f"must be >= 1, got {self.users}")
        require(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        try:  # yambda-data's rules for the synthetic data, and for a size folder's name
            self.synth_config()
        except ValueError as error:
            field, _, message = str(error).removeprefix("SynthConfig.").partition(": ")
            require(False, field, message)
        require(self.workers >= 0, "workers", f"must be >= 0, got {self.workers}")
        require(
            self.checkpoint_every >= 0, "checkpoint_every", f"must be >= 0: {self.checkpoint_every}"
        )
        require(
            self.checkpoint_seconds >= 0,
            "checkpoint_seconds",
            f"must be >= 0, got {self.checkpoint_seconds}",
        )
        require(
            self.keep_checkpoints >= 1,
            "keep_checkpoints",
            f"must be >= 1, got {self.keep_checkpoints}",
        )
        require(
            self.dist_timeout_seconds > 0,
            "dist_timeout_seconds",
            f"must be > 0, got {self.dist_timeout_seconds}",
        )
        require(
            self.resume in ("never", "auto"),
            "resume",
            f"must be 'never' or 'auto', got {self.resume!r}",
        )
        require(
            self.checkpoint_dir is not None or self.resume == "never",
            "resume",
            "auto needs checkpoint_dir",
        )
        require(
            self.checkpoint_dir is None
            or bool(
                self.checkpoint_every or self.checkpoint_seconds or self.checkpoint_every_window
            ),
            "checkpoint_dir",
            "needs checkpoint_every > 0, checkpoint_seconds > 0 or checkpoint_every_window",
        )
        require(
            self.out is None or not self.out.exists() or self.out.is_dir(),
            "out",
            f"{self.out} exists and is not a folder",
        )
        self.resolved()  # the preset, the config file, HSTU_* and --set items, checked now

    def resolved(self) -> HSTUConfig:
        """The run's model and training config: the preset, then `config_file`, the HSTU_*
        variables of the environment and `overrides`, then `kernel` and `seed`; raises
        ConfigError naming the file, variable or item at fault."""
        hstu = resolve_config(self.preset, file=self.config_file, cli=self.overrides).replace(
            model={"kernel": self.model_kernel()}, train={"seed": self.seed}
        )
        model_crosses(hstu.model)  # yambda-data must know every contextual feature
        return hstu

    def synth_config(self) -> yambda_data.SynthConfig:
        """The synthetic dataset the run trains on without `data` (with it, only `seed` and
        `size` are its own)."""
        users = self.users if self.data is None else yambda_data.SynthConfig.users
        return yambda_data.SynthConfig(users=users, seed=self.seed, size=self.size)

    def model_kernel(self, device: str | None = None) -> str:
        """The model's kernel: `kernel` with `auto` resolved for a `device` device (default:
        the one the run trains on, `device_type()`); KernelUnavailableError (a ConfigError that
        names --kernel, the kernel and the device) when it cannot run there."""
        return resolve_kernel(self.kernel, device or device_type())

    @property
    def effective_target_auc(self) -> float:
        if self.target_auc is not None:
            return self.target_auc
        return SYNTHETIC_TARGET_AUC if self.data is None else MLPERF_TARGET_AUC

    def identity(self, world_size: int = 1) -> dict[str, str | None]:
        """The fields that fix the result, and the number of ranks, as strings (stored in every
        checkpoint). The kernel is the one that runs: `auto` resumes a checkpoint of the kernel
        it picks here, and only that."""
        values = {name: getattr(self, name) for name in RUN_IDENTITY}
        values["kernel"] = self.model_kernel()
        values["target_auc"] = self.effective_target_auc
        values["world_size"] = world_size
        return {name: None if v is None else str(v) for name, v in values.items()}

    def as_json(self) -> dict:
        def plain(value):
            return str(value) if isinstance(value, Path) else value

        values = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return values | {"target_auc": self.effective_target_auc, "overrides": list(self.overrides)}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_crosses(model: ModelConfig) -> tuple[yambda_data.CrossFeature, ...]:
    """yambda-data's cross features hashed into the model's contextual tables (name -> rows)."""
    specs = {spec.name: spec for spec in yambda_data.CROSS_FEATURES}
    tables = model.contextual_tables()
    unknown = sorted(set(tables) - set(specs))
    if unknown:
        raise ConfigError(f"model.contextual_features: yambda-data has no cross named {unknown}")
    return tuple(
        yambda_data.CrossFeature(name, specs[name].keys, rows, specs[name].salt)
        for name, rows in tables.items()
    )


FLAGS = {"config_file": "--config", "overrides": "--set", "world_size": "ranks"}
"""The tools/train.py option of each RunConfig field that is not `--<field-with-dashes>`
(`world_size`, a field of the run's identity, is the number of ranks torchrun starts)."""


def flag(field: str) -> str:
    """The command-line option that sets RunConfig `field`, as messages name it."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def run_hstu(config: RunConfig, device: torch.device, distributed: bool) -> HSTUConfig:
    """The model and training config the run trains with: `config.resolved()`, its sharding
    computed on `device` when the tables are sharded (`distributed`) or not on the CPU."""
    hstu = config.resolved()
    if distributed or device.type != "cpu":
        hstu = hstu.replace(sharding={"compute_device": device.type})
    return hstu


def run_differences(
    saved_identity: dict,
    saved_config: dict | None,
    config: RunConfig,
    hstu: HSTUConfig,
    world_size: int,
) -> list[str]:
    """What differs between a saved run (its identity and effective config, as a checkpoint
    or a run folder's config.json holds them) and the run `config` would start."""
    now = config.identity(world_size)
    differ = [
        f"{flag(k)} {saved_identity.get(k)} then, {now[k]} now"
        for k in now
        if saved_identity.get(k) != now[k]
    ]
    if saved_config is not None:
        differ += ckpt.config_differences(saved_config, hstu.to_dict())
    return differ


def find_resume_point(
    config: RunConfig, hstu: HSTUConfig, world_size: int = 1
) -> tuple[ckpt.CheckpointInfo | None, list[tuple[Path, str]]]:
    """The checkpoint to resume from (None: start afresh) and the newer ones skipped because
    they do not verify (path, what is wrong); refuses (RunRefused) a checkpoint of another run
    (other settings, another effective config), and to start afresh over an earlier run's
    checkpoints."""
    if config.checkpoint_dir is None:
        return None, []
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
    differ = run_differences(found.extra.get("run", {}), found.config, config, hstu, world_size)
    if differ:
        raise RunRefused(f"{found.path} is a checkpoint of another run: {'; '.join(differ)}")
    return found, skipped


def rng_neutral(batches: Iterable) -> Iterator:
    """The batches of a loader; starting its iterator draws from torch's global generator, which
    would shift the model's random numbers by where a run was resumed, so that draw is undone."""
    with torch.random.fork_rng(devices=[]):
        iterator = iter(batches)
    yield from iterator


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


class RunRefused(ValueError):
    """The run was refused before it created or changed anything: a bad input, or a run folder
    that holds another run. The message says why and what to do instead."""


def run_state(out: Path) -> str:
    """ "finished" (it has a summary), "unfinished" (a log, metrics or config without one) or
    "empty"."""
    if (out / SUMMARY).is_file():
        return "finished"
    if any((out / name).exists() for name in RUN_FILES):
        return "unfinished"
    return "empty"


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


def plan_run(config: RunConfig, hstu: HSTUConfig, world_size: int = 1) -> RunPlan:
    """Where and how `config` runs; RunRefused (having created nothing) when `out` holds
    another run, or a run it cannot continue."""
    resume, skipped = find_resume_point(config, hstu, world_size)
    out, notes = config.out, []
    if out is None and config.resume == "auto":
        out = newest_unfinished_run(config.checkpoint_dir)
        if out is not None:
            notes.append(f"resuming the newest unfinished run, {out}")
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
    differ = run_differences(record["identity"], record, config, hstu, world_size)
    if differ:
        raise RunRefused(
            f"--out {out} holds an unfinished run of other settings: {'; '.join(differ)}"
        )
    notes.append(
        f"{out} holds an unfinished run that saved no checkpoint in --checkpoint-dir "
        f"{config.checkpoint_dir}: starting it again"
    )
    return RunPlan(out, None, tuple(skipped), True, fresh_id, tuple(notes))


def claim_run(
    config: RunConfig, hstu: HSTUConfig, world_size: int, held: contextlib.ExitStack
) -> RunPlan:
    """`plan_run`, then the locks of the checkpoint directory and the run folder (creating
    them), held in `held` for the life of the run, then `plan_run` again under the locks (what
    another process did in between counts). Call on rank 0 only."""
    try:
        for folder, what in ((config.checkpoint_dir, "--checkpoint-dir"), (config.out, "--out")):
            if folder is not None:
                folder_lock.ensure_free(folder, what)
        first = plan_run(config, hstu, world_size)  # every refusal before anything is created
        if config.checkpoint_dir is not None:
            held.enter_context(folder_lock.lock_folder(config.checkpoint_dir, "--checkpoint-dir"))
        out = first.out or fresh_run_dir()
        what = "--out" if config.out is not None else "the run folder"
        held.enter_context(folder_lock.lock_folder(out, what))
    except folder_lock.FolderInUse as error:
        raise RunRefused(str(error)) from None
    plan = plan_run(dataclasses.replace(config, out=out), hstu, world_size)
    return dataclasses.replace(plan, notes=tuple(dict.fromkeys(first.notes + plan.notes)))


def check_inputs(config: RunConfig) -> None:
    """What `train` checks of the dataset before it creates anything: the files of `data`
    exist, and the events file's parquet metadata reads as the Yambda schema (its rows are
    checked as the run preprocesses them)."""
    if config.data is not None:
        events = multi_event_path(config.data, config.size)
        paths = [events, *(mapping_path(config.data, kind) for kind in ("artist", "album"))]
        for path in paths:
            if not path.is_file():
                raise RunRefused(f"--data {config.data} --size {config.size}: no file {path}")
        try:
            check_multi_event_header(events)
        except (yambda_data.SchemaError, yambda_data.InputFileError) as error:
            raise RunRefused(str(error)) from None


def vocab_floor(config: RunConfig) -> dict[str, int]:
    """Rows the id tables will have at least, known before the data is read: the synthetic
    dataset's users, items, artists and albums (each a distinct id); one each (a table's
    least) for a download."""
    if config.data is not None:
        return dict.fromkeys(ID_TABLES, 1)
    synth = config.synth_config()
    return {
        "uid": synth.users,
        "item_id": synth.items,
        "artist_id": synth.artists,
        "album_id": synth.albums,
    }


def memory_refusal(hstu: HSTUConfig, vocab: dict[str, int], ctx: Distributed) -> str | None:
    """Why the model cannot fit on `ctx`'s device (`hstu_model.memory`), or None."""
    need = training_memory(hstu.model, vocab)
    ranks_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    available = available_memory(ctx.device, 1 if ctx.device.type == "cuda" else ranks_on_host)
    if available is None or need.per_rank(ctx.world_size) <= available[0]:
        return None
    return (
        f"the model needs at least {format_bytes(need.per_rank(ctx.world_size))} per rank "
        f"({format_bytes(need.embedding_bytes)} of embedding tables with their Adagrad state "
        f"over {ctx.world_size} rank(s), {format_bytes(need.dense_bytes)} of dense parameters "
        f"with Adam's state), more than the {format_bytes(available[0])} {available[1]}; use "
        "smaller tables (model.contextual_features rows), more ranks or more memory"
    )


def data_root(config: RunConfig) -> Path:
    """Where the run's dataset is: `data`, or the synthetic one, made in the run folder of an
    explicit `out` and otherwise shared by the runs under runs/ that ask for the same one."""
    if config.data is not None:
        return config.data
    explicit_out = config.out.parent != RUNS_DIR or not config.out.name.startswith("train-")
    if explicit_out:
        return config.out / "data"
    synth = config.synth_config()
    return SYNTHETIC_CACHE / f"users{synth.users}-seed{synth.seed}-{synth.size}"


def _agree(ctx: Distributed, decide: Callable[[], object]) -> object:
    """`decide()` on rank 0, its value (or its exception) on every rank."""
    if not ctx.active:
        return decide()
    import torch.distributed as dist

    box: list[object] = [None]
    if ctx.is_main:
        try:
            box[0] = ("ok", decide())
        except Exception as error:  # every rank raises it, none waits for the others
            box[0] = ("error", error)
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise value
    return value


_FAILING = False
"""Set once a run has started to fail: from then on SIGTERM and SIGINT are ignored."""
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _on_signal(signum: int, frame: object) -> None:
    if not _FAILING:
        raise RunInterrupted(signum)


def _failing() -> None:
    """The run is failing: SIGTERM and SIGINT are ignored until `train` returns (a launcher
    such as torchrun sends SIGTERM to every rank as soon as one dies; the abort record and the
    failure's message must still be written whole), and exiting children no longer raise (the
    DataLoader's SIGCHLD handler raises when its workers die of that SIGTERM)."""
    global _FAILING
    _FAILING = True
    if threading.current_thread() is threading.main_thread():
        for signum in _SIGNALS:
            signal.signal(signum, _on_signal)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def train(config: RunConfig, log: Callable[[str], None] = _stderr) -> dict:
    """See `_train_run`. SIGTERM and SIGINT end the run (RunInterrupted, a SystemExit with
    status 128 + the signal) with `run_stop` aborted in its log, unless the run is already failing: then they
    are ignored until the failure leaves this function. The signal handlers it found are
    restored when it returns or raises."""
    global _FAILING
    _FAILING = False
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.getsignal(s) for s in (*_SIGNALS, signal.SIGCHLD)}
        for signum in _SIGNALS:
            signal.signal(signum, _on_signal)
    try:
        return _train_run(config, log)
    except BaseException:
        _failing()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _train_run(config: RunConfig, log: Callable[[str], None] = _stderr) -> dict:
    """Runs `config` to its end (or its quality target); returns the summary.

    Everything it was given is checked before it creates or changes a file (RunConfig checks
    its fields and the resolved model config when it is built; here the dataset, the memory
    the model needs, the run folder and the checkpoints): a bad input raises ConfigError or
    RunRefused and leaves no trace. The run folder and the checkpoint directory are locked for
    the life of the run (`folder_lock`): a second process refused there names the first. Under
    torchrun every rank calls it (see `init_distributed`); rank 0 writes the logs and the
    metrics, and every rank returns the summary. Progress goes to `log` (rank 0). An exception
    or a signal after the run started ends the MLPerf log with run_stop "aborted" and
    propagates.
    """
    check_inputs(config)
    with init_distributed(config.dist_timeout_seconds) as ctx, contextlib.ExitStack() as held:
        # Before anything is created: a kernel the device cannot run is a bad input.
        config = dataclasses.replace(config, kernel=config.model_kernel(ctx.device.type))
        hstu = run_hstu(config, ctx.device, ctx.active)
        say = log if ctx.is_main else lambda message: None
        too_large = _agree(ctx, lambda: memory_refusal(hstu, vocab_floor(config), ctx))
        if too_large:
            raise RunRefused(too_large)
        plan = _agree(ctx, lambda: claim_run(config, hstu, ctx.world_size, held))
        for path, why in plan.skipped:
            say(f"checkpoint {path} does not verify, skipped: {why}")
        if plan.resume is not None and plan.skipped:
            say(f"resuming from {plan.resume.path}, the newest checkpoint that verifies")
        for note in plan.notes:
            say(note)
        announce, out = config.out is None, plan.out
        config = dataclasses.replace(config, out=out)
        root = data_root(config)
        if ctx.is_main:
            if plan.replace:
                for name in RUN_FILES:
                    (out / name).unlink(missing_ok=True)
            if announce:
                say(f"run folder: {out}")
            hstu.save_json(
                out / CONFIG,
                run=config.as_json() | {"data": str(root)},
                identity=config.identity(ctx.world_size),
                run_id=plan.run_id,
            )
        ctx.barrier()
        resume = plan.resume
        log_path = out / "mlperf.log"
        if resume is not None and ctx.is_main:  # what the crashed run wrote afterwards goes
            ckpt.rewind_file(log_path, resume.extra["mlperf_log_bytes"])
            ckpt.rewind_file(out / "metrics.csv", resume.extra["metrics"]["csv_bytes"])
        # Records name their source file relative to the installed packages, not this machine.
        package_root = Path(__file__).resolve().parents[2]
        mllog = MLPerfLogger(
            log_path, root_dir=str(package_root), resume=resume is not None, rank=ctx.rank
        )
        tracker = RunTracker(mllog, target_accuracy=config.effective_target_auc)
        if resume is not None:
            tracker.load_state_dict(resume.extra["mlperf"])  # no second init_start / run_start
        with tracker.guard():
            if tracker.state == "new":
                tracker.init_start()
            run = _StreamingRun(config, ctx, mllog, tracker, resume, log, hstu, root, plan.run_id)
            summary = run.run()
        mllog.close()
        summary["skipped_checkpoints"] = [f"{path}: {why}" for path, why in plan.skipped]
        if ctx.is_main:
            tmp = out / f".{SUMMARY}.tmp"
            tmp.write_text(json.dumps(summary, indent=2) + "\n")
            os.replace(tmp, out / SUMMARY)
        return summary


def platform(ctx: Distributed) -> str:
    """The MLPerf submission platform: ranks times device."""
    if ctx.device.type == "cuda":
        return f"{ctx.world_size}x{torch.cuda.get_device_name(ctx.device)}"
    return f"{ctx.world_size}xCPU ({os.cpu_count()} cores)"


class _StreamingRun:
    """The state of one run between its MLPerf init_start and run_stop."""

    def __init__(
        self,
        config: RunConfig,
        ctx: Distributed,
        mllog: MLPerfLogger,
        tracker: RunTracker,
        resume: ckpt.CheckpointInfo | None,
        log: Callable[[str], None],
        hstu: HSTUConfig,
        root: Path,
        run_id: str,
    ) -> None:
        self.config, self.ctx, self.mllog, self.tracker, self.resume = (
            config,
            ctx,
            mllog,
            tracker,
            resume,
        )
        self.log = log if ctx.is_main else lambda message: None
        self.hstu, self.root, self.run_id = hstu, root, run_id

        # Rank 0 synthesizes and prepares the data, checking what it reuses; the others open
        # the store it verified (each checking it again would read it once per rank).
        def prepare() -> Path:
            if config.data is None:
                yambda_data.synthesize_cached(self.root, config.synth_config(), progress=self.log)
            return yambda_data.prepare_store(
                self.root,
                config.size,
                config.out / "prepared",
                min_history=config.min_history,
                progress=self.log,
            ).path

        self.store = yambda_data.SampleStore.open(_agree(ctx, prepare))
        vocab = self.store.vocab.as_dict()
        too_large = _agree(ctx, lambda: memory_refusal(self.hstu, vocab, ctx))
        if too_large:  # the data's own tables (the run checked the config's before it began)
            raise ValueError(f"{self.store.path}: {too_large}")
        self.sample_config = yambda_data.SampleConfig(
            history_length=self.hstu.model.history_length,
            min_history=self.store.min_history,
            strategy=config.history_strategy,
        )
        self.crosses = model_crosses(self.hstu.model)  # the model's table sizes
        self.batch_size = self.hstu.train.batch_size
        """Samples per rank per step."""
        self.global_batch_size = self.batch_size * ctx.world_size
        self.windows = tuple(range(self.store.num_windows))  # strict time order
        self.eval_plan = yambda_data.BatchPlan(
            (yambda_data.TEST,),
            self.hstu.train.eval_batch_size,
            rank=ctx.rank,
            world_size=ctx.world_size,
            shuffle=False,
            drop_last=False,
        )
        # Where the data stands, counted in the samples each window trains per pass (whole
        # global batches: batches never span windows).
        plan = self.train_plan()
        sizes = [
            dataclasses.replace(plan, sources=(w,)).num_samples(self.store) for w in self.windows
        ]
        if sum(sizes) == 0:
            raise ValueError(
                f"{self.store.path}: no time window holds a global batch of "
                f"{self.global_batch_size} samples (min_history {config.min_history}); "
                "use more data, a lower min_history or a smaller batch"
            )
        self.position = ckpt.StreamPosition(sizes)
        if config.steps is None:  # the dataset's size, as the closed rules pin it
            anchors = dataclasses.replace(plan, rank=0, world_size=1, drop_last=False)
            self.train_samples = anchors.num_samples(self.store)
        else:
            self.train_samples = config.steps * self.global_batch_size
        """Logged as train_samples; the run ends at the last evaluation not beyond it."""
        per_pass, anchors = sum(sizes), int(self.store.manifest["num_train_anchors"])
        if self.train_samples > per_pass and 2 * per_pass < anchors:
            # Batches never span windows: a global batch larger than most windows leaves most
            # anchors out of every pass, and the run trains the few it keeps over and over.
            self.log(
                f"warning: a global batch of {self.global_batch_size} samples "
                f"({ctx.world_size} rank(s) x {self.batch_size}) fits whole in "
                f"{sum(n > 0 for n in sizes)} of the {len(self.windows)} time windows: a pass "
                f"trains {per_pass} of the {anchors} train anchors ({per_pass / anchors:.1%}), "
                f"and the run's {self.train_samples} samples repeat them "
                f"{self.train_samples / per_pass:.1f} times, so its train AUC is measured on "
                "samples already trained on; use a smaller train.batch_size, fewer ranks or "
                "more data"
            )

    def loader(self, plan: yambda_data.BatchPlan):
        return make_loader(
            self.store.path,
            self.sample_config,
            plan,
            num_workers=self.config.workers,
            crosses=self.crosses,
        )

    def train_plan(self, epoch: int = 0, first: int = 0, skip: int = 0) -> yambda_data.BatchPlan:
        """Pass `epoch` over the windows from window `first` on, less `skip` samples of it."""
        return yambda_data.BatchPlan(
            self.windows[first:],
            self.batch_size,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            seed=self.config.seed,
            epoch=epoch,
            skip=skip,
        )

    def train_stream(self, start_epoch: int, first: int, skip: int) -> Iterator[tuple[int, object]]:
        """(epoch, batch) pairs: one pass over the windows is an epoch, and a run longer than
        that starts a new pass. A resumed run starts `skip` samples into window `first`."""
        for epoch in itertools.count(start_epoch):
            for batch in rng_neutral(self.loader(self.train_plan(epoch, first, skip))):
                yield epoch, batch.to(self.ctx.device)
            first, skip = 0, 0

    def mlperf_config(self, config_path: Path, eval_samples: int) -> DLRMv4RunConfig:
        hstu = self.hstu
        precision = "bfloat16" if hstu.train.autocast_bf16 else "fp32"
        return DLRMv4RunConfig(
            global_batch_size=self.global_batch_size,
            learning_rate=hstu.optimizer.dense_lr,
            sparse_learning_rate=hstu.optimizer.sparse_lr,
            micro_batch_size=self.batch_size,
            config_filename=config_path.name,
            precision_linear=precision,
            precision_attn=precision,
            precision_comm="fp32",
            train_samples=self.train_samples,
            eval_samples=eval_samples,
            max_sequence_length=hstu.model.max_seq_len,
            eval_every_data_pct=1.0 / self.config.evals,
            warmup_steps=hstu.optimizer.warmup_steps,
            seed=self.config.seed,
        )

    def run(self) -> dict:
        config, store, tracker, mllog = self.config, self.store, self.tracker, self.mllog
        ctx = self.ctx
        eval_samples = self.eval_plan.num_samples(store)
        self.log(
            f"data: {store.manifest['num_train_anchors']} train anchors in {len(self.windows)} "
            f"windows, {eval_samples} eval samples, vocab {store.vocab}; "
            f"{ctx.world_size} rank(s) on {ctx.device.type}"
        )
        seed_everything(config.seed)
        vocab = store.vocab.as_dict()
        if ctx.active:  # every rank builds the same model, then DMP shards its tables
            model, _ = shard_model(HSTURanker(self.hstu.model, vocab), self.hstu)
        else:
            model = HSTURanker(self.hstu.model, vocab, device=ctx.device)
        trainer = Trainer(model, self.hstu)
        eval_batches = self.loader(self.eval_plan)
        config_path = config.out / CONFIG
        checkpoints = None
        if config.checkpoint_dir is not None:
            checkpoints = ckpt.Checkpointer(
                config.checkpoint_dir,
                every_steps=config.checkpoint_every,
                every_seconds=config.checkpoint_seconds,
                keep=config.keep_checkpoints,
                config=json.loads(config_path.read_text()),
            )
        run_config = self.mlperf_config(config_path, eval_samples)
        schedule = eval_schedule(
            run_config.train_samples, self.global_batch_size, run_config.eval_every_data_pct
        )
        if not schedule:
            raise ValueError(
                f"{run_config.train_samples} train samples in {config.evals} evaluation(s) at a "
                f"global batch of {self.global_batch_size}: too short for a first evaluation"
            )
        recorder = MetricsRecorder(
            config.out,
            schedule[-1] // self.global_batch_size,
            self.global_batch_size,
            log=self.log,
            write=ctx.is_main,
            reduce=ctx.sum_array,
        )
        # What the loop carries from one eval interval to the next (and through a checkpoint).
        loop = {"epoch": 0, "trained_seconds": 0.0, "auc": float("nan"), "ne": float("nan")}
        if self.resume is None:
            mllog.submission_info(org="reference", platform=platform(ctx), division=config.division)
            mllog.cache_clear()
            mllog.hyperparameters(dlrmv4_run_start_keys(run_config))
            tracker.init_stop()
            tracker.run_start()
        else:  # last: the RNG continues from the checkpoint, after model init drew from it
            extra = checkpoints.restore(self.resume, trainer).extra
            self.position.load_state_dict(extra["data"])
            loop = extra["loop"]
            recorder.load_state_dict(extra["metrics"])
            self.log(
                f"resumed from {self.resume.path} at step {trainer.step}, "
                f"data position {extra['data']}"
            )

        def save_checkpoint(trained_seconds: float) -> float:
            """Save the run as it stands after `trainer.step`; returns the seconds it took."""
            began = time.perf_counter()
            recorder.sync()
            extra = {
                "data": self.position.state_dict(),
                "mlperf": tracker.state_dict(),
                "mlperf_log_bytes": mllog.path.stat().st_size if ctx.is_main else 0,
                "metrics": recorder.state_dict(),
                "loop": loop | {"trained_seconds": trained_seconds},
                "run": config.identity(ctx.world_size),
                "run_id": self.run_id,
            }
            checkpoints.save(trainer, extra)
            return time.perf_counter() - began

        batch_size = self.global_batch_size
        try:
            self._train(
                trainer, schedule, loop, recorder, eval_batches, save_checkpoint, checkpoints
            )
        except BaseException:
            _failing()  # from here on a launcher's SIGTERM does not cut the record short
            stream = getattr(self, "_stream", None)
            if stream is not None:
                # The loader's workers stop before the log is written (a launcher's SIGTERM
                # may have killed them already: what that raises is not the failure).
                with contextlib.suppress(Exception):
                    stream.close()
            # The aborted run_stop counts the samples trained, not the last block's start.
            if tracker.state not in ("new", "stopped") and not mllog.run_stopped:
                tracker.run_stop("aborted", max(trainer.step * batch_size, tracker.samples_count))
            raise
        status = tracker.run_stop()
        recorder.close()
        plot = recorder.plot()
        samples = trainer.step * batch_size
        return {
            "eval_auc": round(loop["auc"], 6),
            "eval_ne": round(loop["ne"], 6),
            "train_samples": samples,
            "status": status,
            "samples_per_s": round(samples / loop["trained_seconds"], 1),
            "mlperf_log": str(mllog.path),
            "metrics_csv": str(recorder.path),
            "metrics_png": None if plot is None else str(plot),
            "weights_sha256": ckpt.state_digest(trainer),
            "resumed_from_step": None if self.resume is None else self.resume.step,
        }

    def _train(
        self,
        trainer: Trainer,
        schedule: list[int],
        loop: dict,
        recorder: MetricsRecorder,
        eval_batches: Iterable,
        save_checkpoint: Callable[[float], float],
        checkpoints: ckpt.Checkpointer | None,
    ) -> None:
        """Train and evaluate along `schedule` until its end or the target AUC; `loop` carries
        the epoch, the training seconds and the last evaluation's AUC and NE."""
        config, ctx, tracker = self.config, self.ctx, self.tracker
        position, batch_size = self.position, self.global_batch_size
        stream = self.train_stream(position.epoch, position.source, position.consumed)
        self._stream = stream
        for eval_at in schedule[tracker.num_evals :]:  # a resumed run skips logged evals
            if not tracker.in_block:
                tracker.block_start(trainer.step * batch_size, first_epoch_num=loop["epoch"])
            started = time.perf_counter()
            while trainer.step * batch_size < eval_at:
                loop["epoch"], batch = next(stream)
                loss = ctx.mean(trainer.train_step(batch))  # every rank sees a NaN
                step = trainer.step
                if not math.isfinite(loss):  # stop before a checkpoint could save the bad state
                    last = checkpoints.latest() if checkpoints else None
                    raise FloatingPointError(
                        f"non-finite loss {loss} at step {step} (epoch {loop['epoch']}); "
                        f"last good checkpoint: {last.path if last else 'none'}"
                    )
                position.advance(batch_size)
                seconds = loop["trained_seconds"] + time.perf_counter() - started
                logits, labels = (t.cpu().numpy() for t in trainer.last_scores)
                recorder.train_step(step, loss, logits, labels.round().astype(np.int64), seconds)
                # The schedule is asked at every step (its time decision is collective).
                due = checkpoints is not None and checkpoints.schedule.due(step)
                window_done = config.checkpoint_every_window and position.consumed == 0
                if checkpoints is not None and (due or window_done):
                    started += save_checkpoint(seconds)  # saving is not training time
            loop["trained_seconds"] += time.perf_counter() - started
            tracker.block_stop(eval_at, first_epoch_num=loop["epoch"])
            result = trainer.evaluate(rng_neutral(eval_batches), gather=ctx.concat)
            loop["auc"], loop["ne"] = result.auc, result.normalized_entropy
            recorder.evaluation(trainer.step, result.auc, result.loss, result.normalized_entropy)
            self.log(
                f"eval at step {trainer.step}: auc {result.auc:.4f} "
                f"(target {config.effective_target_auc}), ne {result.normalized_entropy:.4f}, "
                f"loss {result.loss:.4f}"
            )
            if tracker.eval(loop["auc"], eval_at, epoch_num=loop["epoch"]):
                break
