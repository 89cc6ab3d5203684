"""Evaluation metrics."""

from __future__ import annotations

import numpy as np


def binary_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve, exact, with tied scores counted as half.

    This is the Mann-Whitney U statistic over (positive, negative) pairs, computed from the
    average ranks of the scores in O(n log n).
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"scores and labels differ in length: {scores.size} vs {labels.size}")
    if not np.isfinite(scores).all():
        raise ValueError("scores: contains NaN or infinity")
    positive = labels.astype(bool)
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise ValueError("labels: must be 0 or 1")
    num_pos = int(positive.sum())
    num_neg = positive.size - num_pos
    if num_pos == 0 or num_neg == 0:
        raise ValueError(f"AUC needs both classes, got {num_pos} positive and {num_neg} negative")
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    # Average 1-based rank of each run of equal scores.
    run_starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    run_ends = np.r_[run_starts[1:], sorted_scores.size]
    run_ranks = (run_starts + run_ends + 1) / 2.0
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, run_ends - run_starts)
    rank_sum = ranks[positive].sum()
    return float((rank_sum - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg))


def normalized_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean log loss of the predictions divided by the entropy of the base rate.

    NE < 1 means the model predicts better than always answering the empirical positive rate
    (He et al., "Practical Lessons from Predicting Clicks on Ads at Facebook"). `logits` are
    pre-sigmoid scores; the log loss is computed from them directly for numerical stability.
    """
    logits = np.asarray(logits, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    if logits.shape != labels.shape:
        raise ValueError(f"logits and labels differ in length: {logits.size} vs {labels.size}")
    if not np.isfinite(logits).all():
        raise ValueError("logits: contains NaN or infinity")
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise ValueError("labels: must be 0 or 1")
    rate = labels.mean() if labels.size else 0.0
    if not 0.0 < rate < 1.0:
        raise ValueError(f"normalized entropy needs both classes, positive rate {rate}")
    # log(1 + exp(-|x|)) + max(x, 0) - x * y is the log loss of sigmoid(x) against y.
    log_loss = np.mean(np.logaddexp(0.0, logits) - logits * labels)
    base = -(rate * np.log(rate) + (1.0 - rate) * np.log(1.0 - rate))
    return float(log_loss / base)


class BinnedAUC:
    """ROC AUC over every prediction added so far ("lifetime"), in constant memory.

    Probabilities sigmoid(logit) are counted into `num_bins` equal-width bins per class; the AUC
    of the binned scores treats predictions in one bin as tied. It differs from the exact AUC
    by at most the share of (positive, negative) pairs that share a bin.
    """

    def __init__(self, num_bins: int = 10_000) -> None:
        if num_bins < 2:
            raise ValueError(f"BinnedAUC.num_bins: must be >= 2, got {num_bins}")
        self.num_bins = num_bins
        self.positives = np.zeros(num_bins, dtype=np.int64)
        self.negatives = np.zeros(num_bins, dtype=np.int64)

    def update(self, logits: np.ndarray, labels: np.ndarray) -> None:
        logits = np.asarray(logits, dtype=np.float64).reshape(-1)
        labels = np.asarray(labels).reshape(-1)
        if logits.shape != labels.shape:
            raise ValueError(f"logits and labels differ in length: {logits.size} vs {labels.size}")
        if not np.isfinite(logits).all():
            raise ValueError("logits: contains NaN or infinity")
        if labels.size and not np.isin(labels, (0, 1)).all():
            raise ValueError("labels: must be 0 or 1")
        probabilities = 0.5 * (1.0 + np.tanh(0.5 * logits))  # sigmoid without overflow
        bins = np.minimum((probabilities * self.num_bins).astype(np.int64), self.num_bins - 1)
        positive = labels.astype(bool)
        self.positives += np.bincount(bins[positive], minlength=self.num_bins)
        self.negatives += np.bincount(bins[~positive], minlength=self.num_bins)

    def compute(self) -> float:
        num_pos, num_neg = int(self.positives.sum()), int(self.negatives.sum())
        if num_pos == 0 or num_neg == 0:
            raise ValueError(
                f"AUC needs both classes, got {num_pos} positive and {num_neg} negative"
            )
        # Each positive beats the negatives of lower bins and ties those of its own bin.
        below = np.cumsum(self.negatives) - self.negatives
        wins = (self.positives * (below + 0.5 * self.negatives)).sum()
        return float(wins / (num_pos * num_neg))

    def state_dict(self) -> dict:
        return {"positives": self.positives.tolist(), "negatives": self.negatives.tolist()}

    def load_state_dict(self, state: dict) -> None:
        positives = np.asarray(state["positives"], dtype=np.int64)
        negatives = np.asarray(state["negatives"], dtype=np.int64)
        if positives.shape != (self.num_bins,) or negatives.shape != (self.num_bins,):
            raise ValueError(
                f"BinnedAUC state has {positives.size} bins, this metric {self.num_bins}"
            )
        self.positives, self.negatives = positives, negatives
