"""A 2-rank gloo run of tools/train.py against one process with the same global batch.

Both runs train the same model on the same synthetic data; the only difference is that the
global batch of every step (and of every evaluation) is split over two ranks instead of being
processed whole. Each process runs tools/train.py under a small wrapper that records, for every
train step and evaluation, which samples the trainer got (a sample is named by its anchor's
event index in the sample store) and the step's loss. The test then checks that

* per step, rank 0's samples followed by rank 1's are exactly the one process's batch (so the
  ranks' slices are disjoint and cover the global batch), no sample is trained twice (a global
  batch too large for the time windows makes a run repeat the few batches that fit, which
  inflates its train AUC), and the evaluations cover the same samples;
* the mean of the ranks' losses equals the one process's loss at every step;
* the metrics the runs report (train loss and lifetime AUC, eval AUC, loss and NE in
  metrics.csv, eval_auc in the summary) agree to float tolerance.

The sharded 2-rank model computes what the unsharded one does (its shards are copied from the
same initial tables), so the only differences are float rounding (summation order). One thing
would make them differ more: HSTU attention is divided by the longest sequence of the batch,
which is each rank's slice under torchrun, so a slice without the global batch's longest
history gives its samples other logits (relative differences of about 1e-4 in the loss after a
few steps). The runs here use last_n histories of 16 events, which nearly every sample has, so
every slice holds the longest sequence of its global batch.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import yambda_data

ROOT = Path(__file__).resolve().parents[1]

USERS = 40
GLOBAL_BATCH = 128
GLOBAL_EVAL_BATCH = 512
STEPS = 12
EVALS = 2

RECORDING_TRAIN = """
import json, os, runpy, sys
from pathlib import Path

from hstu_model.training.trainer import Trainer
from yambda_data.store import SampleStore

record = Path(os.environ["RECORD_DIR"]) / f"rank{os.environ.get('RANK', '0')}.jsonl"
samples, train_step, evaluate = SampleStore.samples, Trainer.train_step, Trainer.evaluate
loaded = []
\"\"\"The anchor event indices of each batch loaded and not yet trained or evaluated (the
loader runs in this process, --workers 0, and builds a batch when the loop asks for it).\"\"\"


def recording_samples(self, anchors, config):
    loaded.append([int(a) for a in anchors])
    return samples(self, anchors, config)


def write(**entry):
    with open(record, "a") as f:
        f.write(json.dumps(entry) + "\\n")


def recording_train_step(self, batch):
    (anchors,) = loaded
    loaded.clear()
    assert len(anchors) == batch.labels.numel()
    loss = train_step(self, batch)
    write(kind="train", step=self.step, samples=anchors, loss=loss)
    return loss


def recording_evaluate(self, batches, gather=None):
    batches = list(batches)
    assert len(loaded) == len(batches)
    write(kind="eval", step=self.step, samples=[a for anchors in loaded for a in anchors])
    loaded.clear()
    return evaluate(self, batches, gather)


SampleStore.samples = recording_samples
Trainer.train_step, Trainer.evaluate = recording_train_step, recording_evaluate
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
"""tools/train.py recording, per rank, the samples (anchor event indices) and loss of every
train step and the samples of every evaluation."""


def run(tmp_path: Path, data: Path, ranks: int) -> tuple[dict, list[list[dict]], dict]:
    """tools/train.py on `ranks` processes (torchrun with gloo for 2) at the global batches
    GLOBAL_BATCH and GLOBAL_EVAL_BATCH: (summary, records per rank, metrics.csv values by
    (step, split, name))."""
    name = f"{ranks}-rank"
    out, records = tmp_path / name / "run", tmp_path / name / "records"
    records.mkdir(parents=True)
    script = tmp_path / "recording_train.py"
    script.write_text(RECORDING_TRAIN)
    argv = [str(ROOT / "tools" / "train.py"), "--data", str(data), "--size", "50m"]
    argv += ["--steps", str(STEPS), "--evals", str(EVALS), "--workers", "0"]
    argv += ["--set", f"train.batch_size={GLOBAL_BATCH // ranks}"]
    argv += ["--set", f"train.eval_batch_size={GLOBAL_EVAL_BATCH // ranks}"]
    # Histories of the last 16 events (the store's anchors have at least 16 earlier ones): every
    # rank's slice holds the global batch's longest sequence (see the module docstring).
    argv += ["--history-strategy", "last_n", "--set", "model.history_length=16"]
    argv += ["--target-auc", "0.99", "--out", str(out)]
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env |= {"RECORD_DIR": str(records), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        [*launcher, str(script), *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-15000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.stdout[-2000:]
    per_rank = []
    for rank in range(ranks):
        entries = [json.loads(line) for line in (records / f"rank{rank}.jsonl").open()]
        per_rank.append(entries)
    with open(out / "metrics.csv", newline="") as f:
        metrics = {
            (int(r["step"]), r["split"], r["name"]): float(r["value"]) for r in csv.DictReader(f)
        }
    return json.loads(lines[0]), per_rank, metrics


def of_kind(entries: list[dict], kind: str) -> list[dict]:
    return [e for e in entries if e["kind"] == kind]


@pytest.mark.slow
def test_two_ranks_see_and_report_what_one_process_does(tmp_path):
    data = tmp_path / "data"
    yambda_data.synthesize(data, yambda_data.SynthConfig(users=USERS, seed=0, size="50m"))
    one, (single,), one_metrics = run(tmp_path, data, 1)
    two, (rank0, rank1), two_metrics = run(tmp_path, data, 2)

    # The same samples: each global batch is rank 0's slice followed by rank 1's.
    steps = of_kind(single, "train")
    assert [e["step"] for e in steps] == list(range(1, STEPS + 1))
    for whole, first, second in zip(
        steps, of_kind(rank0, "train"), of_kind(rank1, "train"), strict=True
    ):
        assert whole["step"] == first["step"] == second["step"]
        assert len(first["samples"]) == len(second["samples"]) == GLOBAL_BATCH // 2
        assert first["samples"] + second["samples"] == whole["samples"], whole["step"]
        # Every rank trains on its half; the loss the run logs is their mean.
        mean = (first["loss"] + second["loss"]) / 2
        assert mean == pytest.approx(whole["loss"], rel=1e-5), whole["step"]
    trained = [s for e in steps for s in e["samples"]]
    assert len(set(trained)) == len(trained) == STEPS * GLOBAL_BATCH  # no sample seen twice

    evals = of_kind(single, "eval")
    assert len(evals) == EVALS
    for whole, first, second in zip(
        evals, of_kind(rank0, "eval"), of_kind(rank1, "eval"), strict=True
    ):
        assert whole["step"] == first["step"] == second["step"]
        assert sorted(first["samples"] + second["samples"]) == sorted(whole["samples"])
        assert len(set(whole["samples"])) == len(whole["samples"])

    # The same metrics, to float tolerance (the sharded model sums in another order).
    assert one["train_samples"] == two["train_samples"] == STEPS * GLOBAL_BATCH
    assert two["eval_auc"] == pytest.approx(one["eval_auc"], abs=1e-4)
    assert set(two_metrics) == set(one_metrics)
    for key, value in one_metrics.items():
        # An AUC moves by about 2e-5 when one (positive, negative) pair swaps order.
        tolerance = {"abs": 1e-4} if "auc" in key[2] else {"rel": 1e-5}
        assert two_metrics[key] == pytest.approx(value, **tolerance), key
