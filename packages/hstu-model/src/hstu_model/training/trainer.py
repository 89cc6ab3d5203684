"""Training machinery: optimizers with a shared warmup, one train step, evaluation.

`Trainer` takes either an `HSTURanker` or the DistributedModelParallel that
`hstu_model.sharding.shard_model` returns; with the latter the sparse optimizer is the DMP's
fused one (row-wise Adagrad in the backward pass of the sharded tables).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn
from torchrec.distributed.model_parallel import get_unwrapped_module
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from hstu_model.config import HSTUConfig
from hstu_model.metrics import binary_auc, normalized_entropy
from hstu_model.model import HSTURanker
from hstu_model.optimizers import (
    SparseRowWiseAdagrad,
    set_learning_rates,
    sparse_optimizer_settings,
)
from hstu_model.sharding import is_sharded, sharded_parameters


class Batch(Protocol):
    uih: KeyedJaggedTensor
    candidates: KeyedJaggedTensor
    labels: torch.Tensor


def seed_everything(seed: int) -> None:
    """Seed every generator a run draws from, so that a seed fixes the whole run."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class EvalResult:
    auc: float
    """ROC AUC of the first task over every evaluated candidate."""
    loss: float
    """Weighted loss per evaluated candidate: each batch's loss weighted by its samples, so
    that it does not depend on how the samples were cut into batches and ranks."""
    normalized_entropy: float
    """Log loss of the first task over the entropy of its positive rate (< 1: informative)."""
    num_samples: int
    """Candidates evaluated."""


