"""Train the HSTU ranking model end to end; print progress to stderr and one JSON line to stdout.

With no arguments it synthesizes a small dataset in the exact Yambda schema (with a planted,
learnable signal), trains the `tiny` preset on it, evaluates AUC on the held-out last day and
writes an MLPerf log. `--data ROOT --size SIZE` trains on a Yambda download instead.

Each run without `--out` gets a fresh folder, runs/train-<UTC date-time> (the synthetic data is
shared through runs/cache/), so no run overwrites another; `--resume auto` without `--out`
continues the newest unfinished one that no process is running. An `--out` that holds a run is
refused unless `--resume auto` continues it or `--overwrite` replaces it; `--resume auto` on an
unfinished run that saved no checkpoint yet starts it again (a requeued job repeats its command
line). A run locks its folder and its --checkpoint-dir while it lives: a second process there is
refused, naming the first. Everything given (options, the config file, HSTU_* variables, --set
items, the dataset, the memory the model needs) is checked before any file is created.
`--debug` or DLRMV4_DEBUG=1 adds the traceback to an error.

Exit status:
  0         the run ended: it reached the target AUC ("status": "success" in the JSON line) or
            ran its steps without reaching it ("status": "aborted", as its MLPerf log says)
  1         the run started and failed (its log ends with run_stop "aborted")
  2         a bad input, or a folder in use by another run: refused in one line on stderr,
            before anything was created or changed
  130, 143  interrupted by SIGINT or SIGTERM (its log ends with run_stop "aborted")

Under torchrun (`torchrun --nproc-per-node N tools/train.py ...`) every rank runs it: gloo on
CPU, NCCL/RCCL with one GPU per rank, the embedding tables sharded by TorchRec, each rank
training on its slice of every global batch (N times the preset's batch size).

`--checkpoint-dir DIR` saves crash-exact checkpoints every `--checkpoint-every` steps and/or
`--checkpoint-seconds` seconds; `--resume auto` continues from the newest complete one and ends
bit-identical to a run that was never interrupted (compare `weights_sha256`). The run itself is
hstu_model.training.run (see its docstring); this script only reads the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

from hstu_model import ConfigError
from hstu_model.checkpoint import CheckpointError
from hstu_model.config import PRESETS
from hstu_model.training.distributed import RankLostError
from hstu_model.training.kernels import KERNELS
from hstu_model.training.run import REFERENCE_MIN_HISTORY, RunConfig, RunRefused, flag, train
from mlperf_compliance import RunInterrupted
from yambda_data import HISTORY_STRATEGIES

DEFAULTS = argparse.Namespace(**{f.name: f.default for f in dataclasses.fields(RunConfig)})
"""RunConfig's defaults, read without building one (that resolves the config, and a bad
HSTU_* variable must not break --help)."""
DEBUG_VARIABLE = "DLRMV4_DEBUG"
"""Set to 1 for tracebacks with errors, as --debug does."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    # yambda-5b's tables (about 600 GB) need GPUs under torchrun (sharded by TorchRec).
    add("--preset", default=DEFAULTS.preset, choices=sorted(PRESETS))
    add("--config", dest="config_file", type=Path, help="TOML/JSON/YAML overrides of the preset")
    add(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one config field (after --config and HSTU_* variables; repeatable)",
    )
    add("--data", type=Path, help="Yambda root (default: synthesize one under --out)")
    add("--size", default=DEFAULTS.size, help="dataset size folder under flat/ (default 50m)")
    add("--users", type=int, default=DEFAULTS.users, help="users of the synthetic dataset")
    add("--seed", type=int, default=DEFAULTS.seed, help="seed of data, init and order")
    add(
        "--steps",
        type=steps_arg,
        default=DEFAULTS.steps,
        help="training steps, or 'epoch': as many samples as the train windows hold (their "
        "anchor count is then the logged train_samples)",
    )
    add("--evals", type=int, default=DEFAULTS.evals, help="evaluations, evenly spaced")
    add(
        "--kernel",
        choices=KERNELS,
        default=DEFAULTS.kernel,
        help="hstu-ops kernel family of the model; auto: triton on a CUDA or ROCm GPU, native "
        "on the CPU (triton on the CPU only under TRITON_INTERPRET=1, for tests)",
    )
    add("--workers", type=int, default=DEFAULTS.workers, help="data loader worker processes")
    add(
        "--target-auc",
        type=float,
        help="AUC that counts as success (default: 0.75, the MLPerf target, on --data; "
        "0.65 on the synthetic data)",
    )
    add(
        "--out",
        type=Path,
        default=DEFAULTS.out,
        help="run folder (default: a fresh runs/train-<UTC date-time>; with --resume auto the "
        "newest unfinished run under runs/ that checkpointed into --checkpoint-dir); one that "
        "holds another run is refused",
    )
    add("--overwrite", action="store_true", help="replace the run that --out holds")
    add("--checkpoint-dir", type=Path, help="save checkpoints here (default: none)")
    add("--checkpoint-every", type=int, default=DEFAULTS.checkpoint_every, help="steps (0: off)")
    add(
        "--checkpoint-seconds",
        type=float,
        default=DEFAULTS.checkpoint_seconds,
        help="also save when this many seconds passed since the last save (0: off)",
    )
    add(
        "--checkpoint-every-window",
        action="store_true",
        help="also save after the last batch of each time window",
    )
    add("--keep-checkpoints", type=int, default=DEFAULTS.keep_checkpoints, help="newest kept")
    add(
        "--resume",
        choices=("never", "auto"),
        default=DEFAULTS.resume,
        help="auto: continue from the newest complete checkpoint in --checkpoint-dir, if any",
    )
    add(
        "--dist-timeout-seconds",
        type=float,
        default=DEFAULTS.dist_timeout_seconds,
        help="under torchrun: how long a collective waits for a silent rank before failing",
    )
    add(
        "--min-history",
        type=int,
        default=DEFAULTS.min_history,
        help=f"earlier events a listen needs to become a sample (the reference: "
        f"{REFERENCE_MIN_HISTORY})",
    )
    add(
        "--history-strategy",
        choices=HISTORY_STRATEGIES,
        default=DEFAULTS.history_strategy,
        help="how a sample's history is drawn: interleaved (the reference's) or last_n",
    )
    add(
        "--division",
        choices=("open", "closed"),
        default=DEFAULTS.division,
        help="MLPerf division of the log; closed refuses settings the closed rules reject "
        "(see tools/mlperf/README.md)",
    )
    add(
        "--debug",
        action="store_true",
        help=f"print a traceback with an error (also with {DEBUG_VARIABLE}=1)",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        run_config(args)
    except ConfigError as error:
        p.error(flag_message(error))
    return args


class OneLineParser(argparse.ArgumentParser):
    """Reports a bad argument as one line (`train.py: error: ...`, status 2), no usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def flag_message(error: Exception) -> str:
    """ "RunConfig.min_history: ..." read as "--min-history: ..."; other messages unchanged."""
    text = str(error)
    if not text.startswith("RunConfig."):
        return text
    field, _, message = text.removeprefix("RunConfig.").partition(": ")
    return f"{flag(field)}: {message}"


def steps_arg(text: str) -> int | None:
    if text == "epoch":
        return None
    try:
        return int(text)
    except ValueError:
        message = f"expected a number of steps or 'epoch', got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def debugging(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")


def run_config(args: argparse.Namespace) -> RunConfig:
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return RunConfig(**{k: v for k, v in vars(args).items() if k in names})


def main(argv: list[str] | None = None) -> dict:
    summary = train(run_config(parse_args(argv)))
    if os.environ.get("RANK", "0") == "0":  # under torchrun every rank returns it
        print(json.dumps(summary), flush=True)
    return summary


def quiet_exit() -> None:
    """A failure is being reported: a launcher's SIGTERM must not cut the message short."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    try:
        main()
    except (ConfigError, RunRefused, FileNotFoundError, FileExistsError) as error:
        # A bad input, refused before the run created or changed anything.
        quiet_exit()
        if debugging(sys.argv[1:]):
            raise
        print(f"train.py: error: {flag_message(error)}", file=sys.stderr)
        sys.exit(2)
    except RunInterrupted as interrupted:
        # A signal ended the run (under torchrun: often the launcher, after another rank died
        # before this one noticed); its log ends with run_stop "aborted".
        quiet_exit()
        rank, ranks = os.environ.get("RANK"), os.environ.get("WORLD_SIZE", "1")
        where = f"rank {rank} of {ranks}: " if ranks != "1" and rank is not None else ""
        print(f"train.py: {where}{interrupted}", file=sys.stderr)
        sys.exit(interrupted.code)
    except (FloatingPointError, RankLostError, CheckpointError, OSError, ValueError) as error:
        # The run started and failed; its log ends with run_stop "aborted".
        quiet_exit()
        if debugging(sys.argv[1:]):
            raise
        print(f"train.py: {error}", file=sys.stderr)
        sys.exit(1)
