"""dlrmv4_train.run's state outside the run folder: how a raised error ends a run (`ending`),
the signal state a run owns (`RunSignals`) and what its loop carries through a checkpoint
(`LoopState`)."""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import signal

import pytest

import yambda_data
from dlrmv4_train.run import (
    _FAILURES,
    _REFUSALS,
    Ending,
    LoopState,
    RunInterrupted,
    RunRefused,
    RunSignals,
    ending,
)
from dlrmv4_train.run_config import RunConfigError
from hstu_model.checkpoint import CheckpointError
from hstu_model.config import ConfigError
from hstu_model.training.distributed import RankLostError


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("model.num_layers: must be >= 1, got 0"),
        RunConfigError("min_history", "must be >= 1, got 0"),
        RunRefused("--out runs/x: holds another run"),
        FileNotFoundError("no file data/flat/50m/multi_event.parquet"),
        FileExistsError("runs/x exists"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_bad_inputs_are_refusals(error):
    """Each is also a failure type (a ConfigError and a RunRefused are ValueErrors, the file
    errors OSErrors): the refusal is what counts."""
    assert isinstance(error, _FAILURES)
    assert ending(error) is Ending.REFUSED


@pytest.mark.parametrize(
    "error",
    [
        ValueError("runs/x/prepared: no time window holds a global batch"),
        OSError(errno.ENOSPC, "No space left on device"),
        FloatingPointError("non-finite loss nan at step 3"),
        CheckpointError("ckpt/step-2: tensors.distcp has 10 bytes, the manifest says 20"),
        RankLostError("rank 1 stopped answering"),
        yambda_data.StoreError("prepared/manifest.json: damaged"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_errors_of_a_started_run_are_failures(error):
    assert ending(error) is Ending.FAILED


@pytest.mark.parametrize("error", [RuntimeError("a bug"), KeyboardInterrupt(), TypeError()])
def test_other_errors_are_not_the_runs_to_report(error):
    assert ending(error) is None


def test_every_refusal_type_that_is_also_a_failure_type_is_a_refusal():
    overlapping = [
        refusal
        for refusal, failure in itertools.product(_REFUSALS, _FAILURES)
        if issubclass(refusal, failure)
    ]
    assert ConfigError in overlapping  # the overlap this order exists for
    for refusal in overlapping:
        assert ending(refusal.__new__(refusal)) is Ending.REFUSED, refusal


def test_a_config_error_exits_2_through_the_command_line(train_tool, capsys, monkeypatch):
    monkeypatch.delenv("DLRMV4_DEBUG", raising=False)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(SystemExit) as exited:
            train_tool.exit_for(ConfigError("model.num_layers: must be >= 1, got 0"))
    finally:  # exit_for ignores the signals from then on, as a process about to exit
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().endswith("model.num_layers: must be >= 1, got 0")


def test_a_signal_ends_the_run_unless_it_is_failing_or_held():
    signals = RunSignals()
    with pytest.raises(RunInterrupted) as raised:
        signals.handle(signal.SIGTERM, None)
    assert raised.value.code == 128 + signal.SIGTERM

    # Held while a loader starts its workers, the first is raised after.
    with pytest.raises(RunInterrupted) as raised, signals.held():
        signals.handle(signal.SIGINT, None)
        signals.handle(signal.SIGTERM, None)
    assert raised.value.code == 128 + signal.SIGINT and signals.deferred is None

    signals.failing = True  # a failing run writes its abort record whole
    signals.handle(signal.SIGTERM, None)
    with signals.held():
        signals.handle(signal.SIGTERM, None)


def test_a_signal_in_another_process_is_not_the_runs():
    """A loader worker forked with the handler: the signal is the trainer's."""
    signals = RunSignals(trainer_pid=os.getpid() + 1)
    signals.handle(signal.SIGTERM, None)
    with signals.held():
        signals.handle(signal.SIGTERM, None)


def test_two_runs_do_not_share_signal_state():
    first, second = RunSignals(), RunSignals()
    first.failing = True
    with pytest.raises(RunInterrupted):
        second.handle(signal.SIGTERM, None)


def test_the_loop_state_keeps_the_checkpoint_format():
    """A checkpoint's `loop` entry: the same keys, in the same order, as the runs saved before
    the state was typed (a dict literal then), so that their checkpoints resume."""
    saved_before = json.loads('{"epoch": 1, "trained_seconds": 12.5, "auc": 0.61, "ne": 0.97}')
    state = LoopState.from_state_dict(saved_before)
    assert state == LoopState(epoch=1, trained_seconds=12.5, auc=0.61, ne=0.97)
    assert json.dumps(state.state_dict()) == json.dumps(saved_before)
    fresh = LoopState().state_dict()
    assert list(fresh) == ["epoch", "trained_seconds", "auc", "ne"]
    assert fresh["epoch"] == 0 and fresh["trained_seconds"] == 0.0
    assert math.isnan(fresh["auc"]) and math.isnan(fresh["ne"])
    with pytest.raises(KeyError, match="ne"):
        LoopState.from_state_dict({"epoch": 1, "trained_seconds": 1.0, "auc": 0.5})


def test_rank_zero_s_errors_reach_the_other_ranks_whole():
    """`_agree` pickles rank 0's error to the others: each kind a run reports comes back with
    its type, message and fields."""
    import pickle

    for error in [
        RunConfigError("steps", "must be positive, got 0"),
        RunRefused("runs/x: refused"),
        yambda_data.SchemaError("raw/multi_event.parquet", "uid", "null value"),
        yambda_data.WindowTooSmall("raw/multi_event.parquet", 1024, 253, 86_400),
    ]:
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), vars(copy)) == (type(error), str(error), vars(error))
