"""The end-to-end DLRMv4 run: streaming train-eval over time windows, MLPerf log, resume.

`train(RunConfig(...))` (or a `ResolvedRun`) prepares the sample store (yambda-data), trains a
preset over the train windows in time order (shuffled within each window), evaluates on the
test split at the MLPerf schedule, and writes an MLPerf log, the effective config and,
optionally, crash-exact checkpoints. It returns the run's summary (a JSON-able dict).

With `checkpoint_dir` set, `resume="auto"` continues from the newest complete checkpoint: same
weights, optimizer states, RNG, data position (mid-window), eval schedule and MLPerf log (no
second run_start; records written after the checkpoint by the crashed process move to
mlperf.log.discarded), so the run ends bit-identical to one that was never interrupted (compare
`weights_sha256`). A non-finite loss stops the run before it can be checkpointed.

This module is the run's public entry: it re-exports what a command line needs (`RunConfig`,
`resolve_run`, `flag`), how a run that raised ended (`ending(error)`: refused before anything
was written, or started and failed) and `RunInterrupted` (stopped by a signal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

import hstu_ops
import yambda_data
from dlrmv4_train.fork_memory import exclude_from_forks
from dlrmv4_train.progress import Progress
from dlrmv4_train.recorder import MetricsRecorder
from dlrmv4_train.run_config import (
    MIN_HISTORY,
    REFERENCE_MIN_HISTORY,
    RUN_IDENTITY,
    ResolvedRun,
    RunConfig,
    RunConfigError,
    field_types,
    flag,
    model_crosses,
    resolve_run,
)
from dlrmv4_train.run_folders import (
    CONFIG,
    DATA_FILES,
    SUMMARY,
    RunRefused,
    claim_run,
    data_fingerprint,
    data_root,
    remove_run_files,
    write_run_record,
)
from hstu_model import checkpoint as ckpt
from hstu_model.atomic_files import atomic_write_text
from hstu_model.config import ID_TABLES, ConfigError, HSTUConfig
from hstu_model.memory import available_memory, format_bytes, training_memory
from hstu_model.model import HSTURanker
from hstu_model.quiet import quiet_fx_tracing_notice
from hstu_model.sharding import shard_model
from hstu_model.training.distributed import Distributed, RankLostError, init_distributed
from hstu_model.training.trainer import Trainer, seed_everything
from mlperf_compliance import (
    DLRMv4RunConfig,
    MLPerfLogger,
    RunInterrupted,
    RunTracker,
    dlrmv4_run_start_keys,
    eval_schedule,
    first_eval_samples,
)
from yambda_data.dataset import STORE_DIR
from yambda_data.loader import make_loader
from yambda_data.schema import check_multi_event_header, mapping_path, multi_event_path
from yambda_data.store import StoreInUse

__all__ = [
    "MIN_HISTORY",
    "REFERENCE_MIN_HISTORY",
    "RUN_IDENTITY",
    "Ending",
    "ResolvedRun",
    "RunConfig",
    "RunConfigError",
    "RunInterrupted",
    "RunRefused",
    "ending",
    "field_types",
    "flag",
    "model_crosses",
    "resolve_run",
    "train",
]


class Ending(enum.Enum):
    """How a run that raised ended, as its command line reports it."""

    REFUSED = "refused"
    """A bad input, refused before anything was created or changed."""
    FAILED = "failed"
    """The run started and failed (its log ends with run_stop "aborted")."""


_REFUSALS = (ConfigError, RunRefused, FileNotFoundError, FileExistsError)
_FAILURES = (
    FloatingPointError,
    RankLostError,
    ckpt.CheckpointError,
    OSError,
    ValueError,
    yambda_data.StoreError,
)


def ending(error: BaseException) -> Ending | None:
    """How `train` ended when it raised `error`; None for an error that is not the run's to
    report (a bug). The refusals are asked first: a ConfigError or a RunRefused is also a
    ValueError, a FileNotFoundError also an OSError."""
    if isinstance(error, _REFUSALS):
        return Ending.REFUSED
    if isinstance(error, _FAILURES):
        return Ending.FAILED
    return None


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rng_neutral(batches: Iterable, signals: RunSignals) -> Iterator:
    """The batches of a loader; starting its iterator draws from torch's global generator, which
    would shift the model's random numbers by where a run was resumed, so that draw is undone.

    A signal that arrives while the iterator starts its workers is raised once they have
    started (raised inside, it would leave a half-built iterator that fails again when
    collected), and when the batches are left early (an error, a signal, `close()`), the
    loader's workers are shut down then and there, not whenever the iterator is collected."""
    with signals.held(), torch.random.fork_rng(devices=[]):
        iterator = iter(batches)
    try:
        yield from iterator
    except BaseException:
        shutdown = getattr(iterator, "_shutdown_workers", None)  # a multi-process DataLoader's
        if shutdown is not None:
            with contextlib.suppress(Exception):  # its workers may have died of the signal
                shutdown()
        raise


