"""Training and evaluation throughput of a preset on random batches. Prints a table.

Run from the workspace root:
    uv run --package hstu-model python packages/hstu-model/benchmarks/bench_train_step.py
Options: --preset NAME, --batch-size N, --steps N, --threads N.
Histories are full (history_length events each), the worst case of a batch.
"""

from __future__ import annotations

import argparse
import time

import torch

import hstu_model
from hstu_model.testing import random_batch

VOCAB = {"uid": 400, "item_id": 80_000, "artist_id": 8_000, "album_id": 20_000}


def measure(cfg: hstu_model.HSTUConfig, batch_size: int, steps: int) -> tuple[float, float]:
    """(train samples/s, eval samples/s) over `steps` batches after two warm-up steps."""
    hstu_model.seed_everything(0)
    trainer = hstu_model.Trainer(hstu_model.HSTURanker(cfg.model, VOCAB), cfg)
    lengths = [cfg.model.history_length] * batch_size
    tables = cfg.model.contextual_tables()
    batches = [
        random_batch(lengths, VOCAB, seed=i, contextual_tables=tables) for i in range(steps + 2)
    ]
    for batch in batches[:2]:
        trainer.train_step(batch)
    start = time.perf_counter()
    for batch in batches[2:]:
        trainer.train_step(batch)
    train_rate = steps * batch_size / (time.perf_counter() - start)
    start = time.perf_counter()
    trainer.evaluate(batches[2:])
    eval_rate = steps * batch_size / (time.perf_counter() - start)
    return train_rate, eval_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(hstu_model.config.PRESETS))
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = hstu_model.preset(args.preset)
    batch_size = args.batch_size or base.train.batch_size
    print(f"preset {args.preset}, batch {batch_size}, {args.threads} threads, full histories")
    print(f"{'kernel':<10}{'history':>9}{'train samples/s':>18}{'eval samples/s':>17}")
    for kernel in ("pytorch", "native"):
        cfg = base.replace(model={"kernel": kernel})
        train_rate, eval_rate = measure(cfg, batch_size, args.steps)
        print(f"{kernel:<10}{cfg.model.history_length:>9}{train_rate:>18.0f}{eval_rate:>17.0f}")


if __name__ == "__main__":
    main()
