"""What a training run is asked to do (`RunConfig`, checked values only) and what it resolves to
once (`ResolvedRun`: the model and training config, the kernels, the device), before anything is
written.

`RunConfig`'s fields are the command line of tools/train.py: each field's metadata holds its
help text and, where the option is not `--<field-with-dashes>`, its flag (`flag`), so that the
command line is derived from the fields rather than written twice. `resolve_run` reads the
preset, the `--config` file, the `HSTU_*` variables and the `--set` items, decides the kernels
for the device (one `hstu_ops.KernelDecision`, which the run only narrows by its self-check)
and checks the closed division; it is the only place that reads them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import hstu_ops
import yambda_data
from hstu_model.config import (
    PRESETS,
    ConfigError,
    FeatureNames,
    HSTUConfig,
    ModelConfig,
    reference_departures,
)
from hstu_model.overrides import MAX_CONFIG_BYTES, resolve_config

__all__ = [
    "CLOSED_EVALS",
    "CLOSED_SIZE",
    "MIN_HISTORY",
    "MLPERF_TARGET_AUC",
    "REFERENCE_MIN_HISTORY",
    "RUN_IDENTITY",
    "SYNTHETIC_TARGET_AUC",
    "ResolvedRun",
    "RunConfig",
    "RunConfigError",
    "flag",
    "model_crosses",
    "resolve_run",
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
"""Earlier events a listen needs to become an anchor in the run's sample store, by default;
the MLPerf data scripts prepare the same store."""

REFERENCE_MIN_HISTORY = 4086
"""The reference's anchor rule (min_history = history_length = 4086), which the train and eval
sample counts pinned by the closed rules come from."""

CLOSED_EVALS = 1000
"""Evaluations of a closed run: one every 0.1% of the train samples (eval_every_data_pct)."""

MAX_EVALS = 100 * CLOSED_EVALS
"""Evaluations a run may make at most: each reads the whole test split, and the run holds
their schedule in memory."""

CLOSED_SIZE = "5b"
"""The dataset whose sample counts the closed rules pin."""


class RunConfigError(ConfigError):
    """A RunConfig field is wrong: `field` names it, `reason` says why (the message is
    `RunConfig.<field>: <reason>`)."""

    def __init__(self, field_name: str, reason: str) -> None:
        self.field, self.reason = field_name, reason
        super().__init__(f"RunConfig.{field_name}: {reason}")

    def __reduce__(self) -> tuple:  # pickled (rank 0's decision, to the others) with its fields
        return type(self), (self.field, self.reason)


def steps_arg(text: str) -> int | None:
    """`--steps`: a number of steps, or 'epoch' (None)."""
    if text == "epoch":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected a number of steps or 'epoch', got {text!r}") from None


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple | None = None,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
) -> Any:
    """A RunConfig field with its command-line option: `help` is the field's documentation."""
    extra = {"flag": flag, "choices": choices, "parse": parse, "metavar": metavar}
    return field(default=default, metadata={"help": help, **extra})


