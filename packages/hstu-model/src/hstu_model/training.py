"""Training machinery: optimizers with a shared warmup, one train step, evaluation."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from hstu_model.config import HSTUConfig
from hstu_model.metrics import binary_auc
from hstu_model.model import HSTURanker


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
    """Mean weighted loss per batch."""
    num_samples: int
    """Candidates evaluated."""


class Trainer:
    """Dense Adam and sparse row-wise Adagrad over an HSTURanker, one step at a time."""

    def __init__(self, model: HSTURanker, config: HSTUConfig) -> None:
        self.model = model
        self.config = config
        opt = config.optimizer
        self._dense_parameters = model.dense_parameters()
        self.dense_optimizer = torch.optim.Adam(
            self._dense_parameters,
            lr=opt.dense_lr,
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
        )
        self.sparse_optimizer = RowWiseAdagrad(model.embedding_parameters(), lr=opt.sparse_lr)
        self.step = 0

    def _set_learning_rates(self) -> float:
        opt = self.config.optimizer
        factor = opt.lr_factor(self.step)
        for group in self.dense_optimizer.param_groups:
            group["lr"] = opt.dense_lr * factor
        for group in self.sparse_optimizer.param_groups:
            group["lr"] = opt.sparse_lr * factor
        return factor

    def _autocast(self):
        enabled = self.config.train.autocast_bf16
        device_type = next(self.model.parameters()).device.type
        return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled)

    def train_step(self, batch: Batch) -> float:
        """One optimizer step on `batch`; returns its loss."""
        self.model.train()
        self._set_learning_rates()
        with self._autocast():
            logits = self.model(batch.uih, batch.candidates).logits
        loss = self.model.loss(logits.float(), batch.labels)
        self.dense_optimizer.zero_grad(set_to_none=True)
        self.sparse_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.config.optimizer.grad_clip_norm
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(self._dense_parameters, clip)
        self.dense_optimizer.step()
        self.sparse_optimizer.step()
        self.step += 1
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self, batches: Iterable[Batch]) -> EvalResult:
        """AUC and loss of the model over `batches`, in eval mode."""
        self.model.eval()
        scores, labels, losses = [], [], []
        for batch in batches:
            with self._autocast():
                logits = self.model(batch.uih, batch.candidates).logits.float()
            losses.append(float(self.model.loss(logits, batch.labels)))
            scores.append(logits[:, 0].cpu().numpy())
            labels.append(batch.labels.reshape(logits.shape[0], -1)[:, 0].cpu().numpy())
        if not scores:
            raise ValueError("evaluate: no batches to evaluate")
        all_scores, all_labels = np.concatenate(scores), np.concatenate(labels)
        return EvalResult(
            auc=binary_auc(all_scores, all_labels.round().astype(np.int64)),
            loss=float(np.mean(losses)),
            num_samples=int(all_scores.size),
        )
