"""A trainer's state by name, as a checkpoint holds it, and its digest.

Tensors are keyed by name, not by position: `model/<fqn>` for the model's state dict and
`optimizer/<name>/<param fqn>/<state>` for the optimizers, named `dense`, `sparse0`,
`sparse1`, ... in the trainer's order; their param groups and non-tensor state go to
`meta.json` as JSON. torchrec's `KeyedOptimizer`s are keyed by parameter name already (with
ShardedTensor states when sharded); torch optimizers number their parameters, which are mapped
to the model's names. `state_digest` hashes all of it. `CheckpointableTrainer` is what this
reads and writes of a trainer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torchrec.optim.keyed import KeyedOptimizer

from hstu_model.checkpoint.files import CheckpointError
from hstu_model.config import HSTUConfig


class CheckpointableTrainer(Protocol):
    """What checkpointing reads and writes of a trainer (`hstu_model.Trainer` is one).

    A save reads the model's state dict, the state of every optimizer, the step and the config;
    a load loads into the same model and optimizers in place, checks the config and sets the
    step.
    """

    step: int
    """Training steps taken; the checkpoint's `N`, and set when one is loaded."""

    @property
    def model(self) -> torch.nn.Module:
        """The model whose `state_dict` is saved (an `HSTURanker`, or the
        DistributedModelParallel of a sharded one)."""

    @property
    def config(self) -> HSTUConfig:
        """Saved as `config.json` (`to_dict()`) unless the caller gives another."""

    @property
    def dense_optimizer(self) -> torch.optim.Optimizer:
        """Saved as the optimizer `dense`."""

    @property
    def sparse_optimizers(self) -> Sequence[torch.optim.Optimizer]:
        """Saved as `sparse0`, `sparse1`, ... in this order."""


def _named_optimizers(trainer: CheckpointableTrainer) -> list[tuple[str, torch.optim.Optimizer]]:
    return [("dense", trainer.dense_optimizer)] + [
        (f"sparse{i}", opt) for i, opt in enumerate(trainer.sparse_optimizers)
    ]


def _param_names(model: torch.nn.Module) -> dict[torch.nn.Parameter, str]:
    return {p: name for name, p in model.named_parameters(remove_duplicate=False)}


