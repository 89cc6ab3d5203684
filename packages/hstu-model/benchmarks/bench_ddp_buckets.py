"""The training step at several ranks with the dense gradients' bucket layout fixed by one
backward spent when DDP wraps the model (`hstu_model.sharding.FixedGradientBuckets`, the
design in use) beside DDP's search for unused parameters (`find_unused_parameters=True`
without a static graph, the design it replaced: the same fixed layout, paid for with a walk
of the autograd graph after each forward and one more all-reduce per step).

Run from the workspace root, one process per rank, on gloo:
    OMP_NUM_THREADS=1 uv run --package hstu-model python -m torch.distributed.run \\
        --standalone --nproc-per-node 2 packages/hstu-model/benchmarks/bench_ddp_buckets.py
Options: --preset NAME (default tiny), --batch-size N (per rank, default 64), --steps N (timed
steps per round, default 10), --rounds N (default 3).

Both models start from the same seed and are sharded alike (a freshly seeded model per design);
each rank trains on its own random batches of full histories, the same for both designs. After
one untimed step each, whose losses must be equal (at two ranks every element of a gradient's
all-reduce is a sum of two terms, equal in either order), the designs alternate in `--rounds`
rounds of `--steps` timed steps, so that a change in the machine's load reaches both. Rank 0
prints each design's mean step time over all rounds and in its best round, and their ratios
(the replaced design's over the one in use).
"""

from __future__ import annotations

import argparse
import os
import time
from unittest import mock

import torch.distributed as dist
from torchrec.distributed.model_parallel import DefaultDataParallelWrapper

import hstu_model
from hstu_model import sharding
from hstu_model.config import DEFAULT_VOCABS
from hstu_model.testing import random_batch


def searching_for_unused_parameters() -> DefaultDataParallelWrapper:
    return DefaultDataParallelWrapper(static_graph=False, find_unused_parameters=True)


def trainer(cfg: hstu_model.HSTUConfig, vocab: dict[str, int], search: bool):
    hstu_model.seed_everything(0)
    model = hstu_model.HSTURanker(cfg.model, vocab)
    wrapper = searching_for_unused_parameters if search else sharding.FixedGradientBuckets
    with mock.patch.object(sharding, "FixedGradientBuckets", wrapper):
        dmp, _ = sharding.shard_model(model, cfg)
    return hstu_model.Trainer(dmp, cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if "RANK" not in os.environ:
        parser.error("run it under torch.distributed.run (one process per rank)")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = hstu_model.preset(args.preset).replace(train={"batch_size": args.batch_size})
    vocab = DEFAULT_VOCABS[args.preset]
    lengths = [cfg.model.history_length] * args.batch_size
    tables = cfg.model.contextual_tables()
    batches = [
        random_batch(lengths, vocab, seed=1000 * rank + i, contextual_tables=tables)
        for i in range(args.steps + 1)
    ]
    designs = {"fixed layout": trainer(cfg, vocab, False), "search": trainer(cfg, vocab, True)}
    first = {name: float(t.train_step(batches[0])) for name, t in designs.items()}
    if len(set(first.values())) != 1:
        raise SystemExit(f"rank {rank}: the designs' first losses differ: {first}")
    rounds: dict[str, list[float]] = {name: [] for name in designs}
    for _ in range(args.rounds):
        for name, t in designs.items():
            dist.barrier()
            start = time.perf_counter()
            for batch in batches[1:]:
                t.train_step(batch)
            rounds[name].append(1000 * (time.perf_counter() - start) / args.steps)
    if rank == 0:
        mean = {name: sum(r) / len(r) for name, r in rounds.items()}
        best = {name: min(r) for name, r in rounds.items()}
        print(
            f"{args.preset}, {world} ranks (gloo, CPU), batch {args.batch_size} per rank, "
            f"{args.rounds} rounds of {args.steps} steps; load average {os.getloadavg()[0]:.1f}"
        )
        print(f"{'design':<14} {'mean step ms':>12} {'best round ms':>13}")
        for name in designs:
            print(f"{name:<14} {mean[name]:>12.1f} {best[name]:>13.1f}")
        ratio_mean = mean["search"] / mean["fixed layout"]
        ratio_best = best["search"] / best["fixed layout"]
        print(f"search / fixed layout: {ratio_mean:.3f}x (mean), {ratio_best:.3f}x (best)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
