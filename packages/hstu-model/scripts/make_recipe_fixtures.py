"""Write the recipe-equivalence fixture: the reference's optimizers, warm-up and clip, step by step.

The reference is never copied into this repository: this script imports it from the checkout
named by `--reference` (the `recommendation_v4` directory; it also needs the reference's imports
`gin-config` and `tensorboard` installed) and runs, on CPU in a one-process gloo world:

- the model of the model-equivalence fixtures (`make_reference_fixtures.py`, same seed, same
  perturbed constants: the initial weights are `fixtures/reference/weights.pt`, checked here
  bit for bit);
- its own `make_optimizer_and_shard` (`dlrm_v4/train/utils.py`): TorchRec's planner (its
  topology told the CPU instead of CUDA) and DistributedModelParallel at world size 1,
  row-wise Adagrad fused into the tables' backward, dense Adam inside a `CombinedOptimizer`
  and that optimizer's `init_state`. Its two optimizer
  factories read their settings from gin; they are bound here to the yambda-5b gin file's
  values (optimizer names, betas, eps, weight decay, momentum) with learning rates large enough
  to move the weights in a few steps (`DENSE_LR`, `SPARSE_LR`);
- the streaming training loop's step, which is code inside `streaming_train_eval_loop` and so
  cannot be called on its own; it is done here in the same order: the linear warm-up from 0 at
  global step 0 (`lr = peak * step / warmup` on the dense groups and on the fused optimizer's,
  then the fused optimizer's `step()` that pushes it into the kernel), `zero_grad`, forward,
  backward of the sum of the losses, `clip_grad_norm_` over `model.parameters()`, `step()`.

It writes `tests/fixtures/recipe/recipe.json`: the settings, the batches (plain ids), and per
step the loss, the gradient norm before clipping, the learning rates, and for every dense
parameter and every table three summary floats (sum, sum of absolute values, and a sum weighted
by cos(flat index), which moves when rows are swapped) plus a sha256 of its float32 bytes, for
information (kernels differ in the last bits, so the test compares the floats).

Usage:

    python packages/hstu-model/scripts/make_recipe_fixtures.py \
        --reference /path/to/training/recommendation_v4
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_reference_fixtures as model_fixtures

from hstu_model.reference import _strip_wrappers as unwrapped
from hstu_model.reference_checkout import (
    build_config,
    build_model,
    build_tables,
    check_reference,
    check_wiring,
    forbid_triton,
    import_quietly,
    import_reference,
)

FORMAT_VERSION = 1
PACKAGE = Path(__file__).resolve().parents[1]
DEFAULT_OUT = PACKAGE / "tests" / "fixtures" / "recipe"
MODEL_WEIGHTS = PACKAGE / "tests" / "fixtures" / "reference" / "weights.pt"

DENSE_LR = 1e-3
SPARSE_LR = 1e-2
WARMUP_STEPS = 3
GRAD_CLIP_NORM = 0.1  # below every step's norm (0.17 to 0.44 here)
# The yambda-5b gin file's optimizer settings (its learning rates come from the environment).
DENSE_OPTIMIZER = {"optimizer_name": "Adam", "momentum": 0, "weight_decay": 0, "eps": 1e-8}
SPARSE_OPTIMIZER = {"optimizer_name": "RowWiseAdagrad", "momentum": 0, "weight_decay": 0}
BETAS = (0.95, 0.999)
SPARSE_EPS = 1e-8
# One batch per step: the history length of each sample and the input seed.
BATCHES = (
    ((5, 1, 9, 14), 1001),
    ((17, 30, 2), 1002),
    ((6, 11, 3, 22), 1003),
    ((9, 4, 27), 1004),
    ((12, 2, 8, 19), 1005),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return model_fixtures.reference_parser(__doc__, DEFAULT_OUT).parse_args(argv)


def summary(tensor: torch.Tensor) -> dict[str, Any]:
    """Three floats (in float64) and a digest of one weight tensor."""
    flat = tensor.detach().to(torch.float32).reshape(-1)
    wide = flat.to(torch.float64)
    cos = torch.cos(torch.arange(flat.numel(), dtype=torch.float64))
    return {
        "sum": float(wide.sum()),
        "abs_sum": float(wide.abs().sum()),
        "cos_sum": float((wide * cos).sum()),
        "sha256": hashlib.sha256(flat.contiguous().numpy().tobytes()).hexdigest(),
    }


def full_table(value: Any) -> torch.Tensor:
    """A table of the sharded model as one tensor (all its shards live on this one rank)."""
    if isinstance(value, torch.Tensor) and not hasattr(value, "local_shards"):
        return value
    out = torch.zeros(value.size(), dtype=torch.float32)
    for shard in value.local_shards():
        offsets, sizes = shard.metadata.shard_offsets, shard.metadata.shard_sizes
        index = tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))
        out[index] = shard.tensor.detach().to(torch.float32)
    return out


def weight_summaries(dmp: Any, dense_names: list[str], table_names: list[str]) -> dict:
    state = dmp.state_dict()

    by_name = {unwrapped(k): v for k, v in state.items()}
    dense = {n: summary(by_name[n]) for n in dense_names}
    tables = {}
    for table in table_names:
        key = f"_embedding_collection.embeddings.{table}.weight"
        tables[table] = summary(full_table(by_name[key]))
    return {"dense": dense, "tables": tables}


def copy_tables(dmp: Any, committed: dict[str, torch.Tensor], table_names: list[str]) -> None:
    """Give the sharded tables the committed weights: DistributedModelParallel initialises
    its tables itself (the reference builds them on the meta device), it does not copy them."""
    state = dmp.state_dict()
    for table in table_names:
        key = f"_embedding_collection.embeddings.{table}.weight"
        sharded = {unwrapped(k): v for k, v in state.items()}[key]
        with torch.no_grad():
            for shard in sharded.local_shards():
                offsets, sizes = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                index = tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))
                shard.tensor.copy_(committed[key][index])
        copied = {unwrapped(k): v for k, v in dmp.state_dict().items()}[key]
        if not torch.equal(full_table(copied), committed[key]):
            raise AssertionError(f"table {table} did not take the committed weights")


def plan_for_the_cpu(train_utils: Any) -> None:
    """`make_optimizer_and_shard` tells its planner the compute device is CUDA (its shards would
    be placed on cuda:0); here the planner's topology is the CPU, with the memory it gives HBM."""
    topology = train_utils.Topology

    def cpu_topology(*args: Any, **kwargs: Any) -> Any:
        kwargs["compute_device"] = "cpu"
        kwargs["ddr_cap"] = kwargs.get("hbm_cap")
        return topology(*args, **kwargs)

    train_utils.Topology = cpu_topology