def _param_list(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    # torch.optim state_dict numbers the parameters of all groups in order from 0.
    return [p for group in optimizer.param_groups for p in group["params"]]


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise CheckpointError(f"optimizer value of type {type(value).__name__} is not supported")


def _like(saved: Any, live: Any) -> Any:
    """`saved` (from JSON) in the type of the live value it replaces."""
    if isinstance(saved, Mapping) and "__tensor__" in saved:
        return torch.tensor(saved["__tensor__"], dtype=getattr(torch, saved["dtype"]))
    if isinstance(live, tuple) and isinstance(saved, list):
        return tuple(saved)
    return saved


def _optimizer_state(
    name: str, optimizer: torch.optim.Optimizer, names: Mapping[torch.nn.Parameter, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors keyed `optimizer/<name>/<param fqn>/<key>`, JSON part) of one optimizer."""
    keyed = isinstance(optimizer, KeyedOptimizer)
    sd = optimizer.state_dict()
    if keyed:  # torchrec: already keyed by parameter name (ShardedTensor states when sharded)
        state, groups = sd["state"], sd.get("param_groups")
    else:
        params = _param_list(optimizer)
        try:
            state = {names[params[i]]: s for i, s in sd["state"].items()}
            groups = [
                {**g, "params": [names[params[i]] for i in g["params"]]} for g in sd["param_groups"]
            ]
        except KeyError:
            raise CheckpointError(
                f"optimizer {name!r} holds a parameter that is not the model's"
            ) from None
    tensors: dict[str, Any] = {}
    scalars: dict[str, Any] = {}
    for fqn, entry in state.items():
        if "/" in fqn:
            raise CheckpointError(f"parameter name {fqn!r} contains '/'")
        for key, value in entry.items():
            path = f"optimizer/{name}/{fqn}/{key}"
            if isinstance(value, torch.Tensor):
                tensors[path] = value
            else:
                scalars[path] = _jsonable(value)
    meta = {"keyed": keyed, "param_groups": _jsonable(groups), "scalars": scalars}
    return tensors, meta


def _trainer_state(trainer: CheckpointableTrainer) -> tuple[dict[str, Any], dict[str, Any]]:
    """Flat name -> tensor dict of model and optimizers, and the JSON part of the optimizers."""
    tensors = {f"model/{k}": v for k, v in trainer.model.state_dict().items()}
    names = _param_names(trainer.model)
    optimizers = {}
    for name, optimizer in _named_optimizers(trainer):
        part, meta = _optimizer_state(name, optimizer, names)
        tensors |= part
        optimizers[name] = meta
    return tensors, optimizers


def _local_tensors(value: Any) -> list[tuple[str, torch.Tensor]]:
    """The plain tensors a state value holds on this rank (a ShardedTensor's local shards)."""
    if isinstance(value, torch.Tensor) and hasattr(value, "local_shards"):
        return [(f"shard{list(s.metadata.shard_offsets)}", s.tensor) for s in value.local_shards()]
    if hasattr(value, "to_local"):  # DTensor
        return [("local", value.to_local())]
    return [("", value)]


def state_digest(trainer: CheckpointableTrainer) -> str:
    """sha256 (hex) of the trainer's step, model state and optimizer states.

    Deterministic: entries in sorted name order, each tensor as name, dtype, shape and its raw
    bytes; optimizer hyperparameters as canonical JSON. Two runs that agree on it hold
    bit-identical weights and optimizer state. Sharded tensors contribute this rank's shards.
    """
    tensors, optimizers = _trainer_state(trainer)
    h = hashlib.sha256()
    h.update(f"step={int(trainer.step)}\n".encode())
    for name in sorted(tensors):
        for suffix, t in _local_tensors(tensors[name]):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}{suffix} {t.dtype!s} {list(t.shape)}\n".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(optimizers, sort_keys=True, allow_nan=True).encode())
    return h.hexdigest()


def _load_optimizer(
    name: str,
    optimizer: torch.optim.Optimizer,
    meta: Mapping[str, Any],
    loaded: Mapping[str, Any],
    names: Mapping[torch.nn.Parameter, str],
) -> None:
    prefix = f"optimizer/{name}/"
    state: dict[str, dict[str, Any]] = {}
    for path, value in loaded.items():
        if path.startswith(prefix):
            fqn, key = path[len(prefix) :].rsplit("/", 1)
            state.setdefault(fqn, {})[key] = value
    for path, value in meta["scalars"].items():
        fqn, key = path[len(prefix) :].rsplit("/", 1)
        state.setdefault(fqn, {})[key] = _like(value, None)
    saved_groups = meta["param_groups"]
    if isinstance(optimizer, KeyedOptimizer):
        sd: dict[str, Any] = {"state": state}
        if saved_groups is not None:
            sd["param_groups"] = saved_groups
        optimizer.load_state_dict(sd)
        return
    params = _param_list(optimizer)
    index = {names[p]: i for i, p in enumerate(params)}
    unknown = sorted(set(state) - set(index))
    if unknown:
        raise CheckpointError(f"optimizer {name!r}: the checkpoint has state for {unknown[:3]}")
    live_groups = optimizer.param_groups
    if len(saved_groups) != len(live_groups):
        raise CheckpointError(
            f"optimizer {name!r}: {len(saved_groups)} param groups saved, {len(live_groups)} now"
        )
    groups = []
    for saved, live in zip(saved_groups, live_groups, strict=True):
        if saved["params"] != [names[p] for p in live["params"]]:
            raise CheckpointError(f"optimizer {name!r}: the parameters of a group differ")
        group = {k: _like(v, live.get(k)) for k, v in saved.items() if k != "params"}
        groups.append(group | {"params": [index[fqn] for fqn in saved["params"]]})
    optimizer.load_state_dict(
        {"state": {index[fqn]: entry for fqn, entry in state.items()}, "param_groups": groups}
    )
