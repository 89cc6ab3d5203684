"""One rank of the sharding tests: `python -m torch.distributed.run --standalone
--nproc-per-node 2 sharding_worker.py OUT_DIR [SCENARIO ...]`.

Runs each scenario on a gloo process group and writes `OUT_DIR/rank<r>.json`:
`{scenario: result}`, where a result holds the plan summary, the log lines of
`hstu_model.sharding`, losses, or the `ShardingError` the scenario raised. test_sharding.py
launches it (a standalone script, so that nothing has to be pickled across processes) and
checks the files.

Every scenario uses the `tiny` preset with small tables and a global batch of 8 samples that
each rank splits in halves; both halves contain a history of the maximal length, because the
model divides attention by the batch's longest sequence, so the halves see the same
normalisation as the whole batch.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec.distributed.model_parallel import get_unwrapped_module

import hstu_model.sharding as sharding_module
from hstu_model import HSTURanker, Trainer, preset, seed_everything
from hstu_model.config import TableOption
from hstu_model.sharding import ShardingError, shard_model
from hstu_model.testing import random_batch, slice_batch

VOCAB = {"uid": 11, "item_id": 50, "artist_id": 13, "album_id": 17}
HISTORY_LENGTHS = [12, 3, 5, 2, 12, 7, 0, 4]
OVERRIDES = "item_id=row_wise,uid=table_wise,artist_id=column_wise,user_x_artist=row_wise"
STEPS = 3


def config(overrides: str = OVERRIDES, **sharding):
    cfg = preset("tiny").replace(
        model={
            "embedding_dim": 16,
            "attention_dim": 8,
            "linear_dim": 8,
            "num_heads": 2,
            "preprocessor_hidden_dim": 16,
            "history_length": 12,
            "max_seq_len": 24,
            "position_buckets": 24,
            "time_buckets": 32,
        },
        # Warmup over 2 steps: the learning rate factors of the 3 steps are 0, 0.5 and 1.
        optimizer={"warmup_steps": 2},
    )
    options = tuple(TableOption.parse(item) for item in overrides.split(",") if item)
    return cfg.replace(sharding={"sharding_types": options, **sharding})


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def batches(rank: int, world_size: int):
    """[(full batch, this rank's share)] for each step, plus one held-out batch."""
    per_rank = len(HISTORY_LENGTHS) // world_size
    out = []
    for seed in range(STEPS + 1):
        full = random_batch(HISTORY_LENGTHS, VOCAB, seed=100 + seed)
        out.append((full, slice_batch(full, rank * per_rank, (rank + 1) * per_rank)))
    return out


def mean_over_ranks(values: list[float]) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor)
    return (tensor / dist.get_world_size()).tolist()


def reference_losses(cfg, data) -> list[float]:
    """The unsharded model in this process: STEPS train steps on the full batches, then the
    loss of the held-out batch."""
    seed_everything(0)
    model = HSTURanker(cfg.model, VOCAB)
    trainer = Trainer(model, cfg)
    losses = [trainer.train_step(full) for full, _ in data[:STEPS]]
    held_out = data[STEPS][0]
    with torch.no_grad():
        losses.append(
            float(model.loss(model(held_out.uih, held_out.candidates).logits, held_out.labels))
        )
    return losses


def shard(cfg, meta: bool = False):
    """shard_model over a freshly seeded model: (dmp, summary, log lines of the plan)."""
    seed_everything(0)
    model = HSTURanker(cfg.model, VOCAB, device=torch.device("meta") if meta else None)
    records = Records()
    logger = logging.getLogger("hstu_model.sharding")
    logger.setLevel(logging.INFO)
    logger.addHandler(records)
    try:
        dmp, summary = shard_model(model, cfg)
    finally:
        logger.removeHandler(records)
    return dmp, summary, records.lines


def train(dmp, cfg, data):
    """STEPS train steps on this rank's shares, then the loss of the held-out share."""
    trainer = Trainer(dmp, cfg)
    losses = [trainer.train_step(local) for _, local in data[:STEPS]]
    held_out = data[STEPS][1]
    with torch.no_grad():
        logits = dmp(held_out.uih, held_out.candidates).logits
        losses.append(float(trainer.module.loss(logits, held_out.labels)))
    return trainer, losses


def train_sharded(cfg, data):
    dmp, summary, lines = shard(cfg)
    trainer, losses = train(dmp, cfg, data)
    return dmp, trainer, summary, lines, losses


def scenario_equivalence(rank: int, world_size: int) -> dict:
    """Overrides honoured and logged; the sharded model trains like the unsharded one."""
    cfg = config()
    data = batches(rank, world_size)
    _, trainer, summary, lines, losses = train_sharded(cfg, data)
    return {
        "summary": summary,
        "log": lines,
        "reference": reference_losses(cfg, data),
        "sharded": mean_over_ranks(losses),
        "dense_parameters": len(trainer._dense_parameters),
        "unsharded_dense_parameters": len(HSTURanker(cfg.model, VOCAB).dense_parameters()),
        "sparse_optimizers": [type(o).__name__ for o in trainer.sparse_optimizers],
        "sparse_lr": [g["lr"] for o in trainer.sparse_optimizers for g in o.param_groups],
    }


def scenario_fp16(rank: int, world_size: int) -> dict:
    """fp16 all-to-all enabled (it works on CPU/gloo): FP16 codecs on every all-to-all."""
    cfg = config(fp16_all_to_all=True)
    data = batches(rank, world_size)
    _, _, summary, lines, losses = train_sharded(cfg, data)
    return {
        "summary": summary,
        "log": lines,
        "reference": reference_losses(config(), data),
        "sharded": mean_over_ranks(losses),
    }


def _expect_sharding_error(cfg) -> dict:
    seed_everything(0)
    try:
        shard_model(HSTURanker(cfg.model, VOCAB), cfg)
    except ShardingError as exc:
        return {"error": str(exc)}
    return {"error": None}


def scenario_fp16_codec_fails_on_rank1(rank: int, world_size: int) -> dict:
    """FP16 codecs that cannot run on one rank (as on a device without fbgemm's quantize
    kernels): every rank raises."""
    original = sharding_module.fp16_codecs

    def broken(device):
        raise RuntimeError(f"no FP16 quantize kernel for {device}")

    if rank == 1:
        sharding_module.fp16_codecs = broken
    try:
        return _expect_sharding_error(config(fp16_all_to_all=True))
    finally:
        sharding_module.fp16_codecs = original


def scenario_fp16_codecs_dropped(rank: int, world_size: int) -> dict:
    """A sharder that ignores the codec registry (a TorchRec that cannot quantize this
    all-to-all): the check of the built model raises on every rank."""
    original = sharding_module.EmbeddingCollectionSharder

    class IgnoresCodecs(original):
        def __init__(self, *args, qcomm_codecs_registry=None, **kwargs):
            super().__init__(*args, **kwargs)

    sharding_module.EmbeddingCollectionSharder = IgnoresCodecs
    try:
        return _expect_sharding_error(config(fp16_all_to_all=True))
    finally:
        sharding_module.EmbeddingCollectionSharder = original


def scenario_data_parallel_trainer(rank: int, world_size: int) -> dict:
    """Trainer's handling of a data_parallel table (row-wise Adagrad after backward).

    ShardingConfig rejects data_parallel on cpu, because fbgemm's CPU dense kernel pools;
    for a single data_parallel table with one id per sample (uid) pooling changes nothing, so
    this bypasses the check to exercise the Trainer's path on CPU."""
    cfg = config("item_id=row_wise")
    options = (*cfg.sharding.sharding_types, TableOption("uid", "data_parallel"))
    object.__setattr__(cfg.sharding, "sharding_types", options)
    data = batches(rank, world_size)
    dmp, trainer, summary, _, losses = train_sharded(cfg, data)
    weight = dict(dmp.named_parameters())["embedding_collection.embeddings.uid.weight"].detach()
    gathered = [torch.empty_like(weight) for _ in range(world_size)]
    dist.all_gather(gathered, weight)
    return {
        "summary": summary,
        "reference": reference_losses(cfg, data),
        "sharded": mean_over_ranks(losses),
        "replicas_equal": all(torch.equal(g, gathered[0]) for g in gathered),
        "sparse_optimizers": [type(o).__name__ for o in trainer.sparse_optimizers],
    }


def scenario_meta(rank: int, world_size: int) -> dict:
    """A model built on the meta device (the way the yambda-5b tables must be built) is
    materialised by DistributedModelParallel, initialised, and trains."""
    cfg = config()
    dmp, summary, _ = shard(cfg, meta=True)
    module = get_unwrapped_module(dmp)
    # TorchRec's and the reference's table init: U(+-sqrt(1 / rows of the whole table)).
    bounds = {
        f"embedding_collection.embeddings.{t.name}.weight": (1.0 / t.num_embeddings) ** 0.5
        for t in module.tables
    }
    tables = {
        name: float(p.detach().abs().max()) if p.numel() else 0.0
        for name, p in dmp.named_parameters()
        if name.startswith("embedding_collection.")
    }
    item_shard = dict(dmp.named_parameters())["embedding_collection.embeddings.item_id.weight"]
    first_rows = [None] * world_size
    dist.all_gather_object(first_rows, item_shard[0].tolist())
    _, losses = train(dmp, cfg, batches(rank, world_size))
    return {
        "summary": summary,
        "losses": losses,
        "on_meta": [n for n, p in dmp.named_parameters() if p.is_meta],
        "table_max_abs": tables,
        "init_bounds": bounds,
        "item_id_first_row_per_rank": first_rows,
        "buffers": {n: b.tolist() for n, b in module.named_buffers() if n in BUFFERS},
    }


BUFFERS = ("action_bits", "task_weights")


SCENARIOS = {
    name.removeprefix("scenario_"): fn
    for name, fn in globals().items()
    if name.startswith("scenario_")
}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0])
    names = argv[1:] or list(SCENARIOS)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    results: dict = {}
    for name in names:
        try:
            results[name] = SCENARIOS[name](rank, world_size)
        except Exception:
            results[name] = {"exception": traceback.format_exc()}
            break  # the ranks may no longer agree on where they are
    (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1, default=str))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main(sys.argv[1:]))
