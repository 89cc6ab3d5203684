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
  1         the run started and failed (its log ends with run_stop "aborted"; a failure
            while preparing the data, before the log, such as a full disk, leaves none)
  2         a bad input, or a folder in use by another run: refused in one line on stderr,
            before anything was created or changed
  130, 143  interrupted by SIGINT or SIGTERM (its log ends with run_stop "aborted")

Under torchrun (`torchrun --nproc-per-node N tools/train.py ...`) every rank runs it: gloo on
CPU, NCCL/RCCL with one GPU per rank, the embedding tables sharded by TorchRec, each rank
training on its slice of every global batch (N times the preset's batch size).

`--checkpoint-dir DIR` saves crash-exact checkpoints every `--checkpoint-every` steps and/or
`--checkpoint-seconds` seconds; `--resume auto` continues from the newest complete one and ends
bit-identical to a run that was never interrupted (compare `weights_sha256`). The run itself is
dlrmv4_train.run (see its docstring); this script only reads the command line, whose
options are RunConfig's fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import typing
from pathlib import Path
from typing import NoReturn

import dlrmv4_cli

# The run's one entry; its names load their modules when first used, so --help and a refused
# argument answer before torch is imported.
import dlrmv4_train as training


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written; each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == []
        if unset or action.default is argparse.SUPPRESS or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def _value_parser(parse: typing.Callable[[str], object]) -> typing.Callable[[str], object]:
    """`parse` with its ValueError reported by argparse as the option's error."""

    def checked(text: str) -> object:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return checked


def build_parser() -> argparse.ArgumentParser:
    """One option per RunConfig field (its flag, default, type, choices and help come from the
    field), and --debug."""
    p = dlrmv4_cli.OneLineParser(
        description=__doc__, formatter_class=HelpFormatter, help_command=""
    )
    types = training.field_types()
    for spec in dataclasses.fields(training.RunConfig):
        meta, kind = spec.metadata, types[spec.name]
        base = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
        option = {"dest": spec.name, "help": meta["help"], "default": spec.default}
        if kind is bool:
            option["action"] = "store_true"
        elif typing.get_origin(kind) is tuple:
            option |= {"action": "append", "default": list(spec.default)}
        elif meta["choices"] is not None:
            option["choices"] = meta["choices"]
        elif meta["parse"] is not None:
            option["type"] = _value_parser(meta["parse"])
        elif base[0] in (int, float, Path):
            option["type"] = base[0]
        if meta["metavar"] is not None:
            option["metavar"] = meta["metavar"]
        p.add_argument(training.flag(spec.name), **option)
    dlrmv4_cli.add_debug_option(p)
    return p


def flag_message(error: Exception) -> str:
    """A RunConfig field's error worded with its option ("--min-history: ..."); other
    messages unchanged."""
    if isinstance(error, training.RunConfigError):
        return f"{training.flag(error.field)}: {error.reason}"
    return str(error)


def run_config(args: argparse.Namespace) -> training.RunConfig:
    names = {f.name for f in dataclasses.fields(training.RunConfig)}
    return training.RunConfig(**{k: v for k, v in vars(args).items() if k in names})


def parse_args(argv: list[str] | None = None) -> training.ResolvedRun:
    """The run the command line asks for, resolved (once); a bad value exits with one line."""
    p = build_parser()
    args = p.parse_args(argv)
    try:
        return training.resolve_run(run_config(args))
    except training.ConfigError as error:
        p.error(flag_message(error))


def debugging(argv: list[str]) -> bool:
    return dlrmv4_cli.debug_requested("--debug" in argv)


def main(argv: list[str] | None = None) -> dict:
    run = parse_args(argv)  # before `training.train` loads torch: --help answers at once
    summary = training.train(run, interruption_line=interruption_line)
    if os.environ.get("RANK", "0") == "0":  # under torchrun every rank returns it
        print(json.dumps(summary), flush=True)
    return summary


def interrupted_by_ctrl_c(error: BaseException) -> bool:
    """A KeyboardInterrupt, or an error raised while handling one: Ctrl-C in the first
    seconds lands in the imports, where a module that catches it re-raises it as its own
    (an ImportError, say) with the KeyboardInterrupt as its context."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def interruption_line(error: training.RunInterrupted) -> str:
    """What a rank says when a signal ended its run; under torchrun the signal is often the
    launcher's, sent after another rank died before this one noticed."""
    rank, ranks = os.environ.get("RANK"), os.environ.get("WORLD_SIZE", "1")
    where = f"rank {rank} of {ranks}: " if ranks != "1" and rank is not None else ""
    return f"train.py: {where}{error}"


def exit_for(error: BaseException) -> NoReturn:
    """Say why the run ended in one line on stderr and exit with its status (see the module
    docstring); re-raise what is not the run's to report, or anything under --debug."""
    # From here on a launcher's SIGTERM must not cut the message short.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    if isinstance(error, training.RunInterrupted):
        print(interruption_line(error), file=sys.stderr)
        sys.exit(error.code)
    if interrupted_by_ctrl_c(error):  # before the run started
        sys.exit(dlrmv4_cli.interrupted("train.py"))
    if debugging(sys.argv[1:]) or not isinstance(error, Exception):
        raise error
    ended = training.ending(error)
    if ended is training.Ending.REFUSED:  # refused before anything was written
        print(dlrmv4_cli.error_line("train.py", flag_message(error)), file=sys.stderr)
        sys.exit(dlrmv4_cli.EXIT_REFUSED)
    if ended is training.Ending.FAILED:  # started and failed: the log says aborted
        # (an error of too many open files says what the limit is)
        print(f"train.py: {dlrmv4_cli.describe(error, (Exception,))}", file=sys.stderr)
        sys.exit(dlrmv4_cli.EXIT_FAILED)
    raise error


if __name__ == "__main__":
    try:
        main()
    except BaseException as error:
        if type(error) is SystemExit:  # argparse's (a RunInterrupted is a SystemExit too)
            raise
        exit_for(error)
