import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hstu_model import binary_auc
from hstu_model.testing import ThreadRanks


def pairwise_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels, strict=True) if y == 1]
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 1)), min_size=2, max_size=40).filter(
        lambda xs: len({y for _, y in xs}) == 2
    )
)
def test_matches_pairwise_definition_with_ties(pairs):
    scores = np.array([s for s, _ in pairs], dtype=np.float64) / 2
    labels = np.array([y for _, y in pairs])
    assert binary_auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)


def test_known_values():
    assert binary_auc([0.1, 0.9], [0, 1]) == 1.0
    assert binary_auc([0.9, 0.1], [0, 1]) == 0.0
    assert binary_auc([0.5, 0.5], [0, 1]) == 0.5


@pytest.mark.parametrize(
    ("scores", "labels", "message"),
    [
        ([0.1, 0.2], [1, 1], "both classes"),
        ([0.1, float("nan")], [0, 1], "NaN"),
        ([0.1, 0.2], [0, 2], "0 or 1"),
        ([0.1], [0, 1], "differ in length"),
    ],
)
def test_bad_input(scores, labels, message):
    with pytest.raises(ValueError, match=message):
        binary_auc(scores, labels)


def test_normalized_entropy_known_values():
    from hstu_model.metrics import normalized_entropy

    labels = np.array([1, 0, 0, 0])
    base_rate_logit = np.log(0.25 / 0.75)
    # Predicting the base rate everywhere is exactly 1.
    assert normalized_entropy(np.full(4, base_rate_logit), labels) == pytest.approx(1.0)
    assert normalized_entropy(np.array([8.0, -8.0, -8.0, -8.0]), labels) < 0.01
    assert normalized_entropy(np.array([-8.0, 8.0, 8.0, 8.0]), labels) > 5
    # Huge logits stay finite.
    assert np.isfinite(normalized_entropy(np.array([1e4, -1e4, 1e4, -1e4]), labels))
    with pytest.raises(ValueError, match="both classes"):
        normalized_entropy(np.zeros(3), np.zeros(3))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**16), st.integers(20, 400))
def test_binned_auc_is_close_to_exact_and_streams(seed, size):
    from hstu_model.metrics import BinnedAUC

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size)
    labels[:2] = [0, 1]
    logits = rng.normal(size=size) + labels
    num_bins = 100_000
    metric = BinnedAUC(num_bins=num_bins)
    for part in np.array_split(np.arange(size), 3):
        metric.update(logits[part], labels[part])
    # A (positive, negative) pair in one bin counts half where the exact AUC counts 0 or 1, so
    # the two differ by at most half the share of such pairs (none, mostly, so they are equal).
    probabilities = 0.5 * (1.0 + np.tanh(0.5 * logits))  # the metric's sigmoid, to the last bit
    bins = np.minimum((probabilities * num_bins).astype(np.int64), num_bins - 1)
    positive = labels.astype(bool)
    shared = np.bincount(bins[positive], minlength=num_bins) @ np.bincount(
        bins[~positive], minlength=num_bins
    )
    bound = 0.5 * shared / (positive.sum() * (~positive).sum())
    assert abs(metric.compute() - binary_auc(logits, labels)) <= bound + 1e-12
    restored = BinnedAUC(num_bins=num_bins)
    restored.load_state_dict(metric.state_dict())
    assert restored.compute() == metric.compute()


def test_binned_auc_ties_within_a_bin_and_errors():
    from hstu_model.metrics import BinnedAUC

    metric = BinnedAUC(num_bins=2)
    metric.update(np.array([-0.1, -0.2, 3.0]), np.array([1, 0, 1]))
    # The positive at -0.1 ties the negative in the low bin; the one at 3.0 beats it.
    assert metric.compute() == pytest.approx(0.75)
    with pytest.raises(ValueError, match="both classes"):
        BinnedAUC().compute()
    with pytest.raises(ValueError, match="num_bins"):
        BinnedAUC(num_bins=1)
    with pytest.raises(ValueError, match="3 bins, this metric 2"):
        metric.load_state_dict({"positives": [0, 0, 0], "negatives": [0, 0, 0]})


def test_binned_auc_of_the_ranks_adds_up_to_the_whole():
    """The lifetime AUC of a multi-rank run sums each rank's bin counts: exactly the counts of
    one metric that saw every rank's predictions."""
    from hstu_model.metrics import BinnedAUC

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 600)
    logits = rng.normal(size=600) + labels
    whole, ranks = BinnedAUC(), [BinnedAUC(), BinnedAUC()]
    for step in np.array_split(np.arange(600), 5):  # each step's global batch...
        whole.update(logits[step], labels[step])
        for rank, part in zip(ranks, np.array_split(step, 2), strict=True):  # ...in rank slices
            rank.update(logits[part], labels[part])
    assert np.array_equal(ranks[0].positives + ranks[1].positives, whole.positives)
    assert np.array_equal(ranks[0].negatives + ranks[1].negatives, whole.negatives)


def test_eval_loss_weighs_batches_by_their_samples(tiny_config, build, make_batch):
    """The eval loss is the loss over every evaluated sample, however the samples were cut
    into batches and ranks; the mean of the batches' losses would weigh the one-sample batch
    here as much as the three-sample one. (Each slice holds the longest history, so the model
    gives its samples the logits it gives them in the whole batch.)"""
    from hstu_model import Trainer
    from hstu_model.testing import slice_batch

    batch = make_batch([12, 3, 5, 12], seed=3)
    batch.labels.copy_(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    parts = [slice_batch(batch, 0, 3), slice_batch(batch, 3, 4)]
    whole = Trainer(build(tiny_config), tiny_config).evaluate([batch])
    cut = Trainer(build(tiny_config), tiny_config).evaluate(parts)
    assert cut.num_samples == whole.num_samples == 4
    assert cut.loss == pytest.approx(whole.loss, rel=1e-6)
    assert cut.auc == whole.auc
    assert cut.normalized_entropy == pytest.approx(whole.normalized_entropy, rel=1e-6)

    # Two ranks, one slice each (rank 1 with an empty last batch, as the eval plan's tail).
    ranks = ThreadRanks(2)
    trainers = [Trainer(build(tiny_config), tiny_config) for _ in range(2)]
    empty = slice_batch(batch, 4, 4)
    rank_batches = [[parts[0]], [parts[1], empty]]
    results = ranks.run(lambda r: trainers[r].evaluate(rank_batches[r], gather=ranks.concat(r)))
    for result in results:
        assert result.num_samples == 4
        assert result.loss == pytest.approx(whole.loss, rel=1e-6)
        assert result.auc == whole.auc