@dataclass(frozen=True)
class RunConfig:
    """One training run, as the command line gives it. Invalid values raise RunConfigError
    naming the field; nothing here reads a file or the environment (`resolve_run` does)."""

    preset: str = option("tiny", "model and optimizer preset", choices=tuple(sorted(PRESETS)))
    config_file: Path | None = option(
        None, "TOML/JSON/YAML overrides of the preset", flag="--config"
    )
    overrides: tuple[str, ...] = option(
        (),
        "override one config field (after --config and HSTU_* variables; repeatable)",
        flag="--set",
        metavar="SECTION.FIELD=VALUE",
    )
    data: Path | None = option(
        None,
        "Yambda root holding flat/<size>/multi_event.parquet and the item mappings (`yambda-data "
        "download` fetches one); without it, a synthetic dataset in the Yambda schema, made once "
        "in runs/cache/ (in --out/data when --out is given)",
    )
    size: str = option("50m", "dataset size folder under flat/")
    users: int = option(400, "users of the synthetic dataset")
    seed: int = option(0, "seed of data, init and order")
    steps: int | None = option(
        600,
        "training steps, or 'epoch': as many samples as the train windows hold (their "
        "anchor count is then the logged train_samples)",
        parse=steps_arg,
    )
    evals: int = option(3, "evaluations, evenly spaced")
    kernel: hstu_ops.Kernel = option(
        hstu_ops.Kernel.AUTO,
        "hstu-ops kernel family of the model; auto: triton on a CUDA or ROCm GPU, checked "
        "there first (an op whose kernel fails runs its PyTorch reference, said on stderr), "
        "native on the CPU (triton on the CPU only under TRITON_INTERPRET=1, for tests)",
        choices=tuple(k.value for k in hstu_ops.Kernel),
    )
    workers: int = option(1, "data loader worker processes")
    target_auc: float | None = option(
        None,
        f"AUC that counts as success (default: {MLPERF_TARGET_AUC}, the MLPerf target, on "
        f"--data; {SYNTHETIC_TARGET_AUC} on the synthetic data)",
    )
    out: Path | None = option(
        None,
        "run folder (default: a fresh runs/train-<UTC date-time>; with --resume auto the "
        "newest unfinished run under runs/ that checkpointed into --checkpoint-dir); one that "
        "holds another run is refused",
    )
    overwrite: bool = option(False, "replace the run that --out holds")
    checkpoint_dir: Path | None = option(None, "save checkpoints here (default: none)")
    checkpoint_every: int = option(100, "steps (0: off)")
    checkpoint_seconds: float = option(
        0.0, "also save when this many seconds passed since the last save (0: off)"
    )
    checkpoint_every_window: bool = option(
        False, "also save after the last batch of each time window"
    )
    keep_checkpoints: int = option(2, "newest kept")
    resume: Literal["never", "auto"] = option(
        "never",
        "auto: continue from the newest complete checkpoint in --checkpoint-dir, if any",
        choices=("never", "auto"),
    )
    dist_timeout_seconds: float = option(
        300.0, "under torchrun: how long a collective waits for a silent rank before failing"
    )
    min_history: int = option(
        MIN_HISTORY,
        f"earlier events a listen needs to become a sample (the reference: "
        f"{REFERENCE_MIN_HISTORY})",
    )
    history_strategy: str = option(
        "interleaved",
        "how a sample's history is drawn: interleaved (the reference's) or last_n",
        choices=yambda_data.HISTORY_STRATEGIES,
    )
    division: Literal["open", "closed"] = option(
        "open",
        "MLPerf division of the log; closed refuses settings the closed rules reject "
        "(see tools/mlperf/README.md)",
        choices=("open", "closed"),
    )

    def __post_init__(self) -> None:
        def require(ok: bool, field_name: str, message: str) -> None:
            if not ok:
                raise RunConfigError(field_name, message)

        if isinstance(self.overrides, list):
            object.__setattr__(self, "overrides", tuple(self.overrides))
        for spec in dataclasses.fields(self):  # inf passes every bound below
            value = getattr(self, spec.name)
            require(
                not isinstance(value, float) or math.isfinite(value),
                spec.name,
                f"must be finite, got {value}",
            )
        require(self.preset in PRESETS, "preset", f"unknown preset {self.preset!r}")
        kernels = tuple(k.value for k in hstu_ops.Kernel)
        require(
            self.kernel in kernels,
            "kernel",
            f"must be one of {', '.join(kernels)}, got {self.kernel!r}",
        )
        object.__setattr__(self, "kernel", hstu_ops.Kernel(self.kernel))
        require(self.steps is None or self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")
        require(
            1 <= self.evals <= (self.steps or self.evals),
            "evals",
            f"need 1 <= evals <= steps ({self.steps}), got {self.evals}",
        )
        require(
            self.evals <= MAX_EVALS,
            "evals",
            f"must be at most {MAX_EVALS:,} (a closed run makes {CLOSED_EVALS:,}), got "
            f"{self.evals:,}",
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
            field_name, _, message = str(error).removeprefix("SynthConfig.").partition(": ")
            require(False, field_name, message)
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

    def synth_config(self) -> yambda_data.SynthConfig:
        """The synthetic dataset the run trains on without `data` (with it, only `seed` and
        `size` are its own)."""
        users = self.users if self.data is None else yambda_data.SynthConfig.users
        return yambda_data.SynthConfig(users=users, seed=self.seed, size=self.size)

    @property
    def effective_target_auc(self) -> float:
        if self.target_auc is not None:
            return self.target_auc
        return SYNTHETIC_TARGET_AUC if self.data is None else MLPERF_TARGET_AUC


FLAGS = {f.name: f.metadata["flag"] for f in dataclasses.fields(RunConfig) if f.metadata["flag"]}
FLAGS["world_size"] = "ranks"  # of the identity: the number of ranks torchrun starts


def flag(field_name: str) -> str:
    """The command-line option that sets RunConfig `field_name`, as messages name it."""
    return FLAGS.get(field_name, "--" + field_name.replace("_", "-"))


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


RUN_RECORD_KEYS = frozenset({"run", "identity", "run_id"})
"""The keys a run adds to its effective config in config.json (dlrmv4_train.run)."""


def is_run_record(path: Path) -> bool:
    """Whether `path` is a run's config.json: a JSON object with `RUN_RECORD_KEYS` (anything
    unreadable is left to the config file's own checks)."""
    if path.suffix.lower() != ".json":
        return False
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return False
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.keys() >= RUN_RECORD_KEYS


def check_feature_names(model: ModelConfig) -> None:
    """A run feeds the model yambda-data's batches, whose keys are FeatureNames' defaults:
    another key would be looked up in vain once the first batch arrives (ConfigError naming
    the field)."""
    keys = dataclasses.asdict(FeatureNames())
    for name, key in dataclasses.asdict(model.features).items():
        if key != keys[name]:
            raise ConfigError(
                f"model.features.{name}: {key!r} is not the key of yambda-data's batches "
                f"({keys[name]!r}), which a run feeds the model; leave it at {keys[name]!r}"
            )


@dataclass(frozen=True)
class ResolvedRun:
    """A run resolved once, before it writes anything: the config as given, the model and
    training config it trains with, the kernels and the device it runs on."""

    config: RunConfig
    hstu: HSTUConfig
    """The preset, then the config file, the HSTU_* variables and the --set items; then the
    kernel and the seed; the sharding computed on the device when tables are sharded."""
    kernels: hstu_ops.KernelDecision
    """`config.kernel` decided for the device (`auto` resolved), every op's kernel with the
    reason where it runs its reference; the run narrows it once by the self-check on its
    device (`hstu_ops.verify_decision`) and hands it to the model."""
    device_type: str
    world_size: int

    @property
    def kernel(self) -> hstu_ops.Kernel:
        """The family that runs (`auto` resolved)."""
        return self.kernels.family

    def identity(self) -> dict[str, str | None]:
        """The fields that fix the result, and the number of ranks, as strings (stored in
        config.json and every checkpoint). The kernel is the one that runs: `auto` resumes a
        checkpoint of the kernel it picks here, and only that."""
        values = {name: getattr(self.config, name) for name in RUN_IDENTITY}
        values["kernel"] = self.kernel
        values["target_auc"] = self.config.effective_target_auc
        values["world_size"] = self.world_size
        return {name: None if v is None else str(v) for name, v in values.items()}

    def as_json(self, out: Path) -> dict:
        """The `run` section of config.json: every field, with the kernel that runs and the
        run folder `out`."""
        config = dataclasses.replace(self.config, kernel=self.kernel, out=out)

        def plain(value):
            return str(value) if isinstance(value, Path) else value

        values = {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
        return values | {
            "target_auc": config.effective_target_auc,
            "overrides": list(config.overrides),
        }


def _closed_division_problems(config: RunConfig, hstu: HSTUConfig) -> list[str]:
    """What keeps `config` from a closed run: the settings the closed rules pin that the run
    itself decides, and the resolved model's and recipe's departures from the reference."""
    wanted = {  # field: (what the closed rules need, whether it is set so)
        "data": ("<the Yambda download>", config.data is not None),
        "size": (CLOSED_SIZE, config.size == CLOSED_SIZE),
        "steps": ("None (one pass over the data; --steps epoch)", config.steps is None),
        "evals": (f"{CLOSED_EVALS}, one every 0.1% of the data", config.evals == CLOSED_EVALS),
        "min_history": (
            f"{REFERENCE_MIN_HISTORY}, the reference's samples",
            config.min_history == REFERENCE_MIN_HISTORY,
        ),
        "target_auc": (f"{MLPERF_TARGET_AUC}", config.target_auc in (None, MLPERF_TARGET_AUC)),
        "history_strategy": (
            "interleaved, the reference's samples",
            config.history_strategy == "interleaved",
        ),
        "preset": ("yambda-5b, the reference's model", config.preset == "yambda-5b"),
    }
    wrong = [
        f"{name}={need} (got {getattr(config, name)})"
        for name, (need, ok) in wanted.items()
        if not ok
    ]
    return wrong + [f"{d}, not the reference's" for d in reference_departures(hstu)]


def resolve_run(
    config: RunConfig,
    *,
    environ: Mapping[str, str] | None = None,
    device_type: str | None = None,
    world_size: int | None = None,
) -> ResolvedRun:
    """`config` resolved on this process's device (`device_type`, default: the one
    `init_distributed` picks) among `world_size` ranks (default: WORLD_SIZE): the kernels
    for the device (`hstu_ops.decide_kernel`), the model and training config (the preset, the config file, the
    HSTU_* variables of `environ` (default: os.environ) and the --set items), the contextual
    features yambda-data must know, an `out` that is a folder if it exists, and, for
    `division="closed"`, everything the closed rules pin. Raises ConfigError (a RunConfigError naming the field, or one naming the file,
    variable or item at fault)."""
    if config.out is not None and config.out.exists() and not config.out.is_dir():
        raise RunConfigError("out", f"{config.out} exists and is not a folder")
    if device_type is None:
        from hstu_model.training.distributed import device_type as current_device_type

        device_type = current_device_type()
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    try:
        kernels = hstu_ops.decide_kernel(config.kernel, device_type)
    except hstu_ops.KernelUnavailableError as error:
        raise ConfigError(_kernel_refusal(error)) from None  # (it names the option itself)
    if config.config_file is not None and is_run_record(config.config_file):
        raise RunConfigError(
            "config_file",
            f"{config.config_file} is a run's record (the config.json a run writes), not a "
            "config file: its effective config holds what that run's options chose (seed, "
            "kernel, device); resume that run with --resume auto, or put the sections to "
            "change in a file of their own",
        )
    hstu = resolve_config(
        config.preset, file=config.config_file, environ=environ, cli=config.overrides
    ).replace(model={"kernel": kernels.family}, train={"seed": config.seed})
    if world_size > 1 or device_type != "cpu":
        hstu = hstu.replace(sharding={"compute_device": device_type})
    model_crosses(hstu.model)  # yambda-data must know every contextual feature
    check_feature_names(hstu.model)
    if config.division == "closed":
        problems = _closed_division_problems(config, hstu)
        if problems:
            raise RunConfigError("division", "closed needs " + "; ".join(problems))
    return ResolvedRun(config, hstu, kernels, device_type, world_size)


def _kernel_refusal(error: hstu_ops.KernelUnavailableError) -> str:
    """hstu-ops' refusal of a kernel, worded with the option that chose it."""
    what = f"{flag('kernel')} {error.kernel}"
    if error.asked is not error.kernel:
        what = f"{flag('kernel')} {error.asked} (here {error.kernel})"
    instead = " or ".join(f"{flag('kernel')} {k}" for k in error.alternatives)
    return f"{what} cannot run on the {error.device_type} device: {error.reason}; use {instead}"


def field_types() -> dict[str, Any]:
    """RunConfig's field annotations, resolved (the command line's types come from them)."""
    return typing.get_type_hints(RunConfig)