def check_inputs(config: RunConfig) -> None:
    """What `train` checks of the dataset before it creates anything: the files of `data`
    exist, and the events file's parquet metadata reads as the Yambda schema (its rows are
    checked as the run preprocesses them)."""
    if config.data is not None:
        events = multi_event_path(config.data, config.size)
        paths = [events, *(mapping_path(config.data, kind) for kind in ("artist", "album"))]
        for path in paths:
            if not path.is_file():
                raise RunRefused(
                    f"--data {config.data} --size {config.size}: no file {path}; fetch the "
                    f"dataset with `yambda-data download --size {config.size} --dest "
                    f"{config.data}`"
                )
        try:
            check_multi_event_header(events)
        except (yambda_data.SchemaError, yambda_data.InputFileError, StoreInUse) as error:
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


def data_bounds(config: RunConfig) -> tuple[int, int, str]:
    """More train samples than the dataset can have, more events than a user of it can have,
    and why, known before it is read: a sample is a listen, an event a row, so no more than
    the rows of a download's events file (its parquet metadata); the synthetic dataset's users
    times the listens it gives a user at most, and three events a listen at most (the listen,
    a reaction, its undo)."""
    if config.data is not None:
        import polars as pl  # yambda-data's reader of the file; the count is in its metadata

        events = multi_event_path(config.data, config.size)
        rows = pl.scan_parquet(events).select(pl.len()).collect().item()
        return rows, rows, f"the {rows:,} rows of {events}"
    synth = config.synth_config()
    listens = synth.max_events_per_user
    why = f"{synth.users:,} synthetic users of at most {listens:,} listens each"
    return synth.users * listens, 3 * listens, why


EXACT_SAMPLES = 2**53
"""The most train samples a run may ask for: the MLPerf eval schedule is computed in floating
point, exact up to here."""


def comm_precision(all_to_all: list[dict[str, str | None]]) -> str:
    """The MLPerf name of the lowest precision among the embedding all-to-all codecs (the
    `all_to_all` of `shard_model`'s summary, forward and backward; None: no codec, fp32)."""
    codecs = {a[direction] or "FP32" for a in all_to_all for direction in ("forward", "backward")}
    for codec, name in (("FP8", "fp8"), ("INT8", "int8"), ("FP16", "fp16"), ("BF16", "bfloat16")):
        if codec in codecs:
            return name
    unknown = codecs - {"FP32"}
    if unknown:
        raise ValueError(f"all-to-all codec(s) {sorted(unknown)}: no MLPerf precision name")
    return "fp32"


def schedule_refusal(config: RunConfig, hstu: HSTUConfig, world_size: int) -> str | None:
    """Why the steps, evaluations and global batch make no run, told before the data is
    prepared (a dataset too small for them is found from its raw events, `prepare_data`, or
    once it is prepared, `window_refusal`), or None."""
    batch = hstu.train.batch_size * world_size
    most, most_history, why = data_bounds(config)
    if config.min_history >= most_history:
        return (
            f"--min-history: no listen of the dataset can have {config.min_history:,} earlier "
            f"events ({why}); use a lower --min-history"
        )
    if batch > most:
        return (
            f"train.batch_size: a global batch of {batch:,} samples ({world_size} rank(s) x "
            f"{hstu.train.batch_size:,}) is more than the dataset can hold ({why}); use a "
            "smaller train.batch_size or more data"
        )
    if config.steps is None:  # the dataset's size, known once it is prepared
        return None
    samples = config.steps * batch
    if samples > EXACT_SAMPLES:
        return (
            f"--steps: {config.steps:,} steps of {batch:,} samples are more than the "
            f"{EXACT_SAMPLES:,} train samples whose evaluation schedule is exact"
        )
    first = first_eval_samples(batch, train_samples=samples, eval_every_data_pct=1 / config.evals)
    if first > samples:
        return (
            f"--steps: {samples:,} train samples in {config.evals} evaluation(s) at a global "
            f"batch of {batch:,}: too short for a first evaluation (at {first:,})"
        )
    return None


