"""Training and evaluation throughput of the presets on random batches, with model FLOPs.

Run from the workspace root:
    uv run --package hstu-model python packages/hstu-model/benchmarks/bench_train_step.py
Options: --presets NAME ..., --kernels NAME ..., --batch-size N, --steps N, --repeat N,
--threads N, --device cpu|cuda.

For each preset (default: tiny and small) and kernel backend (pytorch and native; triton too
when CUDA is available), a freshly seeded model trains on random batches of full histories
(history_length events each, the worst case of a batch), over the preset's default vocabulary.
One run: warm-up steps, then `--steps` timed training steps, then one timed evaluation over the
same batches; the table keeps the best of `--repeat` runs (the fastest mean training step and,
separately, the fastest evaluation). Columns:

- step ms: mean wall time of one training step (forward, backward, dense Adam, sparse
  row-wise Adagrad);
- train/s, eval/s: samples per second of training and of evaluation (forward only);
- GFLOP/sample: the model's training-step FLOPs per sample (`hstu_model.flops`, attention over
  the pairs the causal mask allows; forward is a third of it);
- train GFLOP/s, eval GFLOP/s: those FLOPs per second achieved. The PyTorch attention pads and
  computes all N^2 pairs, so the executed work is larger (the `full N^2` column gives its
  training FLOPs per sample).

- other: the mean number of cores other processes kept busy during the best training run and
  during the best evaluation (train/eval; from /proc/stat, less this process's own CPU time);
  the load average is printed before and after.
  On a small machine other processes slow the figures down a lot (threads that wait for a
  core), so compare only rows whose `other` is near 0.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import torch

import hstu_model
from hstu_model.config import DEFAULT_VOCABS
from hstu_model.flops import flops_per_sample
from hstu_model.testing import Batch, random_batch

DEFAULT_STEPS = {"tiny": 20, "small": 3}
"""Timed training steps per run when --steps is not given (a small step takes seconds on a
CPU, so a few suffice)."""
WARMUP_STEPS = {"tiny": 2, "small": 1}


@dataclass(frozen=True)
class Result:
    step_ms: float
    train_rate: float
    train_other: float | None
    eval_rate: float
    eval_other: float | None


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


class OtherLoad:
    """Mean number of cores busy with other processes while it runs: the machine's busy time
    (/proc/stat) less this process's CPU time, over the wall time. None where /proc/stat is
    missing."""

    def __enter__(self) -> OtherLoad:
        self.value: float | None = None
        self._start = (self._busy(), self._own(), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        busy, own, wall = self._busy(), self._own(), time.perf_counter()
        if busy is not None and self._start[0] is not None:
            elapsed = wall - self._start[2]
            other = (busy - self._start[0]) - (own - self._start[1])
            self.value = max(0.0, other / elapsed)

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(batch.uih.to(device), batch.candidates.to(device), batch.labels.to(device))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_setup(
    cfg: hstu_model.HSTUConfig,
    vocab: dict[str, int],
    batch_size: int,
    count: int,
    device: torch.device,
) -> tuple[hstu_model.Trainer, list[Batch]]:
    """A freshly seeded model of `cfg` on `device` with its trainer, and `count` random batches
    of full histories (history_length events each, the worst case of a batch) on `device`."""
    hstu_model.seed_everything(0)
    model = hstu_model.HSTURanker(cfg.model, vocab, device=device)
    trainer = hstu_model.Trainer(model, cfg)
    lengths = [cfg.model.history_length] * batch_size
    tables = cfg.model.contextual_tables()
    batches = [
        to_device(random_batch(lengths, vocab, seed=i, contextual_tables=tables), device)
        for i in range(count)
    ]
    return trainer, batches


def measure(
    cfg: hstu_model.HSTUConfig,
    vocab: dict[str, int],
    batch_size: int,
    steps: int,
    warmup: int,
    device: torch.device,
) -> Result:
    """One run: `warmup` untimed steps, `steps` timed steps, one timed evaluation."""
    trainer, batches = training_setup(cfg, vocab, batch_size, steps + warmup, device)
    for batch in batches[:warmup]:
        trainer.train_step(batch)
    synchronize(device)
    with OtherLoad() as train_other:
        start = time.perf_counter()
        for batch in batches[warmup:]:
            trainer.train_step(batch)
        synchronize(device)
        train_seconds = time.perf_counter() - start
    with OtherLoad() as eval_other:
        start = time.perf_counter()
        trainer.evaluate(batches[warmup:])
        synchronize(device)
        eval_seconds = time.perf_counter() - start
    samples = steps * batch_size
    return Result(
        1000 * train_seconds / steps,
        samples / train_seconds,
        train_other.value,
        samples / eval_seconds,
        eval_other.value,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    presets = sorted(hstu_model.config.PRESETS)
    cuda = torch.cuda.is_available()
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"], choices=presets)
    parser.add_argument(
        "--kernels",
        nargs="+",
        default=["pytorch", "native", *(["triton"] if cuda else [])],
        choices=["pytorch", "native", "triton"],
    )
    parser.add_argument("--batch-size", type=int, help="default: the preset's batch size")
    parser.add_argument("--steps", type=int, help="timed steps per run (default: tiny 20, small 3)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best is kept")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cuda" if cuda else "cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, device {device}, {args.threads} threads, "
        f"best of {args.repeat}, full histories; load average before: {load()}"
    )
    header = (
        f"{'preset':<8}{'kernel':<9}{'batch':>6}{'history':>8}{'step ms':>10}{'train/s':>9}"
        f"{'eval/s':>9}{'GFLOP/sample':>13}{'full N^2':>10}{'train GFLOP/s':>14}"
        f"{'eval GFLOP/s':>13}{'other':>12}"
    )
    print(header)
    for name in args.presets:
        base = hstu_model.preset(name)
        vocab = DEFAULT_VOCABS[name]
        batch_size = args.batch_size or base.train.batch_size
        steps = args.steps or DEFAULT_STEPS.get(name, 5)
        warmup = WARMUP_STEPS.get(name, 1)
        count = flops_per_sample(base.model)
        for kernel in args.kernels:
            cfg = base.replace(model={"kernel": kernel}, sharding={"compute_device": device.type})
            runs = [
                measure(cfg, vocab, batch_size, steps, warmup, device) for _ in range(args.repeat)
            ]
            best = min(runs, key=lambda r: r.step_ms)
            best_eval = max(runs, key=lambda r: r.eval_rate)
            train_gflops = best.train_rate * count.train_total / 1e9
            eval_gflops = best_eval.eval_rate * count.forward_total / 1e9
            others = "/".join(
                "-" if x is None else f"{x:.2f}" for x in (best.train_other, best_eval.eval_other)
            )
            print(
                f"{name:<8}{kernel:<9}{batch_size:>6}{cfg.model.history_length:>8}"
                f"{best.step_ms:>10.1f}{best.train_rate:>9.1f}{best_eval.eval_rate:>9.1f}"
                f"{count.train_total / 1e9:>13.4f}{count.train_total_full / 1e9:>10.4f}"
                f"{train_gflops:>14.1f}{eval_gflops:>13.1f}{others:>12}",
                flush=True,
            )
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
