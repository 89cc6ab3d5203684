"""dlrmv4_train.run's state outside the run folder: the signal state a run owns (`RunSignals`)
and what its loop carries through a checkpoint (`LoopState`)."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest

from dlrmv4_train.run import LoopState, RunInterrupted, RunSignals


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
