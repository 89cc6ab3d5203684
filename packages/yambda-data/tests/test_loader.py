import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from yambda_data import BatchPlan, SampleConfig, SampleStore  # noqa: E402
from yambda_data.batching import make_batch  # noqa: E402
from yambda_data.loader import StoreBatches, make_loader  # noqa: E402

CONFIG = SampleConfig(history_length=24, min_history=16, strategy="interleaved")


@pytest.fixture(scope="module")
def plan(built_store):
    store = SampleStore.open(built_store[2])
    busy = np.flatnonzero(store.window_sizes() > 0)[:6]
    return BatchPlan(sources=tuple(int(w) for w in busy), batch_size=8, seed=4)


def _flat(batch):
    return (
        batch.uih.values().tolist(),
        batch.uih.lengths().tolist(),
        batch.candidates.values().tolist(),
        batch.labels.tolist(),
    )


def test_store_batches_carry_the_query_time_and_the_listen_plus_bit(built_store, plan):
    store = SampleStore.open(built_store[2])
    for anchors, batch in zip(
        plan.batches(store), StoreBatches(built_store[2], CONFIG, plan), strict=True
    ):
        samples = store.samples(anchors, CONFIG)
        assert samples.history_lengths.min() > 0  # min_history 16: never an empty history
        last = samples.history_timestamp[samples.history_offsets[1:] - 1]
        c = batch.candidates.to_dict()
        assert c["item_query_time"].values().tolist() == last.tolist()
        assert batch.uih.to_dict()["dummy_query_time"].values().tolist() == last.tolist()
        assert c["item_action_weight"].values().tolist() == samples.label.tolist()


def test_batches_are_the_plans_samples(built_store, plan):
    store = SampleStore.open(built_store[2])
    dataset = StoreBatches(built_store[2], CONFIG, plan)
    assert len(dataset) == plan.num_batches(store)
    expected = [_flat(make_batch(store.samples(a, CONFIG))) for a in plan.batches(store)]
    assert [_flat(b) for b in dataset] == expected
    assert len(expected) > 4


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_worker_count_does_not_change_the_stream(built_store, plan, workers):
    single = [_flat(b) for b in make_loader(built_store[2], CONFIG, plan, num_workers=0)]
    loader = make_loader(built_store[2], CONFIG, plan, num_workers=workers, prefetch_factor=2)
    assert [_flat(b) for b in loader] == single
    # Persistent workers serve a second pass identically.
    assert [_flat(b) for b in loader] == single


def test_loader_arguments_are_checked(built_store, plan):
    with pytest.raises(ValueError, match="num_workers"):
        make_loader(built_store[2], CONFIG, plan, num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        make_loader(built_store[2], CONFIG, plan, prefetch_factor=0)
    assert not make_loader(built_store[2], CONFIG, plan, num_workers=0).pin_memory or (
        torch.cuda.is_available()
    )


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_workers_leave_group_signals_to_the_calling_process(built_store, plan):
    """SIGTERM or SIGINT sent to the process group (a launcher, Ctrl-C) must not kill a worker
    first: the DataLoader would then raise "worker killed" instead of the caller's handler
    running. The workers have a process group of their own and still end with the loader."""
    loader = make_loader(built_store[2], CONFIG, plan, num_workers=2, prefetch_factor=2)
    stream = iter(loader)
    next(stream), next(stream)  # batches alternate between the workers: both have started
    workers = [w.pid for w in stream._workers]
    assert len(workers) == 2
    for pid in workers:
        assert os.getpgid(pid) == pid != os.getpgrp()
    stream._shutdown_workers()
    for pid in workers:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or ") Z " in stat.read_text(), f"worker {pid} still runs"


_EXIT_WITH_WORKERS = """
import sys
from yambda_data import BatchPlan, SampleConfig, SampleStore
from yambda_data.loader import make_loader
store = SampleStore.open(sys.argv[1])
plan = BatchPlan(sources=(int(sys.argv[2]),), batch_size=8, seed=4)
config = SampleConfig(history_length=24, min_history=16, strategy="interleaved")
stream = iter(make_loader(sys.argv[1], config, plan, num_workers=2, prefetch_factor=2))
next(stream)
print("read a batch", flush=True)
"""


@pytest.mark.slow
def test_a_process_exits_with_its_workers_still_running(built_store, plan):
    """The interpreter's exit stops workers the loader never shut down (it terminates them)."""
    busy = str(plan.sources[0])
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WITH_WORKERS, str(built_store[2]), busy],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "read a batch" in done.stdout, done.stderr[-2000:]


