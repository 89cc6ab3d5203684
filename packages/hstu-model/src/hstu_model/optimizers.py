"""The optimizer policy of a run: which sparse optimizer the embedding tables get, at which
settings, and the one warmup that sets every learning rate each step.

`Trainer` (unsharded: `SparseRowWiseAdagrad` stepped after backward) and `shard_model` (sharded:
TorchRec's row-wise Adagrad fused into the tables' backward) both build their sparse optimizer
from `sparse_optimizer_settings`, and `set_learning_rates` is the only place a rate is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from hstu_model.config import OptimizerConfig


def sparse_optimizer_settings(config: OptimizerConfig) -> dict[str, Any]:
    """Keyword arguments of the row-wise Adagrad of the embedding tables, at its peak rate."""
    return {"lr": config.sparse_lr, "eps": config.sparse_eps}


class SparseRowWiseAdagrad(RowWiseAdagrad):
    """TorchRec's `RowWiseAdagrad` (same state, same checkpoints) that also takes the sparse
    gradients of `nn.Embedding(sparse=True)`: it then updates only the rows a batch touched,
    with the dense update's own operations on those rows. A row outside the batch has a zero
    gradient, which leaves the dense update's row as it was (no weight or learning-rate
    decay), so both give the same weights up to float rounding (a row that several samples
    of a batch touch sums their gradients in another order); tested against the dense path."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        if not any(p.grad is not None and p.grad.is_sparse for p in self._all_params()):
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["weight_decay"] or group["lr_decay"] or group["maximize"]:
                raise ValueError(
                    "SparseRowWiseAdagrad: sparse gradients need weight_decay, lr_decay 0 and "
                    "maximize False (a decay also changes the rows outside the batch)"
                )
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                state["step"] += 1
                grad = param.grad
                grad = grad.coalesce() if grad.is_sparse else grad.to_sparse(sparse_dim=1)
                rows, values = grad.indices()[0], grad.values()
                sums = state["sum"][rows]
                sums += values.pow(2).mean(axis=1).view(-1, 1)
                state["sum"].index_copy_(0, rows, sums)
                std = sums.sqrt().add_(group["eps"])
                updated = param[rows].addcdiv_(values, std, value=-group["lr"])
                param.index_copy_(0, rows, updated)
        return loss

    def _all_params(self) -> Iterable[nn.Parameter]:
        return (p for group in self.param_groups for p in group["params"])


def set_learning_rates(
    dense_optimizer: torch.optim.Optimizer,
    sparse_optimizers: Sequence[torch.optim.Optimizer],
    config: OptimizerConfig,
    step: int,
) -> float:
    """Set the dense optimizer and every sparse one to their peak rate times the warmup factor
    of `step`; returns the factor. A fused optimizer (the DMP's `fused_optimizer`) takes the new
    rate into its kernels at once, so it applies to the next backward pass."""
    factor = config.lr_factor(step)
    for group in dense_optimizer.param_groups:
        group["lr"] = config.dense_lr * factor
    for optimizer in sparse_optimizers:
        for group in optimizer.param_groups:
            group["lr"] = config.sparse_lr * factor
        if not isinstance(optimizer, RowWiseAdagrad):
            # TorchRec's fused embedding optimizers push param_groups' lr into their kernels in
            # zero_grad() and step(), neither of which touches weights (backward does).
            optimizer.zero_grad()
    return factor