def window_refusal(store: yambda_data.SampleStore, hstu: HSTUConfig, world_size: int) -> str | None:
    """Why no time window of `store` holds one global batch (batches never span windows, so
    the run would have no batch to train), or None; told before the run writes a file, so
    the corrected command runs in the same folder on the data already prepared."""
    anchors = store.window_sizes()
    batch = hstu.train.batch_size * world_size
    largest = int(anchors.max()) if anchors.size else 0
    if largest >= batch:
        return None
    return (
        f"train.batch_size: a global batch of {batch:,} samples ({world_size} rank(s) x "
        f"{hstu.train.batch_size:,}) is more than any time window of {store.path} holds (the "
        f"largest of its {anchors.size:,} windows has {largest:,} train anchors at min_history "
        f"{store.min_history}); use a smaller train.batch_size, fewer ranks, more data or a "
        "lower --min-history"
    )


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


_SIGNALS = (signal.SIGTERM, signal.SIGINT)

STOP_GRACE_SECONDS = 20.0
"""How long a stop signal may wait for the trainer's main thread before the watchdog ends the
process (`RunSignals.watched`): inside the 30 s that torchrun and SLURM (KillWait) leave
between SIGTERM and SIGKILL, with room for the abort record, and long enough for one slow call
that does return (a large tensor written in one piece) to end first; a Python handler in a
working run answers in milliseconds."""

_WATCHDOG_FDS: set[int] = set()
"""The wakeup fds of this process's watchdogs (`RunSignals.watched`)."""


def _drop_watchdog_fd_in_child() -> None:
    """A forked child (a loader worker) inherits the wakeup fd: a signal it received would
    reach its parent's watchdog as the parent's own."""
    if not _WATCHDOG_FDS:
        return
    try:
        inherited = signal.set_wakeup_fd(-1)
    except ValueError:  # not forked from the main thread: Python keeps no wakeup fd there
        return
    if inherited not in _WATCHDOG_FDS:
        signal.set_wakeup_fd(inherited)
    _WATCHDOG_FDS.clear()


os.register_at_fork(after_in_child=_drop_watchdog_fd_in_child)


