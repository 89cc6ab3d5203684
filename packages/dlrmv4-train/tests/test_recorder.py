"""dlrmv4_train.recorder: the metrics a run writes besides its MLPerf log."""

import numpy as np

from dlrmv4_train.recorder import MetricsRecorder
from hstu_model.testing import ThreadRanks


def test_recorder_of_two_ranks_writes_what_one_process_does(tmp_path):
    """Two ranks, each recording its half of every global batch and the mean loss (as the
    training loop passes them), write the same metrics.csv as one recorder that sees the whole
    batches; after `sync` both ranks hold the lifetime counts of the whole."""
    steps, half = 7, 16
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(steps, 2 * half))
    labels = rng.integers(0, 2, (steps, 2 * half))
    labels[0, :2] = [0, 1]
    losses = rng.uniform(0.1, 0.2, steps)

    def record(recorder, part):
        for step in range(1, steps + 1):
            i = step - 1
            recorder.train_step(step, losses[i], logits[i, part], labels[i, part])
        recorder.sync()
        recorder.evaluation(steps, 0.6, 0.5, 0.9)
        recorder.close()
        return recorder.lifetime_auc.state_dict()

    quiet = {"every": 3, "log": lambda message: None}
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    one = MetricsRecorder(tmp_path / "one", steps, 2 * half, **quiet)
    whole = record(one, slice(None))

    ranks = ThreadRanks(2)

    def rank_records(rank):
        recorder = MetricsRecorder(
            tmp_path / "two",
            steps,
            2 * half,
            write=rank == 0,
            reduce=ranks.sum_array(rank),
            **quiet,
        )
        return record(recorder, slice(rank * half, (rank + 1) * half))

    counts = ranks.run(rank_records)
    rows = (tmp_path / "two" / "metrics.csv").read_text()
    assert rows == (tmp_path / "one" / "metrics.csv").read_text()
    assert "6,192,train,lifetime_auc," in rows and "7,224,train,lifetime_auc," in rows
    assert counts == [whole, whole]