class Trainer:
    """Dense Adam and sparse row-wise Adagrad over an HSTURanker, one step at a time.

    `model` is an `HSTURanker` or the DistributedModelParallel of `shard_model`. Unsharded, the
    tables give sparse gradients and the sparse optimizer is `SparseRowWiseAdagrad` (TorchRec's
    `RowWiseAdagrad` on the touched rows only), stepped after backward. Sharded, the
    sharded tables are updated inside backward by the DMP's `fused_optimizer` (row-wise Adagrad
    too), and data_parallel tables, if any, by a `RowWiseAdagrad` after backward; DDP averages
    the gradients of the dense parameters and of the data_parallel tables over the ranks.
    Every sparse optimizer gets its learning rate from the same warmup as the dense Adam
    (`set_learning_rates`). `train_step` returns this rank's loss.
    """

    def __init__(self, model: HSTURanker | nn.Module, config: HSTUConfig) -> None:
        self.model = model
        self.config = config
        self.module: HSTURanker = get_unwrapped_module(model)
        """The HSTURanker inside `model` (for its loss)."""
        opt = config.optimizer
        self._replicated_parameters: list[nn.Parameter] = []
        if is_sharded(model):
            self._dense_parameters, self._replicated_parameters = sharded_parameters(model)
            sparse = [model.fused_optimizer]
            if self._replicated_parameters:
                sparse.append(self._row_wise_adagrad(self._replicated_parameters))
        else:
            self._dense_parameters = model.dense_parameters()
            # Sparse gradients: a step costs what the batch touched, not the tables' size
            # (what the sharded tables' fused optimizer does too).
            for table in model.embedding_collection.embeddings.values():
                table.sparse = True
            sparse = [
                SparseRowWiseAdagrad(model.embedding_parameters(), **sparse_optimizer_settings(opt))
            ]
        self.dense_optimizer = torch.optim.Adam(
            self._dense_parameters,
            lr=opt.dense_lr,
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
        )
        self._take_initial_step(self.dense_optimizer, self._dense_parameters)
        self.sparse_optimizers: list[torch.optim.Optimizer] = sparse
        """Row-wise Adagrad of the embedding tables: one optimizer unsharded; the DMP's fused
        optimizer (plus one for the data_parallel tables, if any) sharded."""
        self.step = 0
        self.last_scores: tuple[torch.Tensor, torch.Tensor] | None = None
        """(logits, labels) of the first task in the last training batch, detached, for
        running metrics."""

    @staticmethod
    @torch.no_grad()
    def _take_initial_step(optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter]):
        """One step on zero gradients, as the reference's `KeyedOptimizer.init_state` takes on
        its dense optimizer when the run is built: Adam's first real batch is then its step 2
        (bias correction included) with zero moments from step 1; no weight moves unless weight
        decay is set, as in the reference. The sharded tables' fused row-wise Adagrad is outside that optimizer and starts
        untouched, as here. A resumed run loads the checkpoint's state over this one."""
        for param in parameters:
            param.grad = torch.zeros_like(param)
        optimizer.step()
        for param in parameters:
            param.grad = None

    def _row_wise_adagrad(self, parameters: list[nn.Parameter]) -> RowWiseAdagrad:
        return RowWiseAdagrad(parameters, **sparse_optimizer_settings(self.config.optimizer))

    @property
    def sparse_optimizer(self) -> torch.optim.Optimizer:
        """The first sparse optimizer (the only one of an unsharded model)."""
        return self.sparse_optimizers[0]

    def set_learning_rates(self) -> float:
        """Set the dense and the sparse learning rates for step `self.step` (peak times the
        shared warmup factor, which it returns). `train_step` calls it before each step."""
        return set_learning_rates(
            self.dense_optimizer, self.sparse_optimizers, self.config.optimizer, self.step
        )

    def _autocast(self):
        enabled = self.config.train.autocast_bf16
        device_type = next(self.model.parameters()).device.type
        return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled)

    def train_step(self, batch: Batch) -> float:
        """One optimizer step on `batch`; returns its loss."""
        self.model.train()
        self.set_learning_rates()
        with self._autocast():
            logits = self.model(batch.uih, batch.candidates).logits
        loss = self.module.loss(logits.float(), batch.labels)
        first_task = batch.labels.reshape(logits.shape[0], -1)[:, 0]
        self.last_scores = (logits[:, 0].detach().float(), first_task.detach())
        self.dense_optimizer.zero_grad(set_to_none=True)
        for optimizer in self.sparse_optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.config.optimizer.grad_clip_norm
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(self._dense_parameters, clip)
        self.dense_optimizer.step()
        for optimizer in self.sparse_optimizers:
            optimizer.step()
        self.step += 1
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(
        self,
        batches: Iterable[Batch],
        gather: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> EvalResult:
        """AUC, loss and normalized entropy of the model over `batches`, in eval mode.

        With a process group every rank passes its own batches (the same number on every rank;
        a sharded model's forward is collective)
        and `gather` concatenates an array over the ranks, so every rank gets the metrics of
        all the batches. Empty batches (the tail of the last global batch) count for nothing.
        The loss is each batch's loss weighted by its samples, so that a run of several ranks
        (whose batches are slices of the global batches, the last ones uneven) reports the loss
        that one process evaluating the same samples does.
        """
        self.model.eval()
        scores, labels, losses, sizes = [], [], [], []
        previous = None
        for batch in batches:
            if batch.labels.numel() == 0:
                # Only the last global batch leaves some ranks without samples. TorchRec cannot
                # look up an empty batch, and the others wait for this rank in the all-to-all:
                # run the previous batch again and drop its result.
                if previous is None:
                    raise ValueError("evaluate: this rank got no samples (fewer than its ranks)")
                with self._autocast():
                    self.model(previous.uih, previous.candidates)
                continue
            previous = batch
            with self._autocast():
                logits = self.model(batch.uih, batch.candidates).logits.float()
            losses.append(float(self.module.loss(logits, batch.labels)))
            sizes.append(logits.shape[0])
            scores.append(logits[:, 0].cpu().numpy())
            labels.append(batch.labels.reshape(logits.shape[0], -1)[:, 0].cpu().numpy())
        empty = np.zeros(0)
        all_scores = np.concatenate(scores) if scores else empty
        all_labels = np.concatenate(labels) if labels else empty
        all_losses = np.asarray(losses, dtype=np.float64)
        all_sizes = np.asarray(sizes, dtype=np.float64)
        if gather is not None:
            all_scores, all_labels, all_losses, all_sizes = map(
                gather, (all_scores, all_labels, all_losses, all_sizes)
            )
        if not all_scores.size:
            raise ValueError("evaluate: no batches to evaluate")
        all_labels = all_labels.round().astype(np.int64)
        return EvalResult(
            auc=binary_auc(all_scores, all_labels),
            loss=float(np.dot(all_losses, all_sizes) / all_sizes.sum()),
            normalized_entropy=normalized_entropy(all_scores, all_labels),
            num_samples=int(all_scores.size),
        )