def bind_gin(gin: Any) -> None:
    for name, value in DENSE_OPTIMIZER.items():
        gin.bind_parameter(f"dense_optimizer_factory_and_class.{name}", value)
    gin.bind_parameter("dense_optimizer_factory_and_class.betas", BETAS)
    gin.bind_parameter("dense_optimizer_factory_and_class.learning_rate", DENSE_LR)
    for name, value in SPARSE_OPTIMIZER.items():
        gin.bind_parameter(f"sparse_optimizer_factory_and_class.{name}", value)
    gin.bind_parameter("sparse_optimizer_factory_and_class.betas", BETAS)
    gin.bind_parameter("sparse_optimizer_factory_and_class.eps", SPARSE_EPS)
    gin.bind_parameter("sparse_optimizer_factory_and_class.learning_rate", SPARSE_LR)


def plain_batch(inputs: dict[str, Any]) -> dict[str, Any]:
    def kjt(stored: dict[str, Any]) -> dict[str, Any]:
        return {
            "keys": list(stored["keys"]),
            "values": stored["values"].tolist(),
            "lengths": stored["lengths"].tolist(),
        }

    return {
        "uih": kjt(inputs["uih"]),
        "candidates": kjt(inputs["candidates"]),
        "labels": inputs["labels"].tolist(),
    }


