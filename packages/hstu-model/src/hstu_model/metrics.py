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