_DESCRIPTOR_SERVER_RESET = """
import os, socket, sys, time
from multiprocessing import resource_sharer
from yambda_data.loader import _quiet_descriptor_server_resets
if sys.argv[1] == "quiet":
    sys.excepthook = _quiet_descriptor_server_resets
read, write = os.pipe()
shared = resource_sharer.DupFd(read)  # starts the server thread, as a worker's first batch does
client = socket.socket(socket.AF_UNIX)
client.connect(resource_sharer._resource_sharer._address)
time.sleep(0.5)  # the server's challenge arrives unread: closing now resets the connection
client.close()
time.sleep(0.5)
"""


@pytest.mark.parametrize("hook", ["default", "quiet"])
def test_a_worker_says_nothing_when_the_trainer_drops_a_descriptor_fetch(hook):
    """An interrupted trainer resets its connection to a worker's descriptor server: the
    worker's thread reports it through sys.excepthook, which a worker's hook silences."""
    result = subprocess.run(
        [sys.executable, "-c", _DESCRIPTOR_SERVER_RESET, hook],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    if hook == "default":
        assert "ConnectionResetError" in result.stderr, result.stderr
    else:
        assert result.stderr == ""


def _own_group(report) -> None:
    report.put(os.getpgid(0) == os.getpid())


def test_a_forked_worker_leaves_the_process_group_before_its_target_runs():
    """A signal to the caller's group must never reach a worker, even one just forked."""
    from yambda_data.loader import _WorkerContext

    context = _WorkerContext()
    report = context.SimpleQueue()
    worker = context.Process(target=_own_group, args=(report,))
    worker.start()
    worker.join(timeout=60)
    assert report.get() is True
    assert os.getpgid(0) != worker.pid


_LOW_LIMIT = """
import resource, sys
from yambda_data import BatchPlan, SampleConfig
from yambda_data.loader import make_loader
soft, hard = (int(n) for n in sys.argv[2:4])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
plan = BatchPlan(sources=(0, 1, 2, 3), batch_size=8, seed=4)
config = SampleConfig(history_length=24, min_history=16, strategy="interleaved")
try:
    batches = sum(1 for _ in make_loader(sys.argv[1], config, plan, num_workers=2))
except ValueError as error:
    print(error)
    sys.exit(2)
print(batches, resource.getrlimit(resource.RLIMIT_NOFILE)[0] > soft)
"""


@pytest.mark.slow
def test_too_few_open_files_for_the_workers_is_one_line_naming_the_limit(built_store):
    """Under `ulimit -n 64` two workers would fail inside torch's threads, with a traceback
    from each: the loader refuses first, naming the limit; where the hard limit leaves room,
    it raises the soft one and loads."""

    def load(soft: int, hard: int) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", _LOW_LIMIT, str(built_store[2]), str(soft), str(hard)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)

    refused = load(64, 64)
    assert refused.returncode == 2 and refused.stderr == "", refused.stderr[-3000:]
    assert "num_workers: 2 loader worker(s) with 4 batches in flight each need about" in (
        refused.stdout
    )
    assert "this process may have 64 files open (ulimit -n; at most 64): raise it" in (
        refused.stdout
    )
    _, hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
    raised = load(64, hard)
    assert raised.returncode == 0 and "Traceback" not in raised.stderr, raised.stderr[-3000:]
    assert raised.stdout.split()[1] == "True"


@pytest.mark.slow
def test_a_worker_that_finds_another_store_says_so_in_one_line(built_store, plan):
    """The store was built again since the caller verified it: the worker's refusal reaches
    the caller as its own one line, naming the store and the worker, not as a traceback."""
    from yambda_data.store import StoreError

    loader = make_loader(built_store[2], CONFIG, plan, num_workers=1, fingerprint="another")
    with pytest.raises(StoreError) as refused:
        next(iter(loader))
    assert str(refused.value) == (
        f"{built_store[2]}: not the store this run verified (built again from other inputs "
        "or settings since it started); start the run again (DataLoader worker process 0)"
    )
