"""What a run records besides the MLPerf log: metric scalars (CSV, TensorBoard) and at the end a
PNG of the curves (the progress on stderr is `dlrmv4_train.progress`).

`metrics.csv` has one row per record: `step, samples, split, name, value` (split "train" or
"eval"). It is append-only, so a resumed run cuts it back to its size at the checkpoint (like
the MLPerf log) and goes on appending. TensorBoard event files are written next to it when the
`tensorboard` package is installed.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hstu_model.atomic_files import atomic_path
from hstu_model.metrics import BinnedAUC

__all__ = ["MetricsRecorder"]

_FIELDS = ("step", "samples", "split", "name", "value")


class MetricsRecorder:
    """Scalars of one run: running train loss, lifetime (binned) train AUC, eval metrics.

    `train_step` takes each step's loss (the mean over the ranks) and this rank's first-task
    (logits, labels); every `every` steps (and at the last step) it writes the mean loss since
    the last row and the lifetime AUC, and returns that row. `evaluation` writes the eval metrics. `state_dict` /
    `load_state_dict` carry what a resume needs (the CSV size, the loss sum, the AUC bins), so a
    resumed run records the same rows.

    With several ranks every rank calls every method at the same steps: the AUC bins of the ranks
    are summed by `reduce` (an all-reduce) when a row is written and by `sync` before a checkpoint.
    Only the rank with `write=True` writes files and logs.
    """

    def __init__(
        self,
        out: Path,
        total_steps: int,
        batch_size: int,
        every: int = 100,
        log: Callable[[str], None] = print,
        *,
        target_auc: float | None = None,
        write: bool = True,
        reduce: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"MetricsRecorder.every: must be >= 1, got {every}")
        self.path = out / "metrics.csv"
        self.plot_path = out / "metrics.png"
        self.total_steps, self.batch_size, self.every, self.log = (
            total_steps,
            batch_size,
            every,
            log,
        )
        self.target_auc = target_auc
        self.write, self._reduce = write, reduce
        self.lifetime_auc = BinnedAUC()
        """Counts of every rank up to the last `sync`."""
        self._pending = BinnedAUC()
        """This rank's counts since the last `sync`."""
        self._loss_sum, self._loss_count = 0.0, 0
        self._tensorboard = None
        if write:
            if not self.path.exists() or self.path.stat().st_size == 0:
                self.path.write_text(",".join(_FIELDS) + "\n")
            self._tensorboard = _tensorboard_writer(out / "tensorboard")

    def sync(self) -> None:
        """Adds every rank's pending AUC counts to the lifetime counts (collective)."""
        for name in ("positives", "negatives"):
            pending = getattr(self._pending, name)
            total = pending if self._reduce is None else self._reduce(pending)
            setattr(self.lifetime_auc, name, getattr(self.lifetime_auc, name) + total)
            pending[:] = 0

    def _write(self, step: int, split: str, values: dict[str, float]) -> None:
        if not self.write:
            return
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        for name, value in values.items():
            writer.writerow((step, step * self.batch_size, split, name, repr(float(value))))
            if self._tensorboard is not None:
                self._tensorboard.add_scalar(f"{split}/{name}", value, step * self.batch_size)
        with open(self.path, "a") as f:
            f.write(buffer.getvalue())
            f.flush()

    def train_step(
        self, step: int, loss: float, logits: np.ndarray, labels: np.ndarray
    ) -> dict[str, float] | None:
        """Record step `step` (1-based); the row written at this step (loss, lifetime_auc once
        both classes were seen), or None."""
        self._loss_sum += loss
        self._loss_count += 1
        self._pending.update(logits, labels)
        if step % self.every and step != self.total_steps:
            return None
        self.sync()
        values = {"loss": self._loss_sum / self._loss_count}
        with contextlib.suppress(ValueError):  # until both classes were seen
            values["lifetime_auc"] = self.lifetime_auc.compute()
        self._write(step, "train", values)
        self._loss_sum, self._loss_count = 0.0, 0
        return values

    def evaluation(self, step: int, auc: float, loss: float, normalized_entropy: float) -> None:
        self._write(step, "eval", {"auc": auc, "loss": loss, "ne": normalized_entropy})

    def state_dict(self) -> dict:
        """What a checkpoint keeps; call `sync` first (on every rank)."""
        return {
            "csv_bytes": self.path.stat().st_size if self.write else 0,
            "loss_sum": self._loss_sum,
            "loss_count": self._loss_count,
            "lifetime_auc": self.lifetime_auc.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self._loss_sum, self._loss_count = state["loss_sum"], state["loss_count"]
        self.lifetime_auc.load_state_dict(state["lifetime_auc"])

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()

    def plot(self) -> Path | None:
        """Writes metrics.png (train loss, eval loss and AUCs against samples); None without
        matplotlib or rows, or on a rank that does not write."""
        if not self.write:
            return None
        try:
            import matplotlib

            matplotlib.use("Agg")
            from matplotlib import pyplot as plt
        except ImportError:
            self.log("metrics.png skipped: matplotlib is not installed")
            return None
        series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
        with open(self.path, newline="") as f:
            for row in csv.DictReader(f):
                xs, ys = series.setdefault((row["split"], row["name"]), ([], []))
                xs.append(int(row["samples"]))
                ys.append(float(row["value"]))
        if not series:
            return None
        fig, (ax_auc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4))
        for (split, name), (xs, ys) in sorted(series.items()):
            ax = ax_loss if name == "loss" else ax_auc if "auc" in name else None
            if ax is not None:
                ax.plot(xs, ys, marker="o" if split == "eval" else ".", label=f"{split} {name}")
        if self.target_auc is not None:
            ax_auc.axhline(self.target_auc, color="gray", linestyle="--", label="target")
        for ax, title in ((ax_auc, "AUC"), (ax_loss, "loss")):
            ax.set_xlabel("training samples")
            ax.set_ylabel(title)
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        with atomic_path(self.plot_path) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
        plt.close(fig)
        return self.plot_path


def _tensorboard_writer(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # the tensorboard package is optional
        return None
    return SummaryWriter(str(folder), purge_step=None, flush_secs=30)
