"""Sharding the model's embedding tables over ranks with TorchRec's DistributedModelParallel.

`shard_model(model, config, process_group)` plans the EmbeddingCollection with TorchRec's
`EmbeddingShardingPlanner` over a `Topology` of the process group's world size, turns the
per-table overrides of `ShardingConfig` into `ParameterConstraints`, fuses the sparse optimizer
(row-wise Adagrad) into the backward pass of the sharded tables, lets DistributedModelParallel
wrap the rest of the model in DistributedDataParallel, logs the plan table by table and
returns the DMP model with a plain-dict summary of the plan. `Trainer` takes the returned model
as it is: dense Adam over the non-embedding parameters, and the learning rates of the dense and
the sparse optimizer set every step from the same warmup.

With `ShardingConfig.fp16_all_to_all`, TorchRec's qcomm codecs (FP16 in forward and backward)
go on the sequence-embedding all-to-all; if that cannot be done, or the sharded model does not
carry them, every rank raises `ShardingError`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import _apply_optimizer_in_backward
from torch.nn.parallel import DistributedDataParallel
from torchrec.distributed.dist_data import SequenceEmbeddingsAllToAll
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.fbgemm_qcomm_codec import (
    CommType,
    QCommsConfig,
    get_qcomm_codecs_registry,
)
from torchrec.distributed.model_parallel import (
    DefaultDataParallelWrapper,
    DistributedModelParallel,
    get_unwrapped_module,
)
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig
from torchrec.distributed.types import CommOp, ShardingEnv, ShardingPlan
from torchrec.modules.embedding_modules import EmbeddingCollection
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from hstu_model.config import (
    SHARDING_TYPES,
    ConfigError,
    HSTUConfig,
)
from hstu_model.optimizers import sparse_optimizer_settings
from hstu_model.quiet import quiet_torchrec_sharding

logger = logging.getLogger(__name__)

GB = 10**9


class ShardingError(RuntimeError):
    """The model cannot be sharded as configured (raised on every rank of the group)."""


class ShardingInfo:
    """What `shard_model` leaves on the DMP model as `.hstu_sharding` for `Trainer`."""

    def __init__(
        self,
        process_group: dist.ProcessGroup,
        module_path: str,
        replicated_tables: tuple[str, ...],
        summary: dict[str, Any],
    ) -> None:
        self.process_group = process_group
        self.module_path = module_path
        """Path of the sharded EmbeddingCollection in the model."""
        self.replicated_tables = replicated_tables
        """The data_parallel tables: a full copy on every rank, not updated in backward."""
        self.summary = summary
        """The summary `shard_model` returned."""


def is_sharded(model: nn.Module) -> bool:
    """Whether `model` is a DistributedModelParallel (the result of `shard_model`)."""
    return isinstance(model, DistributedModelParallel)


def _embedding_collection(model: nn.Module) -> tuple[str, EmbeddingCollection]:
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, EmbeddingCollection)]
    if len(found) != 1:
        raise ShardingError(
            f"shard_model: expected exactly one EmbeddingCollection in the model, found "
            f"{len(found)} ({[n for n, _ in found]})"
        )
    return found[0]


def _agree(pg: dist.ProcessGroup, error: str | None) -> None:
    """Raise `ShardingError` on every rank of `pg` if any rank has an error (a collective:
    every rank must call it at the same point)."""
    world_size = dist.get_world_size(pg)
    errors: list[str | None] = [error]
    if world_size > 1:
        errors = [None] * world_size
        dist.all_gather_object(errors, error, group=pg)
    failed = [(rank, e) for rank, e in enumerate(errors) if e is not None]
    if failed:
        ranks = [r for r, _ in failed]
        raise ShardingError(f"{failed[0][1]} [failed on rank(s) {ranks} of {world_size}]")


def _compute_device(config: HSTUConfig, pg: dist.ProcessGroup) -> torch.device:
    sharding = config.sharding
    backend = str(dist.get_backend(pg)).lower()
    if sharding.compute_device == "cpu":
        if "gloo" not in backend:
            raise ShardingError(
                f"compute_device: cpu needs a gloo process group, got backend {backend!r}"
            )
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ShardingError("compute_device: cuda, but torch sees no CUDA/ROCm device")
    if "nccl" not in backend:
        raise ShardingError(
            f"compute_device: cuda needs an nccl process group, got backend {backend!r}"
        )
    return torch.device("cuda", torch.cuda.current_device())


def fp16_codecs(device: torch.device) -> dict[str, Any]:
    """TorchRec's qcomm codec registry with FP16 forward and backward for the sequence-embedding
    all-to-all on `device`, after a round trip through both codecs to prove that their kernels
    run there. Raises whatever the codecs raise when they cannot."""
    registry = get_qcomm_codecs_registry(
        QCommsConfig(forward_precision=CommType.FP16, backward_precision=CommType.FP16),
        comm_ops=[CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL],
        device=device,
    )
    if not registry:
        raise RuntimeError("TorchRec returned no qcomm codecs for FP16")
    codecs = registry[CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL.name]
    probe = torch.linspace(-2.0, 2.0, 64, device=device).reshape(4, 16)
    for name in ("forward", "backward"):
        codec = getattr(codecs, name)
        encoded = codec.encode(probe)
        if encoded.dtype != torch.float16:
            raise RuntimeError(f"the {name} codec sends {encoded.dtype}, not float16")
        decoded = codec.decode(encoded)
        if not torch.allclose(decoded.float(), probe, atol=1e-2):
            raise RuntimeError(f"the {name} codec does not round-trip on {device}")
    return registry


def _codec_precision(codec: Any) -> str | None:
    precision = getattr(codec, "_comm_precision", None)
    return None if precision is None else getattr(precision, "name", str(precision))


def _all_to_all_precisions(sharded_collection: nn.Module) -> list[dict[str, Any]]:
    """`{sharding, forward, backward}` for every sequence-embedding all-to-all of the sharded
    collection: the precision of its forward and backward codec, None where it has none."""
    found = []
    # The output dists sit in a plain list (one per sharding type), not in a ModuleList.
    output_dists = getattr(sharded_collection, "_output_dists", [])
    sharding_types = list(getattr(sharded_collection, "_sharding_type_to_sharding", {}))
    for index, output_dist in enumerate(output_dists):
        for module in output_dist.modules():
            if isinstance(module, SequenceEmbeddingsAllToAll):
                codecs = getattr(module, "_codecs", None)
                found.append(
                    {
                        "sharding": (
                            sharding_types[index] if index < len(sharding_types) else index
                        ),
                        "forward": _codec_precision(getattr(codecs, "forward", None)),
                        "backward": _codec_precision(getattr(codecs, "backward", None)),
                    }
                )
    return found


def _constraints(config: HSTUConfig, tables: list[str]) -> dict[str, ParameterConstraints]:
    sharding = config.sharding
    unknown = sorted(sharding.tables() - set(tables))
    if unknown:
        raise ConfigError(
            f"sharding_types/compute_kernels: table(s) {unknown} are not tables of the model "
            f"({', '.join(tables)})"
        )
    constraints = {}
    for table in tables:
        sharding_types = None
        chosen = sharding.sharding_type_of(table)
        if chosen is not None:
            sharding_types = [chosen]
        elif sharding.compute_device == "cpu":
            # fbgemm's CPU dense kernel (data_parallel) pools sequences; see ShardingConfig.
            sharding_types = [t for t in SHARDING_TYPES if t != "data_parallel"]
        kernel = sharding.compute_kernel_of(table)
        if sharding_types is None and kernel is None:
            continue
        constraints[table] = ParameterConstraints(
            sharding_types=sharding_types,
            compute_kernels=None if kernel is None else [kernel],
        )
    return constraints


def _plan(
    planner: EmbeddingShardingPlanner,
    model: nn.Module,
    sharder: EmbeddingCollectionSharder,
    pg: dist.ProcessGroup,
    device: torch.device,
) -> ShardingPlan:
    """Plan on rank 0 and broadcast the plan, or the planner's error to raise on every rank
    (TorchRec's `collective_plan` leaves the other ranks waiting when rank 0 fails)."""
    result: list[Any] = [None]
    if dist.get_rank(pg) == 0:
        try:
            result[0] = ("plan", planner.plan(model, [sharder]))
        except Exception as exc:
            result[0] = ("error", f"{type(exc).__name__}: {exc}")
    if dist.get_world_size(pg) > 1:
        dist.broadcast_object_list(
            result, group_src=0, group=pg, device=device if device.type == "cuda" else None
        )
    kind, value = result[0]
    if kind == "error":
        raise ShardingError(f"shard_model: the planner found no plan: {value}")
    return value


def plan_summary(plan: ShardingPlan, module_path: str) -> dict[str, dict[str, Any]]:
    """`{table: {sharding_type, compute_kernel, ranks, shards}}` of the collection at
    `module_path`; shards are `{rank, offsets, sizes}` (none for a data_parallel table, which
    every rank holds whole)."""
    module_plan = plan.get_plan_for_module(module_path)
    if module_plan is None:
        raise ShardingError(f"shard_model: the plan has no entry for {module_path!r}")
    tables = {}
    for table, sharding in module_plan.items():
        shards = [
            {
                "rank": None if meta.placement is None else meta.placement.rank(),
                "offsets": list(meta.shard_offsets),
                "sizes": list(meta.shard_sizes),
            }
            for meta in getattr(sharding.sharding_spec, "shards", None) or []
        ]
        tables[table] = {
            "sharding_type": sharding.sharding_type,
            "compute_kernel": sharding.compute_kernel,
            "ranks": [] if sharding.ranks is None else list(sharding.ranks),
            "shards": shards,
        }
    return tables


def _copy_unsharded_weights(
    dmp: DistributedModelParallel, module_path: str, weights: Mapping[str, torch.Tensor]
) -> None:
    """Write the unsharded tables' weights into this rank's shards (and replicas)."""
    state = dmp.state_dict()
    with torch.no_grad():
        for key, full in weights.items():
            target = state[f"{module_path}.{key}"]
            if not hasattr(target, "local_shards"):  # a data_parallel replica
                target.copy_(full.to(target.device))
                continue
            for shard in target.local_shards():
                offsets, sizes = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                rows = slice(offsets[0], offsets[0] + sizes[0])
                cols = slice(offsets[1], offsets[1] + sizes[1])
                shard.tensor.copy_(full[rows, cols].to(shard.tensor.device))


def _broadcast_replicated(
    dmp: DistributedModelParallel, module_path: str, tables: Sequence[str], pg: dist.ProcessGroup
) -> None:
    """Give every rank rank 0's copy of the data_parallel tables (after an init on the meta
    device each rank draws its own)."""
    state = dmp.state_dict()
    for table in tables:
        dist.broadcast(state[f"{module_path}.embeddings.{table}.weight"], group_src=0, group=pg)


class FixedGradientBuckets(DefaultDataParallelWrapper):
    """The DistributedDataParallel of the dense part, with one layout of its gradient buckets
    from the first training step on, whatever step a process starts at.

    DDP reduces a process's first backward in one bucket in parameter order, then rebuilds its
    buckets in the order that backward's gradients came. A ring all-reduce sums each element
    over the ranks starting at a rank that depends on where the element lies in its bucket, so
    a resumed process (first backward at step k + 1) would sum step k + 1 in another layout
    than the uninterrupted run, which rebuilt after step 1: from three ranks on the sums round
    differently and a resume is no longer bit-identical. So every process, fresh or resumed,
    spends its first backward right here, on zeros: a backward that reaches the parameters in
    reverse order (the order a forward's gradients come back in, which keeps the all-reduces
    overlapping the backward), before any weights are loaded. The first real forward rebuilds
    from that order, so a fresh run and a resumed one train in the same layout, and no step
    pays for DDP's search for unused parameters.
    """

    def __init__(self) -> None:
        super().__init__(static_graph=False, find_unused_parameters=False)

    def wrap(self, dmp: DistributedModelParallel, env: ShardingEnv, device: torch.device) -> None:
        super().wrap(dmp, env, device)
        ddp = dmp._dmp_wrapped_module
        if isinstance(ddp, DistributedDataParallel):
            _spend_first_backward(ddp)


def _spend_first_backward(ddp: DistributedDataParallel) -> None:
    """One backward through `ddp`'s reducer, of zeros, reaching the parameters last to first."""
    parameters = [p for p in ddp._module_parameters if p.requires_grad]
    ddp.reducer.prepare_for_forward()
    ddp.reducer.prepare_for_backward([])
    # Each term of the chain is created after the one before, and autograd runs the newest
    # ready node first: the last parameter's gradient is accumulated first.
    total = torch.zeros((), device=parameters[0].device)
    for parameter in parameters:
        total = total + parameter.sum() * 0
    total.backward()
    for parameter in parameters:
        parameter.grad = None


def shard_model(
    model: nn.Module,
    config: HSTUConfig,
    process_group: dist.ProcessGroup | None = None,
) -> tuple[DistributedModelParallel, dict[str, Any]]:
    """Shard `model`'s EmbeddingCollection over the ranks of `process_group` (default: the
    world group, which must be initialised) as `config.sharding` says.

    Every rank calls it with the same model and config. The sharded tables get the sparse
    optimizer, row-wise Adagrad at `config.optimizer.sparse_lr`, fused into their backward
    pass; `Trainer` sets its learning rate every step together with the dense Adam's. A model
    with real weights keeps them (each rank's shards are copied from the unsharded tables, so
    the sharded model computes what the unsharded one does); a model built on the meta device
    is initialised by DistributedModelParallel (data_parallel tables then take rank 0's
    values). The model object is consumed: its EmbeddingCollection is replaced by the sharded
    one.

    Returns the DistributedModelParallel and a summary dict: `world_size`, `compute_device`,
    `fp16_all_to_all`, `tables` (`{table: {sharding_type, compute_kernel, ranks, shards}}`, the
    plan actually chosen, also logged one line per table) and `all_to_all` (the codec
    precisions on the sharded collection's sequence all-to-alls). Raises `ShardingError` on
    every rank when no plan can be made, or fp16 all-to-all is configured but cannot be enabled.
    """
    sharding, optimizer = config.sharding, config.optimizer
    if process_group is None:
        if not dist.is_initialized():
            raise ShardingError("shard_model: torch.distributed is not initialised")
        process_group = dist.group.WORLD
    pg = process_group
    world_size, rank = dist.get_world_size(pg), dist.get_rank(pg)
    device = _compute_device(config, pg)
    module_path, collection = _embedding_collection(model)
    tables = [c.name for c in collection.embedding_configs()]
    constraints = _constraints(config, tables)
    on_meta = any(p.is_meta for p in collection.parameters())
    weights = (
        None
        if on_meta
        else {key: value.detach().clone() for key, value in collection.state_dict().items()}
    )

    registry = None
    if sharding.fp16_all_to_all:
        error = None
        try:
            registry = fp16_codecs(device)
        except Exception as exc:
            error = (
                f"fp16_all_to_all: TorchRec's FP16 qcomm codecs cannot run on {device} "
                f"({type(exc).__name__}: {exc}); set sharding.fp16_all_to_all=false to send "
                "the embeddings in fp32"
            )
        _agree(pg, error)

    sharder = EmbeddingCollectionSharder(qcomm_codecs_registry=registry)
    # The sharder turns this into fused row-wise Adagrad in the tables' backward (TorchRec's
    # own apply_optimizer_in_backward is a deprecated wrapper around this function).
    _apply_optimizer_in_backward(
        RowWiseAdagrad,
        collection.parameters(),
        sparse_optimizer_settings(optimizer),
    )
    topology = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(
            world_size=world_size,
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world_size)),
            hbm_cap_bytes=round(sharding.hbm_cap_gb * GB) if sharding.hbm_cap_gb > 0 else None,
        ),
        kernel_config=KernelConfig(compute_device=sharding.compute_device),
    )
    with quiet_torchrec_sharding():
        planner = EmbeddingShardingPlanner(
            topology=topology, batch_size=config.train.batch_size, constraints=constraints
        )
        plan = _plan(planner, model, sharder, pg, device)
    table_plans = plan_summary(plan, module_path)
    for table in tables:
        entry = table_plans[table]
        logger.info(
            "sharding plan (rank %d of %d): table %s -> %s, kernel %s, ranks %s",
            rank,
            world_size,
            table,
            entry["sharding_type"],
            entry["compute_kernel"],
            entry["ranks"],
        )
    replicated = [t for t in tables if table_plans[t]["sharding_type"] == "data_parallel"]
    if sharding.fp16_all_to_all and len(replicated) == len(tables):
        _agree(
            pg,
            "fp16_all_to_all: every table is data_parallel, so no embedding goes through an "
            "all-to-all that could run in fp16; shard at least one table (e.g. "
            "sharding.sharding_types=item_id=row_wise) or set sharding.fp16_all_to_all=false",
        )

    # A model on the meta device is initialised shard by shard: each rank draws from its own
    # seed (else every rank's row-wise shard would repeat the same rows); the dense parameters
    # are then broadcast from rank 0 by DDP, the data_parallel tables below.
    base_seed = int(torch.randint(0, 2**62, (1,))) if on_meta else 0
    with (
        torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
        quiet_torchrec_sharding(),
    ):
        if on_meta:
            torch.manual_seed(base_seed + rank)
        dmp = DistributedModelParallel(
            model,
            env=ShardingEnv.from_process_group(pg),
            device=device,
            plan=plan,
            sharders=[sharder],
            data_parallel_wrapper=FixedGradientBuckets(),
        )
    sharded = get_unwrapped_module(dmp).get_submodule(module_path)
    if weights is not None:
        _copy_unsharded_weights(dmp, module_path, weights)
    elif replicated and world_size > 1:
        _broadcast_replicated(dmp, module_path, replicated, pg)

    all_to_all = _all_to_all_precisions(sharded)
    if sharding.fp16_all_to_all:
        not_fp16 = [a for a in all_to_all if (a["forward"], a["backward"]) != ("FP16", "FP16")]
        error = None
        if not all_to_all:
            error = "fp16_all_to_all: the sharded collection has no sequence all-to-all"
        elif not_fp16:
            error = f"fp16_all_to_all: all-to-all(s) without FP16 codecs: {not_fp16}"
        _agree(pg, error)
    summary = {
        "world_size": world_size,
        "compute_device": sharding.compute_device,
        "fp16_all_to_all": sharding.fp16_all_to_all,
        "tables": table_plans,
        "all_to_all": all_to_all,
    }
    dmp.hstu_sharding = ShardingInfo(pg, module_path, tuple(replicated), summary)
    return dmp, summary


def _info(model: nn.Module) -> ShardingInfo:
    info = getattr(model, "hstu_sharding", None)
    if not isinstance(info, ShardingInfo):
        raise ShardingError("the model was not sharded by hstu_model.sharding.shard_model")
    return info


def sharded_parameters(
    model: DistributedModelParallel,
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(dense, replicated) parameters of a model from `shard_model`: `dense` for the dense
    optimizer (everything outside the embedding tables), `replicated` the weights of the
    data_parallel tables, which need the sparse optimizer after backward (TorchRec wraps their
    lookup in its own DistributedDataParallel, which averages their gradients). The sharded
    tables are updated inside backward by the DMP's `fused_optimizer`."""
    info = _info(model)
    prefix = f"{info.module_path}."
    named = dict(model.named_parameters())
    fused = {name for name, _ in in_backward_optimizer_filter(iter(named.items()), include=True)}
    replicated = [
        p
        for name, p in named.items()
        if name.startswith(prefix) and name.split(".")[-2] in info.replicated_tables
    ]
    dense = [p for name, p in named.items() if not name.startswith(prefix) and name not in fused]
    return dense, replicated