def dump_json(obj: dict[str, Any], file: Any) -> None:
    file.write((json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = check_reference(args.reference)
    if not MODEL_WEIGHTS.is_file():
        raise SystemExit(f"error: {MODEL_WEIGHTS} is missing; run make_reference_fixtures.py")
    torch.set_num_threads(1)
    ref = import_reference(root)
    forbid_triton()
    train_utils = import_quietly("generative_recommenders.dlrm_v4.train.utils")
    import gin

    seed = 0  # the model fixtures' weight seed
    cfg = build_config(ref, model_fixtures.SHAPE)
    tables = build_tables(ref, model_fixtures.SHAPE)
    check_wiring(cfg, tables)
    model = build_model(ref, cfg, tables, seed)
    model_fixtures.perturb_constants(model, seed)
    committed = torch.load(MODEL_WEIGHTS, weights_only=True)["state_dict"]
    for key, value in model.state_dict().items():
        if not torch.equal(value, committed[key]):
            raise SystemExit(f"error: {key} differs from {MODEL_WEIGHTS.name}")
    dense_names = [
        n for n, _ in model.named_parameters() if not n.startswith("_embedding_collection.")
    ]
    table_names = sorted(tables)
    batches = [
        model_fixtures.make_inputs(model_fixtures.Case(f"step{i}", lengths, False, input_seed))
        for i, (lengths, input_seed) in enumerate(BATCHES)
    ]

    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            bind_gin(gin)
            plan_for_the_cpu(train_utils)
            dmp, optimizer = train_utils.make_optimizer_and_shard(
                model, device=torch.device("cpu"), world_size=1
            )
            copy_tables(dmp, committed, table_names)
            steps = run_steps(ref, dmp, optimizer, batches, dense_names, table_names)
            initial = steps.pop(0)
        finally:
            dist.destroy_process_group()

    for i, step in enumerate(steps):
        if not step["grad_norm"] > GRAD_CLIP_NORM:
            raise SystemExit(f"error: the clip does not bite at step {i}: {step['grad_norm']}")
        print(
            f"step {i}: loss {step['loss']:.6f} grad norm {step['grad_norm']:.4f} "
            f"lr {step['dense_lr']:.2e}/{step['sparse_lr']:.2e}",
            file=sys.stderr,
        )
    fixture = {
        "format_version": FORMAT_VERSION,
        "reference": {
            "commit": args.reference_commit,
            "ran": [
                "generative_recommenders.dlrm_v4.train.utils.make_optimizer_and_shard, its "
                "planner's topology set to the CPU",
                "the streaming loop's warm-up, clip and step order, done by this script",
            ],
            "sha256": model_fixtures.reference_digests(root),
        },
        "initial_weights": "tests/fixtures/reference/weights.pt",
        "optimizer": {
            "dense_lr": DENSE_LR,
            "sparse_lr": SPARSE_LR,
            "betas": list(BETAS),
            "eps": DENSE_OPTIMIZER["eps"],
            "sparse_eps": SPARSE_EPS,
            "weight_decay": 0.0,
            "warmup_steps": WARMUP_STEPS,
            "grad_clip_norm": GRAD_CLIP_NORM,
        },
        "batches": [plain_batch(b) for b in batches],
        "initial": initial,
        "steps": steps,
    }
    model_fixtures.save_atomic(fixture, args.out / "recipe.json", dump_json)
    print(f"wrote {len(steps)} steps to {args.out / 'recipe.json'}", file=sys.stderr)
    return 0


def run_steps(
    ref: Any,
    dmp: Any,
    optimizer: Any,
    batches: list[dict[str, Any]],
    dense_names: list[str],
    table_names: list[str],
) -> list[dict[str, Any]]:
    """The initial summaries, then one record per step."""
    fused = dmp.fused_optimizer
    groups = list(optimizer.param_groups) + list(fused.param_groups)
    peaks = [group["lr"] for group in groups]
    records: list[dict[str, Any]] = [weight_summaries(dmp, dense_names, table_names)]
    for step, inputs in enumerate(batches):
        progress = min(1.0, step / WARMUP_STEPS)
        for group, peak in zip(groups, peaks, strict=True):
            group["lr"] = peak * progress
        fused.step()  # pushes the learning rate into the fused kernel
        optimizer.zero_grad()
        out = dmp(
            model_fixtures.to_kjt(ref, inputs["uih"]),
            model_fixtures.to_kjt(ref, inputs["candidates"]),
        )
        labels = out[4].detach().to(torch.float32).reshape(-1)
        if not torch.equal(labels, inputs["labels"]):
            raise AssertionError(f"labels differ at step {step}")
        loss = sum(out[2].values())
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(dmp.parameters(), max_norm=GRAD_CLIP_NORM)
        optimizer.step()
        if not math.isfinite(float(loss.detach())):
            raise AssertionError(f"loss is not finite at step {step}")
        records.append(
            {
                "loss": float(loss.detach()),
                "grad_norm": float(norm),
                "dense_lr": optimizer.param_groups[0]["lr"],
                "sparse_lr": fused.param_groups[0]["lr"],
                **weight_summaries(dmp, dense_names, table_names),
            }
        )
    return records


if __name__ == "__main__":
    raise SystemExit(main())