@dataclasses.dataclass
class RunSignals:
    """How SIGTERM and SIGINT end the run that owns this object: `handle` raises
    RunInterrupted in the trainer's process, unless the run is already failing (then they are
    ignored) or a loader is starting its workers (then they are kept and raised after); and,
    inside `watched`, how the process ends when its main thread cannot run `handle`."""

    trainer_pid: int = dataclasses.field(default_factory=os.getpid)
    """The process whose run the handler ends. A loader worker is forked with the handler and
    still in the trainer's process group for a moment: a signal sent to the group then is the
    trainer's, which stops its workers itself."""
    failing: bool = False
    """Set once the run has started to fail: from then on SIGTERM and SIGINT are ignored."""
    deferred: list[int] | None = None
    """While a loader starts its workers: the signals received meanwhile, raised after."""
    grace_seconds: float = STOP_GRACE_SECONDS
    """How long `watched` waits for `handle` after a stop signal arrived."""
    answered: bool = False
    """Whether `handle` has run in the trainer's process: from then on its main thread is
    acting on the signals, whatever it decided."""
    abort_record: Callable[[], None] | None = None
    """Writes the run's abort record (run_stop aborted), set while the run logs: what the
    watchdog does before it ends a process whose main thread did not answer."""

    def handle(self, signum: int, frame: object) -> None:
        if os.getpid() == self.trainer_pid:
            self.answered = True
        if self.failing or os.getpid() != self.trainer_pid:
            return
        if self.deferred is not None:
            self.deferred.append(signum)
            return
        raise RunInterrupted(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """SIGTERM and SIGINT received inside are raised (RunInterrupted) when it ends."""
        self.deferred = []
        try:
            yield
        finally:
            pending, self.deferred = self.deferred, None
            if pending and not self.failing:
                raise RunInterrupted(pending[0])

    def fail(self) -> None:
        """The run is failing: SIGTERM and SIGINT are ignored until `train` returns (a launcher
        such as torchrun sends SIGTERM to every rank as soon as one dies; the abort record and
        the failure's message must still be written whole), and exiting children no longer
        raise (the DataLoader's SIGCHLD handler raises when its workers die of that SIGTERM)."""
        self.failing = True
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                signal.signal(signum, self.handle)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    @contextlib.contextmanager
    def watched(self, interruption_line: Callable[[RunInterrupted], str] = str) -> Iterator[None]:
        """A stop signal that the main thread has not answered (`handle`) `grace_seconds`
        after it arrived ends the process from a watchdog thread: the abort record, then
        ``interruption_line(RunInterrupted)`` and why on stderr, then exit status 128 + the
        signal, without the rest of the cleanup. Python runs a signal's handler only between
        bytecodes of the main thread: one blocked in a call that does not return (a gloo
        collective whose peer is gone but whose sockets stay open, a device wait) would
        otherwise stay deaf until the launcher's SIGKILL, and its log would have no run_stop.
        The signal's arrival is seen through Python's wakeup fd, which its C-level handler
        writes whatever the main thread does. Main thread only; elsewhere a no-op."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        _WATCHDOG_FDS.add(write_fd)
        ended = threading.Event()
        watchdog = threading.Thread(
            target=self._watch,
            args=(read_fd, ended, interruption_line),
            name="stop-signal watchdog",
            daemon=True,
        )
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        try:
            watchdog.start()
            yield
        finally:
            signal.set_wakeup_fd(previous)
            _WATCHDOG_FDS.discard(write_fd)
            ended.set()
            # Wakes the watchdog if it waits for a signal (a full pipe wakes it as well).
            with contextlib.suppress(BlockingIOError):
                os.write(write_fd, b"\0")
            watchdog.join()
            os.close(read_fd)
            os.close(write_fd)

    def _watch(
        self, read_fd: int, ended: threading.Event, interruption_line: Callable[..., str]
    ) -> None:
        while not ended.is_set():
            received = os.read(read_fd, 256)
            stops = [signum for signum in received if signum in _SIGNALS]
            # A handler of another's (none inside a run today) answers for itself.
            if not stops or self.answered or signal.getsignal(stops[0]) != self.handle:
                continue
            signum = stops[0]
            deadline = time.monotonic() + self.grace_seconds
            while not (self.answered or ended.is_set()) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not (self.answered or ended.is_set()):
                self._end_unanswered(signum, interruption_line)

    def _end_unanswered(self, signum: int, interruption_line: Callable[..., str]) -> None:
        error = RunInterrupted(signum)
        record = self.abort_record
        if record is not None:
            with contextlib.suppress(Exception):  # what it could not write is lost either way
                record()
        why = (
            f"{interruption_line(error)}; it was not answered within {self.grace_seconds:g} s "
            "(a call waiting on another rank or on the device did not return), so the "
            "process ended without the rest of its cleanup\n"
        )
        # Not through sys.stderr: a main thread blocked inside a write holds its lock.
        with contextlib.suppress(OSError):
            os.write(2, why.encode())
        os._exit(error.code)


def train(
    run: RunConfig | ResolvedRun,
    log: Callable[[str], None] = _stderr,
    interruption_line: Callable[[RunInterrupted], str] = str,
) -> dict:
    """See `_train_run`; a RunConfig is resolved first (`resolve_run`). SIGTERM and SIGINT end
    the run (RunInterrupted, a SystemExit with status 128 + the signal) with `run_stop` aborted
    in its log, unless the run is already failing: then they are ignored until the failure
    leaves this function. One that the main thread cannot answer within STOP_GRACE_SECONDS
    (blocked in a collective) ends the process with the same record and status, and
    ``interruption_line(error)`` with why on stderr (`RunSignals.watched`). The signal handlers
    it found are restored when it returns or raises."""
    if isinstance(run, RunConfig):
        run = resolve_run(run)
    signals = RunSignals()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.getsignal(s) for s in (*_SIGNALS, signal.SIGCHLD)}
        for signum in _SIGNALS:
            signal.signal(signum, signals.handle)
    try:
        with signals.watched(interruption_line):
            return _train_run(run, signals, log)
    except BaseException:
        signals.fail()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _train_run(run: ResolvedRun, signals: RunSignals, log: Callable[[str], None] = _stderr) -> dict:
    """Runs `run` to its end (or its quality target); returns the summary.

    Everything it was given is checked before it creates or changes a file (`resolve_run`
    checked the config; here the dataset, the memory the model needs, the run folder and the
    checkpoints): a bad input raises ConfigError or RunRefused and leaves no trace. The run
    folder and the checkpoint directory are locked for the life of the run (`folder_lock`): a
    second process refused there names the first. Under torchrun every rank calls it (see
    `init_distributed`); rank 0 writes the logs and the metrics, and every rank returns the
    summary. Progress goes to `log` (rank 0). An exception or a signal after the run started
    ends the MLPerf log with run_stop "aborted" and propagates.
    """
    config, hstu = run.config, run.hstu
    quiet_fx_tracing_notice()
    check_inputs(config)
    with init_distributed(config.dist_timeout_seconds) as ctx, contextlib.ExitStack() as held:
        say = log if ctx.is_main else lambda message: None
        too_large = _agree(ctx, lambda: memory_refusal(hstu, vocab_floor(config), ctx))
        too_large = too_large or schedule_refusal(config, hstu, ctx.world_size)
        if too_large:
            raise RunRefused(too_large)
        plan = _agree(ctx, lambda: claim_run(run, held))
        for path, why in plan.skipped:
            say(f"checkpoint {path} does not verify, skipped: {why}")
        if plan.resume is not None and plan.skipped:
            say(f"resuming from {plan.resume.path}, the newest checkpoint that verifies")
        for note in plan.notes:
            say(note)
        if plan.finished:
            return json.loads((plan.out / SUMMARY).read_text())
        # What --kernel auto chose is checked on this rank's device before the model runs it:
        # an op whose kernel fails there runs its reference, and the rank says so. The
        # decision that comes back is the one the model is built with.
        kernels = hstu_ops.verify_decision(run.kernels, ctx.device, report=log)
        run = dataclasses.replace(run, kernels=kernels)
        out, root = plan.out, data_root(config, plan.out)
        if config.out is None:
            say(f"run folder: {out}")
        store = prepare_data(run, ctx, out, root, say)
        no_batch = window_refusal(store, hstu, ctx.world_size)
        if no_batch:
            raise RunRefused(no_batch)
        extras = {
            "run": run.as_json(out) | {"data": str(root)},
            "identity": run.identity(),
            "run_id": plan.run_id,
            DATA_FILES: data_fingerprint(config),
        }
        if ctx.is_main:
            if plan.replace:
                remove_run_files(out)
            write_run_record(out, plan.run_id)  # before the run's first file
            hstu.save_json(out / CONFIG, **extras)
        ctx.barrier()
        # config.json as JSON data, saved with every checkpoint.
        record = json.loads(json.dumps(hstu.to_dict() | extras, default=str))
        resume = plan.resume
        log_path = out / "mlperf.log"
        if resume is not None and ctx.is_main:  # what the crashed run wrote afterwards goes
            ckpt.rewind_file(log_path, resume.extra["mlperf_log_bytes"])
            ckpt.rewind_file(out / "metrics.csv", resume.extra["metrics"]["csv_bytes"])
        # Records name their source file relative to the installed packages, not this machine.
        package_root = Path(__file__).resolve().parents[1]
        mllog = MLPerfLogger(
            log_path, root_dir=str(package_root), resume=resume is not None, rank=ctx.rank
        )
        tracker = RunTracker(mllog, target_accuracy=config.effective_target_auc)
        if resume is not None:
            tracker.load_state_dict(resume.extra["mlperf"])  # no second init_start / run_start
        # The guard logs run_stop aborted when the run dies; the signals stay with `signals`
        # (deferred while a loader starts, ignored in forked workers and while failing).
        signals.abort_record = lambda: log_abort(tracker, mllog, samples=0)
        with tracker.guard(signals=()):
            try:
                if tracker.state == "new":
                    mllog.cache_clear()  # before init_start, where the reference logs it
                    tracker.init_start()
                streaming = _StreamingRun(
                    run, out, store, record, ctx, mllog, tracker, resume, signals, log
                )
                summary = streaming.run()
            except BaseException:
                signals.fail()  # before the guard writes run_stop: a second signal must not cut it
                raise
            finally:
                signals.abort_record = None
        mllog.close()
        summary["skipped_checkpoints"] = [f"{path}: {why}" for path, why in plan.skipped]
        if ctx.is_main:
            atomic_write_text(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
        return summary


def prepare_data(
    run: ResolvedRun, ctx: Distributed, out: Path, root: Path, say: Callable[[str], None]
) -> yambda_data.SampleStore:
    """The run's sample store, prepared before the run writes a file of its own: rank 0
    synthesizes and prepares the data, checking what it reuses, and the other ranks open the
    store it verified (each checking it again would read it once per rank); rank 0 holds the
    store and the raw data for the life of the run (`yambda_data.hold_store`, `hold_data`),
    and each loader process checks it opened that store. A row that the preprocessing
    refuses, or a model too large for the data's tables, or a store or dataset that another
    run holds and this one would rewrite, is a RunRefused: the run folder then holds no run,
    and the corrected command runs there."""
    config = run.config
    # Batches never span windows: data with no window of a global batch is refused before it
    # is synthesized or preprocessed (from a bound on the raw events), and a store built with
    # too few anchors is refused after (`window_refusal`, exact).
    batch = run.hstu.train.batch_size * ctx.world_size

    def prepare() -> Path:
        # Held for the life of the run: another process's synthesis, download or build into
        # them is refused.
        yambda_data.hold_store(out / "prepared" / STORE_DIR, progress=say)
        try:
            if config.data is None:
                yambda_data.synthesize_cached(
                    root, config.synth_config(), say, hold=True, min_window_anchors=batch
                )
            else:
                yambda_data.hold_data(root, progress=say)
            return yambda_data.prepare_store(
                root,
                config.size,
                out / "prepared",
                min_history=config.min_history,
                progress=say,
                min_window_anchors=batch,
            ).path
        except yambda_data.WindowTooSmall as small:
            made = "synthesized" if config.data is None else "preprocessed"
            raise RunRefused(
                f"train.batch_size: a global batch of {batch:,} samples ({ctx.world_size} "
                f"rank(s) x {run.hstu.train.batch_size:,}) is more than any time window of "
                f"{small.source} can hold (no {small.window_seconds:,} s of it holds more "
                f"than {small.most:,} train listens, and a sample is one), found before the "
                f"data was {made}; use a smaller train.batch_size, fewer ranks or more data"
            ) from None
        except (
            yambda_data.SchemaError,
            yambda_data.InputFileError,
            yambda_data.DataInUse,
            StoreInUse,
        ) as error:
            raise RunRefused(str(error)) from None

    store = yambda_data.SampleStore.open(_agree(ctx, prepare))
    vocab = store.vocab.as_dict()
    too_large = _agree(ctx, lambda: memory_refusal(run.hstu, vocab, ctx))
    if too_large:  # the data's own tables (the run checked the config's before it began)
        raise RunRefused(f"{store.path}: {too_large}")
    return store


def log_abort(tracker: RunTracker, mllog: MLPerfLogger, samples: int) -> None:
    """run_stop aborted, unless the run has not started or has stopped already; it counts the
    samples trained (`samples`), not the last block's start."""
    if tracker.state not in ("new", "stopped") and not mllog.run_stopped:
        tracker.run_stop("aborted", max(samples, tracker.samples_count))


def platform(ctx: Distributed) -> str:
    """The MLPerf submission platform: ranks times device."""
    if ctx.device.type == "cuda":
        return f"{ctx.world_size}x{torch.cuda.get_device_name(ctx.device)}"
    return f"{ctx.world_size}xCPU ({os.cpu_count()} cores)"


@dataclasses.dataclass
class LoopState:
    """What the training loop carries from one evaluation interval to the next, and through a
    checkpoint (its `loop` entry, under these field names)."""

    epoch: int = 0
    """The pass over the time windows that the last batch came from."""
    trained_seconds: float = 0.0
    """Seconds spent training: evaluations and checkpoint saves are not counted."""
    auc: float = math.nan
    ne: float = math.nan
    """The last evaluation's AUC and normalized entropy (NaN before the first)."""

    def state_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict) -> LoopState:
        return cls(**{field.name: state[field.name] for field in dataclasses.fields(cls)})


class _StreamingRun:
    """The state of one run between its MLPerf init_start and run_stop."""

    def __init__(
        self,
        run: ResolvedRun,
        out: Path,
        store: yambda_data.SampleStore,
        record: dict,
        ctx: Distributed,
        mllog: MLPerfLogger,
        tracker: RunTracker,
        resume: ckpt.CheckpointInfo | None,
        signals: RunSignals,
        log: Callable[[str], None],
    ) -> None:
        self.run_spec, self.config, self.hstu = run, run.config, run.hstu
        self.out, self.store, self.record = out, store, record
        """The run folder, the sample store it verified, and config.json as JSON data."""
        self.ctx, self.mllog, self.tracker, self.resume = ctx, mllog, tracker, resume
        self.signals = signals
        self.log = log if ctx.is_main else lambda message: None
        config = self.config
        self.sample_config = yambda_data.SampleConfig(
            history_length=self.hstu.model.history_length,
            min_history=self.store.min_history,
            strategy=config.history_strategy,
        )
        self.crosses = model_crosses(self.hstu.model)  # the model's table sizes
        self.batch_size = self.hstu.train.batch_size
        """Samples per rank per step."""
        self.global_batch_size = self.batch_size * ctx.world_size
        self.comm_precision = "fp32"
        """The lowest precision the run communicates in, from its sharded model's embedding
        all-to-alls once built (gradients and metrics go in fp32)."""
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
            fingerprint=self.store.manifest.get("fingerprint"),
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
            for batch in rng_neutral(
                self.loader(self.train_plan(epoch, first, skip)), self.signals
            ):
                yield epoch, batch.to(self.ctx.device)
            first, skip = 0, 0

    def mlperf_config(self, eval_samples: int) -> DLRMv4RunConfig:
        hstu = self.hstu
        precision = "bfloat16" if hstu.train.autocast_bf16 else "fp32"
        return DLRMv4RunConfig(
            global_batch_size=self.global_batch_size,
            learning_rate=hstu.optimizer.dense_lr,
            sparse_learning_rate=hstu.optimizer.sparse_lr,
            micro_batch_size=self.batch_size,
            config_filename=CONFIG,
            precision_linear=precision,
            precision_attn=precision,
            precision_comm=self.comm_precision,
            train_samples=self.train_samples,
            eval_samples=eval_samples,
            max_sequence_length=hstu.model.max_seq_len,
            eval_every_data_pct=1.0 / self.config.evals,
            warmup_steps=hstu.optimizer.warmup_steps,
            seed=self.config.seed,
        )

    def plan_line(self, eval_steps: list[int], train_samples: int) -> str:
        """What the run will do: its steps, its evaluations and when it stops."""
        steps, batch = eval_steps[-1], self.global_batch_size
        evals = (
            f"evaluations at steps {', '.join(map(str, eval_steps))}"
            if len(eval_steps) <= 5
            else f"{len(eval_steps)} evaluations, the first at step {eval_steps[0]}"
        )
        fewer = (
            f" (the last evaluation not beyond train_samples {train_samples:,})"
            if steps * batch < train_samples
            else ""
        )
        return (
            f"plan: {steps} steps of {batch} samples{fewer}, {evals}; the run stops at the "
            f"first evaluation that reaches AUC {self.config.effective_target_auc}"
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
            model = HSTURanker(self.hstu.model, vocab, kernels=self.run_spec.kernels)
            model, sharding = shard_model(model, self.hstu)
            self.comm_precision = comm_precision(sharding["all_to_all"])
        else:
            model = HSTURanker(
                self.hstu.model, vocab, device=ctx.device, kernels=self.run_spec.kernels
            )
        trainer = Trainer(model, self.hstu)
        # before the first loader forks: its workers would keep copies of every page of the
        # tables that the trainer writes afterwards
        exclude_from_forks(itertools.chain(model.parameters(), model.buffers()))
        eval_batches = self.loader(self.eval_plan)
        checkpoints = None
        if config.checkpoint_dir is not None:
            checkpoints = ckpt.Checkpointer(
                config.checkpoint_dir,
                every_steps=config.checkpoint_every,
                every_seconds=config.checkpoint_seconds,
                keep=config.keep_checkpoints,
                config=self.record,
            )
        run_config = self.mlperf_config(eval_samples)
        schedule = eval_schedule(
            run_config.train_samples, self.global_batch_size, run_config.eval_every_data_pct
        )
        if not schedule:
            raise ValueError(
                f"{run_config.train_samples} train samples in {config.evals} evaluation(s) at a "
                f"global batch of {self.global_batch_size}: too short for a first evaluation"
            )
        eval_steps = [samples // self.global_batch_size for samples in schedule]
        recorder = MetricsRecorder(
            self.out,
            eval_steps[-1],
            self.global_batch_size,
            log=self.log,
            target_auc=config.effective_target_auc,
            write=ctx.is_main,
            reduce=ctx.sum_array,
        )
        loop = LoopState()
        if self.resume is None:
            mllog.submission_info(org="reference", platform=platform(ctx), division=config.division)
            mllog.hyperparameters(dlrmv4_run_start_keys(run_config))
            tracker.init_stop()
            tracker.run_start()
        else:  # last: the RNG continues from the checkpoint, after model init drew from it
            extra = checkpoints.restore(self.resume, trainer).extra
            self.position.load_state_dict(extra["data"])
            loop = LoopState.from_state_dict(extra["loop"])
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
                "loop": dataclasses.replace(loop, trained_seconds=trained_seconds).state_dict(),
                "run": self.run_spec.identity(),
                "run_id": self.record["run_id"],
            }
            checkpoints.save(trainer, extra)
            return time.perf_counter() - began

        batch_size = self.global_batch_size
        self.log(self.plan_line(eval_steps, run_config.train_samples))
        progress = Progress(
            eval_steps,
            batch_size,
            self.log,
            first_step=trainer.step,
            bar=None if ctx.is_main else False,
        )
        self.signals.abort_record = lambda: log_abort(
            tracker, mllog, samples=trainer.step * batch_size
        )
        try:
            self._train(
                trainer, schedule, loop, recorder, eval_batches, save_checkpoint, checkpoints,
                progress,
            )  # fmt: skip
        except BaseException:
            self.signals.fail()  # from here on a launcher's SIGTERM does not cut the record short
            progress.close()
            stream = getattr(self, "_stream", None)
            if stream is not None:
                # The loader's workers stop before the log is written (a launcher's SIGTERM
                # may have killed them already: what that raises is not the failure).
                with contextlib.suppress(Exception):
                    stream.close()
            log_abort(tracker, mllog, samples=trainer.step * batch_size)
            raise
        progress.close()
        status = tracker.run_stop()
        recorder.close()
        plot = recorder.plot()
        samples = trainer.step * batch_size
        return {
            "eval_auc": round(loop.auc, 6),
            "eval_ne": round(loop.ne, 6),
            "train_samples": samples,
            "status": status,
            "samples_per_s": round(samples / loop.trained_seconds, 1),
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
        loop: LoopState,
        recorder: MetricsRecorder,
        eval_batches: Iterable,
        save_checkpoint: Callable[[float], float],
        checkpoints: ckpt.Checkpointer | None,
        progress: Progress,
    ) -> None:
        """Train and evaluate along `schedule` until its end or the target AUC, updating
        `loop`."""
        config, ctx, tracker = self.config, self.ctx, self.tracker
        position, batch_size = self.position, self.global_batch_size
        stream = self.train_stream(position.epoch, position.source, position.consumed)
        self._stream = stream
        for eval_at in schedule[tracker.num_evals :]:  # a resumed run skips logged evals
            if not tracker.in_block:
                tracker.block_start(trainer.step * batch_size, first_epoch_num=loop.epoch)
            started = time.perf_counter()
            while trainer.step * batch_size < eval_at:
                loop.epoch, batch = next(stream)
                loss = ctx.mean(trainer.train_step(batch))  # every rank sees a NaN
                step = trainer.step
                if not math.isfinite(loss):  # stop before a checkpoint could save the bad state
                    last = checkpoints.latest() if checkpoints else None
                    raise FloatingPointError(
                        f"non-finite loss {loss} at step {step} (epoch {loop.epoch}); "
                        f"last good checkpoint: {last.path if last else 'none'}"
                    )
                position.advance(batch_size)
                seconds = loop.trained_seconds + time.perf_counter() - started
                logits, labels = (t.cpu().numpy() for t in trainer.last_scores)
                row = recorder.train_step(step, loss, logits, labels.round().astype(np.int64))
                progress.step(step, seconds, row)
                # The schedule is asked at every step (its time decision is collective).
                due = checkpoints is not None and checkpoints.schedule.due(step)
                window_done = config.checkpoint_every_window and position.consumed == 0
                if checkpoints is not None and (due or window_done):
                    started += save_checkpoint(seconds)  # saving is not training time
            loop.trained_seconds += time.perf_counter() - started
            tracker.block_stop(eval_at, first_epoch_num=loop.epoch)
            tracker.eval_start(eval_at, epoch_num=loop.epoch)
            result = trainer.evaluate(rng_neutral(eval_batches, self.signals), gather=ctx.concat)
            loop.auc, loop.ne = result.auc, result.normalized_entropy
            recorder.evaluation(trainer.step, result.auc, result.loss, result.normalized_entropy)
            progress.write(
                f"eval at step {trainer.step}: auc {result.auc:.4f} "
                f"(target {config.effective_target_auc}), ne {result.normalized_entropy:.4f}, "
                f"loss {result.loss:.4f}"
            )
            if tracker.eval(loop.auc, eval_at, epoch_num=loop.epoch):
                break
